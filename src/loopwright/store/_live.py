"""What the dashboard's live feed and webhook notifier read on each poll (``web/_feed.py``).

Each look must stay cheap however many runs the store holds: open runs are found through the
``runs_status`` index, new ones through ``runs_created``, pending requests through
``approvals_status``; only the few rows that changed are then read in full.
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = [
    "NOTIFIED",
    "NOTIFY_CURSORS_SQL",
    "OPEN_STATUSES",
    "SETTLED",
    "ApprovalMark",
    "LiveSQL",
    "LiveStore",
    "RunMark",
    "SettledRead",
    "notified_key_index",
    "settled_index",
]

if TYPE_CHECKING:
    from ._base import Event

# The event kind recording a webhook delivery (``web/_notify.py``); the partial index
# ``events_notified`` holds the events of this kind.
NOTIFIED = "notified"
# The event kind a person's settling of an effect left in doubt writes (``_settle.py``).
SETTLED = "effect_settled"

# Where each webhook URL's posting of settlings stands (``web/_notify.py``), by the URL's
# digest: the position ``(tx, event_id)`` of the last settling it was posted (or was found
# posted) with every one before it posted too. A notifier that starts posts what came after.
# ``tx`` is the writing transaction's id on PostgreSQL (``settled_index``), 0 on SQLite.
NOTIFY_CURSORS_SQL = (
    "CREATE TABLE IF NOT EXISTS notify_cursors (target TEXT PRIMARY KEY, "
    "tx BIGINT NOT NULL, event_id BIGINT NOT NULL, updated_at {real} NOT NULL)"
)

# A settling's position: (writing transaction, event id).
Position = tuple[int, int]

# The statuses a run can still leave; a run in any other has ended.
OPEN_STATUSES = ("pending", "running", "awaiting_approval")


@dataclass(frozen=True, slots=True)
class SettledRead:
    """Settlings read after a position, oldest first, each with its position. ``horizon``:
    the rows of a transaction below it are all there (no transaction still open can write a
    settling before them); a row at or above it may yet have one commit before it (a
    PostgreSQL transaction that took a lower id and commits later)."""

    rows: list[tuple[Position, Event]]
    horizon: int

    def final(self, pos: Position) -> bool:
        return pos[0] < self.horizon


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

    def settlings_after(self, after: Position, limit: int = 100) -> SettledRead:
        """The ``effect_settled`` events of every run past ``after``, in position order, at
        most ``limit`` (a store that cannot read them across runs: none)."""
        return SettledRead([], 0)

    def settled_start(self) -> Position:
        """The position "now": every settling committed before is at or below it."""
        return (0, 0)

    def notify_cursor(self, target: str) -> Position | None:
        """Where ``target``'s posting of settlings stands (None: it never posted)."""
        return None

    def set_notify_cursor(self, target: str, pos: Position) -> None:
        """Move ``target``'s cursor to ``pos``, never back (two processes posting to one URL);
        a store that keeps none forgets it."""
        del target, pos

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


def settled_index(mark: str) -> list[str]:
    """The settlings by position, as a partial index (a notifier reads those after its cursor,
    however many other events were written since). On PostgreSQL each event records its
    writing transaction (``tx``, set by the column's default; rows written before: NULL, the
    settlings among them 0): ids are handed out as statements run, so a transaction holding a
    lower id may commit after one holding a higher; transaction ids order what can still
    appear (``LiveSQL.settlings_after``). The column is added without a default first, then
    given one: no rewrite of the table."""
    if mark == "?":
        return [f"CREATE INDEX IF NOT EXISTS events_settled ON events(id) WHERE kind = '{SETTLED}'"]
    return [
        "ALTER TABLE events ADD COLUMN IF NOT EXISTS tx BIGINT",
        "ALTER TABLE events ALTER COLUMN tx SET DEFAULT txid_current()",
        f"UPDATE events SET tx = 0 WHERE kind = '{SETTLED}' AND tx IS NULL",
        f"CREATE INDEX IF NOT EXISTS events_settled ON events(tx, id) WHERE kind = '{SETTLED}'",
    ]


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
        def _tx(self) -> AbstractContextManager[Any]: ...

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

    # --- settlings by position, and each webhook URL's cursor (``web/_notify.py``) --------
    def settlings_after(self, after: Position, limit: int = 100) -> SettledRead:
        from ._base import Event

        cols = "id, run_id, cycle, kind, ts, data"
        if self._MARK == "?":
            # One writer at a time: ids are handed out in commit order, every row is final.
            # The kind as a literal, for the partial index events_settled.
            rows = self._all(
                f"SELECT {cols}, 0 FROM events WHERE kind = '{SETTLED}' AND id > ? "
                "ORDER BY id LIMIT ?",
                [int(after[1]), int(limit)],
            )
            horizon = 1 << 62
        else:
            # The oldest transaction still open, read in the same statement's snapshot: every
            # row of a transaction below it is visible, no other can still appear.
            rows = self._all(
                f"SELECT {cols}, tx, txid_snapshot_xmin(txid_current_snapshot()) FROM events "
                f"WHERE kind = '{SETTLED}' AND (tx, id) > (%s, %s) ORDER BY tx, id LIMIT %s",
                [int(after[0]), int(after[1]), int(limit)],
            )
            horizon = int(rows[0][7]) if rows else 0
        return SettledRead(
            [
                ((int(r[6]), int(r[0])), Event(r[0], r[1], r[2], r[3], r[4], self._jl(r[5])))
                for r in rows
            ],
            horizon,
        )

    def settled_start(self) -> Position:
        if self._MARK == "?":
            return (0, self.last_event_id())
        rows = self._all("SELECT txid_snapshot_xmin(txid_current_snapshot())", [])
        return (int(rows[0][0]), 0)

    def notify_cursor(self, target: str) -> Position | None:
        rows = self._all(
            _in_dialect(self._MARK, "SELECT tx, event_id FROM notify_cursors WHERE target = ?"),
            [target],
        )
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    def set_notify_cursor(self, target: str, pos: Position) -> None:
        with self._tx() as conn:
            conn.execute(
                _in_dialect(
                    self._MARK,
                    "INSERT INTO notify_cursors(target, tx, event_id, updated_at) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT(target) DO UPDATE SET tx = excluded.tx, "
                    "event_id = excluded.event_id, updated_at = excluded.updated_at "
                    "WHERE (excluded.tx, excluded.event_id) > "
                    "(notify_cursors.tx, notify_cursors.event_id)",
                ),
                [target, int(pos[0]), int(pos[1]), time.time()],
            )
