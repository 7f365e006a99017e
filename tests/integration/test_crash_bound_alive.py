"""An execution that stops alive is no crash: the crash bound (``budget.max_crashes``) counts
only executions that died (crash53), on SQLite and PostgreSQL.

The count read every execution's start event with no handoff after it as one that died, so a
run interrupted at one cycle more than five times ended ``escalated`` ("crashed 6 times")
though its process never crashed: Ctrl-C (``KeyboardInterrupt``), the store failing under the
run (the process handed the lease back and said so), an executor stalled past its lease and
taken over by another (the stalled one learns it at its next commit). Each now says so under
its lease (``interrupted``), and resuming counts it no crash. Faults are placed at fixed
points: the actor of cycle 2, the commit of cycle 2, an actor held on an event until the test
has let another executor take the run over.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from support.crash_bound import TASK, doc_loop, expire, held, resumer, stall_gates

import loopwright as lw

TIMES = 10  # twice the default bound: each would have been a crash


def _loop(fault: Callable[[lw.Context], None]) -> lw.Loop:
    return doc_loop("alive", fault)


def _accepted(rt: lw.Runtime, key: str, said: int = TIMES) -> set[str]:
    """The run accepted after its interruptions, ``said`` of them said by their leases;
    returns why."""
    r = rt.result(key)
    run_id = r.run_id
    assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 3), r.packet
    interrupted = [e for e in rt.store.events(run_id) if e.kind == "interrupted"]
    assert len(interrupted) == said
    assert all(isinstance(e.data["lease"], int) for e in interrupted)
    return {str(e.data["why"]) for e in interrupted}


def test_ctrl_c_at_one_cycle_is_no_crash(url: str) -> None:
    hits = [0]

    def fault(ctx: lw.Context) -> None:
        if ctx.cycle == 2 and hits[0] < TIMES:
            hits[0] += 1
            raise KeyboardInterrupt  # (a person's Ctrl-C, in the actor's call)

    loop = _loop(fault)
    with lw.Runtime(url) as rt:
        for _ in range(TIMES):
            # (before: the 7th returned the run escalated, "crashed 6 times at cycle 2")
            with pytest.raises(KeyboardInterrupt):
                rt.run_sync(loop, TASK, task_key="ctrl-c")
            run = rt.store.get_run("ctrl-c")
            assert (run.status, run.lease_owner) == ("running", None)
        rt.run_sync(loop, TASK, task_key="ctrl-c")
        assert _accepted(rt, "ctrl-c") == {"KeyboardInterrupt"}


def test_a_store_failing_under_the_run_is_no_crash(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = _loop(lambda ctx: None)
    with lw.Runtime(url) as rt:
        one, many = rt.store.commit_request, rt.store.commit_many
        failed = [0]

        def outage(reqs: list[Any]) -> None:
            if any(r.cycle == 2 for r in reqs) and failed[0] < TIMES:  # the commit of cycle 2
                failed[0] += 1
                raise lw.StoreUnavailableError("connection dropped (injected)")

        def flaky_one(req: Any) -> Any:
            outage([req])
            return one(req)

        def flaky_many(reqs: list[Any]) -> Any:  # (how PostgreSQL's commits are written)
            outage(reqs)
            return many(reqs)

        monkeypatch.setattr(rt.store, "commit_request", flaky_one)
        monkeypatch.setattr(rt.store, "commit_many", flaky_many)
        for _ in range(TIMES):
            with pytest.raises(lw.StoreUnavailableError, match="injected"):
                rt.run_sync(loop, TASK, task_key="outage")
        rt.run_sync(loop, TASK, task_key="outage")
        assert _accepted(rt, "outage") == {"store unavailable"}


def test_a_stalled_executor_taken_over_is_no_crash(url: str) -> None:
    # Executor i stalls in its actor at cycle 2 (held on an event, its heartbeat with it) until
    # executor i + 1 has taken the run over (the lease lapsed) and stalls in turn; then i goes
    # on, finds its lease taken at its commit (StaleLeaseError) and says so. Each taker counts
    # the executor it took over as dead (nothing tells it otherwise then), never those that
    # said since that they were not.
    stalls = stall_gates(TIMES)

    def fault(ctx: lw.Context) -> None:
        if ctx.cycle == 2:
            held(stalls)

    loop = _loop(fault)
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, TASK, task_key="stall")[0].run_id
        drive, ended = resumer(url, run_id, loop)
        try:
            r = _take_over_in_turn(rt, run_id, loop, stalls, drive, ended)
        finally:
            for _entered, go in stalls.values():
                go.set()  # (a failing test leaves no executor held)
        assert r.status == "accepted", r.packet
        # (the last one woke after the run ended: a fenced-out executor writes nothing to
        # an ended run, its word no longer needed)
        assert _accepted(rt, "stall", TIMES - 1) == {"lease lost"}


def _take_over_in_turn(
    rt: lw.Runtime,
    run_id: str,
    loop: lw.Loop,
    stalls: dict[str, tuple[threading.Event, threading.Event]],
    drive: Callable[[], None],
    ended: dict[str, BaseException | lw.RunResult],
) -> lw.RunResult:
    """Each stalling executor started once the one before is held and its lease lapsed; the one
    before let go once it is; the last taken over by ``rt``, which finishes the run."""
    before: threading.Thread | None = None
    for name, (entered, _go) in stalls.items():
        if before is not None:
            expire(rt, run_id)
        t = threading.Thread(target=drive, name=name, daemon=True)
        t.start()
        # (before the fix, the 7th resume ended the run escalated: it never stalls)
        while not entered.wait(0.05):
            assert t.is_alive(), ended.get(name)
        if before is not None:
            stalls[before.name][1].set()  # the one taken over wakes
            before.join()
            assert isinstance(ended[before.name], lw.StaleLeaseError), ended[before.name]
        before = t
    assert before is not None
    expire(rt, run_id)
    r = rt.resume_sync(run_id, loop)  # takes the last one over and finishes the run
    stalls[before.name][1].set()
    before.join()
    assert isinstance(ended[before.name], lw.StaleLeaseError), ended[before.name]
    return r


def test_graceful_shutdowns_at_one_cycle_are_no_crash(url: str) -> None:
    # A worker stopped (SIGTERM: ``Runtime.drain``) as it resumes the run, ten times at cycle
    # 2: each drain names its lease and counts no crash (a drain no longer starts the count
    # again: the Ctrl-C before them is no crash either, and would count if it were one).
    hits = [0]

    def fault(ctx: lw.Context) -> None:
        if ctx.cycle == 2 and hits[0] < 1:
            hits[0] += 1
            raise KeyboardInterrupt

    loop = _loop(fault)
    with lw.Runtime(url) as rt:
        with pytest.raises(KeyboardInterrupt):
            rt.run_sync(loop, TASK, task_key="drains")
        run_id = rt.store.get_run("drains").run_id
        for _ in range(TIMES):
            with lw.Runtime(url) as stopping:
                stopping.drain()
                assert stopping.resume_sync(run_id, loop).status == "running"
        r = rt.resume_sync(run_id, loop)
        assert (r.status, r.cycles) == ("accepted", 3), r.packet
        events = rt.store.events(run_id)
        drained = [e.data["lease"] for e in events if e.kind == "drained"]
        starts = [e.data["lease"] for e in events if e.kind in ("started", "resumed")]
        assert len(drained) == TIMES and set(drained) < set(starts)


def test_pauses_and_unpauses_between_interruptions_are_no_crash(url: str) -> None:
    # Ten rounds at cycle 2: the run is paused (it parks at once: no one executes it),
    # unpaused, resumed, and interrupted again in its actor (Ctrl-C). Then it finishes.
    hits = [0]

    def fault(ctx: lw.Context) -> None:
        if ctx.cycle == 2 and hits[0] <= TIMES:
            hits[0] += 1
            raise KeyboardInterrupt

    loop = _loop(fault)
    with lw.Runtime(url) as rt:
        with pytest.raises(KeyboardInterrupt):
            rt.run_sync(loop, TASK, task_key="paused")
        run_id = rt.store.get_run("paused").run_id
        for _ in range(TIMES):
            rt.pause(run_id, by="ops")
            assert rt.store.get_run(run_id).status == "awaiting_approval"
            rt.unpause(run_id, by="ops")
            with pytest.raises(KeyboardInterrupt):
                rt.resume_sync(run_id, loop)
        r = rt.resume_sync(run_id, loop)
        assert (r.status, r.cycles) == ("accepted", 3), r.packet
        kinds = [e.kind for e in rt.store.events(run_id)]
        assert kinds.count("paused") == TIMES and kinds.count("interrupted") == TIMES + 1
