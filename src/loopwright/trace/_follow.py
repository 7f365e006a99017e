"""Following a run's event trace while it is written: ``Runtime.events`` and ``events_sync``.

A follower reads the store, nothing else, so the run may be driven by this process, another
one or a worker on another host. It yields the event lines of the ``loopwright.trace/1``
format (``_jsonl``: the lines ``loopwright trace`` prints after its header, the same keys,
``seq`` the event's position in the run's log), masked as that export masks them, and the
same content: an event carries a verdict's outcome (``held_out``, ``passed``, ``score``, a
count of findings), never a held-out verifier's findings, which the trace shows to no one.

Where it is: the id of the last event yielded (a run's event ids are in commit order, the
stores' ``_lock_run``, so nothing is committed behind it later) and its ``seq``. It reads a
page after it; when a page comes back short it looks at the run's status, read *before* that
page (a run ends or parks in the commit that writes its last events, so a status read earlier
than the page saw every event written before it). A parked run whose request is decided waits
on a resume, not on a person: ``until="parked"`` goes on following it. Nothing new: it waits ``poll_s``, doubling
while nothing comes, up to ``max(poll_s, 5)`` seconds (the worker's idle backoff), and starts
again from ``poll_s`` once something does. A consumer that reconnects passes the last ``seq``
it handled as ``after_seq``: the next line is ``after_seq + 1``, none twice, none lost (a
run's log is only appended to).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from .._contract import TERMINAL_STATUSES
from .._errors import ConfigError, check_seconds
from .._redact import redact
from ..store import Store
from ._jsonl import event_line

__all__ = ["FOLLOW_UNTIL", "MAX_IDLE_S", "Follower", "follow_events", "follow_events_sync"]

#: ``until``'s values: ``"parked"`` ends at a park (``awaiting_approval``) or the run's end,
#: as ``Runtime.run`` returns; ``"ended"`` follows a parked run through its resume.
FOLLOW_UNTIL = ("parked", "ended")
Until = Literal["parked", "ended"]
MAX_IDLE_S = 5.0  # the longest wait between looks while nothing comes (unless poll_s is more)
_PAGE = 256  # events read at a time


class Follower:
    """Where a follower is in one run's log, and one look at the store at a time; the waits
    between looks are its caller's (``follow_events``, ``follow_events_sync``)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        *,
        after_seq: int = 0,
        follow: bool = True,
        until: Until = "parked",
        poll_s: float = 0.5,
    ) -> None:
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            raise ConfigError(
                f"must be a whole number, 0 or more (the seq of the last event handled), "
                f"got {after_seq!r}",
                field="after_seq",
            )
        if not isinstance(follow, bool):
            raise ConfigError(f"must be True or False, got {follow!r}", field="follow")
        if until not in FOLLOW_UNTIL:
            raise ConfigError(
                f"must be one of {', '.join(map(repr, FOLLOW_UNTIL))}, got {until!r}",
                field="until",
            )
        check_seconds(poll_s, "poll_s")
        self.store = store
        self.run = store.get_run(run_id)  # an id, a unique prefix or a task key
        self.follow = follow
        self.until = until
        self.ends = TERMINAL_STATUSES | ({"awaiting_approval"} if until == "parked" else set())
        self.poll_s = float(poll_s)
        self.idle = self.poll_s
        self.seq = after_seq
        self.after_id = 0
        if after_seq:
            at = store.event_id_at(self.run.run_id, after_seq)
            if at is None:
                held = sum(store.event_counts(self.run.run_id).values())
                raise ConfigError(
                    f"run {self.run.run_id} has {held} event(s): there is no event {after_seq} "
                    "to go on after (a seq of another run's trace?)",
                    field="after_seq",
                )
            self.after_id = at
        self.done = False
        self.more = False

    def look(self) -> list[dict[str, Any]]:
        """The next lines (masked), at most a page; ``done`` is set once none will follow."""
        status = self.store.get_run(self.run.run_id).status if self.follow else ""
        if status == "awaiting_approval" and self.until == "parked" and not self._asks():
            status = "running"  # its request decided: a resume is what comes next
        evs = self.store.events_page(self.run.run_id, after_id=self.after_id, limit=_PAGE)
        lines = [event_line(self.run, self.seq + n, ev) for n, ev in enumerate(evs, 1)]
        if evs:
            self.seq += len(evs)
            self.after_id = evs[-1].id
            self.idle = self.poll_s
        self.more = len(evs) == _PAGE  # (a full page: look again at once)
        if not self.more and (not self.follow or status in self.ends):
            self.done = True
        out: list[dict[str, Any]] = redact(lines)  # a trace leaves the engine: no secrets
        return out

    def _asks(self) -> bool:
        """Whether the parked run waits on a person: a request of it still pending. Read,
        as its status is, before the page (polish52b: a run whose request was decided, a
        worker about to resume it, ended ``until="parked"`` at once, its resume unseen)."""
        return bool(self.store.approvals(run_id=self.run.run_id, status="pending"))

    def wait(self) -> float:
        """Seconds to wait before the next look: ``poll_s``, doubled each time nothing came."""
        wait = self.idle
        self.idle = min(self.idle * 2, max(self.poll_s, MAX_IDLE_S))
        return wait


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


async def _asleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def follow_events(store: Store, run_id: str, **kw: Any) -> AsyncIterator[dict[str, Any]]:
    """The run's event lines as they are written (``Follower``'s arguments, checked now: a
    mistake is raised here, not at the first ``async for`` step)."""
    return _follow(Follower(store, run_id, **kw))


def follow_events_sync(store: Store, run_id: str, **kw: Any) -> Iterator[dict[str, Any]]:
    """``follow_events`` for synchronous code: its waits block the calling thread."""
    return _follow_sync(Follower(store, run_id, **kw))


async def _follow(f: Follower) -> AsyncIterator[dict[str, Any]]:
    while True:
        # In a thread: a look is two or three store round trips (PostgreSQL: network ones),
        # which would stop the event loop, and a run driven on it. One look at a time, each
        # awaited before the next: the lines keep their order.
        lines = await asyncio.to_thread(f.look)
        for line in lines:
            yield line
        if f.done:
            return
        if not f.more:
            await _asleep(f.wait())


def _follow_sync(f: Follower) -> Iterator[dict[str, Any]]:
    while True:
        yield from f.look()
        if f.done:
            return
        if not f.more:
            _sleep(f.wait())
