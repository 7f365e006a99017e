"""PostgreSQL: a fork started by its maker's resume (``Store.mark_started``, fork54) is marked
off the event loop, as the lease taken just before it (pgloop54): fork54 wrote the mark on
the event loop, so a person holding the fork's row locked (psql, the dashboard) held every
other run of the process until the lock went (review54a)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from support.row_locks import BesideHeld, RowHolder, capped_loop, until

import loopwright as lw

pytestmark = pytest.mark.postgres


def _fork_beside(
    rt: lw.Runtime, loop: lw.Loop, holder: RowHolder, marking: threading.Event | None = None
) -> tuple[str, str]:
    """Run A (``first``) and fork B, its maker's to start: another session takes B's row
    between its lease and its start's mark (``marking`` set as the mark is tried)."""
    task = {"artifacts": {"doc": {"a": 0}}}
    origin = rt.create(loop, task, task_key="o")[0].run_id
    b = rt.fork(origin, 0, task_key="b").run_id  # its maker's to start
    a = rt.create(loop, {**task, "first": True}, task_key="a")[0].run_id
    mark = rt.store.mark_started

    def locked_then_marked(run_id: str, token: int) -> None:
        if not holder.locked.is_set():
            holder.hold(run_id)
        if marking is not None:
            marking.set()
        mark(run_id, token)

    rt.store.mark_started = locked_then_marked  # type: ignore[method-assign]
    return a, b


def test_a_forks_start_waiting_on_its_row_lock_holds_no_other_run(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    holder = RowHolder(*pg_schema)
    beside = BesideHeld(holder, holder.someone_waits)  # B's mark waits on its row
    loop = capped_loop("start", beside.actor, 5)
    try:
        with lw.Runtime(pg_url) as rt:
            a, b = _fork_beside(rt, loop, holder)
            beside.drive(rt, loop, a, b).result()
            assert beside.waited == [True]  # B's mark waited on its row...
            assert beside.cycles_while_held == [3, 4, 5]  # ...while A drove three more cycles
            assert holder.held_to_the_end == [False]
            got = rt.store.get_run(b)
            assert (got.cycle, got.maker_starts) == (5, False)
    finally:
        holder.free.set()


def test_a_resume_cancelled_while_its_forks_start_waits_hands_the_lease_back_off_the_loop(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    """B's resume is cancelled while its fork's start waits on B's row (held elsewhere): the
    lease it took is handed back from a store thread. Released on the event loop (the
    resume's failure path), the release waited for the lock there, and A with it."""
    holder = RowHolder(*pg_schema)
    marking, b_cancelled = threading.Event(), threading.Event()
    beside = BesideHeld(holder, b_cancelled.is_set)
    loop = capped_loop("cancelled", beside.actor, 5)

    async def cancel(run_b: asyncio.Task[lw.RunResult]) -> None:
        assert await until(marking.is_set)
        run_b.cancel()
        b_cancelled.set()

    try:
        with lw.Runtime(pg_url) as rt:
            a, b = _fork_beside(rt, loop, holder, marking)
            assert beside.drive(rt, loop, a, b, after_b=cancel).cancelled()
            assert beside.waited == [True]
            assert beside.cycles_while_held == [3, 4, 5]  # A went on while B's release waited
            assert holder.held_to_the_end == [False]
            got = rt.store.get_run(b)
            # handed back once the lock went, never driven (its mark, in a thread no
            # cancellation stops, may have landed as the lock went: the maker asked to start it)
            assert (got.lease_owner, got.cycle) == (None, 0)
    finally:
        holder.free.set()
