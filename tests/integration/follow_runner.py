"""The loop ``test_follow_events`` drives in a child process while the test follows its events.

In cycle ``n >= 2`` the actor waits for the file ``go-n`` in the gate folder, which the test
writes once it has seen cycle ``n - 1``'s decision: the test proves it read each cycle while
the run was still going, and nothing here depends on how long anything takes. With ``ask``,
cycle 1 asks a person a question (the run parks) and the next cycles go on once answered.

``python follow_runner.py URL RUN_ID GATES [ask]`` resumes the run (made by the test).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import loopwright as lw

CYCLES = 3
HIDDEN = "HELD-OUT-WORDS-NOT-FOR-ACTORS"  # a held-out finding's message: never in an event
WAIT_S = 120.0  # a test that never writes the gate fails the child, not hangs it


def _wait_for(path: Path) -> None:
    end = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > end:
            raise RuntimeError(f"{path} never came")
        time.sleep(0.01)


def make_loop(gates: Path | None = None, *, ask: bool = False) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ask and ctx.cycle == 1:
            return lw.Proposal(question=lw.Question("go on?"))
        if gates is not None and ctx.cycle >= 2:
            _wait_for(gates / f"go-{ctx.cycle}")
        done = int(ctx.artifacts["doc"].get("n", 0)) + 1
        return lw.Proposal.edit("doc", {"n": done}, note=f"cycle {ctx.cycle}")

    def count(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        n = int(state.artifacts["doc"].values().get("n", 0))
        return lw.Verdict(passed=n >= CYCLES, score=min(1.0, n / CYCLES))

    def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, findings=(lw.Finding(HIDDEN, "doc", "n", "audit"),))

    return lw.Loop(
        name="followed",
        actor=actor,
        verifiers=[lw.Check(fn=count), lw.Check(fn=audit, held_out=True)],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0),
            budget=lw.Budget(max_cycles=CYCLES + 3),
        ),
    )


TASK = {"artifacts": {"doc": {"n": 0}}}


if __name__ == "__main__":
    url, run_id, gates = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    with lw.Runtime(url) as rt:
        res = rt.resume_sync(run_id, make_loop(gates, ask="ask" in sys.argv[4:]))
    print(res.status)
