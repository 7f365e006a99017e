"""Calling user code (actors, verifiers) with timeouts, sync or async, measuring wall time."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["CallTimeout", "call_user"]


class CallTimeout(Exception):
    """A user callable ran past its timeout."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"no result after {seconds:g} s")


def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    # A daemon thread, not the default executor: a sync call that hangs forever must not keep
    # the process from exiting after the engine has given up on it.
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def target() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as e:
            result, exc = None, e
        # A call abandoned after its timeout may return after the event loop has closed: its
        # result is no longer wanted, and reporting it must not raise in this thread.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_set, fut, result, exc)

    threading.Thread(target=target, daemon=True, name="loopwright-call").start()
    return fut


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )


def _set(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


async def call_user(
    fn: Callable[..., Any], *args: Any, timeout: float | None, threaded: bool = False
) -> tuple[Any, float]:
    """Call ``fn(*args)``; returns ``(result, seconds)``. Raises ``CallTimeout`` on timeout and
    whatever ``fn`` raises otherwise.

    Without a timeout a sync callable runs inline (no thread hop on the hot path of a single
    run) unless ``threaded`` (several runs share this event loop: a blocking call must not
    stall the others); with a timeout it runs in a daemon thread so that a hang can be
    abandoned.
    """
    t0 = time.perf_counter()
    try:
        if timeout is None and threaded and not _is_async(fn):
            result = await _in_daemon_thread(fn, *args)
            if inspect.isawaitable(result):
                result = await result
        elif timeout is None:
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
        elif _is_async(fn):
            result = await asyncio.wait_for(fn(*args), timeout)
        else:
            result = await asyncio.wait_for(_in_daemon_thread(fn, *args), timeout)
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(
                    result, max(0.0, timeout - (time.perf_counter() - t0))
                )
    except TimeoutError:
        raise CallTimeout(timeout or 0.0) from None
    return result, time.perf_counter() - t0
