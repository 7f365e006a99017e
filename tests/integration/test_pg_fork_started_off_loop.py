"""PostgreSQL: a fork started by its maker's resume (``Store.mark_started``, fork54) is marked
off the event loop, as the lease taken just before it (pgloop54): fork54 wrote the mark on
the event loop, so a person holding the fork's row locked (psql, the dashboard) held every
other run of the process until the lock went (review54a)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from test_pg_loop_writes_off_loop import _Holder, _loop, _until

import loopwright as lw

pytestmark = pytest.mark.postgres


def test_a_forks_start_waiting_on_its_row_lock_holds_no_other_run(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    holder = _Holder(*pg_schema)
    a_at_2 = threading.Event()
    waited: list[bool] = []  # whether B's mark was seen waiting on the lock
    a_cycles_while_held: list[int] = []

    async def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.task.get("first") and ctx.cycle == 2:
            a_at_2.set()
            waited.append(await _until(holder.someone_waits, holder.gone))
        if ctx.task.get("first") and ctx.cycle > 2 and holder.holding():
            a_cycles_while_held.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    loop = _loop("start", actor, 5)
    task = {"artifacts": {"doc": {"a": 0}}}
    try:
        with lw.Runtime(pg_url) as rt:
            origin = rt.create(loop, task, task_key="o")[0].run_id
            b = rt.fork(origin, 0, task_key="b").run_id  # its maker's to start
            a = rt.create(loop, {**task, "first": True}, task_key="a")[0].run_id
            mark = rt.store.mark_started

            def locked_then_marked(run_id: str, token: int) -> None:
                # another session takes the fork's row between its lease and its mark
                if not holder.locked.is_set():
                    holder.hold(run_id)
                mark(run_id, token)

            rt.store.mark_started = locked_then_marked  # type: ignore[method-assign]

            async def main() -> None:
                run_a = asyncio.create_task(rt.resume(a, loop))
                run_a.add_done_callback(lambda _t: holder.free.set())
                assert await _until(a_at_2.is_set)
                run_b = asyncio.create_task(rt.resume(b, loop))
                await asyncio.wait([run_a, run_b])
                run_a.result()
                run_b.result()

            asyncio.run(main())
            assert waited == [True]  # B's mark waited on its row...
            assert a_cycles_while_held == [3, 4, 5]  # ...while A drove three more cycles
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
    holder = _Holder(*pg_schema)
    a_at_2, marking, b_cancelled = threading.Event(), threading.Event(), threading.Event()
    waited: list[bool] = []
    a_cycles_while_held: list[int] = []

    async def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.task.get("first") and ctx.cycle == 2:
            a_at_2.set()
            waited.append(await _until(b_cancelled.is_set, holder.gone))
        if ctx.task.get("first") and ctx.cycle > 2 and holder.holding():
            a_cycles_while_held.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    loop = _loop("cancelled", actor, 5)
    task = {"artifacts": {"doc": {"a": 0}}}
    try:
        with lw.Runtime(pg_url) as rt:
            origin = rt.create(loop, task, task_key="o")[0].run_id
            b = rt.fork(origin, 0, task_key="b").run_id
            a = rt.create(loop, {**task, "first": True}, task_key="a")[0].run_id
            mark = rt.store.mark_started

            def locked_then_marked(run_id: str, token: int) -> None:
                if not holder.locked.is_set():
                    holder.hold(run_id)
                marking.set()
                mark(run_id, token)

            rt.store.mark_started = locked_then_marked  # type: ignore[method-assign]

            async def main() -> None:
                run_a = asyncio.create_task(rt.resume(a, loop))
                run_a.add_done_callback(lambda _t: holder.free.set())
                assert await _until(a_at_2.is_set)
                run_b = asyncio.create_task(rt.resume(b, loop))
                assert await _until(marking.is_set)
                run_b.cancel()
                b_cancelled.set()
                await asyncio.wait([run_a, run_b])
                run_a.result()
                assert run_b.cancelled()

            asyncio.run(main())
            assert waited == [True]
            assert a_cycles_while_held == [3, 4, 5]  # A went on while B's release waited
            assert holder.held_to_the_end == [False]
            got = rt.store.get_run(b)
            # handed back once the lock went, never driven (its mark, in a thread no
            # cancellation stops, may have landed as the lock went: the maker asked to start it)
            assert (got.lease_owner, got.cycle) == (None, 0)
    finally:
        holder.free.set()
