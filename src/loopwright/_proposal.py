"""What actors return (proposals) and what actors see (context); what verifiers return
(``Verdict``) is in ``_verdict``, its name importable from here."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _ascii
from types import MappingProxyType
from typing import Any, Literal

from . import _shapes as shapes
from ._digest_text import escaped_twice
from ._effects import EffectCall, canon
from ._errors import ConfigError
from ._frozen import quick_init
from ._json import is_text, not_text, owned_copy
from ._question import Question
from ._record_codec import packed_proposal
from ._redact import redact, redact_registered
from ._redact_registry import any_registered
from ._state import Finding, PlanStep, part_ref
from ._usage import Usage, plain_usage
from ._verdict import Verdict

__all__ = ["Context", "Edit", "Proposal", "Remaining", "Verdict"]

# A proposal's plan when it has none: one immutable empty mapping, shared. A proposal that
# ``owned`` gives back as its own copy is handed to verifiers and kept by the engine; with an
# empty dict of its own, a verifier (or the actor, later) could add step statuses to it that
# nobody judged, which the record and a resumed parked cycle then applied.
_NO_PLAN: Mapping[str, str] = MappingProxyType({})


@quick_init
@dataclass(frozen=True, slots=True)
class Edit:
    """A new value for one named part of one artifact: the unit of local repair."""

    artifact: str
    part: str
    value: Any

    def __post_init__(self) -> None:
        # an empty or slashed name cannot be told apart in "artifact/part": refused here, not
        # as a failed commit with the run left running
        a, p = self.artifact, self.part
        if type(a) is not str or type(p) is not str or not a or not p or "/" in a:
            shapes.text(a, "Edit.artifact", empty=False)  # a str subclass (StrEnum) is fine
            shapes.text(p, "Edit.part", empty=False)
            if "/" in a:
                raise ConfigError(f"must not contain '/', got {a!r}", field="Edit.artifact")
        if not (a.isascii() and p.isascii()):
            # A name is a column of the store: one holding a lone surrogate (half an emoji)
            # failed the commit and left the run running.
            for name, where in ((a, "Edit.artifact"), (p, "Edit.part")):
                try:
                    not_text(name)
                except ValueError as exc:
                    raise ConfigError(str(exc), field=where) from None

    @property
    def ref(self) -> str:
        return f"{self.artifact}/{self.part}"  # (``part_ref`` without its call: twice a cycle)


@quick_init
@dataclass(frozen=True, slots=True)
class Proposal:
    """An actor's proposal for one cycle.

    A proposal is either a set of local ``edits`` to named parts, or a full ``replace`` of whole
    artifacts (``{artifact: {part: value}}``) — a distinct, visible choice recorded as such.

    Attributes:
        edits: local edits to named parts.
        replace: whole artifacts replaced; every part of such an artifact is rewritten.
        plan: step status updates (``{step_id: status}``) the actor proposes.
        new_steps: steps the actor adds to the plan.
        note: the actor's own explanation (shown to people; never trusted as a verdict).
        usage: what producing this proposal cost.
        escalate: set by an actor that needs a person (a duplicate invoice, contradictory
            instructions): the run ends ``escalated`` with this reason, nothing applied.
        effects: actions outside the run the actor asks for (``pay.call(...)``); the engine
            runs them through the approval policy and the effect journal, never the actor.
        question: the task is ambiguous: park the run with this question for a person; nothing
            is applied, and the answer reaches the next cycle's context.
    """

    edits: tuple[Edit, ...] = ()
    replace: Mapping[str, Mapping[str, Any]] | None = None
    # (a C callable that returns ``_NO_PLAN``: a dataclass refuses a mapping as a default)
    plan: Mapping[str, str] = field(default_factory=itertools.repeat(_NO_PLAN).__next__)
    new_steps: tuple[PlanStep, ...] = ()
    note: str = ""
    usage: Usage | None = None
    escalate: str | None = None
    effects: tuple[EffectCall, ...] = ()
    question: Question | None = None

    def __post_init__(self) -> None:
        e = self.edits
        if (  # an actor's usual proposal, in a few type tests (one is built every cycle)
            type(e) is tuple
            and (not e or (len(e) == 1 and type(e[0]) is Edit))
            and not self.effects
            and not self.new_steps
            and self.replace is None
            and not self.plan
            and (self.usage is None or type(self.usage) is Usage)
            and type(self.note) is str
            and self.escalate is None
            and self.question is None
        ):
            return
        self._check_shapes()

    def _check_shapes(self) -> None:
        _set = object.__setattr__
        _set(self, "edits", shapes.tuple_of(self.edits, Edit, "Proposal.edits"))
        _set(self, "effects", shapes.tuple_of(self.effects, EffectCall, "Proposal.effects"))
        _set(self, "new_steps", shapes.tuple_of(self.new_steps, PlanStep, "Proposal.new_steps"))
        shapes.optional(self.usage, Usage, "Proposal.usage")
        _set(self, "usage", plain_usage(self.usage))
        shapes.text(self.note, "Proposal.note")
        shapes.optional(self.escalate, str, "Proposal.escalate")
        shapes.optional(self.question, Question, "Proposal.question")
        if self.replace is not None:
            if not isinstance(self.replace, Mapping) or not all(
                isinstance(v, Mapping) for v in self.replace.values()
            ):
                raise ConfigError(
                    "must map artifact names to {part: value} mappings", field="Proposal.replace"
                )
            for artifact, parts in self.replace.items():
                for part in parts:
                    Edit(artifact, part, None)  # the same name rules as an edit
        if self.plan and not (
            isinstance(self.plan, Mapping)
            and all(type(k) is str and type(v) is str for k, v in self.plan.items())
        ):
            raise ConfigError("must map step ids to statuses (strings)", field="Proposal.plan")

    @classmethod
    def edit(
        cls,
        artifact: str,
        parts: Mapping[str, Any],
        *,
        note: str = "",
        usage: Usage | None = None,
    ) -> Proposal:
        """Edits to several parts of one artifact: ``Proposal.edit("invoice", {"qty": 3})``."""
        if not isinstance(parts, Mapping):
            raise ConfigError(
                f"takes a mapping {{part: value}}, got {type(parts).__name__}",
                field="Proposal.edit",
            )
        made = []
        for k, v in parts.items():  # (a loop: no comprehension an actor's proposal)
            made.append(Edit(artifact, k, v))
        edits = tuple(made)
        if cls is Proposal:
            # By position, the defaults written out (an actor builds one every cycle: a class
            # called with keywords goes through a dict of them).
            return Proposal(edits, None, _NO_PLAN, (), note, usage)
        return cls(edits=edits, note=note, usage=usage)

    @property
    def kind(self) -> Literal["edit", "replace", "plan", "effects", "question", "noop"]:
        if self.question is not None:
            return "question"
        if self.replace:
            return "replace"
        if self.edits:
            return "edit"
        if self.plan or self.new_steps:
            return "plan"
        if self.effects:
            return "effects"
        return "noop"

    def changes(self) -> list[Edit]:
        """Every part write this proposal asks for, replacements expanded into edits."""
        out = list(self.edits)
        if not self.replace:  # (the common proposal: no empty dict built to walk)
            return out
        for artifact, parts in self.replace.items():
            # names checked when the proposal was made (a stored one loads as written)
            out.extend(shapes.stored(Edit, artifact, k, v) for k, v in parts.items())
        return out

    def digest(self) -> str:
        """A hash of what the proposal changes (not its note or usage): identical proposals match."""
        if not (self.replace or self.plan or self.new_steps or self.effects):
            edits = self.edits
            if _text_edits(edits):
                # The common proposal, text edits only: the canonical text written out as the
                # JSON encoder below writes it (sorted keys; each string by the encoder's own
                # ASCII escaping, the value's canonical text escaped again: ``escaped_twice``,
                # the same bytes in one pass), without building the body and walking it. A
                # part name is ``str`` whenever its artifact's is not a subclass (``Edit``
                # allows a ``StrEnum``): tested all the same.
                # (loops, not comprehensions: this runs every cycle over one or two edits)
                rows = []
                for e in edits:
                    if type(e.part) is str:
                        rows.append((e.artifact, e.part, e.value))
                if len(rows) == len(edits):
                    if len(rows) > 1:
                        _sort_rows(rows)
                    items = []
                    for a, p, v in rows:
                        items.append(
                            b"["
                            + _ascii(a).encode()
                            + b","
                            + _ascii(p).encode()
                            + b","
                            + escaped_twice(v)
                            + b"]"
                        )
                    text = (
                        b'{"edits":['
                        + b",".join(items)
                        + b'],"new_steps":[],"plan":[],"replace":null}'
                    )
                    return hashlib.sha256(text).hexdigest()[:32]
        body: dict[str, Any] = {
            "edits": sorted((e.artifact, e.part, canon(e.value)) for e in self.edits),
            "replace": canon(self.replace) if self.replace else None,
            "plan": sorted(self.plan.items()) if self.plan else [],
            "new_steps": [s.to_dict() for s in self.new_steps],
        }
        if self.effects:  # an approval is bound to the exact actions too (invariant 2)
            body["effects"] = [c.canonical() for c in self.effects]
        return hashlib.sha256(canon(body).encode()).hexdigest()[:32]

    def owned(self) -> Proposal:
        """This proposal as the engine keeps it: each value an ``owned_copy`` (what the store
        will read back, sharing nothing with the objects the actor still holds), and a plain
        ``Proposal`` whatever class the actor built. A value JSON cannot hold is a
        ``ConfigError`` naming its part or effect argument: stored as its ``str``, it would
        be judged as one thing and kept as another."""
        if (
            type(self) is Proposal
            and self.replace is None
            and self.plan is _NO_PLAN  # an empty dict of the actor's own could still change
            and not (self.effects or self.new_steps)
            and self.question is None
            and type(self.note) is str
            and (self.escalate is None or type(self.escalate) is str)
            and _settled_edits(self.edits)
        ):
            # Nothing in it can change, or be stored as anything else: it is its own copy (the
            # common small edit; the copy below cost a tenth of a trivial cycle, made twice).
            return self
        try:
            edits, replace, args = owned_copy(
                [
                    [e.value for e in self.edits],
                    self.replace,
                    [c.args for c in self.effects],
                ]
            )
        except ValueError:
            raise self._not_json() from None
        return shapes.stored(
            Proposal,
            tuple(
                shapes.stored(Edit, e.artifact, e.part, v)
                for e, v in zip(self.edits, edits, strict=True)
            ),
            replace,
            dict(self.plan),
            tuple(self.new_steps),
            str(self.note),
            self.usage,
            None if self.escalate is None else str(self.escalate),
            tuple(
                shapes.stored(EffectCall, c.name, a, c.key)
                for c, a in zip(self.effects, args, strict=True)
            ),
            self.question,
        )

    def unregistered(self) -> Proposal:
        """This proposal with each value given to ``register_secret`` (the process's own API
        keys) masked in its parts' values and its new plan steps' titles, as written and in
        pieces (``_redact_runs``): taken in so, before anything is verified, digested or
        stored, so the verifiers, the stored version and plan, the trace and the actor's next
        context all see the same masked value (a part's value and a step are otherwise the
        work itself, stored as written: docs/security.md). Itself where none is there."""
        edits = self.edits
        replace = self.replace
        steps = self.new_steps
        if not (edits or replace or steps) or not any_registered():
            return self
        values, new_replace, titles = redact_registered(
            [[e.value for e in edits], replace, [t.title for t in steps]]
        )
        if (
            all(v is e.value for v, e in zip(values, edits, strict=True))
            and new_replace is replace
            and all(t is s.title for t, s in zip(titles, steps, strict=True))
        ):
            return self
        return shapes.stored(
            Proposal,
            tuple(
                e if v is e.value else shapes.stored(Edit, e.artifact, e.part, v)
                for e, v in zip(edits, values, strict=True)
            ),
            new_replace,
            self.plan,
            tuple(
                s if t is s.title else dataclasses.replace(s, title=t)
                for s, t in zip(steps, titles, strict=True)
            ),
            self.note,
            self.usage,
            self.escalate,
            self.effects,
            self.question,
        )

    def _not_json(self) -> ConfigError:
        """The first value of this proposal that ``owned_copy`` refuses, named."""
        values: list[tuple[str, Any]] = [(f"the value of {e.ref}", e.value) for e in self.edits]
        for artifact, parts in (self.replace or {}).items():
            values += [(f"the value of {part_ref(artifact, k)}", v) for k, v in parts.items()]
        for c in self.effects:
            values += [(f"argument {k!r} of effect {c.name}", v) for k, v in c.args.items()]
        for where, value in values:
            try:
                owned_copy(value)
            except ValueError as exc:
                return ConfigError(f"{where} cannot be stored as JSON: {exc}", field="Proposal")
        return ConfigError("a value cannot be stored as JSON", field="Proposal")

    def to_dict(self) -> dict[str, Any]:
        edits = []
        for e in self.edits:  # (a loop: no comprehension a cycle)
            edits.append({"artifact": e.artifact, "part": e.part, "value": e.value})
        return {
            "kind": self.kind,
            "edits": edits,
            "replace": {k: dict(v) for k, v in self.replace.items()} if self.replace else None,
            "plan": dict(self.plan) if self.plan else {},  # (a mappingproxy copies slower)
            # (an empty one without a comprehension: most proposals have neither)
            "new_steps": [s.to_dict() for s in self.new_steps] if self.new_steps else [],
            "note": self.note,
            "usage": self.usage.to_dict() if self.usage else None,
            "escalate": self.escalate,
            "effects": [c.to_dict() for c in self.effects] if self.effects else [],
            "question": self.question.to_dict() if self.question else None,
        }

    def to_packed_dict(self) -> dict[str, Any]:
        """``to_dict`` as a cycle's stored record holds it (``_record_codec.pack``'s: its
        defaults left out), built so (a unit test holds the two together)."""
        edits = []
        for e in self.edits:  # (a loop: no comprehension a cycle)
            edits.append({"artifact": e.artifact, "part": e.part, "value": e.value})
        return packed_proposal(  # (to_dict's values, by position in its order)
            self.kind,
            edits,
            {k: dict(v) for k, v in self.replace.items()} if self.replace else None,
            dict(self.plan) if self.plan else {},
            [s.to_dict() for s in self.new_steps] if self.new_steps else [],
            self.note,
            self.usage.to_dict() if self.usage else None,
            self.escalate,
            [c.to_dict() for c in self.effects] if self.effects else [],
            self.question.to_dict() if self.question else None,
        )

    def to_stored_dict(self) -> dict[str, Any]:
        """``to_dict`` with its free text (note, question, escalation) masked (invariant 9):
        the form a waiting run keeps in its state, which the commit's redaction net does not
        reach (it spares the work itself: edits, plan, effects). The digest covers none of
        the masked fields, so a proposal read back matches its approval."""
        d = self.to_dict()
        for k in ("note", "escalate", "question"):
            if d[k]:
                d[k] = redact(d[k])
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Proposal:
        """A proposal as recorded (a waiting run's, a trace's): not checked again, so what an
        older release stored still loads."""
        return shapes.stored(
            cls,
            tuple(
                shapes.stored(Edit, e["artifact"], e["part"], e["value"])
                for e in d.get("edits", ())
            ),
            d.get("replace"),
            dict(d["plan"]) if d.get("plan") else _NO_PLAN,
            tuple(PlanStep.from_dict(s, stored=True) for s in d.get("new_steps", ())),
            str(d.get("note", "")),
            Usage.from_dict(d["usage"]) if d.get("usage") else None,
            d.get("escalate"),
            tuple(EffectCall.from_dict(c) for c in d.get("effects") or ()),
            Question.from_dict(d["question"]) if d.get("question") else None,
        )


def _sort_rows(rows: list[tuple[str, str, str]]) -> None:
    """Text edits (artifact, part, value) in the digest body's order: sorted by artifact, part
    and the value's JSON text. The text is made only where two edits name one part (it orders
    unlike the value where escapes differ): it is the costly part of a large value's digest."""
    rows.sort(key=_names)
    for i in range(1, len(rows)):
        if rows[i][:2] == rows[i - 1][:2]:
            rows.sort(key=lambda r: (r[0], r[1], _ascii(r[2])))
            return


_names = operator.itemgetter(0, 1)


def _text_edits(edits: tuple[Edit, ...]) -> bool:
    """Whether every edit writes text to an artifact named by a ``str`` (``digest``'s common
    case; a loop, not ``all`` over a generator: this runs twice a cycle)."""
    for e in edits:  # noqa: SIM110 - (``all`` over a generator is what this replaces)
        if type(e.value) is not str or type(e.artifact) is not str:
            return False
    return True


def _settled_edits(edits: tuple[Edit, ...]) -> bool:
    """Whether every edit is an ``Edit`` whose value is ``_settled`` (a loop: ``all`` over a
    generator built a function and a generator object, twice a cycle)."""
    for e in edits:
        if type(e) is not Edit:
            return False
        v = e.value
        if type(v) is str:  # (``_settled``'s test of text written out: no call a text edit)
            if not (v.isascii() or is_text(v)):
                return False
        elif not _settled(v):
            return False
    return True


def _settled(value: Any) -> bool:
    """An immutable value that a store gives back as it is: text (that UTF-8 can hold), an
    integer of 64 bits or fewer, a finite float, a boolean or None. (A longer integer goes
    through ``owned_copy``: one of more than 4,300 digits, which no JSON text can be made of,
    crashed the proposal's digest, and the run ended ``failed``, with a traceback.)"""
    kind = type(value)
    if kind is str:
        return value.isascii() or is_text(value)
    if kind is int:
        return bool(_INT_LOW <= value < _INT_HIGH)
    return kind is bool or value is None or (kind is float and math.isfinite(value))


_INT_LOW, _INT_HIGH = -(1 << 63), 1 << 64


@quick_init
@dataclass(frozen=True, slots=True)
class Remaining:
    """Budget left before this cycle; ``None`` means unlimited. ``cycles`` counts down the
    run's cycle cap: the contract's ``max_cycles``, the task's own (``max_cycles_key``), or the
    default ceiling a spend-only contract is given (1,000: ``DEFAULT_MAX_CYCLES``), a real
    limit the run stops at, so it is not ``None`` under such a contract."""

    cycles: int | None
    cost_usd: float | None
    tokens: int | None
    seconds: float | None


@quick_init
@dataclass(frozen=True, slots=True)
class Context:
    """What an actor sees at the start of a cycle. Built from the state alone, never from
    held-out verdicts.

    Attributes:
        run_id: the run's id.
        cycle: the cycle about to run (1-based).
        goal: the task's goal.
        task: the task input.
        artifacts: current values, ``{artifact: {part: value}}``.
        accepted: accepted values (read-only: a proposal touching them is refused).
        findings: open findings from visible verifiers of the previous cycle.
        plan: the plan's steps with their status.
        next_step: the first step not yet done whose dependencies are done.
        remaining: budget left (without what held-out checks spent: invariant 3); its
            ``cycles`` counts down the default ceiling under a spend-only contract.
        notes: human decisions and answers addressed to the actor.
        history: one line per earlier cycle: score, decision, proposal kind.
        memory: feedback memory retrieved for this task and project (corrections,
            reflections, confirmed global rules), strongest and most relevant first; each
            ``{"memory_id", "scope", "signal", "strength", "text", "rule"}``.
    """

    run_id: str
    cycle: int
    goal: str
    task: Mapping[str, Any]
    artifacts: Mapping[str, Mapping[str, Any]]
    accepted: Mapping[str, Mapping[str, Any]]
    findings: Sequence[Finding]
    plan: Sequence[PlanStep]
    next_step: PlanStep | None
    remaining: Remaining
    notes: Sequence[Mapping[str, Any]] = ()
    history: Sequence[Mapping[str, Any]] = ()
    memory: Sequence[Mapping[str, Any]] = ()

    def is_accepted(self, artifact: str, part: str) -> bool:
        return part in self.accepted.get(artifact, {})

    def findings_for(self, artifact: str, part: str | None = None) -> list[Finding]:
        return [
            f
            for f in self.findings
            if f.artifact == artifact and (part is None or f.part in (None, part))
        ]
