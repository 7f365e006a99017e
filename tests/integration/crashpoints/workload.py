"""The crash-point loop: a four-part doc repaired one part per cycle, with counted effects.

Everything the loop does is a pure function of the checkpointed state and of files in
``$CP_DIR``, so a run killed at any phase boundary and resumed must end where an uninterrupted
run ends (or, when a kill leaves a non-idempotent effect in doubt, escalate naming it).

The ``main`` workload (six cycles, ending ``accepted``):

====== ================================================================================
cycle  what the actor proposes
====== ================================================================================
1      p0 fixed (accepted when clean)
2      p1 fixed; the actor's first call in this cycle fails transiently (one backoff), and
       ``mirror`` fails transiently on its first attempt for p1 (one effect backoff)
3      an overwrite of accepted p0: refused (invariant 6); its effects never run
4      p2 near miss (``P2-OK~``): rejected
5      p2 fixed; its effects' keys were done in cycle 4, so they are reused, not run
6      p3 fixed: every check passes, the run is accepted
====== ================================================================================

Each non-refused cycle asks for three effects, in this order, all keyed by the part and run
whatever the verdict (``requires_success=False``):

* ``ledger`` (kind ``send``) has a ``reconcile`` hook that looks for its key in the effects
  log: killed in doubt, it is reconciled (found: done; not found: run);
* ``mirror`` (kind ``publish``) is idempotent (it writes its key only when absent, like a PUT)
  and logs every real attempt to ``mirror-attempts.log``: killed in doubt, it is run again;
* ``notify`` (kind ``send``) is neither: killed in doubt, the run must escalate naming it.

Files in ``$CP_DIR``:

* ``effects.log``: one line ``<effect>:<key>`` per real execution of ledger and notify, and per
  first write of mirror's key; a duplicate line is an effect executed twice;
* ``mirror-attempts.log``: every real call of mirror;
* ``actor.log``: one line ``<cycle>`` per actor call (``<cycle> <unix time>`` in the retry
  modes);
* ``reflector.log``: one line ``<cycle>`` per reflector call (every cycle that goes on);
* ``verifier.log``: one line per call of the visible check (each billed 0.001, 1 token).

``$CP_MODE`` selects a retry workload instead of ``main``:

* ``flaky``: the actor raises ``TransientError`` on its first two calls, then works;
* ``broken``: the actor raises ``ValueError`` (permanent) on every call;
* ``down``: the actor raises ``TransientError`` on every call; the backoff is 1 s, so a kill in
  the backoff leaves most of it to wait out after the restart;
* ``effect_down``: mirror raises ``TransientError`` on every attempt (two allowed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import loopwright as lw

ARTIFACT = "doc"
PARTS = ("p0", "p1", "p2", "p3")
TARGET = {p: f"{p.upper()}-OK" for p in PARTS}
HARD = ("p2",)  # the first repair is a near miss
REFUSED_CYCLE = 3  # the actor tries to overwrite accepted p0
FLAKY_CYCLE = 2  # the actor's first call fails transiently
FLAKY_EFFECT_KEY = "p1"  # mirror's first attempt for this key fails transiently
MODES = ("main", "flaky", "broken", "down", "effect_down")

TASK: dict[str, Any] = {
    "goal": "make every part of the doc match its target",
    "artifacts": {ARTIFACT: dict.fromkeys(PARTS, "draft")},
}


def mode() -> str:
    found = os.environ.get("CP_MODE", "main")
    if found not in MODES:
        raise SystemExit(f"CP_MODE must be one of {MODES}, got {found!r}")
    return found


def _dir() -> Path:
    return Path(os.environ["CP_DIR"])


def _lines(name: str) -> list[str]:
    path = _dir() / name
    return path.read_text().splitlines() if path.exists() else []


def _append(name: str, line: str) -> None:
    # One small write with O_APPEND, flushed before returning: the line is in the file before
    # the engine can journal the result (a SIGKILL right after loses nothing written here).
    with open(_dir() / name, "a") as fh:
        fh.write(line + "\n")


# --- effects ---------------------------------------------------------------------------------
EFFECT_RETRY = lw.RetryPolicy(attempts=3, backoff_s=0.05, max_backoff_s=0.05, jitter=False)
EFFECT_DOWN_RETRY = lw.RetryPolicy(attempts=2, backoff_s=0.05, max_backoff_s=0.05, jitter=False)


def _reconcile_ledger(key: str) -> dict[str, Any] | None:
    """Did ledger ``key`` happen? The outside world (the effects log) knows."""
    return {"sent": key} if key in _lines("effects.log") else None


@lw.effect(
    "send",
    key=lambda a: str(a["part"]),
    requires_success=False,
    reconcile=_reconcile_ledger,
    retry=EFFECT_RETRY,
)
def ledger(part: str, *, key: str) -> dict[str, Any]:
    """Reconcilable: appends its key on every real execution."""
    _append("effects.log", key)
    return {"sent": key}


@lw.effect(
    "publish",
    key=lambda a: str(a["part"]),
    requires_success=False,
    idempotent=True,
    retry=EFFECT_DOWN_RETRY if os.environ.get("CP_MODE") == "effect_down" else EFFECT_RETRY,
)
def mirror(part: str, *, key: str) -> dict[str, Any]:
    """Idempotent: every call is logged; the key is written to the effects log only once."""
    earlier = _lines("mirror-attempts.log").count(key)
    _append("mirror-attempts.log", key)
    if mode() == "effect_down" or (mode() == "main" and part == FLAKY_EFFECT_KEY and not earlier):
        raise lw.TransientError(f"mirror {key}: service unavailable")
    if key not in _lines("effects.log"):
        _append("effects.log", key)
    return {"mirrored": key}


@lw.effect("send", key=lambda a: str(a["part"]), requires_success=False, retry=EFFECT_RETRY)
def notify(part: str, *, key: str) -> dict[str, Any]:
    """Neither idempotent nor reconcilable: appends its key on every real execution."""
    _append("effects.log", key)
    return {"notified": key}


EFFECTS = (ledger, mirror, notify)
EFFECT_NAMES = tuple(e.name for e in EFFECTS)


# --- actor and verifier ------------------------------------------------------------------------
def actor(ctx: lw.Context) -> lw.Proposal:
    """Fix the first part that differs from its target (deterministic in the state)."""
    m = mode()
    calls = _lines("actor.log")
    if m in ("flaky", "broken", "down"):
        _append("actor.log", f"{ctx.cycle} {time.time():.6f}")
    else:
        _append("actor.log", str(ctx.cycle))
    if m == "broken":
        raise ValueError("the actor's input is malformed")
    if m == "down" or (m == "flaky" and len(calls) < 2):
        raise lw.TransientError("model endpoint unavailable")
    if m == "main" and ctx.cycle == FLAKY_CYCLE and str(FLAKY_CYCLE) not in calls:
        raise lw.TransientError("model endpoint unavailable (once)")

    usage = lw.Usage(cost_usd=0.01, tokens=10 + ctx.cycle)
    doc = ctx.artifacts[ARTIFACT]
    if m == "main" and ctx.cycle == REFUSED_CYCLE:
        return lw.Proposal(
            edits=(lw.Edit(ARTIFACT, "p0", "P0-REDO"),),
            effects=tuple(e.call(part="redo") for e in EFFECTS),
            note="overwrite accepted p0",
            usage=usage,
        )
    wrong = [p for p in PARTS if doc[p] != TARGET[p]]
    if not wrong:
        return lw.Proposal(note="nothing to repair", usage=usage)
    part = wrong[0]
    value = TARGET[part]
    if part in HARD and not str(doc[part]).endswith("~"):
        value += "~"
    calls_wanted = EFFECTS if m in ("main", "effect_down") else ()
    return lw.Proposal(
        edits=(lw.Edit(ARTIFACT, part, value),),
        effects=tuple(e.call(part=part) for e in calls_wanted),
        note=f"repair {part}",
        usage=usage,
    )


def fields(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Visible: every part must equal its target; findings are located."""
    _append("verifier.log", "1")
    have = state.values()[ARTIFACT]
    findings = tuple(
        lw.Finding(
            f"{part} is {have.get(part)!r}, expected {target!r}",
            ARTIFACT,
            part,
            "content",
            evidence={"expected": target},
        )
        for part, target in TARGET.items()
        if have.get(part) != target
    )
    return lw.Verdict(
        passed=not findings,
        score=1 - len(findings) / len(TARGET),
        findings=findings,
        usage=lw.Usage(cost_usd=0.001, tokens=1),
    )


def reflector(ctx: lw.Context, verdicts: Any) -> str:
    """A note on each cycle that goes on, from what it is shown (logged per call): a kill
    between a cycle's commit and its reflection must not lose the note."""
    _append("reflector.log", str(ctx.cycle))
    found = sorted(f.message for v in dict(verdicts).values() for f in v.findings)
    return f"cycle {ctx.cycle}, {len(ctx.notes)} note(s): " + "; ".join(found or ["clean"])


def actor_retry() -> lw.RetryPolicy:
    if mode() == "down":
        return lw.RetryPolicy(attempts=3, backoff_s=1.0, max_backoff_s=1.0, jitter=False)
    return lw.RetryPolicy(attempts=3, backoff_s=0.05, max_backoff_s=0.05, jitter=False)


def build_loop() -> lw.Loop:
    return lw.Loop(
        name="crashpoints",
        actor=actor,
        verifiers=[lw.Check(fn=fields, name="fields")],
        contract=lw.Contract(
            success=lw.Success(accept_parts="when_clean"),
            no_progress=lw.NoProgress(cycles=4),
            budget=lw.Budget(max_cycles=12),
        ),
        effects=EFFECTS,
        # Named kinds, not "*": a wildcard allow would also match ``overwrite_accepted`` and let
        # cycle 3 overwrite accepted p0.
        approvals=lw.ApprovalPolicy(
            (
                lw.PolicyRule(kind="send", action="allow"),
                lw.PolicyRule(kind="publish", action="allow"),
            )
        ),
        retry=actor_retry(),
        reflector=reflector,
    )
