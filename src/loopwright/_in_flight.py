"""What a runtime has in flight that its ``close`` waits for (``InFlight``): the runs it
executes (``_lifecycle.Running``) and a person's operations under way (``_person_gate.PersonOps``).

Counted under one lock from any thread: a run's resume on any thread's event loop, a person's
operation in a store thread or the caller's own. Once ``close`` has begun nothing more is
started (each refused with its own words) and ``close`` waits for those in flight to end: in
a thread on a condition, on an event loop on a future of that loop, set by the thread that
ends the last one (``call_soon_threadsafe``; a loop closed meanwhile is passed over, nobody
waits there). A wait on an event loop cancelled meanwhile goes on to its end, then raises the
cancellation: the store closed after it is not closed under what was in flight (a task in
``async with`` cancelled as it ends, every task of ``asyncio.run``'s teardown; lifecycle55,
async55b, inflight56).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["InFlight"]

_K = TypeVar("_K", bound=Hashable)


class InFlight(Generic[_K]):
    """Things in flight, each under a key (counted: ``held``), until ``close`` has begun
    (``closing``); ``close`` and ``aclose`` wait for them to end."""

    def __init__(self) -> None:
        self.closing = False
        self.held: Counter[_K] = Counter()
        self._ended = threading.Condition()
        self._awaiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def start(self, key: _K, refused: Callable[[], BaseException]) -> None:
        """One more in flight under ``key``; once ``close`` has begun, ``refused()`` raised."""
        with self._ended:
            if self.closing:
                raise refused()
            self.held[key] += 1

    def end(self, key: _K) -> None:
        """One under ``key`` ended (in any thread); the last one wakes ``close``'s waits."""
        with self._ended:
            self.held[key] -= 1
            if self.held[key] <= 0:
                del self.held[key]
            if self.held:
                return
            self._ended.notify_all()
            awaiting, self._awaiting = self._awaiting, []
        for loop, done in awaiting:
            with contextlib.suppress(RuntimeError):  # (its event loop closed)
                loop.call_soon_threadsafe(_set, done)

    def close(
        self,
        check: Callable[[Counter[_K]], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Nothing started from now on; ``then()`` called if some are in flight, and they
        waited for here. ``check(held)`` first, under the lock: what it raises leaves all as
        it was (nothing refused yet)."""
        with self._ended:
            if check is not None:
                check(self.held)
            self.closing = True
            if self.held and then is not None:
                then()
            while self.held:
                self._ended.wait()

    def awaiting(self, then: Callable[[], None] | None = None) -> asyncio.Future[None] | None:
        """Nothing started from now on; ``then()`` called if some are in flight, and a future
        of the running event loop returned, set once they have ended (None: none in flight)."""
        loop = asyncio.get_running_loop()
        with self._ended:
            self.closing = True
            if not self.held:
                return None
            if then is not None:
                then()
            done: asyncio.Future[None] = loop.create_future()
            self._awaiting.append((loop, done))
        return done

    async def aclose(self, then: Callable[[], None] | None = None) -> None:
        """``close``, its wait made on the running event loop, which goes on meanwhile. A
        cancellation that comes meanwhile is raised once all have ended, whoever sent it: a
        helper task awaited instead, cancelled with every task by ``asyncio.run``'s teardown,
        stopped the wait at once, and the store was closed under the runs winding down."""
        done = self.awaiting(then)
        if done is None:
            return
        cancelled = False
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                cancelled = True  # (waited for all the same, then raised)
        if cancelled:
            raise asyncio.CancelledError


def _set(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
