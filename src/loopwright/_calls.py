"""Calling user code (actors, verifiers) with timeouts, sync or async, measuring wall time."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import os
import queue
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ._modelcalls import current_sink, use_sink

__all__ = [
    "HOOK_TIMEOUT_S",
    "CallTimeout",
    "call_deadline",
    "call_user",
    "hook_timeout",
    "within_deadline",
]

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "loopwright_call_deadline", default=None
)


def call_deadline() -> float | None:
    """The ``time.monotonic()`` at which the engine gives up on the actor or verifier call
    running in this context (its timeout, or the time budget left), or ``None``.

    A model adapter bounds its requests by it: a sync call the engine abandoned keeps its
    thread, and a request left running there would be answered, and billed, after the engine
    had moved on (its retry sent another beside it), its usage counted nowhere."""
    return _deadline.get()


@contextlib.contextmanager
def within_deadline(deadline: float | None) -> Iterator[None]:
    """Run the block as a call that must end by ``deadline`` (``time.monotonic()``)."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


class CallTimeout(Exception):
    """A user callable ran past its timeout."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"no result after {seconds:g} s")


class _DaemonThreads:
    """Daemon threads for sync user calls, reused from call to call.

    Not the default executor: its threads are joined at exit, so a sync call that hangs forever
    would keep the process alive after the engine gave up on it; a daemon thread does not. Nor a
    new thread per call: starting one blocks the event loop until the new thread
    runs (a GIL hand-off), for every actor and verifier call of every run. An idle thread takes
    the next call; a call that hangs keeps its thread, and the next call starts a fresh one.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every thread: after a fork, the child has none of the parent's."""
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[Callable[[], Callable[[], None]]] = queue.SimpleQueue()
        self._idle = 0  # threads waiting for a task, less the tasks already promised to them

    def submit(self, work: Callable[[], Callable[[], None]]) -> None:
        """Run ``work`` in a thread; it returns what delivers its result."""
        with self._lock:
            reserved = self._idle > 0
            if reserved:
                self._idle -= 1
        if reserved:
            self._tasks.put(work)
        else:
            # A new thread gets this call as its first: if it cannot start, the caller learns
            # it and nothing is left queued to run later. Handed over in a box the thread
            # empties: the Thread keeps its args while it lives (for ever: it serves call after
            # call), and through them the first call's future, and its result, stayed alive.
            threading.Thread(
                target=self._serve, args=([work],), daemon=True, name="loopwright-call"
            ).start()

    def _serve(self, first: list[Callable[[], Callable[[], None]]]) -> None:
        work = first.pop()
        while True:
            # Each call in a context of its own, as a new thread would give it: context
            # variables set by one run's call are never seen by another's. (Thread-locals do
            # persist from call to call.)
            deliver = contextvars.Context().run(work)
            del work
            # Idle before the result is delivered: the caller's next call, made as soon as it
            # has this result, finds this thread free instead of starting another.
            with self._lock:
                self._idle += 1
            deliver()
            del deliver  # hold no result, loop or traceback while idle
            work = self._tasks.get()


_threads = _DaemonThreads()


os.register_at_fork(after_in_child=_threads.reset)  # multiprocessing, Ray


def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    sink = current_sink()
    deadline = call_deadline()

    def target() -> Callable[[], None]:
        # The call's own context gets two things from the caller's: where the engine collects
        # the model calls this attempt makes (``_modelcalls``), and when it gives up on it.
        use_sink(sink)
        _deadline.set(deadline)
        try:
            result, exc = fn(*args), None
        except BaseException as e:
            result, exc = None, e

        def deliver() -> None:
            # A call abandoned after its timeout may return after the event loop has closed:
            # its result is no longer wanted, and reporting it must not raise in this thread.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_set, fut, result, exc)

        return deliver

    _threads.submit(target)
    return fut


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` makes a coroutine, known without ``inspect`` after the first
    call for a function or a method of one (every actor and verifier call asks, twice a
    cycle): for both the answer is the function's (its code's flag or its coroutine mark,
    what ``inspect`` reads), remembered while the function lives."""
    kind = type(fn)
    key = fn.__func__ if kind is types.MethodType else fn  # type: ignore[attr-defined]
    if type(key) is types.FunctionType:
        known = _async_functions.get(key)
        if known is None:
            known = _async_functions[key] = _inspect_async(key)
        return known
    return _inspect_async(fn)


def _inspect_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )


# function -> whether it is a coroutine function (``_is_async``); a function that dies leaves.
_async_functions: weakref.WeakKeyDictionary[Callable[..., Any], bool] = weakref.WeakKeyDictionary()


def _set(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


# Types whose instances are never awaitable (what actors and verifiers return: a proposal, a
# verdict): known after one look, so the common call skips ``inspect.isawaitable``'s ABC test.
# Awaitability is a property of the type (``__await__``), but for generators (a flag of the
# code object), which are never added.
PLAIN_TYPES: set[type] = set()


def is_awaitable(result: Any) -> bool:
    if inspect.isawaitable(result):
        return True
    kind = type(result)
    if kind is not types.GeneratorType and len(PLAIN_TYPES) < 256:
        PLAIN_TYPES.add(kind)
    return False


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
    # (no deadline, and none set around this call, the common case: the variable already
    # says so, and is neither set nor reset; a ``set`` and its ``reset`` cost ≈ 1.4 k
    # instructions, two calls a cycle)
    token = (
        None
        if timeout is None and _deadline.get() is None
        else _deadline.set(None if timeout is None else time.monotonic() + timeout)
    )
    own: TimeoutError | None = None
    try:
        if timeout is None and threaded and not _is_async(fn):
            result = await _in_daemon_thread(fn, *args)
            if inspect.isawaitable(result):
                result = await result
        elif timeout is None:
            result = fn(*args)
            if type(result) not in PLAIN_TYPES and is_awaitable(result):
                result = await result
        elif _is_async(fn):
            result = await asyncio.wait_for(_own_timeout(fn(*args)), timeout)
        else:
            result = await asyncio.wait_for(
                _in_daemon_thread(_sync_own_timeout(fn), *args), timeout
            )
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(
                    _own_timeout(result), max(0.0, timeout - (time.perf_counter() - t0))
                )
    except _OwnTimeout as carried:
        own = carried.exc
    except TimeoutError:
        if timeout is None:  # the callable's own (no limit of ours): kept as it is
            raise
        raise CallTimeout(timeout) from None
    finally:
        if token is not None:
            _deadline.reset(token)
    if own is not None:
        # A TimeoutError the callable raised itself (an HTTP client's, its own ``wait_for``)
        # is its error, kept with its message: it read "no result after 30 s" for a call that
        # failed at once. Only ``wait_for``'s own is the call's limit reached.
        raise own
    return result, time.perf_counter() - t0


class _OwnTimeout(Exception):
    """A ``TimeoutError`` the user's callable raised, carried past ``asyncio.wait_for``."""

    def __init__(self, exc: TimeoutError) -> None:
        super().__init__()
        self.exc = exc


async def _own_timeout(aw: Any) -> Any:
    try:
        return await aw
    except TimeoutError as exc:
        raise _OwnTimeout(exc) from None


def _sync_own_timeout(fn: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any) -> Any:
        try:
            return fn(*args)
        except TimeoutError as exc:
            raise _OwnTimeout(exc) from None

    return guarded


HOOK_TIMEOUT_S = 60.0
"""The timeout of a hook the loop gives none of its own (a reflector, a risk rule's check)
when the actor has none either and the run has no time budget."""


def hook_timeout(actor_s: float | None, remaining_s: float | None) -> float:
    """What a hook of the loop without a timeout of its own (the reflector, a risk rule's
    check) is given: what the actor would be (its timeout, the time budget left), else
    ``HOOK_TIMEOUT_S``: a hook that hangs must not hold a run forever."""
    vals = [v for v in (actor_s, remaining_s) if v is not None]
    return max(0.001, min(vals)) if vals else HOOK_TIMEOUT_S
