"""The embedded SQLite store (the default): WAL, ``synchronous=FULL``, versioned schema.

Durability modes:
    ``full`` (default): every checkpoint survives power loss (``synchronous=FULL``).
    ``process``: survives a crash of the process, not of the machine (``synchronous=NORMAL``);
        faster on slow disks. Choose it with ``sqlite:///path.db?durability=process``.

The logic is ``_sql.SQLStore``'s; this module holds SQLite's dialect: one connection behind an
``RLock``, writes in ``BEGIN IMMEDIATE`` transactions (one writer at a time, so no locking
clauses), JSON columns as text, leases on the writer's clock, and a claim that also takes over
the runs of a dead process of this host.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from .._errors import ConfigError, StoreCorruptError, StoreError, StoreUnavailableError
from .._json import dumps, loads, loads_all
from ._damage import damage_error
from ._schema import CLAIMABLE_SQLITE, SQLITE_MIGRATIONS
from ._sql import SQLStore, Statement, owner_is_dead
from ._sql_statements import ASKED

__all__ = ["SQLiteStore", "owner_is_dead"]


class _Locked:
    """The connection, held under the store's lock (reads: no transaction of their own). A
    read that finds the store damaged raises ``StoreCorruptError`` naming it (the driver's
    error its ``__cause__``): every read of the store passes here."""

    __slots__ = ("_db", "_lock", "_path")

    def __init__(self, lock: threading.RLock, db: sqlite3.Connection, path: Path) -> None:
        # the path, not the store: the store holds this object (no cycle, so a store dropped
        # unclosed is collected, and its connection closed, at once)
        self._lock, self._db, self._path = lock, db, path

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        return self._db

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        self._lock.release()
        if kind is not None and issubclass(kind, sqlite3.DatabaseError):
            damage = damage_error(str(self._path), cast(BaseException, exc))
            if damage is not None:
                raise damage from exc


class _Tx:
    """One write transaction: the store's lock, BEGIN IMMEDIATE (the write lock up front, so
    two writers queue instead of deadlocking), COMMIT or ROLLBACK. A class rather than a
    generator context manager: every commit enters one. ``lazy``: committed with
    ``synchronous=NORMAL`` on a FULL store (in WAL mode the commit is in the log, safe from a
    crash of the process; the next FULL commit syncs it to disk with its own). ``single``:
    the transaction is the one statement run in it, which SQLite begins and commits itself
    (autocommit: no BEGIN, no COMMIT to run; its rows must be read to the end)."""

    __slots__ = ("_lazy", "_single", "_store")

    def __init__(self, store: SQLiteStore, lazy: bool = False, single: bool = False) -> None:
        self._store = store
        self._lazy = lazy and store.durability == "full"
        self._single = single

    def __enter__(self) -> sqlite3.Connection:
        store = self._store
        store._lock.acquire()
        try:
            if self._lazy:
                store._db.execute("PRAGMA synchronous = NORMAL")
            if not self._single:
                store._cur.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            try:
                if self._lazy:
                    with contextlib.suppress(sqlite3.Error):
                        store._db.execute("PRAGMA synchronous = FULL")
            finally:
                store._lock.release()
            failure = store._failure(exc)
            if failure is not None:
                raise failure from exc
            raise
        return store._db

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        store = self._store
        db = store._db
        try:
            if self._single:  # committed, or rolled back, as its statement ended
                failure = None if exc is None else store._failure(exc)
                if failure is not None:
                    raise failure from exc
                return
            if exc is None:
                try:
                    store._cur.execute("COMMIT")
                except sqlite3.Error as failed:
                    # Nothing of it is kept, and no transaction is left open on the connection
                    # (a refused COMMIT leaves one: the next BEGIN would fail).
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                    failure = store._failure(failed)
                    if failure is not None:
                        raise failure from failed
                    raise
                return
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            failure = store._failure(exc)
            if failure is not None:
                raise failure from exc
        finally:
            if self._lazy:  # back to FULL whatever happened, before another writer runs
                try:
                    db.execute("PRAGMA synchronous = FULL")
                finally:
                    store._lock.release()
            else:
                store._lock.release()


def _lower(value: Any) -> Any:
    """``lw_lower``: text lowercased as Python's ``str.lower`` does (every script, not only
    ASCII as SQLite's LOWER), so a search finds 'Überweisung' by 'überweisung' here as on
    PostgreSQL and in the Store defaults; anything else (NULL, numbers, blobs) unchanged."""
    return value.lower() if isinstance(value, str) else value


def _functions(db: sqlite3.Connection) -> None:
    """The SQL functions the store's statements use, registered on a new connection."""
    db.create_function("lw_lower", 1, _lower, deterministic=True)


def _closed_with(store: SQLiteStore, db: sqlite3.Connection) -> None:
    """Close ``db`` when ``store`` is collected, if nobody closed it: a store dropped without
    ``close()`` (a ``Runtime`` not used as a context manager) otherwise leaves its connection
    to the garbage collector, which from Python 3.13 warns of it (``ResourceWarning:
    unclosed database``) in whatever code is running then."""
    weakref.finalize(store, db.close)


class SQLiteStore(SQLStore):
    """A loopwright store in one SQLite file."""

    _MARK = "?"
    _LOWER = "lw_lower"  # registered on every connection by _functions
    _UNIQUE = (sqlite3.IntegrityError,)
    _REFUSED = (sqlite3.Error, OverflowError, ValueError, TypeError)
    _DB_FAILURE = (sqlite3.OperationalError,)  # locked, disk full...: not a value

    _js = staticmethod(dumps)

    @staticmethod
    def _jl(value: Any) -> Any:
        return loads(value)

    def _jl_all(self, values: list[Any]) -> list[Any]:
        return loads_all(values)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        _aside: bool = True,
        _read_only: bool = False,
    ) -> None:
        if durability not in ("full", "process"):
            raise ConfigError("must be 'full' or 'process'", field="store.durability")
        self.path = Path(path)
        self._where = self.path.absolute()  # what ``reopen`` opens, whatever the cwd is then
        self.durability = durability
        self.url = f"sqlite:///{self.path}"
        self._lock = threading.RLock()
        if _read_only:
            self._open_read_only()
            return
        if self.path.exists() and self.path.is_dir():
            raise ConfigError(f"{self.path} is a directory, not a store file", field="store")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the store's folder {self.path.parent}: {exc}"
            ) from None
        if self.path.is_file() and self.path.stat().st_size == 0:
            # A store is never an empty file (see _create_aside): this one was truncated, or
            # made by something else. Opening it would start over and rerun every effect.
            raise StoreCorruptError(
                f"store: {self.path} is an empty file, not a loopwright store (truncated?); "
                "restore it from a backup, or name another store"
            )
        if _aside and str(self.path) not in ("", ":memory:") and not self.path.exists():
            self._create_aside()
        try:
            self._db = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0
            )
            _closed_with(self, self._db)
        except sqlite3.Error as exc:
            folder = self.path.absolute().parent
            if not os.access(folder, os.W_OK):
                raise StoreError(
                    f"cannot open store {self.path}: {exc} (the folder {folder} is not "
                    "writable by this user, or is on a read-only file system)"
                ) from None
            raise StoreError(f"cannot open store {self.path}: {exc}") from None
        self._reader = _Locked(self._lock, self._db, self.path)
        self._cur = self._db.cursor()  # the write transactions' (``_writer``)
        try:
            _functions(self._db)
            self._refuse_foreign()
            self._configure()
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            folder = self.path.absolute().parent
            text = str(exc)
            if ("readonly" in text or "unable to open" in text) and not os.access(folder, os.W_OK):
                # Not damage: SQLite keeps a WAL store's -wal and -shm files beside it, so
                # even reading needs a folder this user may write in (on a read-only file
                # system SQLite says "unable to open database file").
                raise StoreError(
                    f"cannot use store {self.path}: the folder {folder} is not writable by "
                    "this user (or is on a read-only file system), and SQLite keeps the "
                    "store's -wal and -shm files beside it (reading too); run as a user who "
                    "may write there, or copy the store"
                ) from None
            if "readonly" in str(exc) and not os.access(self.path, os.W_OK):
                # Not damage either: opening a store may write (WAL mode, a migration).
                raise StoreError(
                    f"cannot use store {self.path}: the file is not writable by this user "
                    "(opening a store may write to it: its WAL mode, a schema migration); "
                    "run as a user who may write it, or copy the store"
                ) from None
            raise StoreCorruptError(
                f"store: {self.path} is not a usable loopwright store ({exc}): the file is "
                "damaged (truncated, overwritten) or is not a store; restore it from a backup, "
                "or name another store file"
            ) from exc
        except StoreError:
            self._db.close()
            raise

    # --- setup --------------------------------------------------------------------------
    def _open_read_only(self) -> None:
        """``reopen``'s store: the file as it is (never created, never migrated, no lock
        taken: SQLite opens it read-only), refused unless it is a current loopwright store."""
        if not self.path.is_file():
            raise StoreError(f"{self.path} no longer exists: its versions cannot be read")
        try:
            self._db = sqlite3.connect(
                f"{self.path.as_uri()}?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=30.0,
            )
            _closed_with(self, self._db)
            self._reader = _Locked(self._lock, self._db, self.path)
            self._cur = self._db.cursor()
            _functions(self._db)
            self._db.execute("PRAGMA busy_timeout = 30000")
            row = self._db.execute(self._q.schema_version).fetchone()
        except sqlite3.Error as exc:
            with contextlib.suppress(Exception):
                self._db.close()
            damage = self._damaged(exc)
            if damage is not None:
                raise damage from exc
            raise StoreError(f"cannot read {self.path}: {exc}") from None
        if row is None or int(row[0]) != len(SQLITE_MIGRATIONS):
            self._db.close()
            raise StoreError(
                f"{self.path} is not the store this state was read from (schema version "
                f"{row[0] if row else 'none'}): its versions cannot be read"
            )

    def _create_aside(self) -> None:
        """Build a new store under a temporary name and link it into place, so the store's
        path never holds an empty file (SQLite creates one at connect) that another process
        could take for a truncated store. A process that loses the race uses the winner's."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.new")
        try:
            SQLiteStore(tmp, durability=self.durability, _aside=False).close()
            os.link(tmp, self.path)
        except FileExistsError:
            pass  # created meanwhile by another process
        except (OSError, StoreError):
            pass  # no hard links here, or no room: the store is created (or refused) in place
        finally:
            for leftover in (
                tmp,
                tmp.with_name(tmp.name + "-wal"),
                tmp.with_name(tmp.name + "-shm"),
            ):
                # (on a read-only file system, removing a name never made fails with EROFS,
                # not ENOENT: the store is then refused in place, saying why)
                with contextlib.suppress(OSError):
                    leftover.unlink(missing_ok=True)

    def _refuse_foreign(self) -> None:
        # Before any PRAGMA that writes (journal_mode=WAL persists in the file): a database
        # loopwright did not create must be refused untouched.
        tables = {
            r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if tables and "loopwright_meta" not in tables:
            raise StoreCorruptError(
                f"{self.path} is an SQLite database that loopwright did not create "
                f"(tables: {', '.join(sorted(tables)[:5])}); name another store file"
            )

    def _configure(self) -> None:
        db = self._db
        db.execute("PRAGMA busy_timeout = 30000")
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        # an in-memory store (tests, notebooks) has no file for a WAL: nothing to make durable
        if str(mode).lower() != "wal" and str(self.path) not in ("", ":memory:"):
            raise StoreError(f"cannot enable WAL on {self.path} (got {mode})")
        sync = "FULL" if self.durability == "full" else "NORMAL"
        db.execute(f"PRAGMA synchronous = {sync}")
        db.execute("PRAGMA foreign_keys = ON")

    def _migrate(self) -> None:
        with self._tx() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS loopwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            built = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'"
            ).fetchone()
            self._apply_migrations(
                db, SQLITE_MIGRATIONS, f"{self.path} has schema version", built=bool(built)
            )

    # --- connections --------------------------------------------------------------------
    def _conn(self) -> _Locked:
        self._open()
        return self._reader

    def _tx(self) -> _Tx:
        self._open()
        return _Tx(self)

    def _tx_lazy(self) -> _Tx:
        self._open()
        return _Tx(self, lazy=True)

    def _put_fenced(self, sql: str, args: Sequence[Any], lazy: bool) -> Any:
        # One statement, its own transaction (SQLite's autocommit): a billed call's bill as
        # PRAGMA, INSERT, PRAGMA instead of PRAGMA, BEGIN, UPDATE, SELECT, INSERT, COMMIT,
        # PRAGMA (bench/billed_cycles.py). Its rows read to the end, so that it has committed.
        self._open()  # (a closed store refused saying so, as ``_tx`` does)
        with _Tx(self, lazy=lazy, single=True):
            rows = self._cur.execute(sql, args).fetchall()
        return rows[0] if rows else None

    def _writer(self, conn: sqlite3.Connection) -> sqlite3.Cursor:
        # One cursor for every write transaction (under the store's lock): a statement run
        # through it skips making and dropping a cursor (≈ 1 k instructions; seven a cycle).
        return self._cur

    # The recall probes that found no memory, and the database as it was then: SQLite's
    # ``data_version`` (moved by every other connection's commit, another process's included)
    # and this store's own memory writes. A cycle's recall of a loop keeping no memory is
    # then that PRAGMA, not the probe (≈ 12 k instructions against ≈ 30 k).
    _empty_mark: tuple[Any, int] | None = None
    _empty: set[Statement]

    def _known_empty(self, conn: sqlite3.Connection, probe: Statement) -> bool:
        mark = (conn.execute("PRAGMA data_version").fetchone()[0], self._memory_writes)
        if mark != self._empty_mark:
            self._empty_mark, self._empty = mark, set()
            return False
        return probe in self._empty

    def _found_empty(self, probe: Statement) -> None:
        if len(self._empty) >= 256:  # many tasks' scopes (a worker draining a queue): bounded
            self._empty.clear()
        self._empty.add(probe)

    def _failure(self, exc: BaseException) -> StoreError | None:
        """What a write that failed in the database raises instead of ``exc``: damage (a
        damaged file, a missing table or column) is corruption; any other
        ``OperationalError`` (locked past the busy timeout, disk full, an I/O error) is the
        store being unavailable, and nothing of the write was kept. None: ``exc`` as it is
        (a constraint refused at COMMIT, a fencing or a value's error, not the database's)."""
        if not isinstance(exc, sqlite3.DatabaseError):
            return None
        damage = self._damaged(exc)
        if damage is not None:
            return damage
        if not isinstance(exc, sqlite3.OperationalError):
            return None
        text = str(exc)
        if any(w in text.lower() for w in ("no such column", "malformed")):
            # (a write missing a column is damage here, as it always was for writes)
            return StoreCorruptError(f"{self.path} is damaged: {text}")
        return StoreUnavailableError(f"{self.path}: {text}")

    def _damaged(self, exc: BaseException) -> StoreCorruptError | None:
        return damage_error(str(self.path), exc)

    @contextmanager
    def _savepoint(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        conn.execute("SAVEPOINT lw_commit")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK TO lw_commit")
            conn.execute("RELEASE lw_commit")
            raise
        conn.execute("RELEASE lw_commit")

    def _executemany(
        self, conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]
    ) -> None:
        if len(rows) == 1:  # a cycle's one version or digest: execute costs less
            conn.execute(sql, rows[0])
        else:
            conn.executemany(sql, rows)

    def _version_keys(
        self, conn: sqlite3.Connection, run_id: str, keys: Collection[tuple[str, int]]
    ) -> list[Any]:
        # One statement for many keys (a page of checkpoints' versions): each arm a primary-key
        # lookup, joined by UNION ALL (under any build's limits on bound parameters, 999, and
        # on a compound select's arms, 500).
        ks = list(keys)
        rows: list[Any] = []
        for i in range(0, len(ks), 300):
            chunk = ks[i : i + 300]
            sql = " UNION ALL ".join([self._q.version_by_key] * len(chunk))
            rows.extend(conn.execute(sql, [x for ref, n in chunk for x in (run_id, ref, n)]))
        return rows

    def _fence_batch(
        self, conn: sqlite3.Connection, run_ids: Sequence[str]
    ) -> dict[str, tuple[int, Any]]:
        # The write lock, held from BEGIN IMMEDIATE, keeps every token as read until COMMIT.
        owner: dict[str, tuple[int, Any]] = {}
        for i in range(0, len(run_ids), 500):  # under any build's limit on bound parameters
            chunk = run_ids[i : i + 500]
            found = conn.execute(
                f"SELECT run_id, fencing_token, {ASKED} FROM runs "
                f"WHERE run_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            owner.update((r[0], (r[1], r[2])) for r in found)
        return owner

    # --- leases -------------------------------------------------------------------------
    def claim_runs(
        self,
        owner: str,
        ttl_s: float,
        *,
        limit: int = 1,
        now: float | None = None,
        exclude: Collection[str] | None = None,
    ) -> list[tuple[str, int]]:
        if limit <= 0:
            return []
        excluded = frozenset(exclude or ())
        now = time.time() if now is None else now
        # One IMMEDIATE transaction: the write lock is held from the choice to the claim, so
        # concurrent claimers (other connections, other processes) queue and never overlap.
        # A lease still live but held by a process of this host that has died is free too
        # (as ``acquire_lease`` treats it): its runs need not wait out the TTL.
        host = f"{socket.gethostname()}:"
        with self._tx() as db:
            # Candidates in claim order, a batch at a time, from the partial index of runnable
            # runs: a claim reads ``limit`` free runs plus the live leases it passes over
            # (held by workers), not every open run. A live local lease is free only if its
            # process is dead (checked here, in Python): a batch all refused reads the next.
            # (plus those excluded: a worker names the runs it skipped a moment ago, maybe
            # thousands, each the oldest; read 16 at a time, they took a query per 16 with the
            # write lock held, at every poll)
            size = max(int(limit) + len(excluded), 16)
            free = (
                "(lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at < ? "
                "OR substr(lease_owner, 1, ?) = ?)"
            )
            cols = "SELECT updated_at, run_id, fencing_token, lease_owner, lease_expires_at "

            def taken(batch: list[Any]) -> list[tuple[Any, str, int]]:
                return [
                    (at, run_id, token)
                    for at, run_id, token, lease_owner, expires in batch
                    if run_id not in excluded
                    and (
                        lease_owner is None
                        or expires is None
                        or expires < now
                        or owner_is_dead(str(lease_owner))
                    )
                ]

            # Runs in progress whose lease lapsed, or whose process here died: few (those
            # running now, or left by a crash), read by status.
            found = taken(
                db.execute(
                    f"{cols}FROM runs WHERE status = 'running' AND {free}",
                    (now, len(host), host),
                ).fetchall()
            )
            waiting: list[tuple[Any, str, int]] = []
            after: tuple[float, str] | None = None
            while len(waiting) < limit:
                keyset = "" if after is None else "AND (updated_at, run_id) > (?, ?) "
                batch = db.execute(
                    f"{cols}FROM runs INDEXED BY runs_claimable WHERE {CLAIMABLE_SQLITE} "
                    f"AND {free} {keyset}ORDER BY updated_at, run_id LIMIT ?",
                    (now, len(host), host, *(after or ()), size),
                ).fetchall()
                waiting += taken(batch)
                if len(batch) < size:
                    break
                after = (batch[-1][0], batch[-1][1])
            # both in claim order: the oldest first
            rows = [(r, t) for _at, r, t in sorted(found + waiting)[: int(limit)]]
            db.executemany(
                self._q.take_lease,
                [(owner, now + ttl_s, token + 1, run_id) for run_id, token in rows],
            )
        return [(run_id, int(token) + 1) for run_id, token in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self.closed = True

    @property
    def reopenable(self) -> bool:
        return str(self.path) not in ("", ":memory:")

    def reopen(self) -> SQLiteStore | None:
        # Read-only: never a new, empty store where the old one was, no migration, no lock.
        if not self.reopenable:
            return None
        return SQLiteStore(self._where, durability=self.durability, _read_only=True)
