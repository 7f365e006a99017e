"""The threads the engine's store calls run in, off the event loop: lease renewals
(``Runtime._heartbeat``) always, and, for a store whose writes can wait on another session's
row lock (``Store.concurrent_writers``: PostgreSQL), a cycle's commits (``_group``), the lease's
release and an effect's journal writes (evloop53); the lease taken as a run is resumed, the
``drained`` and ``still_waiting`` events and a compensation's journal writes (pgloop54).

One pool for the process's runtimes together, made at the first call and reused after, each
thread made only when the others are busy. Not the event loop's default executor, which user
work fills (a sandboxed check, an image load, a user's ``run_in_executor``: review52a). Enough
threads that writes each stalled on their run's row lock (pg52) leave the others threads to go
on. A forked child makes its own: the parent's threads are not in it, and work handed to their
pool waited for ever.

A write made here waits for a row lock held elsewhere only briefly (``store._protocol_commit.RowLocked``,
PostgreSQL), then gives its pooled connection back and is tried again after a pause: waiting
there, a few runs whose rows another session held took every connection of the store's pool,
and the worker's other writes and reads waited for one until the pool's timeout failed them
(evloop53b).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from .store._protocol_commit import BRIEF_LOCK_WAITS, RowLocked

if TYPE_CHECKING:
    from .store import Store

__all__ = ["STORE_THREADS", "in_store_thread", "loop_running", "store_threads", "written"]

_T = TypeVar("_T")

_THREADS: list[ThreadPoolExecutor] = []

# How many store threads at most; a person's operations hold at most half of them at once
# (``_person_gate``), the rest left to the writes of the runs they wait beside.
STORE_THREADS = 32

# The pause before a write refused on a row lock (``RowLocked``) is tried again: doubled at each
# refusal, up to the last. Its connection is the pool's meanwhile.
_FIRST_PAUSE_S = 0.05
_LAST_PAUSE_S = 1.0


def _brief_lock_waits() -> None:
    BRIEF_LOCK_WAITS.on = True


def loop_running() -> bool:
    """Whether this thread runs an event loop (where a blocking wait holds it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def store_threads() -> ThreadPoolExecutor:
    if not _THREADS:
        # (two made at once: the first is used, the other never starts a thread)
        _THREADS.append(
            ThreadPoolExecutor(
                max_workers=STORE_THREADS,
                thread_name_prefix="loopwright-store",
                initializer=_brief_lock_waits,
            )
        )
    return _THREADS[0]


async def in_store_thread(
    fn: Callable[..., _T],
    *args: Any,
    resting: Callable[[bool], None] | None = None,
    orphaned: Callable[[_T], object] | None = None,
    ended: Callable[[], object] | None = None,
) -> _T:
    """``fn(*args)`` in a store thread, awaited; tried again after a pause while it is refused
    on a row another session holds locked (``RowLocked``: nothing of it was written).
    ``resting(True)`` is called as each pause starts, ``resting(False)`` as it ends.
    ``orphaned``: given what a call returns that ended after its caller was cancelled, which
    no cancellation stops (a lease taken: handed back); a cancellation during a pause leaves
    nothing written. ``ended`` (with ``orphaned``): called once nothing of a cancelled
    caller's is in flight, whatever its outcome: after the call that outlived it (and
    ``orphaned``), in the store thread that made it, or at once, on the event loop, when it
    was cancelled in a pause. Not asked of the event loop after the call: that loop may be
    closed by then (``asyncio.run`` returned, its teardown having cancelled the caller), and
    what a closed loop is asked never runs: a take left in hand, its run counted as driven by
    its runtime for ever (review55b)."""
    loop = asyncio.get_running_loop()
    pause = _FIRST_PAUSE_S
    while True:
        work = store_threads().submit(fn, *args)
        call = asyncio.wrap_future(work, loop=loop)
        try:
            return await (call if orphaned is None else asyncio.shield(call))
        except RowLocked:
            pass
        except asyncio.CancelledError:
            if orphaned is not None:
                work.add_done_callback(functools.partial(_hand_to, orphaned, ended))
            raise
        if resting is not None:
            resting(True)
        try:
            await asyncio.sleep(pause)
        except asyncio.CancelledError:
            if ended is not None:
                ended()  # (nothing in flight)
            raise
        finally:
            if resting is not None:
                resting(False)
        pause = min(pause * 2, _LAST_PAUSE_S)


def _hand_to(
    orphaned: Callable[[Any], object], ended: Callable[[], object] | None, call: Future[Any]
) -> None:
    try:
        if not call.cancelled() and call.exception() is None:
            orphaned(call.result())
    finally:
        if ended is not None:
            ended()


async def written(store: Store, fn: Callable[..., _T], /, *args: Any, **kw: Any) -> _T:
    """``fn(*args, **kw)``, a write to ``store``: in a store thread where one run's write can
    wait on a row lock while the others go on (``Store.concurrent_writers``), else here, on
    the event loop (SQLite: the store's one write lock, which the others wait on anyway)."""
    if not store.concurrent_writers:
        return fn(*args, **kw)
    return await in_store_thread(functools.partial(fn, *args, **kw))


async def uncancelled(coro: Awaitable[_T]) -> _T:
    """``coro``'s result, ``coro`` run to its end in a task of its own even when the caller is
    cancelled meanwhile (again, maybe): a write in a store thread, which no cancellation stops,
    is known to have ended or not. A cancellation of the caller that came meanwhile is raised
    once it has ended (its outcome, an error, then lost); the task itself cancelled (every
    task, by ``asyncio.run``'s teardown), its cancellation is raised."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while True:
        try:
            out = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.cancelled():
                raise  # (its own cancellation)
            cancelled = True  # (the caller's: it is waited for all the same)
        except BaseException:
            if cancelled:
                raise asyncio.CancelledError from None
            raise
    if cancelled:
        raise asyncio.CancelledError
    return out


if hasattr(os, "register_at_fork"):  # (not on Windows, which does not fork)
    os.register_at_fork(after_in_child=_THREADS.clear)
