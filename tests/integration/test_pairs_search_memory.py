"""The search for preference pairs keeps, of each cycle, what it compares (rank, digest,
context id, position), not the cycle's record: a run whose cycles found much and paired
nothing held every record for the search (counted with tracemalloc at two lengths, never
timed)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import loopwright as lw
from loopwright.trace import preference_pairs

FINDINGS = 6  # each cycle's verdict locates this many findings, each with a long message


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {f"p{ctx.cycle % FINDINGS}": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        found = tuple(
            lw.Finding(f"part {i} still reads wrong: " + "m" * 300, "doc", f"p{i}", "quality")
            for i in range(FINDINGS)
        )
        return lw.Verdict(passed=False, score=0.5, findings=found)

    return lw.Loop(
        name="pairs",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _peak(tmp_path: Path, cycles: int) -> int:
    task = {"goal": "g", "artifacts": {"doc": {f"p{i}": "y" for i in range(FINDINGS)}}}
    with lw.Runtime(str(tmp_path / f"{cycles}.db")) as rt:
        result = rt.run_sync(_loop(cycles), task, task_key="k")
        tracemalloc.start()
        try:
            pairs = preference_pairs(rt.store, run_ids=[result.run_id])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert pairs == []  # no cycle did better than another: nothing to pair, nothing written
    return peak


def test_the_pair_search_does_not_hold_every_record(tmp_path: Path) -> None:
    """Each cycle's record (its six findings of 300 characters) was kept for the whole search:
    about 3.9 KB a cycle held for nothing written. Now a cycle costs its candidate's few fields
    (the records of the cycles a pair holds are read again)."""
    _peak(tmp_path, 2)  # imports, before anything is counted
    short, long = _peak(tmp_path, 50), _peak(tmp_path, 450)
    per_cycle = (long - short) / 400
    assert per_cycle <= 2000, (short, long, per_cycle)  # was 9.4 KB; now about 0.9 KB
