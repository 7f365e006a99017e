"""A resume cancelled while its lease take is in a store thread (``Store.concurrent_writers``:
PostgreSQL; forced on SQLite) whose event loop is closed before the take ends
(``asyncio.run`` returning: its teardown, a Ctrl-C): the take is handed back and the run let
go all the same. Both were asked of the closed loop, which never ran them: the run stayed
counted as driven by its runtime for ever, every later ``resume`` of it refused ("being
executed by this runtime") and no worker of the runtime claiming it (review55b). The faults
are placed by events, never by time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from support.row_locks import PATIENCE, capped_loop, until

import loopwright as lw

LOOP = capped_loop("outlived", lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}), 2)


def _held(cond: Callable[[], bool]) -> bool:
    """Whether ``cond()`` holds within the patience (a bound only a stall reaches)."""
    end = time.monotonic() + PATIENCE
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_a_take_that_outlives_its_event_loop_leaves_the_run_free(url: str) -> None:
    entered, go, handed_back = threading.Event(), threading.Event(), threading.Event()
    with lw.Runtime(url, lease_ttl_s=3600) as rt:
        run_id = rt.create(LOOP, {"artifacts": {"doc": {"a": 0}}}, task_key="o")[0].run_id
        take, release = rt.store.acquire_lease, rt.store.release_lease

        def slow(rid: str, owner: str, ttl_s: float) -> int:
            if threading.current_thread() is not threading.main_thread():
                entered.set()  # (waiting on a row lock, say, past its caller's loop)
                assert go.wait(PATIENCE)  # (a stall guard)
            return take(rid, owner, ttl_s)

        def watched(rid: str, token: int) -> None:
            release(rid, token)
            handed_back.set()

        rt.store.acquire_lease = slow  # type: ignore[method-assign]
        rt.store.release_lease = watched  # type: ignore[method-assign]
        forced = not rt.store.concurrent_writers
        rt.store.concurrent_writers = True  # type: ignore[misc]  (the take in a store thread)

        async def main() -> None:
            resuming = asyncio.create_task(rt.resume(run_id, LOOP))
            assert await until(entered.is_set)
            resuming.cancel()
            with pytest.raises(asyncio.CancelledError):
                await resuming

        try:
            asyncio.run(main())  # returned, its loop closed: the take still in flight
        finally:
            go.set()
            if forced:
                del rt.store.concurrent_writers
        assert handed_back.wait(PATIENCE)  # the take that landed after it, handed back
        assert _held(lambda: run_id not in rt._driving)  # the run let go
        rt.store.acquire_lease = take  # type: ignore[method-assign]
        rt.store.release_lease = release  # type: ignore[method-assign]
        got = rt.store.get_run(run_id)
        assert (got.cycle, got.lease_owner) == (0, None)
        assert rt.resume_sync(run_id, LOOP).cycles == 2  # resumable as ever
