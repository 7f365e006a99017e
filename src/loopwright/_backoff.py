"""Waiting out a retry's backoff, and leaving it early when the runtime drains.

A graceful shutdown (``Runtime.drain``: a worker's SIGTERM) finishes each run's cycle in
flight; a cycle waiting to try a failed call again (an actor, a verifier, an effect) is not
kept waiting for its backoff, which may be minutes: it is left as a crash there would leave it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from ._store_threads import written
from .store import NewEvent, Store

if TYPE_CHECKING:
    from ._exec import Execution

__all__ = ["Drained", "backoff", "held_for", "left_of", "since"]

_DRAIN_POLL_S = 0.1  # how often a backoff looks whether the runtime is draining
# A backoff this short is waited out even while draining: the drain's promise is that the
# cycle in flight finishes, and leaving it to be redone costs more than the wait.
DRAIN_WAITS_OUT_S = 1.0


def left_of(until: float, written_at: float) -> float:
    """Seconds left until ``until``, a time a journal entry written at ``written_at`` names (a
    backoff's next attempt; an intent's deadline is ``held_for``'s). Both are the writer's
    clock, maybe another host's: their difference bounds what is left, however far this
    host's clock is from it (a writer an hour fast does not make the run wait an hour;
    probe46d)."""
    return min(until - time.time(), until - written_at)


def since(wall: float, mono: float) -> float:
    """Seconds since a moment read as ``(time.time(), time.monotonic())``: the larger count
    of the two clocks, so that neither a wall clock stepped back nor a monotonic one that
    stood still while the host slept makes it shorter than it was."""
    return max(time.time() - wall, time.monotonic() - mono)


def held_for(data: dict[str, Any], written_at: float, store_now: float, ttl_s: float) -> float:
    """Seconds an in-doubt effect intent's holder may still start its call, as the executor
    that took the run over counts them (``<= 0``: it never will).

    The holder read the store's clock (``clock_at``) before the intent and gave its call
    ``limit_s`` seconds from a moment before that, counted on its own clocks (``since``): it
    never starts the call once ``clock_at + limit_s`` has passed on the store's clock, whatever
    either host's clock says (probe47). Never more than ``limit_s`` from now: the intent was
    written before it was read here.

    An intent written before that (only ``deadline_at``, on the holder's clock, or nothing)
    is waited for all its holder gave it from its write, counted from now: a clock on
    another host can say neither that it has passed nor how much is left."""
    limit, at = data.get("limit_s"), data.get("clock_at")
    if isinstance(limit, (int, float)) and isinstance(at, (int, float)):
        return min(float(limit), float(at) + float(limit) - store_now)
    until = data.get("deadline_at")
    if not isinstance(until, (int, float)):
        return ttl_s
    return float(until) - written_at


class Drained(BaseException):  # (through the cycle's handlers, as a cancellation goes)
    """A retry's backoff cut short by a graceful shutdown (``Runtime.drain``): the cycle in
    flight is left where a crash there would leave it (its failed attempts journaled with when
    the next may start, its effects' write-ahead and journal as they are), to be redone by
    whoever resumes the run, which waits out only the rest of the backoff."""


async def backoff(store: Store, ex: Execution, delay: float, what: str) -> None:
    """Wait ``delay`` seconds before another attempt of ``what``; once the runtime drains,
    say so in a ``drained`` event and raise ``Drained`` instead of waiting on (a backoff of
    ``DRAIN_WAITS_OUT_S`` or less is waited out: the cycle in flight then finishes)."""
    if delay <= DRAIN_WAITS_OUT_S:
        await asyncio.sleep(delay)
        return
    end = time.monotonic() + delay
    while (left := end - time.monotonic()) > 0:
        if ex.draining is not None and ex.draining():
            event = NewEvent(ex.state.cycle, "drained", {"in_backoff_of": what, "lease": ex.token})
            await written(store, store.append_events, ex.run_id, [event])  # (pgloop54)
            raise Drained
        await asyncio.sleep(min(left, _DRAIN_POLL_S))
