"""What the dashboard's live feed and webhook notifier read on each poll (``web/_feed.py``).

Each look must stay cheap however many runs the store holds: open runs are found through the
``runs_status`` index, new ones through ``runs_created``, pending requests through
``approvals_status``; only the few rows that changed are then read in full.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = [
    "NOTIFIED",
    "OPEN_STATUSES",
    "ApprovalMark",
    "LiveSQL",
    "LiveStore",
    "RunMark",
    "notified_key_index",
]

if TYPE_CHECKING:
    from ._base import Event

# The event kind recording a webhook delivery (``web/_notify.py``); the partial index
# ``events_notified`` holds the events of this kind.
NOTIFIED = "notified"

# The statuses a run can still leave; a run in any other has ended.
OPEN_STATUSES = ("pending", "running", "awaiting_approval")


@dataclass(frozen=True, slots=True)
class RunMark:
    """Where a run stands, in the few columns two looks are compared on."""

    run_id: str
    status: str
    cycle: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class ApprovalMark:
    """A pending approval request, without its (possibly large) evidence."""

    approval_id: str
    run_id: str
    requested_at: float


class LiveStore(ABC):
    """The live feed's queries (mixed into ``Store``)."""

    @abstractmethod
    def run_marks(self, *, created_since: float) -> list[RunMark]:
        """Every open run (pending, running, awaiting approval) and every run created at or
        after ``created_since`` (an ended one included), in no particular order."""

    @abstractmethod
    def pending_approval_marks(self) -> list[ApprovalMark]:
        """The pending approval requests, oldest first."""

    @abstractmethod
    def events_of_kind(self, run_id: str, kind: str) -> list[Event]:
        """The run's events of one kind, oldest first."""

    def last_event_id(self) -> int:
        """The id of the store's newest event (0: none); where ``events_after`` starts."""
        return 0

    def events_after(self, kind: str, after: int, limit: int = 1_000) -> list[Event]:
        """Events of ``kind`` of every run, with ids above ``after``, oldest first, at most
        ``limit`` (a store that cannot read them across runs: none). A SQL store walks the ids
        from ``after`` on: what a look costs is the events written since, not the store."""
        return []

    def was_notified(self, run_id: str, key: str, target: str) -> bool:
        """Whether the run holds a ``notified`` marker of ``key`` for ``target`` (one webhook
        delivery's "was this posted?"). A store that can reads the markers of that key only,
        however many the run holds."""
        return any(
            e.data.get("key") == key and e.data.get("target") == target
            for e in self.events_of_kind(run_id, NOTIFIED)
        )


@functools.cache
def _in_dialect(mark: str, text: str) -> str:
    return text if mark == "?" else text.replace("?", mark)


_OPEN = ", ".join(f"'{s}'" for s in OPEN_STATUSES)
_MARK_COLS = "run_id, status, cycle, created_at, updated_at"
_MARKERS = f"WHERE run_id = ? AND kind = '{NOTIFIED}' ORDER BY id"
# A marker's key as the index ``events_notified_key`` holds it (``NOTIFIED_KEY_SQLITE``,
# ``NOTIFIED_KEY_PG``): a query names the same expression, and the index's condition literally.
_MARKER_KEY = {"?": "json_extract(data, '$.key')", "%s": "(data->>'key')"}


def notified_key_index(mark: str) -> str:
    """The partial index of the delivery markers by run and key, in the dialect of ``mark``:
    "was this request posted?" reads the markers of one key, not every one of the run."""
    return (
        f"CREATE INDEX IF NOT EXISTS events_notified_key ON events(run_id, {_MARKER_KEY[mark]}) "
        f"WHERE kind = '{NOTIFIED}'"
    )


class LiveSQL(LiveStore):
    """Mixed into ``SQLStore``: the same statements serve SQLite and PostgreSQL."""

    _MARK: ClassVar[str]

    if TYPE_CHECKING:

        def _all(self, query: str, args: Sequence[Any]) -> list[Any]: ...
        @staticmethod
        def _jl(value: Any) -> Any: ...

    def run_marks(self, *, created_since: float) -> list[RunMark]:
        # Two index probes joined by UNION (an OR over two columns would scan the table).
        rows = self._all(
            _in_dialect(
                self._MARK,
                f"SELECT {_MARK_COLS} FROM runs WHERE status IN ({_OPEN}) "
                f"UNION SELECT {_MARK_COLS} FROM runs WHERE created_at >= ?",
            ),
            [float(created_since)],
        )
        return [RunMark(str(r[0]), str(r[1]), int(r[2]), float(r[3]), float(r[4])) for r in rows]

    def pending_approval_marks(self) -> list[ApprovalMark]:
        rows = self._all(
            _in_dialect(
                self._MARK,
                "SELECT approval_id, run_id, requested_at FROM approvals WHERE status = ? "
                "ORDER BY requested_at, approval_id",
            ),
            ["pending"],
        )
        return [ApprovalMark(str(r[0]), str(r[1]), float(r[2])) for r in rows]

    def events_of_kind(self, run_id: str, kind: str) -> list[Event]:
        from ._base import Event

        if kind == NOTIFIED:
            # Stated as a literal, so the partial index events_notified answers (SQLite uses a
            # partial index only for a query that states its condition): the run's markers
            # are read, not its whole log.
            query, args = _MARKERS, [run_id]
        else:
            query, args = "WHERE run_id = ? AND kind = ? ORDER BY id", [run_id, kind]
        rows = self._all(
            _in_dialect(
                self._MARK, "SELECT id, run_id, cycle, kind, ts, data FROM events " + query
            ),
            args,
        )
        return [Event(r[0], r[1], r[2], r[3], r[4], self._jl(r[5])) for r in rows]

    def last_event_id(self) -> int:
        rows = self._all("SELECT MAX(id) FROM events", [])
        return int(rows[0][0] or 0) if rows else 0

    def events_after(self, kind: str, after: int, limit: int = 1_000) -> list[Event]:
        from ._base import Event

        # by the primary key from ``after`` on (no index holds the kind across runs)
        rows = self._all(
            _in_dialect(
                self._MARK,
                "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE id > ? AND kind = ? "
                "ORDER BY id LIMIT ?",
            ),
            [int(after), kind, int(limit)],
        )
        return [Event(r[0], r[1], r[2], r[3], r[4], self._jl(r[5])) for r in rows]

    def was_notified(self, run_id: str, key: str, target: str) -> bool:
        # The markers of this key (one per target it was posted to), by the partial index
        # events_notified_key: as many rows however many requests the run had posted.
        rows = self._all(
            _in_dialect(
                self._MARK,
                f"SELECT data FROM events WHERE run_id = ? AND kind = '{NOTIFIED}' "
                f"AND {_MARKER_KEY[self._MARK]} = ?",
            ),
            [run_id, key],
        )
        return any(self._jl(r[0]).get("target") == target for r in rows)
