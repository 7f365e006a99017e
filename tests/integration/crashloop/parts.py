"""Actor and verifiers of the crash/resume loop: eight parts, one repaired per cycle.

Everything is a pure function of the checkpointed state, so a run that is killed and resumed
must end exactly where an uninterrupted one ends. The test kills the process at phase
boundaries of the cycle (``runner.py``), so the actor need not be slow.

A task names the parts (``artifacts.doc``), the target of each (``target``), the parts whose
first repair is a near miss (``hard``) and the parts the actor can never get right
(``stubborn``: every attempt differs but none improves the score, so the run ends on
``no_progress`` after the contract's stall window).
"""

from __future__ import annotations

import os
from typing import Any

import loopwright as lw

ARTIFACT = "doc"


def _targets(task: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in task["target"].items()}


def repair_one(ctx: lw.Context) -> lw.Proposal:
    """Repair the first flagged part by name (stubborn parts last, so the stall comes late).

    With ``CRASHLOOP_CALLS`` set, each call appends its cycle number to that file, so the test
    can tell that a kill interrupted a cycle in flight (its actor ran twice).
    """
    log = os.environ.get("CRASHLOOP_CALLS")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{ctx.cycle}\n")
    located = sorted(
        (f for f in ctx.findings if f.artifact == ARTIFACT and f.part is not None),
        key=lambda f: (str(f.part) in ctx.task.get("stubborn", ()), str(f.part)),
    )
    if not located:
        return lw.Proposal(note="nothing to repair", usage=lw.Usage(cost_usd=0.01, tokens=5))
    f = located[0]
    part = str(f.part)
    current = ctx.artifacts[ARTIFACT][part]
    expected = str(f.evidence["expected"])
    if part in ctx.task.get("stubborn", ()):
        value = f"attempt-{ctx.cycle}"
    elif part in ctx.task.get("hard", ()) and not str(current).endswith("~"):
        value = expected + "~"  # a near miss; the next attempt gets it right
    else:
        value = expected
    return lw.Proposal.edit(
        ARTIFACT,
        {part: value},
        note=f"repair {part}",
        usage=lw.Usage(cost_usd=0.02, tokens=100 + ctx.cycle),
    )


def fields(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Visible: each part must equal its target; findings are located and carry the target."""
    want = _targets(state.task)
    have = state.values()[ARTIFACT]
    findings = tuple(
        lw.Finding(
            f"{part} is {have.get(part)!r}, expected {target!r}",
            ARTIFACT,
            part,
            "content",
            evidence={"expected": target, "actual": have.get(part)},
        )
        for part, target in sorted(want.items())
        if have.get(part) != target
    )
    return lw.Verdict(
        passed=not findings,
        score=1 - len(findings) / len(want),
        findings=findings,
        usage=lw.Usage(cost_usd=0.001, tokens=1),
    )


def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Held-out: no near miss (``~``) anywhere, and every value upper-case."""
    bad = tuple(
        lw.Finding(f"{part} fails the audit", ARTIFACT, part, "audit")
        for part, value in sorted(state.values()[ARTIFACT].items())
        if str(value).endswith("~") or str(value) != str(value).upper()
    )
    n = len(state.values()[ARTIFACT])
    return lw.Verdict(passed=not bad, score=1 - len(bad) / n, findings=bad)
