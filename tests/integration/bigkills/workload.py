"""The large-values crash loop: every cycle the actor writes a few KB of text and a nested
dict (values a cycle's record names by version instead of holding, ``_record_codec``), beside
a task holding a large document nobody edits, and asks for an effect every third cycle.

Everything it does is a pure function of the checkpointed state and the cycle number, so a run
killed anywhere and resumed must end as an uninterrupted run ends. The actor appends each
proposal's edits, as JSON, to ``$BK_DIR/proposed.jsonl`` (``<cycle> <edits>``): a cycle redone
after a kill proposes the same again, and a record read back must hold exactly that.

The verifier flags every edited part (so none is accepted: an accepted part's edit is refused)
until the counter part ``n`` reaches ``DONE``, then accepts the run. After a rollback to cycle
``k`` the counter is back at ``k``, so the run goes on ``DONE - k`` cycles more.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import loopwright as lw

DONE = 5  # the counter value the verifier accepts
SIZE = 3_000  # characters of each cycle's text
EFFECT_EVERY = 3
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa")


def _text(seed: int, size: int) -> str:
    out: list[str] = []
    total, i = 0, seed
    while total < size:
        w = WORDS[(i * 7 + seed) % len(WORDS)]
        out.append(w)
        total += len(w) + 1
        i += 1
    return " ".join(out)[:size]


# The task: a large reference document in a part nobody edits.
REFERENCE_DOC = "REFERENCE " + _text(99, 40_000)
TASK: dict[str, Any] = {
    "goal": "draft a long document until the counter reaches its target",
    "artifacts": {
        "doc": {"body": "", "notes": {}, "n": 0},
        "ref": {"text": REFERENCE_DOC},
    },
}


def body(cycle: int, n: int) -> str:
    return f"cycle {cycle} draft {n}: " + _text(cycle * 31 + n, SIZE)


def notes(cycle: int, n: int) -> dict[str, Any]:
    return {
        "cycle": cycle,
        "sections": [
            {"title": f"s{i}", "lines": [_text(cycle + i + j, 60) for j in range(4)], "n": n}
            for i in range(5)
        ],
        "meta": {"draft": n, "tags": ["a", "b", str(cycle)]},
    }


def _dir() -> Path:
    return Path(os.environ["BK_DIR"])


def _lines(name: str) -> list[str]:
    path = _dir() / name
    return path.read_text().splitlines() if path.exists() else []


def _append(name: str, line: str) -> None:
    with open(_dir() / name, "a") as fh:
        fh.write(line + "\n")


def _reconcile(key: str) -> dict[str, Any] | None:
    return {"published": key} if key in _lines("effects.log") else None


@lw.effect("publish", key=lambda a: f"c{a['cycle']}", reconcile=_reconcile, requires_success=False)
def publish(cycle: int, *, key: str) -> dict[str, Any]:
    """Appends its key on every real execution: a duplicate line ran twice."""
    _append("effects.log", key)
    return {"published": key}


def actor(ctx: lw.Context) -> lw.Proposal:
    n = int(ctx.artifacts["doc"]["n"]) + 1
    edits = {"body": body(ctx.cycle, n), "notes": notes(ctx.cycle, n), "n": n}
    _append("proposed.jsonl", f"{ctx.cycle} {json.dumps(edits, sort_keys=True)}")
    effects = (publish.call(cycle=ctx.cycle),) if ctx.cycle % EFFECT_EVERY == 0 else ()
    return lw.Proposal(
        edits=tuple(lw.Edit("doc", part, value) for part, value in edits.items()), effects=effects
    )


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    n = int(state.values()["doc"]["n"])
    if n >= DONE:
        return lw.Verdict(passed=True, score=1.0)
    findings = tuple(lw.Finding(f"draft {n} of {DONE}", "doc", p) for p in ("body", "notes", "n"))
    return lw.Verdict(passed=False, score=n / DONE, findings=findings)


def build_loop() -> lw.Loop:
    return lw.Loop(
        name="bigkills",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            no_progress=lw.NoProgress(cycles=50),
            budget=lw.Budget(max_cycles=40),
        ),
        effects=(publish,),
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="publish", action="allow"),)),
    )
