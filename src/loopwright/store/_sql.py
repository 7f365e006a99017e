"""One SQL core for both stores: the statements, the rules and the row planning.

``SQLStore`` holds everything SQLite and PostgreSQL do alike — the SQL text (written once with
``?`` and turned into the driver's placeholder when a backend class is made), fencing,
commits and group commit, the journal and approval rules, feedback memory, the migrations
runner and the parsing of rows. A backend sets the dialect (``_MARK``, ``_DB_NOW``,
``_LOCKS``, ``_UNIQUE``, ``_REFUSED``, ``_DB_FAILURE``, ``_js``/``_jl``) and the hooks:
connections and transactions (``_conn``, ``_tx``, ``_savepoint``, ``_executemany``), the
batch's fencing read (``_fence_batch``), and ``claim_runs``, which differs by design.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, cast

from .._effects import _canon as canon
from .._errors import (
    ApprovalError,
    ConflictError,
    EffectKeyHeld,
    EffectKeyMoved,
    RunNotFoundError,
    StaleLeaseError,
    StoreCorruptError,
    StoreError,
)
from .._keys import MAX_KEY_CHARS, check_lookup
from .._memory import MemoryNotFoundError
from .._owners import owner_is_dead
from .._record_codec import fill_versions, referred_versions
from .._record_codec import unpack as unpack_record
from .._state import PartStatus, Version
from .._state_codec import copy_json
from .._state_codec import fold as codec_fold
from ._base import (
    VERSION_COST,
    Approval,
    Checkpoint,
    CheckpointRow,
    CommitRequest,
    EffectClaim,
    Event,
    JournalEntry,
    MemorySearch,
    NewApproval,
    NewEvent,
    RunRecord,
    Store,
    VersionRow,
    own_fields,
)
from ._damage import value_damage
from ._live import LiveSQL
from ._people_sql import PeopleSQL
from ._rows import (
    APPROVAL_COLS,
    INSERT_CHECKPOINT_COLS,
    INSERT_EVENT_COLS,
    INSERT_REJECTED_COLS,
    INSERT_VERSION_COLS,
    BatchRefused,
    approval_row,
    batch_rows,
    checkpoint_row,
    decided_event,
    event_row,
    inherited_data,
    memory_values,
    memory_where,
    run_cols,
    sql_int,
    version_row,
)
from ._schema import BACKFILL_CLAIMS, BACKFILL_GENERATIONS, RUN_TASK, memory_tag

__all__ = ["RUNNABLE_STATUS", "SQLStore", "Statements", "owner_is_dead"]

_log = logging.getLogger("loopwright.store")
#: Above every event id (both backends' ids are 64-bit integers): "no upper bound".
_NO_ID = 2**63 - 1
#: Run tasks a store keeps at hand, of the runs it read (the first read leaves first;
#: ``SQLStore._known_task``).
_TASKS_KEPT = 64

RUN_COLS = (
    "run_id, task_key, loop_name, project, status, stop_reason, cycle, best_score, cost_usd, "
    f"tokens, seconds, spec_ref, loop_version, contract, {RUN_TASK}, packet, created_at, updated_at, "
    "ended_at, cancel_requested, lease_owner, lease_expires_at, fencing_token, last_seq, "
    "held_out_passed, forked_from, forked_at, created_by"
)
JOURNAL_COLS = "run_id, key, kind, cycle, status, data, attempts, created_at, updated_at"
# The journal's key: every statement that finds one entry says ``JOURNAL_KEY`` and binds
# ``journal_key(run_id, key)`` for it (to change the key, change these two).
JOURNAL_KEY = "run_id=? AND key=?"


def journal_key(run_id: str, key: str) -> tuple[str, ...]:
    return (run_id, key)


MEMORY_COLS = (
    'memory_id, scope, scope_key, signal, strength, text, rule, source, "by", status, '
    "created_at, updated_at, history"
)
MEMORY_STATUSES = ("active", "candidate", "forgotten")
DECISIONS = ("approved", "answered", "denied", "expired", "cancelled")
BOOLEAN_RUN_COLS = frozenset({"held_out_passed", "cancel_requested"})
# Runnable by status: in progress, or parked with no pending request (decided, so it can go
# on). Each store's claim adds its own lease condition.
RUNNABLE_STATUS = (
    "(r.status IN ('pending', 'running') OR (r.status = 'awaiting_approval' AND NOT EXISTS "
    "(SELECT 1 FROM approvals a WHERE a.run_id = r.run_id AND a.status = 'pending')))"
)


class Statements:
    """The SQL of one dialect, built once per backend class: written with ``?`` placeholders,
    given ``mark`` (the driver's), ``db_now`` (SQL for the server's clock in epoch seconds,
    ``None`` where leases run on the writer's clock) and ``locks`` (whether row-locking
    clauses exist; SQLite has one writer and needs none)."""

    def __init__(self, mark: str, db_now: str | None, locks: bool) -> None:
        self.mark = mark
        self.db_now = db_now
        # a lease expiry's value: a TTL added to the server's now, or an absolute time
        self.expires = f"{db_now} + ?" if db_now else "?"
        p = self.p

        def lock(clause: str) -> str:
            return f" {clause}" if locks else ""

        self.run_by_id = p(f"SELECT {RUN_COLS} FROM runs WHERE run_id=?")
        self.run_by_task_key = p(f"SELECT {RUN_COLS} FROM runs WHERE task_key=?")
        self.run_by_prefix = p(
            f"SELECT {RUN_COLS} FROM runs WHERE run_id LIKE ? ESCAPE '\\' LIMIT 2"
        )
        self.run_exists = p("SELECT 1 FROM runs WHERE run_id=?")
        self.lock_run = p("SELECT 1 FROM runs WHERE run_id=?" + lock("FOR NO KEY UPDATE"))
        self.insert_run = p(
            "INSERT INTO runs(run_id, task_key, loop_name, project, status, spec_ref, "
            "loop_version, contract, task, created_at, updated_at, created_by) "
            "VALUES(?,?,?,?,'pending',?,?,?,?,?,?,?) "
            "ON CONFLICT DO NOTHING RETURNING run_id"
        )
        self.insert_run_task = p("INSERT INTO run_tasks(run_id, task) VALUES(?, ?)")
        # A fork's row starts where its state does: the cycle, spend and best score it
        # inherits (its budget goes on counting them; metrics subtract them: _inherited.py).
        self.set_forked = p(
            "UPDATE runs SET forked_from=?, forked_at=?, cycle=?, cost_usd=?, tokens=?, "
            "seconds=?, best_score=? WHERE run_id=?"
        )
        self.insert_first_checkpoint = p(
            f"INSERT INTO checkpoints({INSERT_CHECKPOINT_COLS}) VALUES(?, 0, ?, ?, NULL, 0, ?, 0)"
        )
        self.cancel = p("UPDATE runs SET cancel_requested=? WHERE run_id=?")
        # --- leases
        self.lease_row = p(
            "SELECT lease_owner, lease_expires_at, fencing_token"
            + (f", {db_now}" if db_now else "")
            + " FROM runs WHERE run_id=?"
            + lock("FOR NO KEY UPDATE")
        )
        self.take_lease = p(
            "UPDATE runs SET lease_owner=?, lease_expires_at=?, fencing_token=? WHERE run_id=?"
        )
        self.renew_lease = p(
            f"UPDATE runs SET lease_expires_at={self.expires} WHERE run_id=? AND fencing_token=?"
        )
        self.release_lease = p(
            "UPDATE runs SET lease_owner=NULL, lease_expires_at=NULL "
            "WHERE run_id=? AND fencing_token=?"
        )
        # A fencing check that writes nothing but takes the write lock (SQLite) or the run's
        # row lock (PostgreSQL) to the end of the transaction.
        self.fence = p(
            "UPDATE runs SET fencing_token=fencing_token WHERE run_id=? AND fencing_token=? "
            "RETURNING fencing_token"
        )
        # --- checkpoints, versions, rejected digests, events
        self.last_checkpoint = p(
            "SELECT seq, COALESCE(base, seq) FROM checkpoints WHERE run_id=? "
            "ORDER BY seq DESC LIMIT 1"
        )
        self.checkpoint_rows = p(
            "SELECT seq, cycle, state, CASE WHEN ? OR seq=? THEN record END, created_at, "
            "COALESCE(base, seq) FROM checkpoints WHERE run_id=? AND seq>=? ORDER BY seq"
        )
        self.checkpoint_range = p(
            "SELECT seq, cycle, state, CASE WHEN ? OR seq=? THEN record END, created_at, "
            "COALESCE(base, seq) FROM checkpoints WHERE run_id=? AND seq>=? AND seq<=? "
            "ORDER BY seq"
        )
        # The run's first checkpoint and those of one cycle, without their states or records
        # (a fork's or rollback's target among a long run's checkpoints).
        self.cycle_marks = p(
            "SELECT seq, COALESCE(base, seq) FROM checkpoints WHERE run_id=? AND (cycle=? OR "
            "seq=(SELECT min(seq) FROM checkpoints WHERE run_id=?)) ORDER BY seq"
        )
        self.versions = p("SELECT ref, n, cycle, status, value FROM versions WHERE run_id=?")
        self.version_by_key = p(
            "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=? AND ref=? AND n=?"
        )
        self.versions_of_part = p(
            "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=? AND ref=? ORDER BY n"
        )
        self.version_page = p(
            "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=? AND ref=? AND n>? "
            "ORDER BY n LIMIT ?"
        )
        # A fork's versions of a part, copied from its origin's rows in the database (none
        # read into Python), and the numbers then held, to name any missing.
        self.copy_versions = p(
            f"INSERT INTO versions({INSERT_VERSION_COLS}) SELECT ?, ref, n, cycle, status, "
            "value FROM versions WHERE run_id=? AND ref=? AND n BETWEEN 1 AND ?"
        )
        self.count_versions_upto = p(
            "SELECT count(*) FROM versions WHERE run_id=? AND ref=? AND n BETWEEN 1 AND ?"
        )
        self.version_numbers_upto = p(
            "SELECT n FROM versions WHERE run_id=? AND ref=? AND n BETWEEN 1 AND ? ORDER BY n"
        )
        # A part's version numbers written again after a cycle (``Store.written_after``): read
        # from the primary key's range and the rows' cycles, no value.
        self.written_after = p(
            "SELECT n FROM versions WHERE run_id=? AND ref=? AND n BETWEEN 1 AND ? AND cycle>? "
            "ORDER BY n LIMIT ?"
        )
        # Records that may name versions (``_record_codec.refer_versions``): a rollback writes
        # their values back in (the text may also match inside a value: the reader checks).
        self.records_naming_versions = p(
            "SELECT seq, record FROM checkpoints WHERE run_id=? AND cycle>? "
            + ("AND CAST(record AS TEXT) LIKE ?" if mark == "?" else "AND record::text LIKE ?")
        )
        self.set_record = p("UPDATE checkpoints SET record=? WHERE run_id=? AND seq=?")
        self.record_page = p(
            "SELECT seq, cycle, record FROM checkpoints WHERE run_id=? AND seq>? ORDER BY seq "
            "LIMIT ?"
        )
        self.state_page = p(
            "SELECT seq, cycle, state, record, COALESCE(base, seq) FROM checkpoints "
            "WHERE run_id=? AND seq>? ORDER BY seq LIMIT ?"
        )
        self.checkpoint_page = p(
            "SELECT seq, cycle, state, record, COALESCE(base, seq), created_at FROM checkpoints "
            "WHERE run_id=? AND seq>? ORDER BY seq LIMIT ?"
        )
        self.all_versions = p(
            "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=? ORDER BY ref, n"
        )
        # A value's stored size: SQLite reads it with the row; PostgreSQL's is in the row's
        # header (psycopg fetches a result whole, so the total is asked for first).
        size = "length(value)" if mark == "?" else "pg_column_size(value)"
        self.streams = mark == "?"
        self.sized_versions = p(
            f"SELECT ref, n, cycle, status, value, {size} FROM versions WHERE run_id=? "
            "ORDER BY ref, n"
        )
        self.versions_size = p(
            f"SELECT count(*), coalesce(sum({size}), 0) FROM versions WHERE run_id=?"
        )
        self.is_rejected = p("SELECT 1 FROM rejected WHERE run_id=? AND digest=?")
        self.rejected = p("SELECT digest FROM rejected WHERE run_id=?")
        self.forget_rejected = p("DELETE FROM rejected WHERE run_id=? AND cycle>?")
        self.insert_checkpoint = p(
            f"INSERT INTO checkpoints({INSERT_CHECKPOINT_COLS}) VALUES(?,?,?,?,?,?,?,?)"
        )
        # A version is written once; then only its status changes (and, after a rollback
        # reused its number, its value: the rolled-back timeline's versions are not kept).
        self.upsert_version = p(
            f"INSERT INTO versions({INSERT_VERSION_COLS}) VALUES(?,?,?,?,?,?) "
            "ON CONFLICT(run_id, ref, n) DO UPDATE SET cycle=excluded.cycle, "
            "status=excluded.status, value=excluded.value"
        )
        self.insert_rejected = p(
            f"INSERT INTO rejected({INSERT_REJECTED_COLS}) VALUES(?,?,?) ON CONFLICT DO NOTHING"
        )
        # A fork's rejected digests, copied from its origin's rows in the database (a late
        # fork of a long run read every one into Python and wrote it back). SQLite reads an
        # upsert after INSERT ... SELECT only when the SELECT has a WHERE clause, as here.
        self.copy_rejected = p(
            f"INSERT INTO rejected({INSERT_REJECTED_COLS}) SELECT ?, digest, cycle FROM rejected "
            "WHERE run_id=? AND cycle<=? ON CONFLICT DO NOTHING"
        )
        self.insert_event = p(f"INSERT INTO events({INSERT_EVENT_COLS}) VALUES(?,?,?,?,?)")
        self.events = p(
            "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE run_id=? AND id>? "
            "ORDER BY id"
        )
        self.event_tail = p(
            "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE run_id=? AND id<? "
            "ORDER BY id DESC LIMIT ?"
        )
        self.count_events = p("SELECT count(*) FROM events WHERE run_id=? AND id<?")
        self.next_start = p(
            "SELECT cycle FROM events WHERE run_id=? AND id>? AND id<? "
            "AND kind='cycle_started' AND cycle>=? ORDER BY id LIMIT 1"
        )
        self.cycle_mark = p(
            "SELECT kind FROM events WHERE run_id=? AND id<? AND (kind IN ('stopped', "
            "'rolled_back') OR (cycle=? AND kind IN ('cycle_started', 'decision'))) "
            "ORDER BY id DESC LIMIT 1"
        )
        self.event_page = p(
            "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE run_id=? AND id>? "
            "ORDER BY id LIMIT ?"
        )
        # --- journal
        self.journal_status = p(f"SELECT status, attempts FROM journal WHERE {JOURNAL_KEY}")
        self.clear_journal = p(f"DELETE FROM journal WHERE {JOURNAL_KEY}")
        self.insert_journal = p(
            "INSERT INTO journal(run_id, key, kind, cycle, status, data, attempts, "
            "created_at, updated_at, fencing_token) VALUES(?,?,?,?,?,?,?,?,?,?) "
            f"RETURNING {JOURNAL_COLS}"
        )
        # A fork's inherited entries, copied from its origin's rows in the database (none
        # read into Python): the done effects up to the fork's cycle, marked inherited
        # (``_rows.inherited_data``), as ``create_run``'s ``inherited`` writes them.
        self.copy_effects = p(
            "INSERT INTO journal(run_id, key, kind, cycle, status, data, attempts, "
            f"created_at, updated_at, fencing_token) SELECT ?, key, kind, cycle, status, "
            f"{inherited_data(mark)}, attempts, ?, ?, 0 FROM journal WHERE run_id=? "
            "AND kind='effect' AND cycle<=? AND status='done'"
        )
        self.update_journal = p(
            "UPDATE journal SET kind=?, cycle=?, status=?, data=?, attempts=?, "
            f"updated_at=?, fencing_token=? WHERE {JOURNAL_KEY} RETURNING {JOURNAL_COLS}"
        )
        # --- approvals
        self.insert_approval = p(
            f"INSERT INTO approvals({APPROVAL_COLS}) VALUES({','.join('?' * 17)})"
        )
        # The status guard makes a decision atomic: of two deciders, the second's UPDATE
        # waits for the first's commit (or its write lock), then matches nothing.
        self.decide = p(
            "UPDATE approvals SET status=?, decided_by=?, decided_at=?, note=?, answer=? "
            f"WHERE approval_id=? AND status='pending' RETURNING {APPROVAL_COLS}"
        )
        self.approval_status = p("SELECT status, decided_by FROM approvals WHERE approval_id=?")
        self.approval_run = p("SELECT run_id FROM approvals WHERE approval_id=?")
        # --- memory
        self.insert_memory = p(f"INSERT INTO memory({MEMORY_COLS}) VALUES({','.join('?' * 13)})")
        self.memory_for_update = p(
            f"SELECT {MEMORY_COLS} FROM memory WHERE memory_id=?" + lock("FOR UPDATE")
        )
        self.set_memory_status = p(
            "UPDATE memory SET status=?, updated_at=?, history=? WHERE memory_id=?"
        )
        # --- effect keys, claimed store-wide (journal_put's ``claim``)
        self.claim_key = p(
            "INSERT INTO effect_keys(kind, key, run_id, status, args_hash, updated_at, "
            "generation) VALUES(?,?,?,?,?,?,?) ON CONFLICT(kind, key) DO NOTHING"
        )
        self.effect_key = p(
            "SELECT run_id, status, args_hash, result, generation FROM effect_keys "
            "WHERE kind=? AND key=?" + lock("FOR UPDATE")
        )
        self.effect_claim = p(
            "SELECT run_id, status, generation FROM effect_keys WHERE kind=? AND key=?"
        )
        self.take_key = p(
            "UPDATE effect_keys SET run_id=?, status=?, args_hash=?, result=NULL, updated_at=?, "
            "generation=? WHERE kind=? AND key=? AND run_id=?"
        )
        self.raise_generation = p(
            "UPDATE effect_keys SET generation=? WHERE kind=? AND key=? AND generation<?"
        )
        self.settle_key = p(
            "UPDATE effect_keys SET status=?, result=?, updated_at=? "
            "WHERE kind=? AND key=? AND run_id=?"
        )
        # --- schema
        self.schema_version = "SELECT value FROM loopwright_meta WHERE key='schema_version'"
        self.set_schema_version = p(
            "INSERT INTO loopwright_meta(key, value) VALUES('schema_version', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value"
        )

    def p(self, text: str) -> str:
        """``text`` written with ``?`` placeholders, in the driver's."""
        return text if self.mark == "?" else text.replace("?", self.mark)

    @functools.cache  # noqa: B019 - one instance per backend class, a few column sets each
    def update_run(self, names: tuple[str, ...], returning: bool) -> str:
        """A commit's ``UPDATE runs`` for these columns, fenced by the token; its parameters
        are ``(*values, now, run_id, token)``."""
        assignments = ", ".join(
            f"{k}={self.expires}" if k == "lease_expires_at" else f"{k}=?" for k in names
        )
        return self.p(
            f"UPDATE runs SET {assignments}, updated_at=? WHERE run_id=? AND fencing_token=?"
            + (" RETURNING cancel_requested" if returning else "")
        )


def _where(conds: Sequence[tuple[str, Any]], mark: str) -> tuple[str, list[Any]]:
    """`` WHERE a=? AND b=?`` for the pairs whose value is not None, and the arguments."""
    given = [(col, val) for col, val in conds if val is not None]
    if not given:
        return "", []
    return " WHERE " + " AND ".join(f"{col}={mark}" for col, _ in given), [v for _, v in given]


def check_journal_expect(run_id: str, key: str, status: str | None, expect: str | None) -> None:
    """``journal_put``'s ``expect_status``: ``""`` = the entry must not exist yet, a status =
    it must exist with that status. ``status`` is the entry's (``None``: there is none)."""
    if expect is None:
        return
    if expect == "":
        if status is not None:
            raise ConflictError(
                f"run {run_id}: journal entry {key!r} already exists (status {status!r})"
            )
    elif status is None:
        raise ConflictError(
            f"run {run_id}: journal entry {key!r} does not exist (expected status {expect!r})"
        )
    elif status != expect:
        raise ConflictError(
            f"run {run_id}: journal entry {key!r} has status {status!r}, expected {expect!r}"
        )


class SQLStore(LiveSQL, PeopleSQL, Store):
    """The shared logic of the SQL stores; a backend supplies the dialect and the hooks."""

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
    _q: ClassVar[Statements]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._q = Statements(cls._MARK, cls._DB_NOW, cls._LOCKS)

    @staticmethod
    @abstractmethod
    def _js(value: Any) -> Any:
        """A JSON column's parameter."""

    @staticmethod
    @abstractmethod
    def _jl(value: Any) -> Any:
        """A JSON column's value as read (text to parse, or already parsed by the driver)."""

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
        """run_id → (fencing token, cancel flag) of ``commit_many``'s runs, read so that no
        token changes until the transaction ends."""

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

    # --- rows ---------------------------------------------------------------------------
    def _all(self, query: str, args: Sequence[Any]) -> list[Any]:
        with self._conn() as conn:
            return list(conn.execute(query, args).fetchall())

    def _run(self, row: Sequence[Any]) -> RunRecord:
        # The numbers as numbers: a value SQLite kept as written ('abc' in cycle) is damage,
        # raised here (ValueError, TypeError) for the CLI to say so, not deep in a report.
        jl, n, x = self._jl, int, float
        return RunRecord(
            run_id=row[0],
            task_key=row[1],
            loop_name=row[2],
            project=row[3],
            status=row[4],
            stop_reason=row[5],
            cycle=n(row[6]),
            best_score=None if row[7] is None else x(row[7]),
            cost_usd=x(row[8]),
            tokens=n(row[9]),
            seconds=x(row[10]),
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

    def _memory_dict(self, row: Sequence[Any]) -> dict[str, Any]:
        jl = self._jl
        return {
            "memory_id": row[0],
            "scope": row[1],
            "scope_key": row[2],
            "signal": row[3],
            "strength": row[4],
            "text": row[5],
            "rule": None if row[6] is None else jl(row[6]),
            "source": jl(row[7]),
            "by": row[8],
            "status": row[9],
            "created_at": row[10],
            "updated_at": row[11],
            "history": jl(row[12]),
        }

    # --- schema -------------------------------------------------------------------------
    def _apply_migrations(
        self, conn: Any, migrations: Sequence[Sequence[str]], what: str, *, built: bool
    ) -> None:
        """Bring the schema forward to ``len(migrations)`` in the caller's transaction (its
        ``loopwright_meta`` exists). ``what`` names the schema for an error: '<what> <n>,
        newer than this loopwright understands'. ``built``: the store's tables (``runs``)
        exist already."""
        row = conn.execute(self._q.schema_version).fetchone()
        if row is None and built:
            # Its version row deleted (or its loopwright_meta dropped): migrating from 0 would
            # fail on the first CREATE TABLE ("table runs already exists"), or, were it let
            # pass, migrate a current store over itself.
            raise StoreCorruptError(
                f"{what.rpartition(' has ')[0]}: the store's tables are there but "
                "loopwright_meta holds no schema_version row (deleted by something other "
                "than loopwright): the store is damaged; restore it from a backup, or name "
                "another store"
            )
        try:
            version = int(row[0]) if row else 0
        except ValueError:
            # a version no loopwright wrote: damage, said so, never migrated over
            raise StoreCorruptError(
                f"{what} {row[0]!r}, not a number: the store is damaged (loopwright_meta)"
            ) from None
        latest = len(migrations)
        if version > latest:
            raise StoreCorruptError(
                f"{what} {version}, newer than this loopwright understands ({latest}); "
                "upgrade loopwright"
            )
        if version == latest:
            return  # nothing written: opening a current store costs no sync to disk
        for statements in migrations[version:latest]:
            for statement in statements:
                if statement == BACKFILL_CLAIMS:
                    self._backfill_claims(conn)
                elif statement == BACKFILL_GENERATIONS:
                    self._backfill_generations(conn)
                else:
                    conn.execute(statement)
        conn.execute(self._q.set_schema_version, (str(latest),))

    def _backfill_claims(self, conn: Any) -> None:
        """A migration step: claim store-wide the effect keys that runs of an earlier release
        did (or may be doing) before keys were claimed — ``done`` with its result, an intent
        not settled as ``claimed`` — so that no run of this release does them again
        (invariant 2 across an upgrade). A key claimed already is left as it is; a key that
        was undone or failed is not claimed, but an undone one is recorded as such
        (``compensated``), so that its redo gets a key none of its runs was handed
        (``_backfill_generations`` counts the generations). Keys that named their run are
        claimed too: no other run asks for them. Each entry gets the ``action`` it names, as
        this release records it: a refund of it then frees its claim (without it, the claim
        stayed ``done`` and the next run was handed the refunded action's result)."""
        rows = conn.execute(
            "SELECT run_id, key, status, data FROM journal WHERE kind='effect' "
            "ORDER BY created_at, run_id, key"
        ).fetchall()
        # an undone (or retired) action's next generation is key~2, key~3, ...
        undone = {(r, k) for r, k, st, _d in rows if st in ("compensated", "retired")}
        now = time.time()
        insert = self._q.p(
            "INSERT INTO effect_keys(kind, key, run_id, status, args_hash, result, updated_at) "
            "VALUES(?,?,?,?,?,?,?) ON CONFLICT(kind, key) DO NOTHING"
        )
        named = self._q.p(f"UPDATE journal SET data=? WHERE {JOURNAL_KEY}")
        freed: dict[tuple[str, str], str] = {}  # (kind, action): a run that undid it
        for run_id, key, status, raw in rows:
            try:
                data = self._jl(raw) if raw is not None else {}
            except ValueError:
                if status in ("done", "intent", "in_doubt"):
                    # not what any release wrote: nothing to claim by, said once per row
                    _log.warning(
                        "run %s: effect journal entry %s is not readable JSON; its key is not "
                        "claimed store-wide (check whether the action happened)",
                        run_id,
                        key,
                    )
                continue
            if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
                continue
            action = data.get("action")
            if not isinstance(action, str):
                action = str(key).removeprefix("effect:")
                head, sep, gen = action.rpartition("~")
                if sep and gen.isdigit() and (run_id, f"effect:{head}") in undone:
                    action = head  # a later generation of an undone action names the action
                conn.execute(
                    named, (self._js({**data, "action": action}), *journal_key(run_id, key))
                )
            if data.get("from_run"):
                continue  # a copy of another run's action: that run's entry claims it
            if status == "compensated":
                freed[(data["kind"], action)] = run_id
            if status not in ("done", "intent", "in_doubt"):
                continue
            args_hash = hashlib.sha256(canon(data.get("args") or {}).encode()).hexdigest()[:24]
            done = status == "done"
            result = data.get("result") if done else None
            conn.execute(
                insert,
                (
                    data["kind"],
                    action,
                    run_id,
                    "done" if done else "claimed",
                    args_hash,
                    None if result is None else self._js(result),
                    now,
                ),
            )
        for (kind, action), run_id in freed.items():  # (an action done again is claimed)
            conn.execute(insert, (kind, action, run_id, "compensated", "", None, now))

    def _backfill_generations(self, conn: Any) -> None:
        """A migration step: each claimed action's generation, the highest any run's journal
        handed out before (an earlier release counted a redo's ``key~2``, ``~3``... in its
        run only), so that the next redo, whichever run asks, gets a key none was given.
        Only the entries whose key has a ``~`` are read (a first generation has none)."""
        rows = conn.execute(
            "SELECT key, data FROM journal WHERE kind='effect' AND key LIKE '%~%'"
        ).fetchall()
        for key, raw in rows:
            try:
                data = self._jl(raw) if raw is not None else {}
            except ValueError:
                continue  # not what any release wrote (``_backfill_claims`` says so)
            if not isinstance(data, Mapping):
                continue
            action, kind = data.get("action"), data.get("kind")
            if not isinstance(action, str) or not isinstance(kind, str):
                continue  # not a business key: never claimed store-wide
            gen = str(key).removeprefix(f"effect:{action}~")
            if gen.isdigit() and gen != str(key):
                conn.execute(self._q.raise_generation, (int(gen), kind, action, int(gen)))

    @property
    def schema_version(self) -> int:
        with self._conn() as conn:
            row = conn.execute(self._q.schema_version).fetchone()
        return int(row[0]) if row else 0

    # --- runs ---------------------------------------------------------------------------
    def create_run(
        self,
        *,
        run_id: str,
        task_key: str,
        loop_name: str,
        project: str,
        spec_ref: str | None,
        loop_version: str | None,
        contract: dict[str, Any],
        task: dict[str, Any],
        initial_state: dict[str, Any],
        initial_versions: Sequence[VersionRow] = (),
        forked_from: tuple[str, int] | None = None,
        inherited: Sequence[JournalEntry] = (),
        initial_rejected: Sequence[tuple[str, int]] = (),
        created_by: str | None = None,
        copy_versions: Sequence[tuple[str, str, int]] = (),
        copy_effects: tuple[str, int] | None = None,
        copy_rejected: tuple[str, int] | None = None,
        fork_seq: int | None = None,
    ) -> tuple[RunRecord, bool]:
        now = time.time()
        q, js = self._q, self._js
        with self._tx() as conn:
            # A concurrent creator of the same key makes this INSERT wait for its commit (or
            # for the write lock), then do nothing; the SELECT then sees the winner's row.
            row = conn.execute(
                q.insert_run,
                (
                    run_id,
                    task_key,
                    loop_name,
                    project,
                    spec_ref,
                    loop_version,
                    js(contract),
                    "null",  # the task is in run_tasks (RUN_TASK)
                    now,
                    now,
                    created_by,
                ),
            ).fetchone()
            if row is not None:
                conn.execute(q.insert_run_task, (run_id, js(task)))
                row = conn.execute(q.run_by_id, (run_id,)).fetchone()
            if row is None:
                row = conn.execute(q.run_by_task_key, (task_key,)).fetchone()
                if row is None:
                    raise ConflictError(f"run id {run_id!r} is taken by another task key")
                return self._keep_task(self._run(row)), False
            # cycle 0, or for a fork the cycle whose state it starts from
            first_cycle = int(initial_state.get("cycle") or 0)
            conn.execute(q.insert_first_checkpoint, (run_id, first_cycle, js(initial_state), now))
            for origin, ref, upto in copy_versions:
                conn.execute(q.copy_versions, (run_id, origin, ref, upto))
                got = conn.execute(q.count_versions_upto, (run_id, ref, upto)).fetchone()
                if int(got[0]) < upto:  # (as Part.fill says it, for a store missing rows)
                    held = {
                        int(r[0]) for r in conn.execute(q.version_numbers_upto, (run_id, ref, upto))
                    }
                    missing = [n for n in range(1, upto + 1) if n not in held]
                    raise LookupError(f"part {ref!r}: versions {missing[:5]} are missing")
            # after the copies: the versions held in memory are the newer truth (their status)
            if initial_versions:
                self._executemany(
                    conn, q.upsert_version, [version_row(run_id, v, js) for v in initial_versions]
                )
            created: dict[str, Any] = {"task_key": task_key, "loop": loop_name}
            if forked_from is not None:
                spent = initial_state.get("spent") or {}
                cost = float(spent.get("cost_usd") or 0.0)
                tokens = int(spent.get("tokens") or 0)
                seconds = float(spent.get("seconds") or 0.0)
                best = initial_state.get("best_score")
                conn.execute(
                    q.set_forked,
                    (*forked_from, forked_from[1], cost, tokens, seconds, best, run_id),
                )
                row = conn.execute(q.run_by_id, (run_id,)).fetchone()
                created["forked_from"] = {
                    "run": forked_from[0],
                    "cycle": forked_from[1],
                    "inherited": {"cost_usd": cost, "tokens": tokens, "seconds": seconds},
                }
                if fork_seq is not None:  # the origin's checkpoint it starts from
                    created["forked_from"]["seq"] = int(fork_seq)
            for e in inherited:
                # the run that did it: a fork of a fork names the origin, not its parent
                data = {**e.data, "inherited_from": e.data.get("inherited_from") or e.run_id}
                conn.execute(
                    q.insert_journal,
                    (run_id, e.key, e.kind, e.cycle, e.status, js(data), e.attempts, now, now, 0),
                )
            if copy_effects is not None:
                origin, upto = copy_effects
                conn.execute(q.copy_effects, (run_id, now, now, origin, int(upto)))
            if initial_rejected:
                self._executemany(
                    conn, q.insert_rejected, [(run_id, d, c) for d, c in initial_rejected]
                )
            if copy_rejected is not None:
                origin, upto = copy_rejected
                conn.execute(q.copy_rejected, (run_id, origin, int(upto)))
            conn.execute(q.insert_event, (run_id, 0, "run_created", now, js(created)))
        return self._keep_task(self._run(row)), True

    def get_run(self, run_id: str) -> RunRecord:
        check_lookup(run_id)  # PostgreSQL refuses a NUL, both stores a lone surrogate: alike
        q = self._q
        with self._conn() as conn:
            row = conn.execute(q.run_by_id, (run_id,)).fetchone()
            if row is None:
                row = conn.execute(q.run_by_task_key, (run_id,)).fetchone()
            # (a prefix of a run id is short: a long one is no prefix, and SQLite refuses a
            # LIKE pattern of 50,000 bytes)
            if row is None and run_id and len(run_id) <= MAX_KEY_CHARS:
                prefix = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                rows = conn.execute(q.run_by_prefix, (prefix + "%",)).fetchall()
                if len(rows) > 1:
                    raise RunNotFoundError(
                        f"run id prefix {run_id!r} is ambiguous; give more of it"
                    )
                row = rows[0] if rows else None
        if row is None:
            shown = repr(run_id) if len(run_id) <= 80 else f"{run_id[:60]!r}… ({len(run_id)} chars)"
            raise RunNotFoundError(f"no run {shown} in {self.url}")
        return self._keep_task(self._run(row))

    def list_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        limit: int | None = None,
        stop_reason: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[RunRecord]:
        where, args = self._runs_where(status, project, loop_name, stop_reason, search)
        m = self._MARK
        for bound, op in ((since, ">="), (until, "<=")):
            if bound is not None:  # the window, selected by the database (index runs_created)
                where += (" AND " if where else " WHERE ") + f"created_at {op} {m}"
                args.append(float(bound))
        if after is not None:  # keyset pagination: the rows after (created_at, run_id)
            m = self._MARK
            where += (" AND " if where else " WHERE ") + (
                f"(created_at < {m} OR (created_at = {m} AND run_id > {m}))"
            )
            args += [after[0], after[0], after[1]]
        query = f"SELECT {RUN_COLS} FROM runs{where} ORDER BY created_at DESC, run_id"
        if limit is not None and limit >= 0:  # a negative limit is no limit
            query += f" LIMIT {sql_int(limit)}"
        return [self._run(r) for r in self._all(query, args)]

    def count_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        stop_reason: str | None = None,
        search: str | None = None,
    ) -> int:
        where, args = self._runs_where(status, project, loop_name, stop_reason, search)
        return int(self._all(f"SELECT COUNT(*) FROM runs{where}", args)[0][0])

    def run_projects(self) -> list[str]:
        rows = self._all("SELECT DISTINCT project FROM runs WHERE project <> '' ORDER BY 1", [])
        return [str(r[0]) for r in rows]

    def first_accepted(self, loop_names: Sequence[str]) -> dict[tuple[str, str], float]:
        names = sorted(set(loop_names))
        if not names:
            return {}
        m = self._MARK
        rows = self._all(
            "SELECT loop_name, loop_version, MIN(ended_at) FROM runs WHERE status = 'accepted' "
            f"AND loop_name IN ({', '.join([m] * len(names))}) AND loop_version IS NOT NULL "
            "AND ended_at IS NOT NULL GROUP BY loop_name, loop_version",
            names,
        )
        return {(str(r[0]), str(r[1])): float(r[2]) for r in rows}

    def _runs_where(
        self,
        status: str | None,
        project: str | None,
        loop_name: str | None,
        stop_reason: str | None,
        search: str | None,
    ) -> tuple[str, list[Any]]:
        where, args = _where(
            (
                ("status", status),
                ("project", project),
                ("loop_name", loop_name),
                ("stop_reason", stop_reason),
            ),
            self._MARK,
        )
        if search:
            # Case-insensitive substring of the task key, loop, project, stop reason or the
            # packet (its cause and stop_cause), or a run id prefix; ! escapes LIKE's wildcards.
            m = self._MARK
            pat = search.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_")
            cols = ("task_key", "loop_name", "project", "stop_reason", "CAST(packet AS TEXT)")
            low = self._LOWER
            cond = " OR ".join(f"{low}({c}) LIKE {m} ESCAPE '!'" for c in cols)
            where += (" AND " if where else " WHERE ") + f"({cond} OR run_id LIKE {m} ESCAPE '!')"
            args += [f"%{pat}%"] * len(cols) + [f"{pat}%"]
        return where, args

    # --- leases -------------------------------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> int:
        now = time.time()
        with self._tx() as conn:
            row = conn.execute(self._q.lease_row, (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
            holder, expires, token, *server_now = row
            if server_now:  # the lease clock is the server's
                now = server_now[0]
            if (
                holder is not None
                and holder != owner
                and expires is not None
                and expires > now
                and not owner_is_dead(holder)
            ):
                raise ConflictError(
                    f"run {run_id} is being executed by {holder} (lease for "
                    f"{expires - now:.0f} s more)"
                )
            token += 1
            conn.execute(self._q.take_lease, (owner, now + ttl_s, token, run_id))
        return int(token)

    def renew_lease(self, run_id: str, token: int, ttl_s: float) -> None:
        with self._tx() as conn:
            cur = conn.execute(self._q.renew_lease, (self._expiry(ttl_s), run_id, token))
            if cur.rowcount != 1:
                raise StaleLeaseError(f"run {run_id}: lease lost (token {token} is stale)")

    def release_lease(self, run_id: str, token: int) -> None:
        with self._tx() as conn:
            conn.execute(self._q.release_lease, (run_id, token))

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
        # As ``iter_fields``, with each row's created_at: a Checkpoint whose state is read
        # when first read (from its snapshot), whose fields are folded as the pages come.
        loader = self._loader(run_id)
        for (seq, cycle, _state, _raw, base, at), rec, f in self._folded_pages(
            run_id, self._q.checkpoint_page
        ):
            yield Checkpoint(
                run_id,
                int(seq),
                int(cycle),
                functools.partial(self._state_at, run_id, int(seq), int(base)),
                rec,
                at,
                loader,
                f,
            )

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
        q, jl = self._q, self._jl
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
        for ref, n, cycle, status, value, _size in rows:  # decoded once known to fit
            out.setdefault(ref, []).append(
                Version(int(n), jl(value), int(cycle), cast(PartStatus, status))
            )
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

    # --- checkpoints: writing -------------------------------------------------------------
    def commit(
        self,
        run_id: str,
        token: int,
        *,
        seq: int,
        cycle: int,
        state: dict[str, Any],
        record: dict[str, Any] | None,
        events: Sequence[NewEvent],
        run: Mapping[str, Any],
        approval: NewApproval | None = None,
        approvals: Sequence[NewApproval] = (),
        base: int | None = None,
        versions: Sequence[VersionRow] = (),
        rejected: Sequence[tuple[str, int]] = (),
    ) -> bool:
        now = time.time()
        req = CommitRequest(
            run_id,
            token,
            seq,
            cycle,
            state,
            record,
            events,
            run,
            [*([approval] if approval is not None else []), *approvals],
            base,
            versions,
            rejected,
        )
        cols = self._run_cols(run, seq)
        with self._tx() as conn:
            return self._commit_in(conn, req, cols, now)

    def forget_rejected(self, run_id: str, after_cycle: int, *, keep: Collection[str] = ()) -> None:
        with self._tx() as conn:
            self._forget_rejected_in(conn, run_id, after_cycle, keep)

    def _forget_rejected_in(
        self, conn: Any, run_id: str, after_cycle: int, keep: Collection[str]
    ) -> None:
        if not keep:
            conn.execute(self._q.forget_rejected, (run_id, after_cycle))
            return
        m = self._MARK
        conn.execute(
            f"DELETE FROM rejected WHERE run_id={m} AND cycle>{m} "
            f"AND digest NOT IN ({', '.join([m] * len(keep))})",
            (run_id, after_cycle, *keep),
        )

    def _inline_versions_in(self, conn: Any, run_id: str, after_cycle: int) -> None:
        """The records of the cycles after ``after_cycle`` hold their edits' values again
        instead of naming versions (a rollback's: those numbers are written again after it).
        Read and rewritten in ``conn``; once per rollback, over the cycles it abandons."""
        q, jl, js = self._q, self._jl, self._js
        rows = conn.execute(
            q.records_naming_versions, (run_id, after_cycle, "%version%")
        ).fetchall()
        # (an edit's "version", a replacement's "replace_versions"; the text may match inside
        # a value: a record naming nothing is left as it is)
        named = [(seq, rec) for seq, raw in rows if referred_versions(rec := jl(raw))]
        if named:
            self._fill_versions(conn, run_id, [rec for _seq, rec in named])
            self._executemany(conn, q.set_record, [(js(rec), run_id, seq) for seq, rec in named])

    def commit_request(self, it: CommitRequest) -> bool:
        now = time.time()
        cols = self._run_cols(it.run, it.seq)
        with self._tx() as conn:
            return self._commit_in(conn, it, cols, now)

    def commit_many(self, items: Sequence[CommitRequest]) -> list[bool | StoreError]:
        """Several runs' commits in ONE transaction (one sync to disk): each is fenced on its
        own — a stale one is reported and left out, the others commit.

        Fast path: one fencing read for the whole batch that keeps every token as read until
        the commit (SQLite: the write lock, held from BEGIN IMMEDIATE; PostgreSQL: the batch's
        run rows locked ``FOR NO KEY UPDATE`` in run_id order, so two batches never deadlock),
        then one ``executemany`` per table. A bad column set, a run twice in the batch, or a
        value the database refuses (a duplicate checkpoint or request, a number out of range)
        takes the slow path instead: one savepoint per commit, so each failure is its own
        run's. A failure of the database itself (locked, disk full, a lost connection) fails
        the whole batch, as one transaction."""
        if not items:
            return []
        now = time.time()
        try:  # a bad column set goes commit by commit, where it fails alone
            cols = [self._run_cols(it.run, it.seq) for it in items]
        except StoreError:
            cols = None
        # (a commit closing approval requests, a cancel's or a rollback's, is rare: it goes
        # commit by commit, where its closures are written)
        # (and a rollback's, which rewrites the records it abandons)
        fast = not any(it.closes or it.forget_rejected_after is not None for it in items)
        if fast and cols is not None and len({it.run_id for it in items}) == len(items):
            try:
                with self._tx() as conn:
                    return self._commit_batch(conn, items, cols, now)
            except BatchRefused:
                pass  # nothing was written: commit by commit, below
        out: list[bool | StoreError] = []
        with self._tx() as conn:
            for it in items:
                try:
                    with self._savepoint(conn):
                        ok = self._commit_in(conn, it, self._run_cols(it.run, it.seq), now)
                except StoreError as exc:  # rolled back to its savepoint; the others go on
                    out.append(exc)
                    continue
                except Exception as exc:
                    failed = self._damaged(exc) or StoreError(
                        f"run {it.run_id}: commit failed: {exc}"
                    )
                    failed.__cause__ = exc
                    out.append(failed)
                    continue
                out.append(ok)
        return out

    def _commit_batch(
        self,
        conn: Any,
        items: Sequence[CommitRequest],
        cols: Sequence[dict[str, Any]],
        now: float,
    ) -> list[bool | StoreError]:
        q = self._q
        owner = self._fence_batch(conn, [it.run_id for it in items])
        rows = batch_rows(items, cols, owner, now, js=self._js)
        try:
            for names, updates in rows.updates.items():
                self._executemany(conn, q.update_run(names, False), updates)
            for statement, table in (
                (q.insert_checkpoint, rows.checkpoints),
                (q.insert_event, rows.events),
                (q.insert_approval, rows.approvals),
                (q.upsert_version, rows.versions),
                (q.forget_rejected, rows.forgotten),
                (q.insert_rejected, rows.rejected),
                (q.clear_journal, rows.cleared),
            ):
                if table:
                    self._executemany(conn, statement, table)
        except self._DB_FAILURE:
            raise  # the database, not a value (locked, disk full...): every commit fails
        except self._REFUSED as exc:
            damage = self._damaged(exc)
            if damage is not None:  # the store, not a value: every commit fails
                raise damage from exc
            raise BatchRefused(str(exc)) from exc
        return rows.results

    def _run_cols(self, run: Mapping[str, Any], seq: int) -> dict[str, Any]:
        """A commit's run columns as the database takes them."""
        cols = run_cols(run, seq)
        if cols.get("packet") is not None:
            cols["packet"] = self._js(cols["packet"])
        for name in BOOLEAN_RUN_COLS & cols.keys():
            if cols[name] is not None:
                cols[name] = bool(cols[name])
        if self._DB_NOW and cols.get("lease_expires_at") is not None:
            # the caller's clock says when; what is kept is how long, from the server's now
            cols["lease_expires_at"] = float(cols["lease_expires_at"]) - time.time()
        return cols

    def _commit_in(self, conn: Any, it: CommitRequest, cols: dict[str, Any], now: float) -> bool:
        q, js = self._q, self._js
        run_id, token = it.run_id, it.token
        flag = conn.execute(
            q.update_run(tuple(cols), True), (*cols.values(), now, run_id, token)
        ).fetchone()
        if flag is None:
            raise StaleLeaseError(
                f"run {run_id}: checkpoint refused, fencing token {token} is stale"
            )
        try:
            conn.execute(q.insert_checkpoint, checkpoint_row(it, now, js))
        except self._UNIQUE:
            raise ConflictError(f"run {run_id}: checkpoint {it.seq} already written") from None
        if it.events:  # (``event_row`` written out: four a cycle)
            self._executemany(
                conn,
                q.insert_event,
                _event_rows(run_id, it.events, now, js),
            )
        for a in it.approvals:
            try:
                conn.execute(q.insert_approval, approval_row(run_id, a, now, js))
            except self._UNIQUE:
                raise ConflictError(
                    f"run {run_id}: approval request {a.approval_id!r} already exists"
                ) from None
        if it.forget_rejected_after is not None:
            # A rollback: the run will write the abandoned cycles' version numbers again, so
            # their records take back the values they name first (before this commit's rows).
            self._inline_versions_in(conn, run_id, it.forget_rejected_after)
        if it.versions:
            self._executemany(conn, q.upsert_version, _version_rows(run_id, it.versions, js))
        if it.forget_rejected_after is not None:
            self._forget_rejected_in(conn, run_id, it.forget_rejected_after, ())
        if it.rejected:
            rejected = []
            for digest, at in it.rejected:  # (a loop: no comprehension a cycle)
                rejected.append((run_id, digest, at))
            self._executemany(conn, q.insert_rejected, rejected)
        if it.cleared:
            self._executemany(conn, q.clear_journal, [journal_key(run_id, k) for k in it.cleared])
        for c in it.closes:
            row = conn.execute(
                q.decide, ("cancelled", c.by, now, c.note, None, c.approval_id)
            ).fetchone()
            if row is not None:  # one already decided stays as it was
                conn.execute(
                    q.insert_event,
                    decided_event(self._approval(row), c.by, c.note, None, now, js),
                )
        return bool(flag[0])

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

    def events(self, run_id: str, *, after_id: int = 0) -> list[Event]:
        jl = self._jl
        return [
            Event(r[0], r[1], r[2], r[3], r[4], jl(r[5]))
            for r in self._all(self._q.events, (run_id, after_id))
        ]

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

    # --- effect/retry journal -----------------------------------------------------------
    def journal_put(
        self,
        run_id: str,
        token: int,
        *,
        key: str,
        kind: str,
        cycle: int,
        status: str,
        data: Mapping[str, Any],
        attempts: int | None = None,
        expect_status: str | None = None,
        events: Sequence[NewEvent] = (),
        claim: tuple[str, str, str] | None = None,
        lazy: bool = False,
    ) -> JournalEntry:
        q = self._q
        now = time.time()
        payload = self._js(dict(data))
        with self._tx_lazy() if lazy else self._tx() as conn:
            # As in commit: the fencing check is a guarded write inside the transaction, so no
            # other executor can take the lease between the check and the writes below, and
            # every journal writer of this run queues here (SQLite: the write lock is held;
            # PostgreSQL: the run's row lock), so the read-check-write cannot interleave.
            if conn.execute(q.fence, (run_id, token)).fetchone() is None:
                if conn.execute(q.run_exists, (run_id,)).fetchone() is None:
                    raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
                raise StaleLeaseError(
                    f"run {run_id}: journal write {key!r} refused, fencing token {token} is stale"
                )
            existing = conn.execute(q.journal_status, journal_key(run_id, key)).fetchone()
            check_journal_expect(
                run_id, key, None if existing is None else existing[0], expect_status
            )
            if claim is not None:
                self._claim(conn, run_id, claim, status, data, now)
            if existing is None:
                row = conn.execute(
                    q.insert_journal,
                    (
                        run_id,
                        key,
                        kind,
                        cycle,
                        status,
                        payload,
                        0 if attempts is None else attempts,
                        now,
                        now,
                        token,
                    ),
                ).fetchone()
            else:
                row = conn.execute(
                    q.update_journal,
                    (
                        kind,
                        cycle,
                        status,
                        payload,
                        existing[1] if attempts is None else attempts,
                        now,
                        token,
                        *journal_key(run_id, key),
                    ),
                ).fetchone()
            if events:
                self._executemany(
                    conn, q.insert_event, [event_row(run_id, e, now, self._js) for e in events]
                )
        return self._journal(row)

    def _claim(
        self,
        conn: Any,
        run_id: str,
        claim: tuple[str, str, str],
        status: str,
        data: Mapping[str, Any],
        now: float,
    ) -> None:
        """``journal_put``'s store-wide claim of an effect key, in its transaction."""
        q = self._q
        kind, key, args_hash = claim
        if status == "intent":
            gen = int(data.get("generation") or 1)
            conn.execute(q.claim_key, (kind, key, run_id, "claimed", args_hash, now, gen))
            row = conn.execute(q.effect_key, (kind, key)).fetchone()
            if row[1] in ("failed", "compensated"):
                # it never happened, or was undone: the key is free; taken (by its own run too)
                # so that no other run takes it while this attempt is in flight. A failed
                # action is tried again under its key; an undone one under a key never handed
                # out (the next generation): asked for with an older one, nothing is written.
                least = row[4] + 1 if row[1] == "compensated" else row[4]
                if gen < least:
                    raise EffectKeyMoved(
                        f"effect key {kind}/{key}: generation {gen} asked, {least} is next",
                        generation=least,
                    )
                conn.execute(
                    q.take_key, (run_id, "claimed", args_hash, now, gen, kind, key, row[0])
                )
                row = conn.execute(q.effect_key, (kind, key)).fetchone()
            elif row[0] == run_id and gen > row[4]:
                conn.execute(q.raise_generation, (gen, kind, key, gen))
            if row[0] != run_id:
                raise EffectKeyHeld(
                    f"effect key {kind}/{key} is held by run {row[0]} ({row[1]})",
                    run_id=row[0],
                    status=row[1],
                    args_hash=row[2],
                    result=self._jl(row[3]) if row[3] is not None else None,
                    generation=int(row[4] or 1),
                )
            return
        result = data.get("result") if status == "done" else None
        conn.execute(
            q.settle_key,
            (status, None if result is None else self._js(result), now, kind, key, run_id),
        )

    def effect_claim(self, kind: str, key: str) -> EffectClaim | None:
        with self._conn() as conn:
            row = conn.execute(self._q.effect_claim, (kind, key)).fetchone()
        return None if row is None else EffectClaim(str(row[0]), str(row[1]), int(row[2]))

    def journal(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        key: str | None = None,
        cycle: int | None = None,
    ) -> list[JournalEntry]:
        conds = (("run_id", run_id), ("kind", kind), ("key", key), ("cycle", cycle))
        where, args = _where(conds, self._MARK)
        query = f"SELECT {JOURNAL_COLS} FROM journal{where} ORDER BY created_at, key"
        if kind is not None and key is None:
            # The keys from the index on (run_id, kind, cycle), then the rows by primary key:
            # asked for whole rows, SQLite read the run's every entry through the primary key
            # instead, so a resume's look for the next cycle's retry entries grew with the
            # run's effects (one entry a cycle).
            m = self._MARK
            query = (
                f"SELECT {JOURNAL_COLS} FROM journal WHERE run_id={m} AND key IN "
                f"(SELECT key FROM journal{where}) ORDER BY created_at, key"
            )
            args = [run_id, *args]
        return [self._journal(r) for r in self._all(query, args)]

    def journal_where(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        after_cycle: int | None = None,
        statuses: Collection[str] | None = None,
        keys: Collection[str] | None = None,
        limit: int | None = None,
        upto_cycle: int | None = None,
    ) -> list[JournalEntry]:
        if limit is not None and limit <= 0:
            return []
        found = self._journal_conds(kind, after_cycle, upto_cycle, statuses)
        if found is None:
            return []
        m = self._MARK
        where, args = found
        if keys is None:
            # As ``journal`` does: the keys from the index on (run_id, kind, cycle) (a cycle's
            # range of it when ``after_cycle`` is given), then the rows by primary key.
            query = (
                f"SELECT {JOURNAL_COLS} FROM journal WHERE run_id={m} AND key IN "
                f"(SELECT key FROM journal WHERE run_id={m}{where}) ORDER BY created_at, key"
                + ("" if limit is None else f" LIMIT {int(limit)}")
            )
            return [self._journal(r) for r in self._all(query, [run_id, run_id, *args])]
        out: list[JournalEntry] = []
        wanted_keys = list(dict.fromkeys(keys))
        for i in range(0, len(wanted_keys), 400):  # under SQLite's bound on parameters
            chunk = wanted_keys[i : i + 400]
            query = (
                f"SELECT {JOURNAL_COLS} FROM journal WHERE run_id={m} "
                f"AND key IN ({','.join([m] * len(chunk))}){where} ORDER BY created_at, key"
            )
            out.extend(self._journal(r) for r in self._all(query, [run_id, *chunk, *args]))
        if len(wanted_keys) > 400:  # several chunks: their rows in one order again
            out.sort(key=lambda e: (e.created_at, e.key))
        return out if limit is None else out[:limit]

    def _journal_conds(
        self,
        kind: str | None,
        after_cycle: int | None,
        upto_cycle: int | None,
        statuses: Collection[str] | None,
    ) -> tuple[str, list[Any]] | None:
        """``journal_where``'s filters as `` AND ...`` conditions and their arguments
        (``None``: no entry can match, an empty ``statuses``)."""
        m = self._MARK
        conds: list[str] = []
        args: list[Any] = []
        if kind is not None:
            conds.append(f"kind={m}")
            args.append(kind)
        if after_cycle is not None:
            conds.append(f"cycle>{m}")
            args.append(int(after_cycle))
        if upto_cycle is not None:
            conds.append(f"cycle<={m}")
            args.append(int(upto_cycle))
        if statuses is not None:
            wanted = list(dict.fromkeys(statuses))
            if not wanted:
                return None
            conds.append(f"status IN ({','.join([m] * len(wanted))})")
            args.extend(wanted)
        return "".join(f" AND {c}" for c in conds), args

    def count_journal(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        statuses: Collection[str] | None = None,
        limit: int | None = None,
    ) -> int:
        found = self._journal_conds(kind, None, None, statuses)
        if found is None or (limit is not None and limit <= 0):
            return 0
        where, args = found
        rows = f"SELECT 1 FROM journal WHERE run_id={self._MARK}{where}"
        if limit is not None:  # the first rows found, in no order: no sort, no whole scan
            rows += f" LIMIT {int(limit)}"
        return int(self._all(f"SELECT COUNT(*) FROM ({rows}) AS found", [run_id, *args])[0][0])

    # --- approvals and cancellation ----------------------------------------------------
    def approvals(self, *, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        where, args = _where((("run_id", run_id), ("status", status)), self._MARK)
        query = f"SELECT {APPROVAL_COLS} FROM approvals{where} ORDER BY requested_at, approval_id"
        return [self._approval(r) for r in self._all(query, args)]

    def approval(self, approval_id: str) -> Approval | None:
        m = self._MARK
        rows = self._all(
            f"SELECT {APPROVAL_COLS} FROM approvals WHERE approval_id={m}", [approval_id]
        )
        return self._approval(rows[0]) if rows else None

    def approvals_by_prefix(
        self, run_id: str, prefix: str, *, limit: int | None = None
    ) -> list[Approval]:
        if limit is not None and limit <= 0:
            return []
        m = self._MARK
        # The run's rows through its index, only those of the prefix decoded: the first
        # characters compared as typed (LIKE ignores ASCII case on SQLite; startswith did not)
        query = (
            f"SELECT {APPROVAL_COLS} FROM approvals WHERE run_id={m} "
            f"AND substr(approval_id, 1, CAST({m} AS INTEGER))={m} ORDER BY requested_at, approval_id"
            + ("" if limit is None else f" LIMIT {int(limit)}")
        )
        return [self._approval(r) for r in self._all(query, [run_id, len(prefix), prefix])]

    def count_approvals(
        self, *, status: str | None = None, run_id: str | None = None, search: str | None = None
    ) -> int:
        where, args = self._approvals_where(status, run_id, search)
        return int(self._all(f"SELECT COUNT(*) FROM approvals{where}", args)[0][0])

    def page_approvals(
        self,
        *,
        status: str | None = None,
        run_id: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
        limit: int,
    ) -> list[Approval]:
        where, args = self._approvals_where(status, run_id, search)
        if after is not None:  # keyset pagination: the rows after (requested_at, approval_id)
            m = self._MARK
            where += (" AND " if where else " WHERE ") + (
                f"(requested_at < {m} OR (requested_at = {m} AND approval_id > {m}))"
            )
            args += [after[0], after[0], after[1]]
        query = (
            f"SELECT {APPROVAL_COLS} FROM approvals{where} "
            f"ORDER BY requested_at DESC, approval_id LIMIT {sql_int(max(0, limit))}"
        )
        return [self._approval(r) for r in self._all(query, args)]

    def _approvals_where(
        self, status: str | None, run_id: str | None, search: str | None
    ) -> tuple[str, list[Any]]:
        where, args = _where((("run_id", run_id), ("status", status)), self._MARK)
        needle = (search or "").strip().lower()
        if needle:
            # as approvals_matching: an id prefix (either id), or a substring of the words;
            # ! escapes LIKE's wildcards
            m = self._MARK
            pat = needle.replace("!", "!!").replace("%", "!%").replace("_", "!_")
            words = ("what", "why", "rule", "kind")
            low = self._LOWER
            cond = " OR ".join(
                [f"{low}({c}) LIKE {m} ESCAPE '!'" for c in ("approval_id", "run_id")]
                + [f"{low}({c}) LIKE {m} ESCAPE '!'" for c in words]
            )
            where += (" AND " if where else " WHERE ") + f"({cond})"
            args += [f"{pat}%"] * 2 + [f"%{pat}%"] * len(words)
        return where, args

    def decided_approvals(self, limit: int) -> list[Approval]:
        # Only ``limit`` rows are parsed; the scan for them stays in the database.
        query = (
            f"SELECT {APPROVAL_COLS} FROM approvals WHERE status <> 'pending' "
            f"ORDER BY requested_at DESC, approval_id DESC LIMIT {self._MARK}"
        )
        return [self._approval(r) for r in self._all(query, [max(0, int(limit))])]

    def decide_approval(
        self,
        approval_id: str,
        *,
        status: str,
        by: str,
        note: str | None,
        now: float,
        answer: Any = None,
    ) -> Approval:
        if status not in DECISIONS:
            raise ApprovalError(f"unknown decision {status!r}")
        q, js = self._q, self._js
        with self._tx() as conn:
            # The run's row first, then the request's: the order a commit takes them in (its
            # fencing update, then the requests it closes), so a person deciding while a
            # cancel commits waits for it instead of deadlocking with it (PostgreSQL).
            owner = conn.execute(q.approval_run, (approval_id,)).fetchone()
            if owner is None:
                raise ApprovalError(f"no approval request {approval_id!r}")
            self._lock_run(conn, owner[0])
            row = conn.execute(
                q.decide,
                (status, by, now, note, None if answer is None else js(answer), approval_id),
            ).fetchone()
            if row is None:
                found = conn.execute(q.approval_status, (approval_id,)).fetchone()
                raise ApprovalError(
                    f"approval {approval_id} was already {found[0]}"
                    + (f" by {found[1]}" if found[1] else "")
                )
            decided = self._approval(row)
            conn.execute(q.insert_event, decided_event(decided, by, note, answer, now, js))
        return decided

    def request_cancel(self, run_id: str) -> RunRecord:
        with self._tx() as conn:
            conn.execute(self._q.cancel, (True, run_id))
        return self.get_run(run_id)

    # --- feedback memory ---------------------------------------------------------------
    def memory_add(self, item: Mapping[str, Any]) -> None:
        values = memory_values(item, self._js)
        with self._tx() as conn:
            try:
                conn.execute(self._q.insert_memory, values)
            except self._UNIQUE:
                raise ConflictError(f"memory item {item['memory_id']!r} already exists") from None

    def memory_query(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
        limit: int | None = None,
        memory_id: str | None = None,
    ) -> list[dict[str, Any]]:
        where, args = memory_where(scopes, status, memory_id, self._MARK)
        query = f"SELECT {MEMORY_COLS} FROM memory"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_at DESC, memory_id DESC"
        if limit is not None:
            query += f" LIMIT {sql_int(limit)}"
        return [self._memory_dict(r) for r in self._all(query, args)]

    def memory_count(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
    ) -> int:
        where, args = memory_where(scopes, status, None, self._MARK)
        query = "SELECT COUNT(*) FROM memory" + (" WHERE " + " AND ".join(where) if where else "")
        return int(self._all(query, args)[0][0])

    def memory_search(self, searches: Sequence[MemorySearch]) -> list[list[dict[str, Any]]]:
        out: list[list[dict[str, Any]]] = []
        with self._conn() as conn:
            # Several runs' searches (GroupRecall): one probe finds which of all their scopes
            # hold active memory, instead of one probe per run.
            live = self._memory_scopes_in_use(conn, searches) if len(searches) > 1 else None
            for s in searches:
                if live is not None:
                    found = s.limit > 0 and any((sc, k) in live for sc, k in s.scopes)
                else:
                    found = self._memory_in_scope(conn, s)
                if not found:
                    out.append([])  # most loops keep no memory: one indexed probe a cycle
                    continue
                out.append(
                    [self._memory_dict(r) for r in conn.execute(*self._memory_search_sql(s))]
                )
        return out

    def _memory_scopes_in_use(
        self, conn: Any, searches: Sequence[MemorySearch]
    ) -> set[tuple[str, str]]:
        """Which of the searches' ``(scope, scope_key)`` pairs hold an active item."""
        pairs = list(dict.fromkeys((sc, k) for s in searches for sc, k in s.scopes))
        m = self._MARK
        live: set[tuple[str, str]] = set()
        for i in range(0, len(pairs), 400):  # under any build's limit on bound parameters
            chunk = pairs[i : i + 400]
            cond = " OR ".join([f"(scope={m} AND scope_key={m})"] * len(chunk))
            live.update(
                (r[0], r[1])
                for r in conn.execute(
                    f"SELECT DISTINCT scope, scope_key FROM memory WHERE status='active' "
                    f"AND ({cond})",
                    [v for pair in chunk for v in pair],
                )
            )
        return live

    def _memory_in_scope(self, conn: Any, s: MemorySearch) -> bool:
        """Whether any active item lies in the search's scopes (the scope index answers)."""
        pairs = list(s.scopes)
        if not pairs or s.limit <= 0:
            return False
        m = self._MARK
        cond = " OR ".join([f"(scope={m} AND scope_key={m})"] * len(pairs))
        row = conn.execute(
            f"SELECT 1 FROM memory WHERE status='active' AND ({cond}) LIMIT 1",
            [v for pair in pairs for v in pair],
        ).fetchone()
        return row is not None

    def _memory_search_sql(self, s: MemorySearch) -> tuple[str, list[Any]]:
        """One search as one statement, all ranking in the database:

        - ``hit``: every active match in the scopes with its raw relevance (the best one
          scales the others, so all are scored — by the full-text index alone), or the newest
          ``s.ranked`` of them (older matches then rank as non-matches);
        - ``bar``: the ``limit``-th best score among the ``4 × limit`` most relevant matches, a
          lower bound of the final ``limit``-th score: a match whose relevance (an upper
          bound of its score, strengths being at most 1) is under it cannot place, so only
          the others are looked up in the table;
        - per scope, the ``limit`` strongest items: a non-match ranks at the floor, by
          strength, so no other non-match can place;
        - the candidates ranked; whole rows read for the first ``limit`` only."""
        m = self._MARK
        pairs = [(scope, key) for scope, key in s.scopes]
        if not pairs or s.limit <= 0:
            return "SELECT * FROM memory WHERE 1=0", []
        fts5 = self._MARK == "?"  # SQLite (FTS5); PostgreSQL's psycopg marks with %s
        k = "rowid" if fts5 else "memory_id"  # the cheapest way back to a row
        limit, floor = int(s.limit), float(s.floor)
        cols = f"m.{k} AS k, m.strength, m.scope, m.updated_at, m.memory_id"
        in_scope = "(" + " OR ".join([f"(m.scope={m} AND m.scope_key={m})"] * len(pairs)) + ")"
        pair_args = [v for pair in pairs for v in pair]
        ctes: list[str] = []
        branches: list[str] = []
        args: list[Any] = []
        top = "0"
        if s.terms:
            if fts5:
                # The tag column keeps the match to the scopes' active items, so no other
                # match is scored; bm25() is lower for better matches; the tag weighs 0.
                terms = " OR ".join(f'"{t}"' for t in s.terms)
                tags = " OR ".join(f'"{memory_tag(scope, key)}"' for scope, key in pairs)
                # Capped, FTS5 hands the matches out newest first (rowid order, which it
                # keeps) and stops after ``ranked``: bm25() reads only those rows.
                cap = "" if s.ranked is None else f" ORDER BY rowid DESC LIMIT {int(s.ranked)}"
                ctes.append(
                    "hit AS MATERIALIZED (SELECT rowid AS k, -bm25(memory_fts, 1.0, 1.0, 0.0) "
                    f"AS raw FROM memory_fts WHERE memory_fts MATCH ?{cap})"
                )
                args.append(f"{{text rule}} : ({terms}) AND tag : ({tags})")
            else:
                tsq = " | ".join(f"'{t}'" for t in s.terms)
                match = (
                    f"FROM memory m, to_tsquery('english'::regconfig, {m}) q "
                    f"WHERE m.search @@ q AND m.status='active'"
                )
                if s.ranked is None:
                    ctes.append(
                        "hit AS MATERIALIZED (SELECT m.memory_id AS k, ts_rank(m.search, q) "
                        f"AS raw {match} AND {in_scope})"
                    )
                    args += [tsq, *pair_args]
                else:
                    # Capped, the newest ``ranked`` matches of each scope (memory_recent, one
                    # index walk per scope that stops at the cap; an OR of scopes would make
                    # the planner read every match and sort them), then the newest of those;
                    # ts_rank() reads only their vectors.
                    cap = f"ORDER BY created_at DESC, k DESC LIMIT {int(s.ranked)}"
                    per_scope = " UNION ALL ".join(
                        [
                            f"(SELECT m.memory_id AS k, m.created_at, m.search, q {match} "
                            f"AND m.scope={m} AND m.scope_key={m} {cap})"
                        ]
                        * len(pairs)
                    )
                    ctes.append(
                        "hit AS MATERIALIZED (SELECT c.k, ts_rank(c.search, c.q) AS raw FROM "
                        f"(SELECT * FROM ({per_scope}) u {cap}) c)"
                    )
                    args += [v for pair in pairs for v in (tsq, *pair)]
            top = "(SELECT MAX(raw) FROM hit)"
            rel = f"CASE WHEN t.top > 0 THEN {floor} + {1 - floor} * h.raw / t.top ELSE {floor} END"
            ctes.append(f"t AS (SELECT {top} AS top)")
            # A hit is an active item of the scopes: on SQLite the check is belt and braces
            # over the FTS5 index. On PostgreSQL the same statement's snapshot filtered it
            # already, and left out: without statistics the planner took the check for very
            # selective and read every row of the scopes to join them to the hits.
            again, again_args = (
                (f"AND m.status='active' AND {in_scope}", pair_args) if fts5 else ("", [])
            )
            ctes.append(
                f"bar AS (SELECT COALESCE((SELECT m.strength * {rel} AS score FROM "
                f"(SELECT k, raw FROM hit ORDER BY raw DESC LIMIT {4 * limit}) h "
                f"JOIN memory m ON m.{k} = h.k CROSS JOIN t WHERE 1=1 {again} "
                f"ORDER BY score DESC LIMIT 1 OFFSET {limit - 1}), 0) AS bar)"
            )
            args += again_args
            branches.append(
                # CROSS JOIN fixes SQLite's join order: the bar first, so that a match under
                # it is dropped before its row is looked up.
                f"SELECT {cols}, h.raw FROM t CROSS JOIN bar CROSS JOIN hit h "
                f"CROSS JOIN memory m WHERE m.{k} = h.k AND {rel} >= bar.bar - 1e-9 {again}"
            )
            args += again_args
        for scope, key in pairs:
            branches.append(
                f"SELECT * FROM (SELECT {cols}, 0.0 AS raw FROM memory m "
                f"WHERE m.scope={m} AND m.scope_key={m} AND m.status='active' "
                f"ORDER BY m.strength DESC, m.updated_at DESC, m.memory_id LIMIT {limit}) AS strongest"
            )
            args += [scope, key]
        ctes.append(f"cand AS ({' UNION ALL '.join(branches)})")
        order = "score DESC, scope_rank, strength DESC, updated_at DESC, memory_id"
        query = (
            f"WITH {', '.join(ctes)}, "
            "best AS (SELECT k, strength, scope, updated_at, memory_id, MAX(raw) AS raw "
            "FROM cand GROUP BY k, strength, scope, updated_at, memory_id), "
            "ranked AS (SELECT k, strength, updated_at, memory_id, "
            f"ROUND(CAST(strength * CASE WHEN top > 0 THEN {floor} + {1 - floor} * raw / top "
            f"ELSE {floor} END AS NUMERIC), 9) AS score, "
            "CASE scope WHEN 'task' THEN 0 WHEN 'project' THEN 1 ELSE 2 END AS scope_rank "
            f"FROM best CROSS JOIN (SELECT {'t.top FROM t' if s.terms else '0 AS top'}) tt "
            f"ORDER BY {order} LIMIT {limit}) "
            f"SELECT {', '.join(f'm.{c.strip()}' for c in MEMORY_COLS.split(','))} "
            f"FROM ranked JOIN memory m ON m.{k} = ranked.k "
            "ORDER BY ranked.score DESC, ranked.scope_rank, ranked.strength DESC, "
            "ranked.updated_at DESC, ranked.memory_id"
        )
        return query, args

    def memory_set_status(
        self,
        memory_id: str,
        status: str,
        *,
        by: str,
        now: float,
        expect: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        if status not in MEMORY_STATUSES:
            raise StoreError(
                f"unknown memory status {status!r}; one of {', '.join(MEMORY_STATUSES)}"
            )
        with self._tx() as conn:
            # FOR UPDATE where rows lock: two people deciding one item at once queue here.
            row = conn.execute(self._q.memory_for_update, (memory_id,)).fetchone()
            if row is None:
                raise MemoryNotFoundError(f"no memory item {memory_id!r} in {self.url}")
            item = self._memory_dict(row)
            if item["status"] == status:
                return item
            if expect is not None and item["status"] not in expect:
                raise ConflictError(
                    f"memory item {item['memory_id']} is {item['status']}, "
                    f"not {' or '.join(expect)}"
                )
            history = [*item["history"], {"status": status, "by": by, "at": now}]
            conn.execute(self._q.set_memory_status, (status, now, self._js(history), memory_id))
            item.update(status=status, updated_at=now, history=history)
        return item


def _event_rows(
    run_id: str, events: Sequence[NewEvent], now: float, js: Callable[[Any], str]
) -> list[tuple[Any, ...]]:
    """A commit's event rows (``event_row`` written out, in a loop: four a cycle)."""
    rows: list[tuple[Any, ...]] = []
    for e in events:
        rows.append((run_id, e.cycle, e.kind, now, js(dict(e.data))))
    return rows


def _version_rows(
    run_id: str, versions: Sequence[Any], js: Callable[[Any], str]
) -> list[tuple[Any, ...]]:
    """A commit's version rows (a loop: no comprehension a cycle)."""
    rows: list[tuple[Any, ...]] = []
    for v in versions:
        rows.append(version_row(run_id, v, js))
    return rows
