"""PostgreSQL: a resume cancelled while its lease take is in a store thread (pgloop54) leaves
the run counted as driven by its runtime until that take has ended and been handed back.
Let go at the cancellation, a second resume of the same runtime took the lease; the first
take, landing after it, took the lease again (the store lets an owner take its own lease,
with a new token) and handed it back: the second execution was fenced out mid-cycle, its
commit refused as stale (review54a). So too between the take and the drive, while the run's
fork start waits in a store thread. The faults are placed by events, never by time."""

from __future__ import annotations

import asyncio
import threading

import pytest
from support.row_locks import PATIENCE, capped_loop, until

import loopwright as lw

pytestmark = pytest.mark.postgres


def test_a_resume_while_a_cancelled_take_is_in_flight_is_refused_not_fenced_out(
    pg_url: str,
) -> None:
    started, go = threading.Event(), threading.Event()
    handed_back = threading.Event()

    async def actor(ctx: lw.Context) -> lw.Proposal:
        if not go.is_set():
            # (the second resume driving, before the fix: the first take lands now)
            go.set()
            await until(handed_back.is_set)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    loop = capped_loop("orphan", actor, 2)
    with lw.Runtime(pg_url, lease_ttl_s=3600) as rt:
        run = rt.create(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="o")[0].run_id
        take, release = rt.store.acquire_lease, rt.store.release_lease
        calls: list[int] = []

        def slow_first_take(run_id: str, owner: str, ttl_s: float) -> int:
            calls.append(1)
            if len(calls) == 1:  # the first take waits (on a row lock, say) past its caller
                started.set()
                go.wait(PATIENCE)  # (a stall guard)
            return take(run_id, owner, ttl_s)

        def watched_release(run_id: str, token: int) -> None:
            release(run_id, token)
            handed_back.set()

        rt.store.acquire_lease = slow_first_take  # type: ignore[method-assign]
        rt.store.release_lease = watched_release  # type: ignore[method-assign]

        async def main() -> None:
            first = asyncio.create_task(rt.resume(run, loop))
            assert await until(started.is_set)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            # its take still in flight: this runtime refuses the run meanwhile
            with pytest.raises(lw.ConflictError, match="being executed by this runtime"):
                await rt.resume(run, loop)
            go.set()
            assert await until(handed_back.is_set)
            assert await until(lambda: run not in rt._driving)

        try:
            asyncio.run(main())
        finally:
            go.set()
        got = rt.store.get_run(run)
        assert (got.cycle, got.lease_owner) == (0, None)  # never driven, the lease free
        assert rt.resume_sync(run, loop).cycles == 2  # resumable as ever


def test_a_resume_while_a_forks_start_waits_off_the_loop_is_refused_not_fenced_out(
    pg_url: str,
) -> None:
    """The first resume took the lease and waits, in a store thread, on its fork's start
    (its row held elsewhere, say): a second resume of the same runtime is refused meanwhile.
    Not counted as driven between the take and the drive, it took the lease again, and the
    first execution drove on a stale token (review54a)."""
    marking, go = threading.Event(), threading.Event()
    loop = capped_loop("marking", lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}), 2)
    with lw.Runtime(pg_url, lease_ttl_s=3600) as rt:
        origin = rt.create(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="o")[0].run_id
        fork = rt.fork(origin, 0, task_key="f").run_id
        mark = rt.store.mark_started
        calls: list[int] = []

        def slow_first_mark(run_id: str, token: int) -> None:
            calls.append(token)
            if len(calls) == 1:
                marking.set()
                go.wait(PATIENCE)  # (a stall guard)
            mark(run_id, token)

        rt.store.mark_started = slow_first_mark  # type: ignore[method-assign]

        async def main() -> lw.RunResult:
            first = asyncio.create_task(rt.resume(fork, loop))
            assert await until(marking.is_set)
            try:
                with pytest.raises(lw.ConflictError, match="being executed by this runtime"):
                    await rt.resume(fork, loop)  # before: driven, on a lease taken again
            finally:
                go.set()
            return await first

        try:
            done = asyncio.run(main())
        finally:
            go.set()
        assert done.cycles == 2 and len(calls) == 1
        got = rt.store.get_run(fork)
        assert (got.cycle, got.lease_owner, got.maker_starts) == (2, None, False)
