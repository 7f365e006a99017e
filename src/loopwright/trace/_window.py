"""The end of a run's log read backwards a page at a time, down to a place ``build_spans``
can start a window at: the live tracer's resumed session and the run page's waterfall both
read one (so that what they cost does not grow with the run)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..store import Event, Store
from ._spans import APPROVAL_KINDS, RUN_KINDS

__all__ = ["Tail", "read_window"]


@dataclass(slots=True)
class Tail:
    """``events`` (oldest first) come after ``cut``, the ``decision`` the window starts after;
    ``cut`` is ``None`` when the log's start was reached first (``events`` is the whole log)."""

    events: list[Event]
    cut: Event | None


def read_window(
    store: Store,
    run_id: str,
    *,
    page: tuple[int, int],
    cycles: int = 0,
    pending: Iterable[str] = (),
    ready: Callable[[Event], bool] | None = None,
) -> Tail:
    """The log after the newest ``decision`` past which nothing an earlier event opened is
    still open: every cycle an event of the window belongs to has its ``cycle_started`` in
    the window (an effect journaled after its cycle's decision), every approval request
    answered in it (or among ``pending``, the requests still waiting) was asked in it, and at
    least ``cycles`` cycles start in it. ``ready``, when given, is called on every event read,
    newest first, before it is judged: whether the window may start at it (a caller's own
    condition). The log is read from its end ``page[0]`` events at first, twice the last
    page after that and at most ``page[1]`` at a time."""
    begun: set[int] = set()
    started = 0
    needed: set[int] = set()
    asked: set[str] = set()
    answered: set[str] = set(pending)
    tail: list[Event] = []  # newest first
    below: int | None = None
    size = page[0]
    while True:
        got = store.events_tail(run_id, before_id=below, limit=size)
        for ev in got:
            ok = ready is None or ready(ev)
            if (
                ev.kind == "decision"
                and ok
                and started >= cycles
                and needed <= begun
                and answered <= asked
            ):
                return Tail(tail[::-1], ev)
            tail.append(ev)
            if ev.kind == "cycle_started":
                started += 1
                begun.add(ev.cycle)
            elif ev.kind not in RUN_KINDS:
                needed.add(ev.cycle)
            aid = ev.data.get("approval_id")
            if ev.kind in APPROVAL_KINDS and aid:
                (asked if ev.kind == "approval_requested" else answered).add(str(aid))
        if len(got) < size:
            return Tail(tail[::-1], None)  # the log's start: all of it
        below = got[-1].id
        size = min(2 * size, page[1])
