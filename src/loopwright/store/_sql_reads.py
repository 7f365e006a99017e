"""The SQL core's reads of a run's history: checkpoints, versions and rejected digests,
read whole, by iteration or by page, and its events (appended and read).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, cast

from .._record_codec import fill_versions, referred_versions
from .._state import PartStatus, Version
from .._state_codec import fold as codec_fold
from .._state_codec import is_head, resolve, wanted_versions
from ._records import (
    VERSION_COST,
    Checkpoint,
    CheckpointRow,
    Event,
    NewEvent,
    VersionRow,
    own_fields,
)
from ._rows import (
    event_row,
    sql_int,
)
from ._sql_core import SQLCore

#: Above every event id (both backends' ids are 64-bit integers): "no upper bound".
_NO_ID = 2**63 - 1


class ReadsSQL(SQLCore):
    """Reads of checkpoints, versions, rejected digests and events; event appends."""

    # --- checkpoints: reading -------------------------------------------------------------
    def _checkpoint_rows(
        self, run_id: str, *, latest: bool, since: int | None = None, until: int | None = None
    ) -> list[CheckpointRow]:
        with self._conn() as conn:
            last = conn.execute(self._q.last_checkpoint, (run_id,)).fetchone()
            if last is None:
                return []
            first = last[1] if latest else -1 if since is None else since
            if until is not None and not latest:
                rows = conn.execute(
                    # (a range's callers read its states and its last row's record only:
                    # the others are neither decoded nor given their versions)
                    self._q.checkpoint_range,
                    (False, until, run_id, first, until),
                ).fetchall()
            else:
                rows = conn.execute(
                    self._q.checkpoint_rows, (not latest, last[0], run_id, first)
                ).fetchall()
            records = [self._stored_record(r[3], run_id, r[0]) for r in rows]
            self._fill_versions(conn, run_id, records)
        state = self._stored_object
        return [
            CheckpointRow(r[0], r[1], state(r[2], run_id, r[0], "state"), rec, r[4], r[5])
            for r, rec in zip(rows, records, strict=True)
        ]

    def _cycle_marks(self, run_id: str, cycle: int) -> list[tuple[int, int]]:
        # (sql_int: a cycle past the bigint, asked for, is one the run has not, not an
        # overflow: the caller says which cycles the run has)
        args = (run_id, sql_int(cycle), run_id)
        return [(int(r[0]), int(r[1])) for r in self._all(self._q.cycle_marks, args)]

    def _fill_versions(
        self, conn: Any, run_id: str, records: Sequence[dict[str, Any] | None]
    ) -> None:
        """Give the edits of ``records`` that name a version (``_record_codec``) their values,
        read in ``conn`` (the transaction the records were read in)."""
        keys = {k for rec in records if rec is not None for k in referred_versions(rec)}
        if not keys:
            return
        jl = self._jl
        values = {(r[0], int(r[1])): jl(r[4]) for r in self._version_keys(conn, run_id, keys)}
        for rec in records:
            if rec is not None:
                fill_versions(rec, values)

    def _version_rows(
        self,
        run_id: str,
        *,
        ref: str | None = None,
        keys: Collection[tuple[str, int]] | None = None,
    ) -> list[VersionRow]:
        with self._conn() as conn:
            rows: list[Any]
            if keys is not None:
                rows = self._version_keys(conn, run_id, keys)
            elif ref is not None:
                rows = conn.execute(self._q.versions_of_part, (run_id, ref)).fetchall()
            else:
                rows = conn.execute(self._q.all_versions, (run_id,)).fetchall()
        jl = self._jl
        return [(r[0], r[1], r[2], r[3], jl(r[4])) for r in rows]

    # Pages of a long run read in order of the primary key, each one indexed range: an export
    # holds one page, and a page is small enough that a run being written beside it waits
    # for nothing.
    PAGE = 32

    def iter_versions(self, run_id: str, ref: str) -> Iterator[Version]:
        after = 0
        while True:
            taken = 0
            for v in self._decoded_versions(run_id, ref, after, self.PAGE):
                taken, after = taken + 1, v.n
                yield v
            if taken < self.PAGE:
                return

    def written_after(
        self, run_id: str, ref: str, *, upto: int, cycle: int, limit: int
    ) -> list[int]:
        rows = self._all(self._q.written_after, (run_id, ref, upto, cycle, limit))
        return [int(r[0]) for r in rows]

    def versions_page(self, run_id: str, ref: str, *, after: int, limit: int) -> list[Version]:
        return list(self._decoded_versions(run_id, ref, after, limit))

    def _decoded_versions(self, run_id: str, ref: str, after: int, limit: int) -> Iterator[Version]:
        # Decoded one at a time as they are taken: a reader walking every version of a part
        # (``iter_versions``) holds one page of rows and one decoded value, not a page of both.
        jl = self._jl
        for _r, n, cycle, status, value in self._all(
            self._q.version_page, (run_id, ref, after, limit)
        ):
            yield Version(int(n), jl(value), int(cycle), cast(PartStatus, status))

    def iter_events(self, run_id: str) -> Iterator[Event]:
        after, jl = 0, self._jl
        while True:
            rows = self._all(self._q.event_page, (run_id, after, self.PAGE))
            for r in rows:
                yield Event(r[0], r[1], r[2], r[3], r[4], jl(r[5]))
            if len(rows) < self.PAGE:
                return
            after = int(rows[-1][0])

    def _folded_pages(
        self, run_id: str, query: str
    ) -> Iterator[tuple[Sequence[Any], dict[str, Any] | None, Mapping[str, Any]]]:
        """The rows of ``query`` (``seq, cycle, state, record, base``, then any more columns)
        a page at a time, each with its record (its versions filled) and its fields folded on
        the last row's (as ``checkpoints`` folds them): no version values, no part read."""
        after = -1
        f: Mapping[str, Any] = {}
        while True:
            with self._conn() as conn:
                rows = conn.execute(query, (run_id, after, self.PAGE)).fetchall()
                records = [self._stored_record(r[3], run_id, r[0]) for r in rows]
                self._fill_versions(conn, run_id, records)
            for row, rec in zip(rows, records, strict=True):
                own = own_fields(self._stored_object(row[2], run_id, row[0], "state"))
                f = own if int(row[0]) == int(row[4]) else codec_fold(f, [own])
                yield row, rec, f
            if len(rows) < self.PAGE:
                return
            after = int(rows[-1][0])

    def iter_fields(
        self, run_id: str
    ) -> Iterator[tuple[int, int, dict[str, Any] | None, Mapping[str, Any]]]:
        for row, rec, f in self._folded_pages(run_id, self._q.state_page):
            yield int(row[0]), int(row[1]), rec, f

    def iter_checkpoints(self, run_id: str) -> Iterator[Checkpoint]:
        # As ``iter_fields``, with each row's created_at; a page's states are folded each on
        # the one before (not each chain read again from its snapshot) and its versions read
        # in one go, when one of them is first read, those the page before read kept: a
        # reader of every state (the exports) costs a few statements a page, not ~11 a
        # checkpoint, and a reader of records and fields alone folds and reads no state.
        loader = self._loader(run_id)
        task = self._task_reader(run_id)
        after = -1
        f: Mapping[str, Any] = {}
        prev: _PageStates | None = None
        while True:
            with self._conn() as conn:
                rows = conn.execute(self._q.checkpoint_page, (run_id, after, self.PAGE)).fetchall()
                records = [self._stored_record(r[3], run_id, r[0]) for r in rows]
                self._fill_versions(conn, run_id, records)
            deltas: list[tuple[int, int, dict[str, Any]]] = []
            fields: list[Mapping[str, Any]] = []
            for row in rows:
                state = self._stored_object(row[2], run_id, row[0], "state")
                own = own_fields(state)
                f = own if int(row[0]) == int(row[4]) else codec_fold(f, [own])
                deltas.append((int(row[0]), int(row[4]), state))
                fields.append(f)
            page = prev = _PageStates(self, run_id, after, deltas, task, prev)
            for i, (row, rec) in enumerate(zip(rows, records, strict=True)):
                yield Checkpoint(
                    run_id,
                    int(row[0]),
                    int(row[1]),
                    functools.partial(page.state, i),
                    rec,
                    row[5],
                    loader,
                    fields[i],
                )
            if len(rows) < self.PAGE:
                return
            after = int(rows[-1][0])

    def iter_records(self, run_id: str) -> Iterator[tuple[int, int, dict[str, Any] | None]]:
        after = -1
        while True:
            with self._conn() as conn:
                rows = conn.execute(self._q.record_page, (run_id, after, self.PAGE)).fetchall()
                records = [self._stored_record(r[2], run_id, r[0]) for r in rows]
                self._fill_versions(conn, run_id, records)
            for (seq, cycle, _raw), rec in zip(rows, records, strict=True):
                yield int(seq), int(cycle), rec
            if len(rows) < self.PAGE:
                return
            after = int(rows[-1][0])

    def versions_within(self, run_id: str, budget: int | None) -> dict[str, list[Version]] | None:
        q = self._q
        out: dict[str, list[Version]] = {}
        total = 0
        limit = float("inf") if budget is None else budget
        with self._conn() as conn:
            if budget is not None and not q.streams:
                # The driver fetches a result whole: its size is asked for first.
                count, size = conn.execute(q.versions_size, (run_id,)).fetchone()
                if int(size) + VERSION_COST * int(count) > budget:
                    return None
            rows = []
            for row in conn.execute(q.sized_versions, (run_id,)):
                total += int(row[5] or 0) + VERSION_COST
                if total > limit:
                    return None  # SQLite steps row by row: nothing more is read
                rows.append(row)
        values = self._jl_all([row[4] for row in rows])  # decoded once known to fit
        for (ref, n, cycle, status, _value, _size), value in zip(rows, values, strict=True):
            out.setdefault(ref, []).append(Version(int(n), value, int(cycle), status))
        return out

    def is_rejected(self, run_id: str, digest: str) -> bool:
        with self._conn() as conn:
            row = conn.execute(self._q.is_rejected, (run_id, digest)).fetchone()
        return row is not None

    def rejected_rows(self, run_id: str, *, upto_cycle: int | None = None) -> list[tuple[str, int]]:
        query = "SELECT digest, cycle FROM rejected WHERE run_id=?"
        args: list[Any] = [run_id]
        if upto_cycle is not None:  # a fork's: not a long run's every rejection read
            query += " AND cycle<=?"
            args.append(int(upto_cycle))
        rows = self._all(self._q.p(query), args)
        return [(r[0], int(r[1])) for r in rows]

    def rejected_digests(self, run_id: str) -> list[str]:
        return [r[0] for r in self._all(self._q.rejected, (run_id,))]

    # --- events -------------------------------------------------------------------------
    def append_events(self, run_id: str, events: Sequence[NewEvent]) -> None:
        if not events:
            return
        now = time.time()
        with self._tx() as conn:
            self._lock_run(conn, run_id)
            self._executemany(
                conn, self._q.insert_event, [event_row(run_id, e, now, self._js) for e in events]
            )

    def add_fenced_spend(
        self,
        run_id: str,
        spent: Mapping[str, Any],
        events: Sequence[NewEvent] = (),
        *,
        lease: int | None = None,
    ) -> None:
        held = spent.get("held_out") or {}
        amounts = (
            float(spent.get("cost_usd") or 0.0),
            int(spent.get("tokens") or 0),
            float(spent.get("seconds") or 0.0),
            float(held.get("cost_usd") or 0.0),
            int(held.get("tokens") or 0),
        )
        now = time.time()
        with self._tx() as conn:
            if (
                lease is not None
                and conn.execute(self._q.fenced_word, (run_id, lease)).rowcount < 1
            ):
                return  # (said already: its first write was durable, its answer lost)
            # (an increment: words of two executions fenced out may be said at once)
            conn.execute(self._q.add_fenced, (*amounts, run_id))
            if events:
                self._executemany(
                    conn,
                    self._q.insert_event,
                    [event_row(run_id, e, now, self._js) for e in events],
                )

    def events(self, run_id: str, *, after_id: int = 0) -> list[Event]:
        jl = self._jl
        return [
            Event(r[0], r[1], r[2], r[3], r[4], jl(r[5]))
            for r in self._all(self._q.events, (run_id, after_id))
        ]

    def events_page(self, run_id: str, *, after_id: int, limit: int) -> list[Event]:
        jl = self._jl
        return [
            Event(r[0], r[1], r[2], r[3], r[4], jl(r[5]))
            for r in self._all(self._q.event_page, (run_id, after_id, limit))
        ]

    def event_id_at(self, run_id: str, seq: int) -> int | None:
        if seq < 1:
            return None
        # walks the (run_id, id) index to the position; no row before it is read whole
        rows = self._all(self._q.event_at, (run_id, seq - 1))
        return int(rows[0][0]) if rows else None

    def events_tail(self, run_id: str, *, before_id: int | None, limit: int) -> list[Event]:
        jl = self._jl
        below = _NO_ID if before_id is None else before_id
        return [
            Event(r[0], r[1], r[2], r[3], r[4], jl(r[5]))
            for r in self._all(self._q.event_tail, (run_id, below, limit))
        ]

    def event_counts(self, run_id: str) -> dict[str, int]:
        rows = self._all(
            self._q.p("SELECT kind, count(*) FROM events WHERE run_id=? GROUP BY kind"), (run_id,)
        )
        return {str(k): int(n) for k, n in rows}

    def events_of_kinds(
        self, run_id: str, kinds: Collection[str], *, limit: int | None = None
    ) -> list[Event]:
        if not kinds or (limit is not None and limit <= 0):
            return []
        marks = ", ".join("?" * len(kinds))
        # newest first on the (run_id, id) index, only the kinds' rows decoded
        sql = (
            "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE run_id=? "
            f"AND kind IN ({marks}) ORDER BY id DESC" + ("" if limit is None else " LIMIT ?")
        )
        args: tuple[Any, ...] = (run_id, *sorted(kinds))
        rows = self._all(self._q.p(sql), args if limit is None else (*args, limit))
        jl = self._jl
        return [Event(r[0], r[1], r[2], r[3], r[4], jl(r[5])) for r in reversed(rows)]

    def events_of_runs(
        self, run_ids: Collection[str], kinds: Collection[str], *, since: str | None = None
    ) -> dict[str, list[Event]]:
        runs, kinds = list(dict.fromkeys(run_ids)), sorted(kinds)
        out: dict[str, list[Event]] = {}
        if not kinds:
            return out
        marks = ", ".join("?" * len(kinds))
        one = (
            "SELECT id, run_id, cycle, kind, ts, data FROM events "
            f"WHERE run_id=? AND kind IN ({marks})"
        )
        extra: tuple[str, ...] = ()
        if since is not None:
            # after the run's newest ``since`` event, found from the end of the (run_id, id)
            # index: a run's rows after it by that index, not its whole log
            one += (
                " AND id > (SELECT id FROM events WHERE run_id=? AND kind=? "
                "ORDER BY id DESC LIMIT 1)"
            )
            extra = (since,)
        jl, step = self._jl, max(1, 400 // (len(kinds) + 3))  # under SQLite's bound on parameters
        for i in range(0, len(runs), step):
            chunk = runs[i : i + step]
            sql = " UNION ALL ".join([one] * len(chunk))
            args = [a for rid in chunk for a in (rid, *kinds, *((rid, *extra) if extra else ()))]
            for r in self._all(self._q.p(sql), args):
                out.setdefault(str(r[1]), []).append(Event(r[0], r[1], r[2], r[3], r[4], jl(r[5])))
        for evs in out.values():
            evs.sort(key=lambda e: e.id)
        return out

    def event_positions(
        self, run_id: str, *, before_id: int, skip: Collection[str]
    ) -> tuple[int, list[tuple[int, Event]]]:
        # The count walks the (run_id, id) index only; the positions are numbered there too
        # and only the rows not skipped are read whole.
        [(count,)] = self._all(self._q.count_events, (run_id, before_id))
        if not count:
            return 0, []
        marks = ", ".join("?" * len(skip))
        rows = self._all(
            self._q.p(
                "SELECT t.pos, e.id, e.run_id, e.cycle, e.kind, e.ts, e.data FROM ("
                "SELECT id, kind, row_number() OVER (ORDER BY id) AS pos FROM events "
                "WHERE run_id=? AND id<?) t JOIN events e ON e.id=t.id "
                + (f"WHERE t.kind NOT IN ({marks}) " if skip else "")
                + "ORDER BY e.id"
            ),
            (run_id, before_id, *sorted(skip)),
        )
        jl = self._jl
        return int(count), [
            (int(r[0]), Event(r[1], r[2], r[3], r[4], r[5], jl(r[6]))) for r in rows
        ]

    def in_cycle(self, run_id: str, *, event_id: int, cycle: int) -> bool:
        # Backwards on the (run_id, id) index from the event: a few rows, those of its cycle.
        rows = self._all(self._q.cycle_mark, (run_id, event_id, cycle))
        return bool(rows) and rows[0][0] == "cycle_started"

    def next_start(self, run_id: str, *, after_id: int, before_id: int, cycle: int) -> int | None:
        # Forwards on the (run_id, id) index from the event: to the next cycle's start.
        rows = self._all(self._q.next_start, (run_id, after_id, before_id, cycle))
        return int(rows[0][0]) if rows else None

    def cycle_starts(
        self, run_id: str, *, before_id: int, cycles: Collection[int]
    ) -> dict[int, int]:
        if not cycles:
            return {}
        marks = ", ".join("?" * len(cycles))
        rows = self._all(
            self._q.p(
                "SELECT cycle, count(*) FROM events WHERE run_id=? AND id<? "
                f"AND kind='cycle_started' AND cycle IN ({marks}) GROUP BY cycle"
            ),
            (run_id, before_id, *sorted(cycles)),
        )
        return {int(c): int(n) for c, n in rows}


class _PageStates:
    """The states of one page of ``iter_checkpoints``, folded and resolved when one of them
    is first read: each head folded on the one before (the page before's last, or the chain
    from the snapshot read when that page is gone), resolved against the versions the heads
    hold, read in one go but for those the page before read."""

    __slots__ = ("_after", "_deltas", "_heads", "_prev", "_run_id", "_store", "_task", "_versions")

    def __init__(
        self,
        store: ReadsSQL,
        run_id: str,
        after: int,
        deltas: list[tuple[int, int, dict[str, Any]]],
        task: Callable[[], Any],
        prev: _PageStates | None,
    ) -> None:
        self._store, self._run_id, self._after, self._task = store, run_id, after, task
        self._deltas = deltas  # (seq, base, stored state) of each row
        # the page before, for its last head and its versions (dropped once this page is
        # read); the one before that is cut off: a reader of no state holds two pages
        self._prev = prev
        if prev is not None:
            prev._prev = None
        self._heads: list[dict[str, Any]] | None = None
        self._versions: dict[tuple[str, int], VersionRow] = {}

    def state(self, i: int) -> dict[str, Any]:
        head = self._read()[i]
        if not is_head(head):
            return head  # a full state of an older schema: nothing to resolve
        return resolve(head, self._versions, self._task)

    def _last(self) -> dict[str, Any]:
        return self._read()[-1]

    def _read(self) -> list[dict[str, Any]]:
        if self._heads is not None:
            return self._heads
        prev, heads = self._prev, []
        head: dict[str, Any] = {}
        for k, (seq, base, state) in enumerate(self._deltas):
            if seq == base:
                head = state
            else:
                if k == 0:
                    head = prev._last() if prev is not None else self._chain(base)
                head = codec_fold(head, [state])
            heads.append(head)
        wanted: set[tuple[str, int]] = set()
        for h in heads:
            if is_head(h):
                wanted |= wanted_versions(h)
        before = prev._versions if prev is not None else {}
        have = {k: v for k, v in before.items() if k in wanted}
        missing = wanted - have.keys()
        if missing:
            for v in self._store._version_rows(self._run_id, keys=missing):
                have[(v[0], int(v[1]))] = v
        self._heads, self._versions, self._prev = heads, have, None
        return heads

    def _chain(self, base: int) -> dict[str, Any]:
        """The head of the row before this page (``after``): its chain from the snapshot
        ``base``, read again (the page before is gone: read by no state in time)."""
        rows = self._store._rows_between(self._run_id, base, self._after)
        return codec_fold(rows[0].state, [r.state for r in rows[1:]]) if rows else {}
