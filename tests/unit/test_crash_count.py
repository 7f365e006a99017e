"""``crashes_at``: the executions of a ``running`` run that died at the cycle after its last
concluded one, read from the end of its event log at resume (stuck52). Only what the engine's
own events say: a park, a decision, a rollback, a drain or an end is no crash."""

from __future__ import annotations

import pytest

import loopwright as lw
from loopwright._resume_ready import crashes_at
from loopwright.store import NewEvent

LOOP = lw.Loop(
    name="count",
    actor=lambda ctx: lw.Proposal.edit("doc", {"n": ctx.cycle}),
    verifiers=[lambda s, p: lw.Verdict(passed=False)],
    contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
)


def _count(rt: lw.Runtime, events: list[tuple[int, str]], cycle: int) -> int:
    run, _ = rt.create(LOOP, {"artifacts": {"doc": {"n": 0}}})
    rt.store.append_events(run.run_id, [NewEvent(c, kind, {}) for c, kind in events])
    return crashes_at(rt.store, run.run_id, cycle)


@pytest.mark.parametrize(
    ("events", "cycle", "crashes"),
    [
        # the first execution died in cycle 1
        ([(0, "started")], 0, 1),
        # three died at cycle 1 (none concluded it)
        ([(0, "started"), (0, "resumed"), (0, "resumed")], 0, 3),
        # one concluded cycles 1 and 2, then died in 3; one more died in 3: two at cycle 3
        ([(0, "started"), (1, "decision"), (2, "decision"), (2, "resumed")], 2, 2),
        # the execution that concluded cycle 2 started at it (resumed at 1, cycle 2 concluded)
        ([(0, "started"), (1, "decision"), (1, "resumed"), (2, "decision")], 2, 1),
        # drained at shutdown, then resumed and died: one
        ([(0, "started"), (0, "drained"), (0, "resumed"), (0, "drained"), (0, "resumed")], 0, 1),
        # parked for a person and decided: the crashes before the park are not this count's
        (
            [(0, "started"), (0, "resumed"), (1, "approval_requested"), (1, "approval_decided")],
            1,
            0,
        ),
        # a rollback starts the count again
        ([(0, "started"), (0, "resumed"), (0, "rolled_back"), (0, "resumed")], 0, 1),
    ],
)
def test_crashes_counted_back_to_a_conclusion_or_a_handoff(
    rt: lw.Runtime, events: list[tuple[int, str]], cycle: int, crashes: int
) -> None:
    assert _count(rt, events, cycle) == crashes


def test_crashes_counted_across_pages(rt: lw.Runtime) -> None:
    # more than a page (16 events) of crashes at one cycle, each with an event of its own
    events = [(0, "started")] + [(0, k) for _ in range(20) for k in ("resumed", "retry")]
    assert _count(rt, events, 0) == 21
