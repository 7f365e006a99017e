"""``crashes_at``: the executions of a ``running`` run that died at the cycle after its last
concluded one, read from the end of its event log at resume (stuck52). Only what the engine's
own events say: a park, a decision, a rollback, a drain or an end is no crash."""

from __future__ import annotations

import pytest

import loopwright as lw
from loopwright._crash_bound import crashes_at
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


def _ev(cycle: int, kind: str, lease: int | None = None, **data: object) -> tuple[int, str, dict]:
    return (cycle, kind, {**data, **({} if lease is None else {"lease": lease})})


def _count_data(
    rt: lw.Runtime, events: list[tuple[int, str, dict]], cycle: int, token: int | None
) -> int:
    run, _ = rt.create(LOOP, {"artifacts": {"doc": {"n": 0}}})
    rt.store.append_events(run.run_id, [NewEvent(c, kind, d) for c, kind, d in events])
    return crashes_at(rt.store, run.run_id, cycle, token)


@pytest.mark.parametrize(
    ("events", "cycle", "token", "crashes"),
    [
        # each execution at cycle 1 was interrupted (Ctrl-C, the store failing under it) and
        # said so under its lease: none died
        (
            [
                e
                for t in range(1, 12)
                for e in (
                    _ev(0, "resumed" if t > 1 else "started", t),
                    _ev(0, "interrupted", t, why="KeyboardInterrupt"),
                )
            ],
            0,
            12,
            0,
        ),
        # a stalled executor (lease 2) taken over by lease 3 says it lost its lease late, after
        # lease 3 started and died: lease 3 counts, lease 2 does not
        (
            [
                _ev(0, "started", 1),
                _ev(0, "interrupted", 1, why="store unavailable"),
                _ev(0, "resumed", 2),
                _ev(0, "resumed", 3),
                _ev(0, "interrupted", 2, why="lease lost"),
            ],
            0,
            4,
            1,
        ),
        # an interruption said by a lease that is not the execution's counts for no other
        ([_ev(0, "started", 1), _ev(0, "interrupted", 7, why="lease lost")], 0, 8, 1),
        # a drain names its lease: the drained execution is no crash, and the crashes before
        # it at that cycle still count (a drain between them does not hide a crash loop)
        (
            [
                _ev(0, "started", 1),
                _ev(0, "resumed", 2),
                _ev(0, "drained", 2),
                _ev(0, "resumed", 3),
            ],
            0,
            4,
            2,
        ),
        # a person lifted a pause (or decided a request) while the run executed: a decision
        # written beside an execution is no handoff of it, and the crash after it counts
        (
            [
                _ev(0, "started", 1),
                _ev(0, "approval_decided", None, approval_id="p"),
                _ev(0, "resumed", 2),
            ],
            0,
            3,
            2,
        ),
        # a worker's note written late at cycle 0 (worker_skipped) is not the execution that
        # concluded the cycle: the count goes on past it to the decision
        (
            [
                _ev(0, "started", 1),
                _ev(1, "decision"),
                _ev(2, "decision"),
                _ev(2, "resumed", 2),
                _ev(0, "worker_skipped", None, why="no loop"),
                _ev(2, "resumed", 3),
            ],
            2,
            4,
            3,
        ),
        # the execution that concluded cycle 2 (lease 1) was interrupted after it: its
        # successor (lease 2) died, and only it counts
        (
            [
                _ev(0, "started", 1),
                _ev(1, "decision"),
                _ev(2, "decision"),
                _ev(2, "interrupted", 1, why="KeyboardInterrupt"),
                _ev(2, "resumed", 2),
            ],
            2,
            3,
            1,
        ),
        # ...and interrupted after it with this resume next: no crash at all
        ([_ev(0, "started", 1), _ev(2, "decision"), _ev(2, "interrupted", 1)], 2, 2, 0),
        # a pause parks the run: the crashes before it are not this count's
        (
            [
                _ev(0, "started", 1),
                _ev(0, "resumed", 2),
                _ev(0, "paused", None, by="ops"),
                _ev(0, "approval_decided"),
                _ev(0, "resumed", 4),
            ],
            0,
            5,
            1,
        ),
    ],
    ids=[
        "interrupted",
        "lost-lease-late",
        "other-lease",
        "drain-skips",
        "decided-mid-run",
        "late-foreign-event",
        "concluder-interrupted",
        "concluder-handed-back",
        "pause",
    ],
)
def test_an_execution_that_said_it_left_is_no_crash(
    rt: lw.Runtime, events: list[tuple[int, str, dict]], cycle: int, token: int, crashes: int
) -> None:
    assert _count_data(rt, events, cycle, token) == crashes


def test_the_concluding_execution_said_alive_after_a_person_took_the_lease(
    rt: lw.Runtime,
) -> None:
    # lease 1 concluded cycle 2 and was interrupted (Ctrl-C); a person's edit took lease 2
    # and handed it back; this resume holds lease 3: lease 1's word lies after its decision
    events = [
        _ev(0, "started", 1),
        _ev(2, "decision"),
        _ev(2, "interrupted", 1, why="KeyboardInterrupt"),
        _ev(2, "edited", None, by="ed"),
    ]
    assert _count_data(rt, events, 2, 3) == 0
    # ...but a lost lease's word is written late, wherever: only its lease places it
    late = [_ev(0, "started", 1), _ev(2, "decision"), _ev(2, "interrupted", 0, why="lease lost")]
    assert _count_data(rt, late, 2, 3) == 1


def test_a_word_written_before_its_start_event_landed_counts(rt: lw.Runtime) -> None:
    # lease 2's start event went out in a group commit still on its way when it was
    # interrupted: its word lies before its start
    events = [_ev(0, "started", 1), _ev(0, "interrupted", 2), _ev(0, "resumed", 2)]
    assert _count_data(rt, events, 0, 3) == 1  # lease 1 died; lease 2 did not


def test_a_late_drain_of_a_lease_taken_over_vouches_for_itself_only(rt: lw.Runtime) -> None:
    # lease 1 stalled, lease 2 took the run over and died; lease 1 woke and drained (written
    # without the lease it no longer held), then lease 3 died: 2 and 3 count (a drain read
    # as a handoff hid lease 2's crash: 1)
    events = [
        _ev(0, "started", 1),
        _ev(0, "resumed", 2),
        _ev(0, "drained", 1),
        _ev(0, "resumed", 3),
    ]
    assert _count_data(rt, events, 0, 4) == 2


def test_the_concluder_is_judged_by_the_lease_its_decision_names(rt: lw.Runtime) -> None:
    # (crash54) lease 1 concluded cycle 2 and stalled; a person's operation took lease 2 and
    # handed it back; lease 1 then said, late, its lease was lost; this resume holds lease 3.
    # Judged by "the successor's lease less one" (2, the person's), it counted a crash.
    late = [
        _ev(0, "started", 1),
        _ev(2, "decision", 1),
        _ev(2, "interrupted", 1, why="lease lost"),
    ]
    assert _count_data(rt, late, 2, 3) == 0
    # ...and a word by another lease after the decision vouches for no concluder
    other = [_ev(0, "started", 1), _ev(2, "decision", 1), _ev(2, "interrupted", 2)]
    assert _count_data(rt, other, 2, 3) == 1
