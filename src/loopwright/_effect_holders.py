"""Who may still be executing an effect call: the calls this process is executing now
(``tracked``, ``running_here``: a sync call past its timeout runs on in its thread, an async
one until its coroutine ends) and what the executor that wrote an intent can still do
(``holder``: gone, alive, or unknown on another host). ``_effect_run.perform_effect`` asks
before it settles an intent without a result (its grace wait) and before it runs a failed call
again.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from ._owners import local_pid, owner_is_dead

__all__ = ["Tracked", "holder", "running_here", "tracked"]

# Effect calls of this process still executing, by (run, journal key), each counted as often
# as it is held: a resume in this process knows whether an earlier attempt here is still
# running. Counted, not a set: an idempotent call retried while its timed-out thread runs on
# holds the mark twice, and the first one ending does not unmark the second.
_RUNNING: Counter[tuple[str, str]] = Counter()
_RUNNING_LOCK = threading.Lock()


class Tracked:
    """``fn``, counted among this process's executing calls (``mark``: run, journal key) from
    now until it ends: a sync call when it returns or raises (in its thread, which a timeout
    does not stop), an awaitable it returns (an ``async def`` effect) when that awaitable ends,
    not when it is made — awaited, the call acts (review48: a coroutine was unmarked before
    it ran, and a taker in this process was told its holder was gone). The caller says
    ``over()`` once it stopped waiting for the call: an awaitable nobody will await (handed
    after a timeout, or never started) is unmarked then."""

    def __init__(self, fn: Callable[[], Any], mark: tuple[str, str]) -> None:
        self._fn = fn
        self._mark = mark
        self._held = True  # this call's count in _RUNNING
        self._over = False  # the caller stopped waiting: what is handed now is never awaited
        self._handed = False  # an awaitable was handed out, to run under this call's count
        self._started = False  # ...and was started
        self._inner: Any = None  # (the awaitable handed out)
        with _RUNNING_LOCK:
            _RUNNING[mark] += 1

    def __call__(self) -> Any:
        handed = False
        try:
            out = self._fn()
            if inspect.isawaitable(out):
                with _RUNNING_LOCK:
                    if not self._over:
                        handed = self._handed = True
                        self._inner = out
                if handed:
                    return self._until_done(out)
                if inspect.iscoroutine(out):
                    out.close()  # never awaited: it never runs (and says nothing of it)
            return out
        finally:
            if not handed:
                self._leave()

    async def _until_done(self, aw: Awaitable[Any]) -> Any:
        with _RUNNING_LOCK:
            self._started = True
        try:
            return await aw
        finally:
            self._leave()

    def over(self) -> None:
        """The caller no longer waits for the call (it returned, raised or timed out): an
        awaitable handed out and never started will not run, and stops counting."""
        with _RUNNING_LOCK:
            self._over = True
            unstarted = self._handed and not self._started
        if unstarted:
            if inspect.iscoroutine(self._inner):
                self._inner.close()  # never awaited: it never runs
            self._leave()

    def _leave(self) -> None:
        with _RUNNING_LOCK:
            if self._held:
                self._held = False
                _RUNNING[self._mark] -= 1
                if _RUNNING[self._mark] <= 0:
                    del _RUNNING[self._mark]


def tracked(fn: Callable[[], Any], mark: tuple[str, str]) -> Tracked:
    """``fn``, counted among this process's executing calls (``mark``: run, journal key)
    from now until it ends (``Tracked``)."""
    return Tracked(fn, mark)


def running_here(mark: tuple[str, str]) -> bool:
    """Whether this process is executing the effect call ``mark`` names (a sync call that
    timed out runs on in its thread; an async one runs until its coroutine ends)."""
    with _RUNNING_LOCK:
        return _RUNNING[mark] > 0


def holder(owner: Any, mark: tuple[str, str]) -> str:
    """Whether the executor that wrote an intent can still be executing it: ``gone`` (a
    process of this host that no longer exists, or this process with the call not running),
    ``alive`` (a process of this host: running, stuck or frozen) or ``unknown`` (another host,
    or not recorded)."""
    pid = local_pid(owner) if isinstance(owner, str) else None
    if pid is None:  # another host, another pid namespace, or an owner not named so
        return "unknown"
    if pid == os.getpid():
        return "alive" if running_here(mark) else "gone"
    return "gone" if owner_is_dead(owner) else "alive"
