"""The base of the SQL core (``_sql.SQLStore``): the dialect a backend sets, the hooks it supplies
(connections, transactions, the batch's fencing read), the row readers and ``where_clause``.
"""

from __future__ import annotations

import contextlib
import functools
import time
from abc import abstractmethod
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from .._errors import (
    ConfigError,
    StoreCorruptError,
    StoreError,
)
from .._record_codec import unpack as unpack_record
from .._state_codec import copy_json
from ._base import Store
from ._damage import value_damage
from ._live import LiveSQL
from ._people_sql import PeopleSQL
from ._records import Approval, JournalEntry, RunRecord
from ._sql_statements import CoreStatements

#: Run tasks a store keeps at hand, of the runs it read (the first read leaves first;
#: ``SQLStore._known_task``).
_TASKS_KEPT = 64


MAX_SEARCH = 1000
"""The longest search a list takes (``list_runs``, ``page_approvals`` and their counts), in
characters: SQLite refuses a LIKE pattern over 50,000 bytes ("LIKE or GLOB pattern too
complex") with a raw ``OperationalError``; a task key, a run id or a cause's words fit many
times over. The dashboard's ``q=`` is held to the same number (a 400 there)."""


def search_text(search: str | None) -> str:
    """``search`` as a list takes it ("" for none), or a ``ConfigError`` naming ``search``: over
    ``MAX_SEARCH`` characters, or with a NUL (PostgreSQL's text refuses it)."""
    text = (search or "").strip()
    if len(text) > MAX_SEARCH:
        raise ConfigError(
            f"is {len(text):,} characters long: give at most {MAX_SEARCH:,}", field="search"
        )
    if "\x00" in text:
        raise ConfigError("holds a NUL character, which no store keeps", field="search")
    return text


def where_clause(conds: Sequence[tuple[str, Any]], mark: str) -> tuple[str, list[Any]]:
    """`` WHERE a=? AND b=?`` for the pairs whose value is not None, and the arguments."""
    given = [(col, val) for col, val in conds if val is not None]
    if not given:
        return "", []
    return " WHERE " + " AND ".join(f"{col}={mark}" for col, _ in given), [v for _, v in given]


class SQLCore(LiveSQL, PeopleSQL, Store):
    """The dialect, the hooks and the row readers the SQL core's parts share; a backend
    supplies the dialect and the hooks."""

    # --- the dialect --------------------------------------------------------------------
    _MARK: ClassVar[str] = "?"  # the driver's placeholder
    # The SQL function that lowercases text for a case-insensitive search, as Python's
    # str.lower does (SQLite's LOWER folds only ASCII: the SQLite store registers its own).
    _LOWER: ClassVar[str] = "LOWER"
    _DB_NOW: ClassVar[str | None] = None  # the server's clock for leases; None: the writer's
    _LOCKS: ClassVar[bool] = False  # row-locking clauses (FOR ... UPDATE) exist
    _UNIQUE: ClassVar[tuple[type[BaseException], ...]] = ()  # a duplicate key
    # a value a one-pass commit_many refuses (retried commit by commit) ...
    _REFUSED: ClassVar[tuple[type[BaseException], ...]] = ()
    # ... and a failure of the database itself, which fails the whole batch
    _DB_FAILURE: ClassVar[tuple[type[BaseException], ...]] = ()
    _q: ClassVar[CoreStatements]

    @staticmethod
    @abstractmethod
    def _js(value: Any) -> Any:
        """A JSON column's parameter."""

    @staticmethod
    @abstractmethod
    def _jl(value: Any) -> Any:
        """A JSON column's value as read (text to parse, or already parsed by the driver)."""

    def _jl_all(self, values: list[Any]) -> list[Any]:
        """``[self._jl(v) for v in values]`` (a backend may read them at once)."""
        jl = self._jl
        return [jl(v) for v in values]

    def _open(self) -> None:
        """Refuse a read or write once ``close`` was called, saying so (not the driver's
        "Cannot operate on a closed database" or "the pool is closed"): the common case is a
        ``Runtime`` used after its ``with`` block ended."""
        if self.closed:
            raise StoreError(
                f"the store {self.url} is closed: a Runtime closes its store in close() and at "
                "the end of its `with` block; use it inside the block, or open a new Runtime"
            )

    # --- the hooks ----------------------------------------------------------------------
    @abstractmethod
    def _conn(self) -> AbstractContextManager[Any]:
        """A connection to read with."""

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Any]:
        """A connection in a write transaction, committed at the end (rolled back on error)."""

    def _tx_lazy(self) -> AbstractContextManager[Any]:
        """``_tx`` for a write that must survive the process, not the machine
        (``journal_put(lazy=True)``); a backend may commit it without waiting for the disk."""
        return self._tx()

    def _put_fenced(self, sql: str, args: Sequence[Any], lazy: bool) -> Any:
        """The row ``sql`` (one write that returns at most one row) returns, written in a
        transaction of its own (``lazy``: as ``_tx_lazy``'s); ``None`` when it wrote none."""
        with self._tx_lazy() if lazy else self._tx() as conn:
            return conn.execute(sql, args).fetchone()

    def _writer(self, conn: Any) -> Any:
        """What runs ``conn``'s statements in a commit, one after another (each one's rows
        read before the next runs): ``conn`` itself, or a cursor the backend keeps for it."""
        return conn

    @abstractmethod
    def _savepoint(self, conn: Any) -> AbstractContextManager[Any]:
        """A savepoint in ``_tx``'s transaction, rolled back to on error."""

    @abstractmethod
    def _executemany(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement over many rows."""

    def _damaged(self, exc: BaseException) -> StoreCorruptError | None:
        """The ``StoreCorruptError`` naming this store that the driver's error ``exc`` stands
        for (``_damage.damage_error``), or None. The backends' ``_conn`` and ``_tx`` raise it
        for every read and write; the batch commit asks here for the errors it catches."""
        return None

    @abstractmethod
    def _fence_batch(self, conn: Any, run_ids: Sequence[str]) -> dict[str, tuple[int, Any]]:
        """run_id → (fencing token, stop flag: ``ASKED``) of ``commit_many``'s runs, read so
        that no token changes until the transaction ends."""

    def _version_keys(self, conn: Any, run_id: str, keys: Collection[tuple[str, int]]) -> list[Any]:
        """Exactly these version rows (a backend may read them in one statement)."""
        rows: list[Any] = []
        for k in keys:  # each a primary-key lookup: as many as the state holds
            rows.extend(conn.execute(self._q.version_by_key, (run_id, *k)))
        return rows

    def _lock_run(self, conn: Any, run_id: str) -> None:
        """Order this transaction's event inserts after any in-flight write to the run (a
        run's event ids stay in commit order); one writer at a time needs nothing."""
        if self._LOCKS:
            conn.execute(self._q.lock_run, (run_id,))

    def _expiry(self, ttl_s: float) -> float:
        """The parameter of a lease expiry ``ttl_s`` from now (see ``Statements.expires``)."""
        return ttl_s if self._DB_NOW else time.time() + ttl_s

    def _store_now(self, conn: Any, now: float) -> float:
        """Now on the clock a request's ``expires_at`` is set and compared on (``clock``),
        read in ``conn``'s transaction: the server's on PostgreSQL; else ``now``, the writer's
        (a store on one host). A request's ``requested_at`` and ``decided_at`` are written on
        it, so ``decided_at - requested_at`` is the wait whatever the hosts' clocks say."""
        if not self._DB_NOW:
            return now
        row = conn.execute(f"SELECT {self._DB_NOW}").fetchone()
        return float(row[0])

    # --- rows ---------------------------------------------------------------------------
    def _all(self, query: str, args: Sequence[Any]) -> list[Any]:
        with self._conn() as conn:
            return list(conn.execute(query, args).fetchall())

    def _run(self, row: Sequence[Any]) -> RunRecord:
        # The numbers as numbers: a value SQLite kept as written ('abc' in cycle) is damage,
        # raised here (ValueError, TypeError) for the CLI to say so, not deep in a report.
        jl, n, x = self._jl, int, float
        # What executions fenced out of it spent that no commit charged (``runs.fenced_*``):
        # in the run's spend as every reader reads it, and apart for the resume that charges it
        fenced = _fenced(x(row[31]), n(row[32]), x(row[33]), x(row[34]), n(row[35]))
        extra = fenced or _NO_FENCED
        return RunRecord(
            run_id=row[0],
            task_key=row[1],
            loop_name=row[2],
            project=row[3],
            status=row[4],
            stop_reason=row[5],
            cycle=n(row[6]),
            best_score=None if row[7] is None else x(row[7]),
            cost_usd=x(row[8]) + extra["cost_usd"],
            tokens=n(row[9]) + extra["tokens"],
            seconds=x(row[10]) + extra["seconds"],
            spec_ref=row[11],
            loop_version=row[12],
            contract=jl(row[13]),
            task=jl(row[14]),
            packet=None if row[15] is None else jl(row[15]),
            created_at=x(row[16]),
            updated_at=x(row[17]),
            ended_at=row[18],
            cancel_requested=bool(row[19]),
            lease_owner=row[20],
            lease_expires_at=row[21],
            fencing_token=n(row[22]),
            last_seq=n(row[23]),
            held_out_passed=None if row[24] is None else bool(row[24]),
            forked_from=row[25],
            forked_at=row[26],
            created_by=row[27],
            open_requests=None if row[28] is None else n(row[28]),
            maker_starts=bool(row[29]),
            held_out_self_reported=None if row[30] is None else n(row[30]),
            fenced=fenced,
        )

    def _stored_object(self, raw: Any, run_id: str, seq: Any, column: str) -> dict[str, Any]:
        """A checkpoint's ``state`` or ``record`` as read: a JSON object. Text that is no JSON,
        or JSON of another kind (a row changed in SQL by something other than loopwright), is
        ``StoreCorruptError`` naming the store, the run and the row, not the parser's error
        (or an ``AttributeError`` from deep in a reader)."""
        cause: BaseException | None = None
        try:
            value = self._jl(raw)
        except (ValueError, TypeError) as exc:  # orjson's JSONDecodeError is a ValueError
            cause, why = exc, (str(exc).strip() or type(exc).__name__).splitlines()[0]
        else:
            if isinstance(value, dict):
                return value
            why = f"JSON {type(value).__name__}, not an object"
        where = f"table checkpoints, run {run_id!r}, row {seq!r}, column {column}"
        raise value_damage(self.url, where, why) from cause

    def _stored_record(self, raw: Any, run_id: str, seq: Any) -> dict[str, Any] | None:
        """A checkpoint's record as read (``_stored_object``), unpacked; None when it has none."""
        return (
            None if raw is None else unpack_record(self._stored_object(raw, run_id, seq, "record"))
        )

    def _keep_task(self, rec: RunRecord) -> RunRecord:
        """``rec``, its task kept for the states this store resolves next (a run's task never
        changes: ``Store._known_task``), so reading a run's checkpoints reads its row no
        more. A run looked up (``get_run``) or created here, not every row of a listing."""
        tasks = self._tasks
        if rec.run_id in tasks:
            return rec  # kept already (copied once: some read a run's row every commit)
        # a copy: the record's task is its reader's, who may change it
        tasks[rec.run_id] = (copy_json(rec.task),)
        if len(tasks) > _TASKS_KEPT:
            # The oldest let go. Another thread may change the dict meanwhile: iterating it
            # then raises RuntimeError, and the key may be gone already (KeyError); what is
            # kept is only a cache, so either is let pass.
            with contextlib.suppress(RuntimeError, KeyError):
                del tasks[next(iter(tasks), "")]
        return rec

    def _known_task(self, run_id: str) -> tuple[Any] | None:
        return self._tasks.get(run_id)

    @functools.cached_property
    def _tasks(self) -> dict[str, tuple[Any]]:
        return {}

    def _approval(self, row: Sequence[Any]) -> Approval:
        r, jl = row, self._jl
        return Approval(
            r[0], r[1], r[2], r[3], r[4], r[5], r[6], jl(r[7]), r[8], r[9], r[10], r[11],
            r[12], r[13], r[14], r[15], None if r[16] is None else jl(r[16]),
        )  # fmt: skip

    def _journal(self, row: Sequence[Any]) -> JournalEntry:
        r = row
        return JournalEntry(r[0], r[1], r[2], r[3], r[4], self._jl(r[5]), r[6], r[7], r[8])


_NO_FENCED: dict[str, Any] = {"cost_usd": 0.0, "tokens": 0, "seconds": 0.0}


def _fenced(
    cost: float, tokens: int, seconds: float, held_cost: float, held_tokens: int
) -> dict[str, Any] | None:
    """A run row's ``fenced_*`` columns as ``RunRecord.fenced`` says them: None when empty."""
    # (a float left by a take-off of what was added meanwhile may be a hair below nothing)
    cost, seconds, held_cost = max(0.0, cost), max(0.0, seconds), max(0.0, held_cost)
    if not (cost or tokens or seconds or held_cost or held_tokens):
        return None
    out: dict[str, Any] = {"cost_usd": cost, "tokens": tokens, "seconds": seconds}
    if held_cost or held_tokens:
        out["held_out"] = {"cost_usd": held_cost, "tokens": held_tokens}
    return out
