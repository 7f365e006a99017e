"""The engine's Python calls a governed cycle of the trivial loop (bench/long_runs.py's: the
actor writes one small value, the verifier rejects it with one located finding), counted by
cProfile between two actor calls: a count, not a time, the same on any machine and load
(bench/RESULTS.md, "2026-12-04 (stop 37) — engine CPU"). Measured so, it was 734 a cycle
before that stop's cuts (issue 14: the engine's CPU a cycle) and 537 after, whatever the hash
seed; the bound leaves room for a feature's few calls, not for a per-cycle walk or copy
creeping back into the hot path."""

from __future__ import annotations

import cProfile
import pstats
import time
from pathlib import Path

import loopwright as lw

CYCLES = 80
WINDOW = (20, 70)  # profiled from the 20th actor call to the 70th: 50 whole cycles
BOUND = 590  # calls a cycle (537 after the cuts; 734 before)


def test_a_trivial_cycle_stays_within_its_call_budget(tmp_path: Path) -> None:
    prof = cProfile.Profile()
    seen: list[float] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(time.perf_counter())
        if len(seen) == WINDOW[0]:
            prof.enable()
        elif len(seen) == WINDOW[1]:
            prof.disable()
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still open", "doc", "body", "text"),)
        )

    loop = lw.Loop(
        name="long",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )
    task = {"goal": "a long loop", "artifacts": {"doc": {"body": "", "title": "a title"}}}
    # no writer thread, no heartbeat inside the window: the same calls every cycle
    with lw.Runtime(tmp_path / "s.db", group_commit=False, lease_ttl_s=3600) as rt:
        r = rt.run_sync(loop, task, task_key="T")
    assert (r.cycles, r.stop_reason) == (CYCLES, "budget_cycles")
    calls = pstats.Stats(prof).total_calls / (WINDOW[1] - WINDOW[0])  # type: ignore[attr-defined]
    assert 300 < calls <= BOUND, calls
