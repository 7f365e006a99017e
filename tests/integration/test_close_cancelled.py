"""The end of ``async with`` cancelled while it waits for its runtime's runs (inflight56): it
goes on waiting until they have wound down (their cycle committed or cut off whole, their
lease handed back), closes the store, then raises ``CancelledError`` as asyncio expects.
Cancelled with every task at once (``asyncio.run``'s teardown, a Ctrl-C's), it waited for
nothing and closed the store before the runs had wound down. Each run is held in its actor's
call until the test lets it go (or the teardown cancels it); nothing is timed."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

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
    running = rt.__dict__.get("_running_")
    return running is not None and running.closing


def _lease_and_last(url: str, run_id: str) -> tuple[Any, str]:
    with lw.Runtime(url) as rt:
        return rt.store.get_run(run_id).lease_owner, rt.store.events(run_id)[-1].kind


async def _ending(rt: lw.Runtime, seen: dict[str, Any]) -> None:
    """The end of ``async with rt``, noting what it raised and whether the store was closed."""
    try:
        await rt.__aexit__(None, None, None)
    except asyncio.CancelledError:
        seen["cancelled"] = True
        raise
    finally:
        seen["store_closed"] = rt.store.closed
        seen["resume_done"] = seen["resuming"].done()


def test_the_end_of_async_with_cancelled_waits_for_its_runs_then_raises(url: str) -> None:
    hold = Hold()
    seen: dict[str, Any] = {}
    with lw.Runtime(url) as rt0:
        run_id = rt0.create(hold.loop(), TASK, task_key="a")[0].run_id

    async def main() -> None:
        rt = lw.Runtime(url)
        seen["resuming"] = asyncio.ensure_future(rt.resume(run_id, hold.loop()))
        assert await until(hold.entered.is_set)
        ending = asyncio.ensure_future(_ending(rt, seen))
        assert await until(lambda: _closing(rt))
        ending.cancel()
        await asyncio.sleep(0)  # (the cancellation delivered while the run is still held)
        seen["waited"] = not ending.done()
        hold.go.set()
        await asyncio.wait([ending])
        seen["result"] = seen["resuming"].result()

    asyncio.run(main())
    assert seen["waited"] and seen["cancelled"] and seen["store_closed"]
    assert seen["resume_done"]  # (the run had wound down before the store was closed)
    assert seen["result"].status == "running"  # (drained: resumable)
    assert _lease_and_last(url, run_id) == (None, "drained")


def test_the_end_of_async_with_cancelled_with_every_task_waits_for_its_runs(url: str) -> None:
    """``asyncio.run`` returns while the end of ``async with`` waits for a run held in its
    actor: its teardown cancels every task at once, the run's and the end's. The run winds
    down (``interrupted``, its lease handed back) before the store is closed."""
    hold = Hold()
    seen: dict[str, Any] = {}
    with lw.Runtime(url) as rt0:
        run_id = rt0.create(hold.loop(), TASK, task_key="t")[0].run_id

    async def main() -> None:
        rt = lw.Runtime(url)
        seen["resuming"] = asyncio.ensure_future(rt.resume(run_id, hold.loop()))
        assert await until(hold.entered.is_set)
        seen["ending"] = asyncio.ensure_future(_ending(rt, seen))
        assert await until(lambda: _closing(rt))
        # returned: the teardown cancels the resume and the end of ``async with`` together

    asyncio.run(main())
    assert seen["cancelled"] and seen["store_closed"]
    assert seen["resume_done"]  # (wound down before the store was closed)
    assert _lease_and_last(url, run_id) == (None, "interrupted")
