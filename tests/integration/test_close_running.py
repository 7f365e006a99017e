"""A runtime closed while it executes runs (lifecycle55): ``close`` (from another thread) and
the end of ``async with`` drain them and wait for them to wind down, their cycle in flight
committed whole, ``drained`` said and their lease handed back, before the store is closed (it
was closed under them, the cycle cut off); a resume started once ``close`` has begun is
refused; ``close`` called on the event loop that executes one cannot wait: refused, naming it,
nothing done. Each run is held inside its actor's call until the test lets it go; nothing is
timed. Both stores: the drain's writes go to store threads on PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from support.row_locks import capped_loop, until

import loopwright as lw

TASK = {"artifacts": {"doc": {"a": 0}}}


class Hold:
    """The actor's first call held (on its event loop) until ``go`` is set."""

    def __init__(self) -> None:
        self.entered, self.go = threading.Event(), threading.Event()

    async def actor(self, ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            self.entered.set()
            assert await until(self.go.is_set)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def loop(self) -> lw.Loop:
        return capped_loop("held", self.actor, 5)


def _closing(rt: lw.Runtime) -> bool:
    running = rt.__dict__.get("_running_")  # (before lifecycle55: none; close did not wait)
    return running is not None and running.closing


def _whole(path: str, run_id: str) -> tuple[list[str], Any, int]:
    """The run's events, its lease holder, its checkpoint's cycle (read by a new runtime)."""
    with lw.Runtime(path) as rt:
        kinds = [e.kind for e in rt.store.events(run_id)]
        rec = rt.store.get_run(run_id)
        return kinds, rec.lease_owner, rt.store.latest_checkpoint(run_id).state["cycle"]


def test_close_from_another_thread_drains_the_runs_and_waits(url: str) -> None:
    path = url
    rt = lw.Runtime(path)
    hold = Hold()
    run_id = rt.create(hold.loop(), TASK, task_key="c")[0].run_id
    closed = threading.Event()

    def close() -> None:
        rt.close()
        closed.set()

    async def main() -> tuple[bool, lw.RunResult]:
        resuming = asyncio.ensure_future(rt.resume(run_id, hold.loop()))
        assert await until(hold.entered.is_set)
        closer = threading.Thread(target=close)
        closer.start()
        try:
            assert await until(lambda: _closing(rt) or closed.is_set())
            waited = not closed.is_set()  # (close waits while the run's cycle is held)
            hold.go.set()
            return waited, await resuming
        finally:
            closer.join(60)

    waited, result = asyncio.run(main())
    assert waited and closed.is_set() and rt.store.closed
    assert result.status == "running"  # (resumable: drained, not ended)
    kinds, holder, cycle = _whole(path, run_id)
    assert kinds[-1] == "drained" and holder is None  # (lease handed back)
    assert cycle == 1  # (the cycle in flight committed whole, no later one begun)


def test_async_with_waits_for_its_runs_and_refuses_new_ones(url: str) -> None:
    path = url
    hold = Hold()
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with lw.Runtime(path) as rt:
            run_id = rt.create(hold.loop(), TASK, task_key="a")[0].run_id
            other = rt.create(hold.loop(), TASK, task_key="b")[0].run_id
            seen["ids"] = run_id, other
            resuming = asyncio.ensure_future(rt.resume(run_id, hold.loop()))
            assert await until(hold.entered.is_set)

            async def later() -> None:
                assert await until(lambda: _closing(rt))
                seen["store_open"] = not rt.store.closed
                try:
                    await rt.resume(other, hold.loop())
                except lw.ConflictError as exc:
                    seen["refused"] = str(exc)
                hold.go.set()

            letting = asyncio.ensure_future(later())
        seen["result"] = await resuming
        await letting

    asyncio.run(main())
    run_id, other = seen["ids"]
    assert seen["store_open"] and "closing" in seen["refused"]
    assert seen["result"].status == "running"
    kinds, holder, cycle = _whole(path, run_id)
    assert kinds[-1] == "drained" and holder is None and cycle == 1
    assert _whole(path, other) == (["run_created"], None, 0)  # (nothing of it done)


def test_close_on_the_runs_event_loop_is_refused_naming_them(url: str) -> None:
    path = url
    rt = lw.Runtime(path)
    hold = Hold()
    run_id = rt.create(hold.loop(), TASK, task_key="s")[0].run_id

    async def main() -> tuple[str, lw.RunResult]:
        resuming = asyncio.ensure_future(rt.resume(run_id, hold.loop()))
        assert await until(hold.entered.is_set)
        with pytest.raises(lw.ConflictError) as refused:
            rt.close()  # (it could only wait by blocking the loop the run needs)
        hold.go.set()
        return str(refused.value), await resuming

    said, result = asyncio.run(main())
    assert run_id in said and "async with" in said
    assert not rt.store.closed and result.status != "running"  # (nothing done: it ran on)
    rt.close()
    assert rt.store.closed
