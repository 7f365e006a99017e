"""The PostgreSQL store: the shared store for workers on many hosts (``loopwright[postgres]``).

Same semantics as :class:`~loopwright.store.sqlite.SQLiteStore`, method for method: the logic is
``_sql.SQLStore``'s, and this module holds PostgreSQL's dialect. The store conformance suite
(``tests/integration/test_store_conformance.py``) runs unchanged on both.

- **Connections.** A ``psycopg_pool.ConnectionPool`` (autocommit connections; every write is one
  short explicit transaction, READ COMMITTED). The store is safe to share between threads.
- **Isolation.** ``schema=`` (argument or ``?schema=NAME`` in the URL) puts every table in that
  PostgreSQL schema, created if missing (``Runtime`` and the CLI refuse a missing one first:
  ``store.missing_pg_schema``), and sets it as the connections' ``search_path``; without
  it the tables live in the connection's current schema (``public`` by default).
- **Migrations.** Versioned (``_pg_schema.PG_MIGRATIONS``, version in ``loopwright_meta``) and
  applied in one transaction under ``pg_advisory_xact_lock`` keyed by the schema name, so any
  number of processes may open a fresh schema at once. A newer schema, or a schema holding
  loopwright's table names without its meta table, raises ``StoreCorruptError``.
- **Fencing.** Every fenced write starts with ``UPDATE runs … WHERE fencing_token = %s``; the
  row lock it takes is held to the end of the transaction, so a lease cannot change hands
  between the check and the writes. Writes that append events without a token lock the run row
  too, which keeps a run's event ids in commit order (readers tail with ``after_id``).
- **Claiming.** ``claim_runs`` picks candidates with ``FOR UPDATE SKIP LOCKED`` (concurrent
  claimers neither wait for nor collide with each other), then re-checks them in a second
  statement of the same transaction, whose fresh snapshot sees every approval committed before
  the row locks were taken.
- **Clocks.** Lease expiry is set and compared on the database server's clock: a worker whose
  host clock runs ahead cannot take over a live lease early, and one whose clock runs behind
  does not keep a dead worker's runs waiting longer. (A client's ``lease_expires_at`` in a
  commit is turned into "server now + the same TTL".) So is an approval request's expiry
  (``clock()``: the engine sets and compares ``expires_at`` on it). Timestamps the store only records
  (``created_at``, ``updated_at``, events) keep the writer's clock.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit

from .._errors import ConfigError, StoreCorruptError, StoreError, StoreUnavailableError
from .._json import dumps, loads
from .._redact import redact_text
from .._url_secrets import hide_url_secrets
from ._damage import damage_error
from ._pg_schema import CLAIMABLE_PG, PG_MIGRATIONS, PG_TABLES
from ._protocol_commit import BRIEF_LOCK_WAIT_S, BRIEF_LOCK_WAITS, RowLocked
from ._rows import BUSY_TOKEN
from ._sql import RUNNABLE_STATUS, SQLStore
from ._sql_statements import ASKED

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.types.json import Json, set_json_loads
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and psycopg_pool: pip install 'loopwright[postgres]'"
    ) from exc

__all__ = ["PostgresStore", "missing_schema"]

# The server's clock, as epoch seconds (what lease_expires_at holds).
_DB_NOW = "extract(epoch from clock_timestamp())::double precision"
# Runnable: free (no owner, no expiry, or expired) and either in progress or parked with no
# pending request (SQLiteStore.claim_runs also frees a dead local owner's runs).
_FREE = "(r.lease_owner IS NULL OR r.lease_expires_at IS NULL OR r.lease_expires_at < %(now)s)"
_RUNNABLE = f"{_FREE} AND {RUNNABLE_STATUS}"

_OWN_PARAMS = frozenset({"schema", "pool_min", "pool_max", "idle_tx_timeout_s"})
_LOCK_WAIT = f"SET LOCAL lock_timeout = '{int(BRIEF_LOCK_WAIT_S * 1000)}ms'"
_LOCK_CLASS = 0x4C57  # "LW": the advisory-lock namespace of loopwright migrations


def _json(value: Any) -> Json:
    return Json(value, dumps=dumps)


def _split_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``(conninfo for psycopg, url safe to show, loopwright's own options)``."""
    if "://" not in url:  # a libpq key=value string: nothing of ours in it
        return url, "postgresql (conninfo)", {}
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = urlencode([(k, v) for k, v in query if k not in _OWN_PARAMS])
    conninfo = _join(parts, parts.netloc, rest)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}" if ":" in user else netloc
    # a password given as a parameter (libpq's ``?sslpassword=``, ``?password=``) masked too
    shown_query = redact_text("?" + urlencode(query))[1:]
    shown = _join(parts, netloc, shown_query)
    return conninfo, shown, own


def _join(parts: SplitResult, netloc: str, query: str) -> str:
    """The URL again, with ``//`` kept when the host is empty: ``urlunsplit`` turns libpq's
    ``postgresql:///db`` (the local socket, or ``?host=``) into ``postgresql:/db``, which libpq
    refuses."""
    url = f"{parts.scheme}://{netloc}{parts.path}"
    return url + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def _int_option(own: Mapping[str, str], name: str, default: int) -> int:
    if name not in own:
        return default
    try:
        return int(own[name])
    except ValueError:
        raise ConfigError(f"{name} must be an integer, not {own[name]!r}", field="store") from None


def _connect(conninfo: str) -> psycopg.Connection[tuple[Any, ...]]:
    """One direct autocommit connection, with a connect timeout unless the URL sets one."""
    extra: dict[str, Any] = {}
    if "connect_timeout" not in conninfo_to_dict(conninfo):
        extra["connect_timeout"] = 10
    return psycopg.connect(conninfo, autocommit=True, **extra)


def missing_schema(url: str) -> tuple[str, str, list[str]] | None:
    """``(schema, database, stores)`` when ``url`` names a schema (``?schema=NAME``) that its
    database does not have, else ``None``; ``stores``: the schemas of that database holding a
    loopwright store (to name the one a typo meant). Creates nothing (opening the store
    would create it)."""
    conninfo, shown, own = _split_url(url)
    schema = own.get("schema")
    if not schema:
        return None
    try:
        with _connect(conninfo) as conn:
            found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname=%s", (schema,))
            if found.fetchone() is not None:
                return None
            stores = conn.execute(
                "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relname = 'loopwright_meta' AND c.relkind = 'r' ORDER BY 1"
            )
            return schema, conn.info.dbname, [r[0] for r in stores]
    except psycopg.Error as exc:
        raise StoreError(
            hide_url_secrets(f"cannot open store {shown}: {type(exc).__name__}: {exc}", url)
        ) from exc


class PostgresStore(SQLStore):
    """A loopwright store in a PostgreSQL database (one schema of it)."""

    _MARK = "%s"
    _DB_NOW = _DB_NOW
    _LOCKS = True
    concurrent_writers = True  # row locks: one run's write waits alone (``Store``)
    _UNIQUE = (psycopg.errors.UniqueViolation,)
    # a value refused (a duplicate, a number out of range): commit by commit; anything else
    # (a lost connection, a timeout) fails every commit, as one transaction would
    _REFUSED = (psycopg.IntegrityError, psycopg.DataError, psycopg.ProgrammingError)

    @staticmethod
    def _js(value: Any) -> Json:
        return _json(value)

    @staticmethod
    def _jl(value: Any) -> Any:
        return value  # json columns arrive parsed (``_configure``)

    def __init__(
        self,
        url: str,
        *,
        pool_min: int | None = None,
        pool_max: int | None = None,
        schema: str | None = None,
        _read_only: bool = False,
    ) -> None:
        conninfo, self.url, own = _split_url(url)
        self._source = url  # kept in memory only, for ``reopen`` (self.url drops credentials)
        self.schema = schema if schema is not None else own.get("schema") or None
        pool_min = pool_min if pool_min is not None else _int_option(own, "pool_min", 1)
        pool_max = pool_max if pool_max is not None else _int_option(own, "pool_max", 10)
        # A process frozen inside a transaction (SIGSTOP, a VM pause) holds its row locks: its
        # runs could not be taken over nor cancelled when its lease expired. The server ends
        # such a transaction (rolled back whole) after this long idle in it; 0: never.
        self.idle_tx_timeout_s = _int_option(own, "idle_tx_timeout_s", 15)
        if self.idle_tx_timeout_s < 0:
            raise ConfigError("idle_tx_timeout_s must be 0 or more", field="store")
        if not 0 <= pool_min <= pool_max or pool_max < 1:
            raise ConfigError(
                f"need 0 <= pool_min <= pool_max and pool_max >= 1 (got {pool_min}, {pool_max})",
                field="store",
            )
        # Migrate on one direct connection first: a wrong URL fails at once with libpq's own
        # message, instead of after the pool's connection timeout.
        try:
            with _connect(conninfo) as first:
                self._configure(first)
                if _read_only:
                    self._check_current(first)
                else:
                    self._migrate(first)
        except psycopg.Error as exc:
            damage = self._damaged(exc)  # (a table dropped that the migrations read)
            if damage is not None:
                raise damage from exc
            raise StoreError(
                hide_url_secrets(f"cannot open store {self.url}: {type(exc).__name__}: {exc}", url)
            ) from exc
        self.connections = pool_max
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            conninfo,
            min_size=pool_min,
            max_size=pool_max,
            kwargs={"autocommit": True},
            configure=self._configure,
            name=f"loopwright:{self.schema or 'default'}",
            timeout=30.0,
            open=True,
        )

    # --- setup --------------------------------------------------------------------------
    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        # json columns read with our parser: faster, and integers of any size stay exact.
        set_json_loads(loads, conn)
        if self.schema:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.execute(
            sql.SQL("SET idle_in_transaction_session_timeout = {}").format(
                sql.Literal(f"{self.idle_tx_timeout_s}s")
            )
        )

    def _check_current(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """``reopen``'s store: the schema as it is — never created or migrated — refused
        unless it holds a current loopwright store."""
        try:
            row = conn.execute(self._q.schema_version).fetchone()
        except psycopg.errors.UndefinedTable:
            row = None
        if row is None or int(row[0]) != len(PG_MIGRATIONS):
            raise StoreError(
                f"{self.url}: schema {self.schema or 'default'!r} no longer holds the store "
                "this state was read from: its versions cannot be read"
            )

    def _migrate(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        with conn.transaction():
            schema = self.schema
            if schema is None:
                schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
                if schema is None:
                    raise StoreError(
                        f"{self.url}: no schema to create tables in (search_path names none "
                        "that exists); add ?schema=NAME to the URL"
                    )
            # Serialise migrators of this schema (other processes included); released at commit.
            key = zlib.crc32(schema.encode()) - 2**31
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, key))
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname=%s", (schema,))
            if exists.fetchone() is None:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema=%s",
                    (schema,),
                )
            }
            if "loopwright_meta" not in tables:
                foreign = sorted(tables & PG_TABLES)
                if foreign:
                    raise StoreCorruptError(
                        f"{self.url}: schema {schema!r} already has tables loopwright did not "
                        f"create ({', '.join(foreign)}); name another with ?schema=NAME"
                    )
                conn.execute(
                    "CREATE TABLE loopwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
            self._apply_migrations(
                conn,
                PG_MIGRATIONS,
                f"{self.url}: schema {schema!r} has version",
                built="runs" in tables,
            )

    # --- connections --------------------------------------------------------------------
    def _damaged(self, exc: BaseException) -> StoreCorruptError | None:
        return damage_error(self.url, exc)

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled connection; database and pool failures become ``StoreError`` here, once
        (a table or column missing, a page the server found corrupt: ``StoreCorruptError``)."""
        self._open()
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.errors.LockNotAvailable as exc:
            # (only a store thread's write sets a lock timeout: ``_tx``)
            raise RowLocked(f"{self.url}: a row is locked by another session ({exc})") from exc
        except PoolTimeout as exc:
            raise StoreUnavailableError(
                f"{self.url}: no database connection available ({exc})"
            ) from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            # a dropped connection, a server restart, a serialization failure: not the data
            raise StoreUnavailableError(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        except psycopg.Error as exc:
            damage = self._damaged(exc)
            if damage is not None:
                raise damage from exc
            raise StoreError(f"{self.url}: {type(exc).__name__}: {exc}") from exc

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        with self._conn() as conn, conn.transaction():
            self._brief_lock_wait(conn)
            yield conn

    @staticmethod
    def _brief_lock_wait(conn: psycopg.Connection[Any]) -> None:
        # A write from a store thread (the engine's: a cycle's commit, an effect's journal, a
        # lease's renewal or release) waits for a row lock held elsewhere only briefly, then
        # gives its connection back and is tried again (``RowLocked``): waiting there, a few
        # runs whose rows another session held took every pooled connection, and the
        # worker's other writes (a renewal, a read) failed after the pool's timeout
        # (evloop53b). A person's write (a cancel, an edit) waits as it did.
        if BRIEF_LOCK_WAITS.on:
            conn.execute(_LOCK_WAIT)

    @contextmanager
    def _tx_lazy(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        # A write that must outlive this process, not the server (a call's bill: the cycle's
        # commit, synchronous, flushes the log up to its own record, so this one's too):
        # committed without waiting for the log's flush. A crash of the server or the machine
        # before the next flush may lose it: the bill of the one call in flight (invariant 7).
        with self._conn() as conn, conn.transaction():
            self._brief_lock_wait(conn)
            conn.execute("SET LOCAL synchronous_commit = off")
            yield conn

    def _savepoint(self, conn: psycopg.Connection[Any]) -> AbstractContextManager[Any]:
        return conn.transaction()  # nested: a savepoint

    def _executemany(
        self, conn: psycopg.Connection[Any], sql: str, rows: Sequence[Sequence[Any]]
    ) -> None:
        # Not psycopg's executemany: it pipelines, and after a pipeline the server does not arm
        # ``idle_in_transaction_session_timeout`` (PostgreSQL 15, psycopg 3.3), so a worker
        # frozen right after one (SIGSTOP, a VM pause) held its runs' row locks for good. An
        # INSERT's rows go as one multi-row statement (one round trip, as the pipeline was);
        # anything else row by row.
        for statement, args in multi_row(sql, rows):
            conn.execute(statement, args)

    def _fence_batch(
        self, conn: psycopg.Connection[Any], run_ids: Sequence[str]
    ) -> dict[str, tuple[int, Any]]:
        # The row locks are held to the commit; taken in run_id order, so that two batches
        # never deadlock. A batch of several runs skips a row another session holds locked
        # (a cancel, the dashboard, psql): that run's commit is left out (``RunBusy``) and
        # written again alone, where it waits, while the rest of the batch commits now; it
        # waited here, and every run of the batch with it (evloop53).
        several = len(set(run_ids)) > 1
        owner = {
            r[0]: (r[1], r[2])
            for r in conn.execute(
                f"SELECT run_id, fencing_token, {ASKED} FROM runs "
                "WHERE run_id = ANY(%s) ORDER BY run_id FOR NO KEY UPDATE"
                + (" SKIP LOCKED" if several else ""),
                (list(run_ids),),
            ).fetchall()
        }
        if several and len(owner) < len(set(run_ids)):
            # skipped: locked by another session (a run that does not exist is stale, as ever)
            missing = [r for r in run_ids if r not in owner]
            for (run_id,) in conn.execute(
                "SELECT run_id FROM runs WHERE run_id = ANY(%s)", (missing,)
            ).fetchall():
                owner[run_id] = (BUSY_TOKEN, None)
        return owner

    def _version_keys(
        self, conn: psycopg.Connection[Any], run_id: str, keys: Collection[tuple[str, int]]
    ) -> list[Any]:
        ks = list(keys)
        return conn.execute(
            self._q.versions + " AND (ref, n) IN (SELECT * FROM unnest(%s::text[], %s::int[]))",
            (run_id, [k[0] for k in ks], [k[1] for k in ks]),
        ).fetchall()

    def clock(self) -> float:
        with self._conn() as conn:
            row = conn.execute(f"SELECT {_DB_NOW}").fetchone()
        assert row is not None
        return float(row[0])

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
        excluded = list(exclude or ())
        with self._tx() as conn:
            if now is None:  # the server's clock: hosts' clocks may disagree
                row = conn.execute(f"SELECT {_DB_NOW}").fetchone()
                assert row is not None
                now = float(row[0])
            args = {"now": now, "limit": int(limit), "owner": owner, "expires": now + ttl_s}
            # 1. Choose, then lock: the `limit` oldest candidates are read without a lock,
            #    then locked, skipping rows another claimer (or a commit) holds: claimers
            #    never wait for each other. A row skipped, or no longer free, is passed over
            #    and the next candidates are read in its place, until `limit` are locked or
            #    none is left. So no row is locked that this claim will not take (a row
            #    locked to the commit and not claimed would be skipped by a concurrent
            #    claimer, which could come back empty while a free run waits).
            #    Candidates are read in claim order from the partial index of runs runnable
            #    by status (its WHERE, CLAIMABLE_PG, is a term here as is): `limit` free runs
            #    plus those passed over, not every open run sorted and every parked run's
            #    approvals probed. Runs in progress whose lease lapsed are not in that index
            #    (every commit would move them there): the few running runs are read by
            #    status.
            picked: list[str] = []
            passed: list[str] = []
            while len(picked) < limit:
                need = int(limit) - len(picked)
                scan = args | {"need": need, "skip": picked + passed + excluded}
                chosen = [
                    r[0]
                    for r in conn.execute(
                        " UNION ALL ".join(
                            f"(SELECT r.run_id, r.updated_at FROM runs r WHERE {where} "
                            f"AND {_FREE} AND r.run_id <> ALL(%(skip)s) "
                            "ORDER BY r.updated_at, r.run_id LIMIT %(need)s)"
                            for where in (CLAIMABLE_PG, "r.status = 'running'")
                        )
                        + " ORDER BY 2, 1 LIMIT %(need)s",
                        scan,
                    )
                ]
                if not chosen:
                    break
                locked = {
                    r[0]
                    for r in conn.execute(
                        f"SELECT r.run_id FROM runs r WHERE r.run_id = ANY(%(ids)s) AND {_FREE} "
                        f"AND ({CLAIMABLE_PG} OR r.status = 'running') "
                        "FOR UPDATE SKIP LOCKED",
                        args | {"ids": chosen},
                    )
                }
                picked += [r for r in chosen if r in locked]
                passed += [r for r in chosen if r not in locked]
                if len(chosen) < need:  # no candidate left to read
                    break
            if not picked:
                return []
            # 2. Re-check under the locks with a fresh snapshot (READ COMMITTED), then claim:
            #    the approvals themselves asked, not only the count the triggers keep.
            rows = conn.execute(
                "UPDATE runs r SET lease_owner=%(owner)s, lease_expires_at=%(expires)s, "
                f"fencing_token=r.fencing_token + 1 WHERE r.run_id = ANY(%(ids)s) AND {_RUNNABLE} "
                "RETURNING r.run_id, r.fencing_token, r.updated_at",
                args | {"ids": picked},
            ).fetchall()
        rows.sort(key=lambda r: (r[2], r[0]))
        return [(r[0], int(r[1])) for r in rows]

    def close(self) -> None:
        self._pool.close()
        self.closed = True

    @property
    def reopenable(self) -> bool:
        return True

    def reopen(self) -> PostgresStore:
        # One connection, for a read after close (``Store.lasting_loader``).
        return PostgresStore(
            self._source, pool_min=0, pool_max=1, schema=self.schema, _read_only=True
        )


_VALUES = re.compile(r"VALUES\s*(\(\s*%s(?:\s*,\s*%s)*\s*\))", re.IGNORECASE)
_CONFLICT = re.compile(
    r"INSERT INTO \w+\s*\(([^)]*)\)\s*VALUES.*ON CONFLICT\s*\(([^)]*)\)\s*DO UPDATE",
    re.IGNORECASE | re.DOTALL,
)
MAX_PARAMS = 30_000  # per statement (the protocol allows 65,535)


def multi_row(sql: str, rows: Sequence[Sequence[Any]]) -> Iterator[tuple[str, Sequence[Any]]]:
    """The statements that do what ``executemany(sql, rows)`` does, each sent on its own: an
    ``INSERT ... VALUES (%s, ...)`` as multi-row INSERTs, anything else once a row. An upsert
    keeps the last of rows with the same conflict key, as executing them in turn would (a
    multi-row ``DO UPDATE`` may not touch a row twice)."""
    m = _VALUES.search(sql)
    if m is None or len(rows) < 2:
        for r in rows:
            yield sql, r
        return
    c = _CONFLICT.search(sql)
    if c is not None:
        cols = [x.strip() for x in c.group(1).split(",")]
        key = [cols.index(x.strip()) for x in c.group(2).split(",")]
        last = {tuple(r[i] for i in key): r for r in rows}
        rows = list(last.values())
    group = m.group(1)
    per = max(1, MAX_PARAMS // max(1, len(rows[0])))
    for i in range(0, len(rows), per):
        chunk = rows[i : i + per]
        values = "VALUES " + ", ".join([group] * len(chunk))
        yield sql[: m.start()] + values + sql[m.end() :], [v for r in chunk for v in r]
