"""Rendering what an actor or a reviewer sees into the text of a chat message.

``context_sections`` turns a ``Context`` into named blocks of text (``goal``, ``artifacts``,
``findings`` ...); ``render_context`` joins them under headings. A ``ChatActor`` template is
either a callable ``Context -> str`` or a format string over those names, e.g.
``"{goal}\\n\\nFix these:\\n{findings}\\n\\nCurrent:\\n{artifacts}"``. The reviewer has the
same pair: ``review_sections`` and ``render_review``.

Only the ``Context`` is rendered, and the engine builds it from the run's state alone, never
from held-out verdicts: a template cannot leak what the actor was never given.
"""

from __future__ import annotations

import dataclasses
import json
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import ConfigError
from .._proposal import Context, Proposal, Remaining
from .._state import Finding, TaskState

__all__ = [
    "CONTEXT_FIELDS",
    "REVIEW_FIELDS",
    "check_template",
    "context_sections",
    "render_context",
    "render_review",
    "review_sections",
]

# Task keys rendered elsewhere, or never: ``held_out`` is for held-out verifiers only (the engine
# already strips it from the actor's context; the reviewer never shows it either).
_TASK_HIDDEN = frozenset({"goal", "artifacts", "plan", "held_out"})
CONTEXT_FIELDS: tuple[str, ...] = (
    "run_id",
    "cycle",
    "goal",
    "task",
    "artifacts",
    "accepted",
    "findings",
    "plan",
    "next_step",
    "notes",
    "memory",
    "remaining",
    "history",
    "extra",
    "context",
)
"""Names a ``ChatActor`` format-string template may use; ``context`` is the whole default
rendering."""
# The Context fields rendered by name; any other (a subclass's own) goes under ``extra``.
_KNOWN_CONTEXT = frozenset(CONTEXT_FIELDS) - {"extra", "context"}

REVIEW_FIELDS: tuple[str, ...] = (
    "rubric",
    "goal",
    "task",
    "artifacts",
    "changed",
    "accepted",
    "review",
)
"""Names a ``ChatReviewer`` format-string template may use; ``review`` is the whole default
rendering."""

_EVIDENCE_CHARS = 1500
_HISTORY_LINES = 12


# Characters a reader (``str.splitlines``, a model's tokenizer) may take for a line break that
# JSON, written with ``ensure_ascii=False``, leaves raw inside a string: escaped, so a value
# cannot start a line of its own (a forged ``## Rubric`` heading in a reviewer's message).
_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


def _json(value: Any, *, indent: int | None = 2) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str).translate(_BREAKS)


def _name(ref: str) -> str:
    """An artifact or part reference as one line: as it is when every character prints, else
    quoted and escaped (an actor names the parts it adds; a name holding a line break would
    otherwise write lines of its own into a reviewer's message)."""
    return ref if ref.isprintable() else json.dumps(ref)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more chars]"


def _ref(artifact: str | None, part: str | None) -> str:
    if artifact is None:
        return "(whole run)"
    return f"{artifact}/{part}" if part else f"{artifact} (whole artifact)"


def _finding(f: Finding) -> str:
    by = f" by {f.verifier}" if f.verifier else ""
    line = f"- [{f.severity}] {_ref(f.artifact, f.part)} ({f.dimension}{by}): {f.message}"
    if f.evidence:
        line += "\n  evidence: " + _clip(_json(dict(f.evidence), indent=None), _EVIDENCE_CHARS)
    return line


def _accepted(accepted: Mapping[str, Mapping[str, Any]]) -> str:
    refs = [f"- {_name(f'{a}/{p}')}" for a, parts in accepted.items() for p in parts]
    if not refs:
        return "none yet"
    return "These parts are accepted and read-only; an edit to any of them is refused:\n" + (
        "\n".join(refs)
    )


def _note(note: Mapping[str, Any]) -> str:
    kind = note.get("kind")
    by = f" (from {note['by']})" if note.get("by") else ""
    if kind == "answer":
        return f"- answer{by} to {note.get('question', 'your question')!r}: {note.get('answer')}"
    if kind == "approval":
        extra = f": {note['note']}" if note.get("note") else ""
        return f"- approval {note.get('decision')}{by}{extra}"
    return "- " + _clip(_json(dict(note), indent=None), _EVIDENCE_CHARS)


def _memory_item(item: Mapping[str, Any]) -> str:
    label = " ".join(str(item[k]) for k in ("scope", "signal") if item.get(k))
    strength = item.get("strength")
    if isinstance(strength, int | float):
        label += f", strength {strength + 0:g}"  # (a -0.0: "0", not "-0")
    text = str(item.get("text") or "")
    if item.get("rule"):
        text += (" " if text else "") + "rule: " + _json(item["rule"], indent=None)
    return f"- [{label}] {_clip(text, _EVIDENCE_CHARS)}"


def _remaining(rem: Remaining) -> str:
    parts = []
    if rem.cycles is not None:
        parts.append(f"{rem.cycles} cycle(s)")
    if rem.cost_usd is not None:
        parts.append(f"${rem.cost_usd:.4f}")
    if rem.tokens is not None:
        parts.append(f"{rem.tokens} tokens")
    if rem.seconds is not None:
        parts.append(f"{rem.seconds:.0f} s")
    return ", ".join(parts) if parts else "unlimited"


def _task(task: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in task.items() if k not in _TASK_HIDDEN}
    return _json(shown) if shown else ""


def context_sections(ctx: Context) -> dict[str, str]:
    """Each piece of the context as text, keyed by the names in ``CONTEXT_FIELDS``."""
    memory: Sequence[Mapping[str, Any]] = getattr(ctx, "memory", ()) or ()
    extra = {
        f.name: getattr(ctx, f.name)
        for f in dataclasses.fields(ctx)
        if f.name not in _KNOWN_CONTEXT and getattr(ctx, f.name)
    }
    history = [_json(dict(h), indent=None) for h in list(ctx.history)[-_HISTORY_LINES:]]
    sections = {
        "run_id": ctx.run_id,
        "cycle": str(ctx.cycle),
        "goal": ctx.goal or "(no goal given)",
        "task": _task(ctx.task),
        "artifacts": _json({k: dict(v) for k, v in ctx.artifacts.items()}),
        "accepted": _accepted(ctx.accepted),
        "findings": "\n".join(_finding(f) for f in ctx.findings),
        "plan": "\n".join(f"- {s.id} [{s.status}] {s.title}".rstrip() for s in ctx.plan),
        "next_step": f"{ctx.next_step.id}: {ctx.next_step.title}".rstrip(": ")
        if ctx.next_step
        else "",
        "notes": "\n".join(_note(n) for n in ctx.notes),
        "memory": "\n".join(_memory_item(m) for m in memory),
        "remaining": _remaining(ctx.remaining),
        "history": "\n".join(history),
        "extra": _json(extra) if extra else "",
    }
    sections["context"] = _join(
        [
            ("Goal", sections["goal"]),
            ("Task input", sections["task"]),
            ("Plan", sections["plan"]),
            ("Next step", sections["next_step"]),
            ("Current artifacts ({artifact: {part: value}})", sections["artifacts"]),
            ("Accepted parts", sections["accepted"]),
            (
                "Open findings from the checks on the last attempt",
                sections["findings"] or "none: this is the first look, or nothing was found",
            ),
            ("Notes from people and from earlier cycles", sections["notes"]),
            ("Remembered feedback (apply it where it fits)", sections["memory"]),
            ("Earlier cycles", sections["history"]),
            ("Other context", sections["extra"]),
            (
                "Budget left",
                f"{sections['remaining']} — this is cycle {ctx.cycle}; "
                "propose the smallest edits that resolve the findings",
            ),
        ]
    )
    return sections


def _join(blocks: Sequence[tuple[str, str]]) -> str:
    return "\n\n".join(f"## {title}\n{body}" for title, body in blocks if body)


def render_context(ctx: Context) -> str:
    """The default rendering: every non-empty section under a heading."""
    return context_sections(ctx)["context"]


def review_sections(state: TaskState, proposal: Proposal, rubric: str) -> dict[str, str]:
    """What a reviewer sees, keyed by the names in ``REVIEW_FIELDS``: the rubric, the goal, the
    task (without its held-out part), the candidate artifacts and which parts this proposal
    changed. The actor's own note is left out: the generator does not get to argue its case."""
    changed = sorted({e.ref for e in proposal.changes()})
    sections = {
        "rubric": rubric,
        "goal": state.goal or "(no goal given)",
        "task": _task(state.task),
        "artifacts": _json(state.values()),
        "changed": "\n".join(f"- {_name(r)}" for r in changed),
        "accepted": _accepted(state.accepted_values()),
    }
    sections["review"] = _join(
        [
            ("Rubric", sections["rubric"]),
            ("Goal", sections["goal"]),
            ("Task input", sections["task"]),
            ("Candidate artifacts ({artifact: {part: value}})", sections["artifacts"]),
            ("Parts changed by the latest proposal", sections["changed"] or "none"),
            ("Accepted parts", sections["accepted"]),
        ]
    )
    return sections


def render_review(state: TaskState, proposal: Proposal, rubric: str) -> str:
    """The reviewer's default rendering."""
    return review_sections(state, proposal, rubric)["review"]


def check_template(template: Any, allowed: Sequence[str], field: str) -> None:
    """Refuse a format-string template naming a field that does not exist (at construction,
    not in the middle of a run)."""
    if callable(template) or template is None:
        return
    if not isinstance(template, str):
        raise ConfigError(
            f"must be a callable or a format string, got {type(template).__name__}", field=field
        )
    try:
        names = {
            name.split(".")[0].split("[")[0]
            for _, name, _, _ in string.Formatter().parse(template)
            if name is not None
        }
    except ValueError as exc:
        raise ConfigError(f"is not a valid format string: {exc}", field=field) from None
    unknown = sorted(n for n in names if n not in allowed)
    if unknown:
        raise ConfigError(f"unknown fields {unknown}; available: {list(allowed)}", field=field)


def apply_template(
    template: str | Callable[..., str] | None,
    sections: Callable[[], dict[str, str]],
    default: str,
    *args: Any,
) -> str:
    """Render with a callable template (given ``args``), a format string, or the default."""
    if template is None:
        return sections()[default]
    if callable(template):
        out = template(*args)
        if not isinstance(out, str):
            raise TypeError(f"the template returned {type(out).__name__}, expected str")
        return out
    return template.format_map(sections())
