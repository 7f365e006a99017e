"""Run (or resume) the crash-bound loop in a subprocess: ``crash_runner.py URL KEY WORK``.

The actor edits ``doc.n`` to its cycle; the check passes at ``n == 3``; cycle 1 also asks for
an effect (keyed by the folder's name and the cycle: two runs in one store with two folders
run one each), which appends to ``WORK/effects.log``. Each actor call appends its cycle to
``WORK/calls.log`` first. With ``CB_EXIT_AT=CYCLE:TIMES[,CYCLE:TIMES...]``, the actor's first
``TIMES`` calls at cycle ``CYCLE`` (counted in that log, over every process) end the process with
``os._exit(137)``, as a kill -9 or a crash in native code would: a deterministic point, on
every attempt. ``CB_MAX_CRASHES`` sets ``budget.max_crashes``. With ``CB_EXIT_AFTER_EFFECTS=TIMES``,
the effect reports a cost ($0.25), and the process ends the same way after cycle 1's effects,
before the cycle is concluded (as a kill in its commit would), the first ``TIMES`` times (counted
in ``WORK/deaths.log``). With ``CB_ASK``, cycle 1's actor asks a person a question instead
(the run parks; cycle 1 is concluded once it is answered). On a normal return it prints the
run's result as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import loopwright as lw


def _loop(work: Path) -> lw.Loop:
    exit_at = os.environ.get("CB_EXIT_AT")

    @lw.effect(
        "send", name="notify", key=lambda a: f"{a['folder']}:{a['cycle']}", requires_success=False
    )
    def notify(folder: str, cycle: int, *, key: str) -> dict[str, Any]:
        with open(work / "effects.log", "a") as fh:
            fh.write(f"{key}\n")
        if os.environ.get("CB_EXIT_AFTER_EFFECTS"):
            return lw.EffectResult({"sent": key}, usage=lw.Usage(cost_usd=0.25))
        return {"sent": key}

    def actor(ctx: lw.Context) -> lw.Proposal:
        log = work / "calls.log"
        with open(log, "a") as fh:
            fh.write(f"{ctx.cycle}\n")
        if ctx.cycle == 1 and os.environ.get("CB_ASK"):
            return lw.Proposal(question=lw.Question("which n?"))
        for point in exit_at.split(",") if exit_at else ():
            cycle, times = (int(x) for x in point.split(":"))
            made = log.read_text().split().count(str(cycle))
            if ctx.cycle == cycle and made <= times:
                os._exit(137)
        effects = (notify.call(folder=work.name, cycle=ctx.cycle),) if ctx.cycle == 1 else ()
        return lw.Proposal(
            edits=(lw.Edit("doc", "n", ctx.cycle),),
            effects=effects,
            usage=lw.Usage(cost_usd=0.01, tokens=10),
        )

    def done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        n = int(state.values()["doc"].get("n", 0))
        return lw.Verdict(passed=n == 3, score=n / 3)

    bound = os.environ.get("CB_MAX_CRASHES")
    crashes = {} if bound is None else {"max_crashes": int(bound)}  # (left out: the default)
    return lw.Loop(
        name="crash-bound",
        actor=actor,
        verifiers=[done],
        effects=[notify],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=10, **crashes)),
    )


def _die_after_effects(work: Path, times: int) -> None:
    """End the process after cycle 1's effects, before its conclusion, ``times`` times."""
    conclude = lw.Runtime._conclude

    def dying(self: Any, ex: Any, n: int, *args: Any, **kw: Any) -> bool:
        log = work / "deaths.log"
        if n == 1 and (len(log.read_text().split()) if log.exists() else 0) < times:
            with open(log, "a") as fh:
                fh.write(f"{n}\n")
            os._exit(137)
        return conclude(self, ex, n, *args, **kw)

    lw.Runtime._conclude = dying  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    url, key, work = argv
    if times := os.environ.get("CB_EXIT_AFTER_EFFECTS"):
        _die_after_effects(Path(work), int(times))
    task = {"artifacts": {"doc": {"n": 0}}}
    with lw.Runtime(url) as rt:
        result = rt.run_sync(_loop(Path(work)), task, task_key=key)
    print(json.dumps(result.to_dict(), default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
