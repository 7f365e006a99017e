"""Per-endpoint limits shared by every run in a process: concurrent requests and tokens per
minute, keyed by ``(base_url, model)`` in canonical spelling.

One ``Gate`` per key, whoever built the adapter: 50 runs with 50 actors pointed at one local
server wait on one gate. A gate serves sync callers (threads) and async callers (any event loop)
in one FIFO queue, so neither kind can starve the other. When two adapters ask for different
limits on one key, the tighter one holds (no caller ever sees more than it asked for).

The token limit is a bucket of ``tokens_per_minute`` refilled continuously: a request waits
while the bucket is empty (at or below 0), and each reply's actual tokens are taken out of it
afterwards (a reply may overdraw it, and the next requests wait the overdraft off, by at most
one minute's tokens: a reply's usage is the server's word, and one claiming 2**40 tokens held
every later request to the endpoint, in every run, for years). Token counts are only known
after the fact, so this bounds the rate over time, not a single call.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import ConfigError

__all__ = ["Gate", "Limits", "gate_for", "limits_in_use"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What one endpoint (``base_url`` + model) may be sent; ``None`` is no limit."""

    max_concurrency: int | None = None
    tokens_per_minute: int | None = None

    @staticmethod
    def check(max_concurrency: object, tokens_per_minute: object) -> Limits:
        for name, value in (
            ("max_concurrency", max_concurrency),
            ("tokens_per_minute", tokens_per_minute),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"must be a whole number ≥ 1, got {value!r}", field=name)
        return Limits(max_concurrency, tokens_per_minute)  # type: ignore[arg-type]

    def __bool__(self) -> bool:
        return self.max_concurrency is not None or self.tokens_per_minute is not None


def tighter(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


class _Waiter:
    __slots__ = ("event", "fut", "granted", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        self.fut: asyncio.Future[None] | None = loop.create_future() if loop else None
        self.event = None if loop else threading.Event()
        self.granted = False


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Gate:
    """Admission to one endpoint: at most ``max_concurrency`` requests in flight, and no new
    request while the token bucket is empty. ``clock`` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.max_concurrency: int | None = None
        self.tokens_per_minute: int | None = None
        self.active = 0
        self.peak = 0  # the most requests ever in flight at once through this gate
        self._waiters: deque[_Waiter] = deque()
        self._level = 0.0  # tokens in the bucket
        self._at = clock()

    def tighten(self, limits: Limits) -> None:
        with self._lock:
            if limits.tokens_per_minute is not None and self.tokens_per_minute is None:
                self._level, self._at = float(limits.tokens_per_minute), self._clock()
            self.max_concurrency = tighter(self.max_concurrency, limits.max_concurrency)
            self.tokens_per_minute = tighter(self.tokens_per_minute, limits.tokens_per_minute)
            if self.tokens_per_minute is not None:
                self._level = min(self._level, float(self.tokens_per_minute))

    # --- concurrency --------------------------------------------------------------------------
    def _enter(self, waiter: _Waiter) -> bool:
        """Take a slot now (True) or queue ``waiter`` for one; under the lock."""
        if not self._waiters and (
            self.max_concurrency is None or self.active < self.max_concurrency
        ):
            self.active += 1
            self.peak = max(self.peak, self.active)
            return True
        self._waiters.append(waiter)
        return False

    def acquire(self) -> None:
        """Take a slot, blocking this thread until one is free."""
        waiter = _Waiter(None)
        with self._lock:
            if self._enter(waiter):
                return
        assert waiter.event is not None
        waiter.event.wait()

    async def acquire_async(self) -> None:
        """Take a slot, awaiting one without blocking the event loop."""
        waiter = _Waiter(asyncio.get_running_loop())
        with self._lock:
            if self._enter(waiter):
                return
        assert waiter.fut is not None
        try:
            await waiter.fut
        except BaseException:  # cancelled (the engine's timeout): give back what was handed over
            with self._lock:
                granted = waiter.granted
                if not granted:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
            if granted:
                self.release()
            raise

    def release(self) -> None:
        """Give a slot back; the longest waiter gets it."""
        with self._lock:
            self.active -= 1
            while self._waiters and (
                self.max_concurrency is None or self.active < self.max_concurrency
            ):
                waiter = self._waiters.popleft()
                if waiter.event is not None:
                    waiter.granted = True
                    self.active += 1
                    self.peak = max(self.peak, self.active)
                    waiter.event.set()
                    continue
                assert waiter.loop is not None and waiter.fut is not None
                try:
                    waiter.loop.call_soon_threadsafe(_wake, waiter.fut)
                except RuntimeError:  # its event loop is closed: nobody is waiting any more
                    continue
                waiter.granted = True
                self.active += 1
                self.peak = max(self.peak, self.active)

    # --- tokens -------------------------------------------------------------------------------
    def _refill(self) -> None:
        now = self._clock()
        if self.tokens_per_minute is not None:
            rate = self.tokens_per_minute / 60.0
            self._level = min(float(self.tokens_per_minute), self._level + (now - self._at) * rate)
        self._at = now

    def wait_s(self) -> float:
        """Seconds until the token bucket has something in it (0: send now)."""
        with self._lock:
            self._refill()
            if self.tokens_per_minute is None or self._level > 0:
                return 0.0
            # a little past the moment the bucket reaches 0, so that it is above it then
            return (1.0 - self._level) / (self.tokens_per_minute / 60.0)

    def charge(self, tokens: int) -> None:
        """Take a reply's tokens out of the bucket."""
        with self._lock:
            self._refill()
            if self.tokens_per_minute is not None:
                floor = -float(self.tokens_per_minute)  # a minute's wait at most (the docstring)
                self._level = max(floor, self._level - max(0, tokens))

    def pace(self) -> None:
        while (wait := self.wait_s()) > 0:
            time.sleep(wait)

    async def pace_async(self) -> None:
        # the wait is for time to refill the bucket, not for an event anyone sets
        while (wait := self.wait_s()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(wait)


_gates: dict[tuple[str, str], Gate] = {}
_gates_lock = threading.Lock()


def gate_for(base_url: str, model: str, limits: Limits) -> Gate | None:
    """The process's gate for ``(base_url, model)`` (both canonical), tightened to ``limits``;
    ``None`` when neither this caller nor an earlier one set a limit for it."""
    key = (base_url, model)
    with _gates_lock:
        gate = _gates.get(key)
        if gate is None:
            if not limits:
                return None
            gate = _gates[key] = Gate()
    gate.tighten(limits)
    return gate


def limits_in_use(base_url: str, model: str) -> Limits:
    """The limits this process holds to for ``(base_url, model)`` (both canonical)."""
    with _gates_lock:
        gate = _gates.get((base_url, model))
    if gate is None:
        return Limits()
    return Limits(gate.max_concurrency, gate.tokens_per_minute)


def _forget_in_child() -> None:
    global _gates_lock  # noqa: PLW0603 - a lock held by a parent's thread never frees here
    _gates.clear()  # a forked worker's requests are its own; the parent's slots are not
    _gates_lock = threading.Lock()


with contextlib.suppress(AttributeError):  # no fork on this platform
    import os

    os.register_at_fork(after_in_child=_forget_in_child)
