"""The PostgreSQL store: the shared store for workers on many hosts (``loopwright[postgres]``).

Same semantics as :class:`~loopwright.store.sqlite.SQLiteStore`, method for method; the store
conformance suite (``tests/integration/test_store_conformance.py``) runs unchanged on both.

- **Connections.** A ``psycopg_pool.ConnectionPool`` (autocommit connections; every write is one
  short explicit transaction, READ COMMITTED). The store is safe to share between threads.
- **Isolation.** ``schema=`` (argument or ``?schema=NAME`` in the URL) puts every table in that
  PostgreSQL schema, created if missing, and sets it as the connections' ``search_path``; without
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
  commit is turned into "server now + the same TTL".) Timestamps the store only records
  (``created_at``, ``updated_at``, events) keep the writer's clock.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._errors import (
    ApprovalError,
    ConfigError,
    ConflictError,
    RunNotFoundError,
    StaleLeaseError,
    StoreCorruptError,
    StoreError,
)
from .._json import dumps, loads
from .._memory import MemoryNotFoundError
from ._base import (
    APPROVAL_COLS,
    INSERT_CHECKPOINT_COLS,
    INSERT_EVENT_COLS,
    INSERT_REJECTED_COLS,
    INSERT_VERSION_COLS,
    Approval,
    BatchRefused,
    CheckpointRow,
    CommitRequest,
    Event,
    JournalEntry,
    NewApproval,
    NewEvent,
    RunRecord,
    Store,
    VersionRow,
    approval_row,
    batch_rows,
    check_journal_expect,
    checkpoint_row,
    event_row,
    run_cols,
    version_row,
)
from ._pg_schema import PG_MIGRATIONS, PG_TABLES
from .sqlite import (
    _MEMORY_COLS,
    _memory_check_status,
    _memory_expect,
    _memory_values,
    _memory_where,
    owner_is_dead,
)

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

__all__ = ["PostgresStore"]

_RUN_COLS = (
    "run_id, task_key, loop_name, project, status, stop_reason, cycle, best_score, cost_usd, "
    "tokens, seconds, spec_ref, loop_version, contract, task, packet, created_at, updated_at, "
    "ended_at, cancel_requested, lease_owner, lease_expires_at, fencing_token, last_seq, "
    "held_out_passed"
)
_APPROVAL_COLS = APPROVAL_COLS
_JOURNAL_COLS = "run_id, key, kind, cycle, status, data, attempts, created_at, updated_at"
_INSERT_EVENT = f"INSERT INTO events({INSERT_EVENT_COLS}) VALUES(%s, %s, %s, %s, %s)"
_BOOLEAN_COLS = frozenset({"held_out_passed", "cancel_requested"})
# Runnable: free (no owner, no expiry, or expired) and either in progress or parked with no
# pending request. The same predicate as SQLiteStore.claim_runs.
_RUNNABLE = (
    "(r.lease_owner IS NULL OR r.lease_expires_at IS NULL OR r.lease_expires_at < %(now)s) "
    "AND (r.status IN ('pending', 'running') OR (r.status = 'awaiting_approval' AND NOT EXISTS "
    "(SELECT 1 FROM approvals a WHERE a.run_id = r.run_id AND a.status = 'pending')))"
)
# The server's clock, as epoch seconds (what lease_expires_at holds).
_DB_NOW = "extract(epoch from clock_timestamp())::double precision"


def _assign(names: Sequence[str]) -> str:
    """``SET`` assignments for run columns; a lease expiry is a TTL added to the server's now."""
    return ", ".join(f"{k}={_DB_NOW} + %s" if k == "lease_expires_at" else f"{k}=%s" for k in names)


_OWN_PARAMS = frozenset({"schema", "pool_min", "pool_max"})
_LOCK_CLASS = 0x4C57  # "LW": the advisory-lock namespace of loopwright migrations


_dumps = dumps


def _json(value: Any) -> Json:
    return Json(value, dumps=_dumps)


_INSERT_CHECKPOINT = (
    f"INSERT INTO checkpoints({INSERT_CHECKPOINT_COLS}) VALUES(%s,%s,%s,%s,%s,%s,%s,%s)"
)
# A version is written once; then only its status changes (and, after a rollback
# reused its number, its value: the rolled-back timeline's versions are not kept).
_UPSERT_VERSION = (
    f"INSERT INTO versions({INSERT_VERSION_COLS}) VALUES(%s,%s,%s,%s,%s,%s) "
    "ON CONFLICT(run_id, ref, n) DO UPDATE SET cycle=excluded.cycle, "
    "status=excluded.status, value=excluded.value"
)
_INSERT_REJECTED = (
    f"INSERT INTO rejected({INSERT_REJECTED_COLS}) VALUES(%s,%s,%s) ON CONFLICT DO NOTHING"
)
_INSERT_APPROVAL = f"INSERT INTO approvals({APPROVAL_COLS}) VALUES({','.join(['%s'] * 17)})"


def _run(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=row[0],
        task_key=row[1],
        loop_name=row[2],
        project=row[3],
        status=row[4],
        stop_reason=row[5],
        cycle=row[6],
        best_score=row[7],
        cost_usd=row[8],
        tokens=row[9],
        seconds=row[10],
        spec_ref=row[11],
        loop_version=row[12],
        contract=row[13],
        task=row[14],
        packet=row[15],
        created_at=row[16],
        updated_at=row[17],
        ended_at=row[18],
        cancel_requested=bool(row[19]),
        lease_owner=row[20],
        lease_expires_at=row[21],
        fencing_token=row[22],
        last_seq=row[23],
        held_out_passed=row[24],
    )


def _approval(row: Sequence[Any]) -> Approval:
    return Approval(*row)


def _journal(row: Sequence[Any]) -> JournalEntry:
    return JournalEntry(*row)


def _split_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``(conninfo for psycopg, url safe to show, loopwright's own options)``."""
    if "://" not in url:  # a libpq key=value string: nothing of ours in it
        return url, "postgresql (conninfo)", {}
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = urlencode([(k, v) for k, v in query if k not in _OWN_PARAMS])
    conninfo = urlunsplit(parts._replace(query=rest))
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}" if ":" in user else netloc
    shown = urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))
    return conninfo, shown, own


def _int_option(own: Mapping[str, str], name: str, default: int) -> int:
    if name not in own:
        return default
    try:
        return int(own[name])
    except ValueError:
        raise ConfigError(f"{name} must be an integer, not {own[name]!r}", field="store") from None


class PostgresStore(Store):
    """A loopwright store in a PostgreSQL database (one schema of it)."""

    def __init__(
        self,
        url: str,
        *,
        pool_min: int | None = None,
        pool_max: int | None = None,
        schema: str | None = None,
    ) -> None:
        conninfo, self.url, own = _split_url(url)
        self.schema = schema if schema is not None else own.get("schema") or None
        pool_min = pool_min if pool_min is not None else _int_option(own, "pool_min", 1)
        pool_max = pool_max if pool_max is not None else _int_option(own, "pool_max", 10)
        if not 0 <= pool_min <= pool_max or pool_max < 1:
            raise ConfigError(
                f"need 0 <= pool_min <= pool_max and pool_max >= 1 (got {pool_min}, {pool_max})",
                field="store",
            )
        # Migrate on one direct connection first: a wrong URL fails at once with libpq's own
        # message, instead of after the pool's connection timeout.
        try:
            extra: dict[str, Any] = {}
            if "connect_timeout" not in conninfo_to_dict(conninfo):
                extra["connect_timeout"] = 10
            with psycopg.connect(conninfo, autocommit=True, **extra) as first:
                self._configure(first)
                self._migrate(first)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open store {self.url}: {type(exc).__name__}: {exc}") from exc
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

    def _migrate(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        latest = len(PG_MIGRATIONS)
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
            row = conn.execute(
                "SELECT value FROM loopwright_meta WHERE key='schema_version'"
            ).fetchone()
            version = int(row[0]) if row else 0
            if version > latest:
                raise StoreCorruptError(
                    f"{self.url}: schema {schema!r} has version {version}, newer than this "
                    f"loopwright understands ({latest}); upgrade loopwright"
                )
            for i in range(version, latest):
                for statement in PG_MIGRATIONS[i]:
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO loopwright_meta(key, value) VALUES('schema_version', %s) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (str(latest),),
            )

    @property
    def schema_version(self) -> int:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT value FROM loopwright_meta WHERE key='schema_version'"
            ).fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled connection; database and pool failures become ``StoreError`` here, once."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise StoreError(f"{self.url}: no database connection available ({exc})") from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self.url}: {type(exc).__name__}: {exc}") from exc

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        with self._conn() as conn, conn.transaction():
            yield conn

    @staticmethod
    def _lock_run(conn: psycopg.Connection[Any], run_id: str) -> None:
        # Orders this transaction's event inserts after any in-flight write to the run.
        conn.execute("SELECT 1 FROM runs WHERE run_id=%s FOR NO KEY UPDATE", (run_id,))

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
    ) -> tuple[RunRecord, bool]:
        now = time.time()
        with self._tx() as conn:
            # A concurrent creator of the same key makes this INSERT wait for its commit, then
            # do nothing; the SELECT (a fresh snapshot) then sees the winner's row.
            row = conn.execute(
                "INSERT INTO runs(run_id, task_key, loop_name, project, status, spec_ref, "
                "loop_version, contract, task, created_at, updated_at) "
                "VALUES(%s,%s,%s,%s,'pending',%s,%s,%s,%s,%s,%s) "
                f"ON CONFLICT DO NOTHING RETURNING {_RUN_COLS}",
                (
                    run_id,
                    task_key,
                    loop_name,
                    project,
                    spec_ref,
                    loop_version,
                    _json(contract),
                    _json(task),
                    now,
                    now,
                ),
            ).fetchone()
            if row is None:
                row = conn.execute(
                    f"SELECT {_RUN_COLS} FROM runs WHERE task_key=%s", (task_key,)
                ).fetchone()
                if row is None:
                    raise ConflictError(f"run id {run_id!r} is taken by another task key")
                return _run(row), False
            conn.execute(
                "INSERT INTO checkpoints(run_id, seq, cycle, state, record, fencing_token, "
                "created_at, base) VALUES(%s, 0, 0, %s, NULL, 0, %s, 0)",
                (run_id, _json(initial_state), now),
            )
            if initial_versions:
                with conn.cursor() as cur:
                    cur.executemany(
                        _UPSERT_VERSION, [version_row(run_id, v, _json) for v in initial_versions]
                    )
            conn.execute(
                _INSERT_EVENT,
                (run_id, 0, "run_created", now, _json({"task_key": task_key, "loop": loop_name})),
            )
        return _run(row), True

    def get_run(self, run_id: str) -> RunRecord:
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT {_RUN_COLS} FROM runs WHERE run_id=%s", (run_id,)
            ).fetchone()
            if row is None:
                row = conn.execute(
                    f"SELECT {_RUN_COLS} FROM runs WHERE task_key=%s", (run_id,)
                ).fetchone()
            if row is None and run_id:
                rows = conn.execute(
                    f"SELECT {_RUN_COLS} FROM runs WHERE run_id LIKE %s ESCAPE '\\' LIMIT 2",
                    (run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",),
                ).fetchall()
                if len(rows) > 1:
                    raise RunNotFoundError(
                        f"run id prefix {run_id!r} is ambiguous; give more of it"
                    )
                row = rows[0] if rows else None
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
        return _run(row)

    def list_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        where, args = [], []
        for col, val in (("status", status), ("project", project), ("loop_name", loop_name)):
            if val is not None:
                where.append(f"{col}=%s")
                args.append(val)
        query = f"SELECT {_RUN_COLS} FROM runs"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_at DESC, run_id"
        if limit is not None and limit >= 0:  # as in SQLite, a negative limit is no limit
            query += f" LIMIT {int(limit)}"
        with self._conn() as conn:
            return [_run(r) for r in conn.execute(query, args).fetchall()]

    # --- leases -------------------------------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> int:
        with self._tx() as conn:
            row = conn.execute(
                f"SELECT lease_owner, lease_expires_at, fencing_token, {_DB_NOW} FROM runs "
                "WHERE run_id=%s FOR NO KEY UPDATE",
                (run_id,),
            ).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
            holder, expires, token, now = row
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
            conn.execute(
                "UPDATE runs SET lease_owner=%s, lease_expires_at=%s, fencing_token=%s "
                "WHERE run_id=%s",
                (owner, now + ttl_s, token, run_id),
            )
        return int(token)

    def claim_runs(
        self, owner: str, ttl_s: float, *, limit: int = 1, now: float | None = None
    ) -> list[tuple[str, int]]:
        if limit <= 0:
            return []
        with self._tx() as conn:
            if now is None:  # the server's clock: hosts' clocks may disagree
                row = conn.execute(f"SELECT {_DB_NOW}").fetchone()
                assert row is not None
                now = float(row[0])
            args = {"now": now, "limit": int(limit), "owner": owner, "expires": now + ttl_s}
            # 1. Lock up to `limit` candidates, skipping rows another claimer (or a commit)
            #    holds: claimers never wait for each other.
            picked = [
                r[0]
                for r in conn.execute(
                    f"SELECT r.run_id FROM runs r WHERE {_RUNNABLE} "
                    "ORDER BY r.updated_at, r.run_id LIMIT %(limit)s FOR UPDATE SKIP LOCKED",
                    args,
                )
            ]
            if not picked:
                return []
            # 2. Re-check under the locks with a fresh snapshot (READ COMMITTED), then claim.
            rows = conn.execute(
                "UPDATE runs r SET lease_owner=%(owner)s, lease_expires_at=%(expires)s, "
                f"fencing_token=r.fencing_token + 1 WHERE r.run_id = ANY(%(ids)s) AND {_RUNNABLE} "
                "RETURNING r.run_id, r.fencing_token, r.updated_at",
                args | {"ids": picked},
            ).fetchall()
        rows.sort(key=lambda r: (r[2], r[0]))
        return [(r[0], int(r[1])) for r in rows]

    def renew_lease(self, run_id: str, token: int, ttl_s: float) -> None:
        with self._tx() as conn:
            cur = conn.execute(
                f"UPDATE runs SET lease_expires_at={_DB_NOW} + %s "
                "WHERE run_id=%s AND fencing_token=%s",
                (ttl_s, run_id, token),
            )
            if cur.rowcount != 1:
                raise StaleLeaseError(f"run {run_id}: lease lost (token {token} is stale)")

    def release_lease(self, run_id: str, token: int) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE runs SET lease_owner=NULL, lease_expires_at=NULL "
                "WHERE run_id=%s AND fencing_token=%s",
                (run_id, token),
            )

    # --- checkpoints and events ----------------------------------------------------------
    def _checkpoint_rows(self, run_id: str, *, latest: bool) -> list[CheckpointRow]:
        with self._conn() as conn:
            last = conn.execute(
                "SELECT seq, COALESCE(base, seq) FROM checkpoints WHERE run_id=%s "
                "ORDER BY seq DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            if last is None:
                return []
            rows = conn.execute(
                "SELECT seq, cycle, state, CASE WHEN %s OR seq=%s THEN record END, created_at, "
                "COALESCE(base, seq) FROM checkpoints WHERE run_id=%s AND seq>=%s ORDER BY seq",
                (not latest, last[0], run_id, last[1] if latest else -1),
            ).fetchall()
        return [CheckpointRow(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]

    def _version_rows(
        self,
        run_id: str,
        *,
        ref: str | None = None,
        keys: Collection[tuple[str, int]] | None = None,
    ) -> list[VersionRow]:
        sql = "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=%s"
        with self._conn() as conn:
            if keys is not None:
                ks = list(keys)
                rows = conn.execute(
                    sql + " AND (ref, n) IN (SELECT * FROM unnest(%s::text[], %s::int[]))",
                    (run_id, [k[0] for k in ks], [k[1] for k in ks]),
                ).fetchall()
            elif ref is not None:
                rows = conn.execute(sql + " AND ref=%s ORDER BY n", (run_id, ref)).fetchall()
            else:
                rows = conn.execute(sql + " ORDER BY ref, n", (run_id,)).fetchall()
        return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def is_rejected(self, run_id: str, digest: str) -> bool:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT 1 FROM rejected WHERE run_id=%s AND digest=%s", (run_id, digest)
            ).fetchone()
        return row is not None

    def rejected_digests(self, run_id: str) -> list[str]:
        with self._conn() as conn:
            rows = conn.execute("SELECT digest FROM rejected WHERE run_id=%s", (run_id,)).fetchall()
        return [r[0] for r in rows]

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

    def commit_many(self, items: Sequence[CommitRequest]) -> list[bool | StoreError]:
        """Several runs' commits in ONE transaction (one sync to disk): each is fenced on its
        own — a stale one is reported and left out, the others commit.

        Fast path: one fencing read that locks the batch's run rows (``FOR NO KEY UPDATE``, in
        run_id order so two batches never deadlock), then one pipelined ``executemany`` per
        table: a handful of round trips for the whole batch instead of several per run. A bad
        column set, a run twice in the batch, or a value the database refuses (a duplicate
        checkpoint or request, a number out of range) takes the slow path instead: one
        savepoint per commit, so each failure is its own run's. A failure of the database
        itself (a lost connection, a timeout) fails the whole batch, as one transaction."""
        if not items:
            return []
        now = time.time()
        try:  # a bad column set goes commit by commit, where it fails alone
            cols = [self._run_cols(it.run, it.seq) for it in items]
        except StoreError:
            cols = None
        if cols is not None and len({it.run_id for it in items}) == len(items):
            try:
                with self._tx() as conn:
                    return self._commit_batch(conn, items, cols, now)
            except BatchRefused:
                pass  # nothing was written: commit by commit, below
        out: list[bool | StoreError] = []
        with self._tx() as conn:
            for it in items:
                try:
                    with conn.transaction():  # a savepoint
                        ok = self._commit_in(conn, it, self._run_cols(it.run, it.seq), now)
                except Exception as exc:  # rolled back to its savepoint; the others go on
                    out.append(
                        exc
                        if isinstance(exc, StoreError)
                        else StoreError(f"run {it.run_id}: commit failed: {exc}")
                    )
                    continue
                out.append(ok)
        return out

    def _commit_batch(
        self,
        conn: psycopg.Connection[Any],
        items: Sequence[CommitRequest],
        cols: Sequence[dict[str, Any]],
        now: float,
    ) -> list[bool | StoreError]:
        owner = {
            r[0]: (r[1], r[2])
            for r in conn.execute(
                "SELECT run_id, fencing_token, cancel_requested FROM runs "
                "WHERE run_id = ANY(%s) ORDER BY run_id FOR NO KEY UPDATE",
                ([it.run_id for it in items],),
            ).fetchall()
        }
        rows = batch_rows(items, cols, owner, now, js=_json)
        try:
            with conn.cursor() as cur:
                for names, updates in rows.updates.items():
                    cur.executemany(
                        f"UPDATE runs SET {_assign(names)}, updated_at=%s "
                        "WHERE run_id=%s AND fencing_token=%s",
                        updates,
                    )
                if rows.checkpoints:
                    cur.executemany(_INSERT_CHECKPOINT, rows.checkpoints)
                if rows.events:
                    cur.executemany(_INSERT_EVENT, rows.events)
                if rows.approvals:
                    cur.executemany(_INSERT_APPROVAL, rows.approvals)
                if rows.versions:
                    cur.executemany(_UPSERT_VERSION, rows.versions)
                if rows.rejected:
                    cur.executemany(_INSERT_REJECTED, rows.rejected)
        except (psycopg.IntegrityError, psycopg.DataError, psycopg.ProgrammingError) as exc:
            # a value refused (a duplicate, a number out of range): commit by commit; anything
            # else (a lost connection, a timeout) fails every commit, as one transaction would
            raise BatchRefused(str(exc)) from exc
        return rows.results

    @staticmethod
    def _run_cols(run: Mapping[str, Any], seq: int) -> dict[str, Any]:
        cols = run_cols(run, seq)
        if cols.get("packet") is not None:
            cols["packet"] = _json(cols["packet"])
        for name in _BOOLEAN_COLS & cols.keys():
            if cols[name] is not None:
                cols[name] = bool(cols[name])
        if cols.get("lease_expires_at") is not None:
            # the caller's clock says when; what is kept is how long, from the server's now
            cols["lease_expires_at"] = float(cols["lease_expires_at"]) - time.time()
        return cols

    def _commit_in(self, conn: Any, it: CommitRequest, cols: dict[str, Any], now: float) -> bool:
        run_id, token = it.run_id, it.token
        assignments = _assign(list(cols))
        flag = conn.execute(
            f"UPDATE runs SET {assignments}, updated_at=%s WHERE run_id=%s "
            "AND fencing_token=%s RETURNING cancel_requested",
            (*cols.values(), now, run_id, token),
        ).fetchone()
        if flag is None:
            raise StaleLeaseError(
                f"run {run_id}: checkpoint refused, fencing token {token} is stale"
            )
        try:
            conn.execute(
                _INSERT_CHECKPOINT,
                checkpoint_row(it, now, _json),
            )
        except psycopg.errors.UniqueViolation:
            raise ConflictError(f"run {run_id}: checkpoint {it.seq} already written") from None
        if it.events:
            with conn.cursor() as cur:
                cur.executemany(
                    _INSERT_EVENT, [event_row(run_id, e, now, _json) for e in it.events]
                )
        for a in it.approvals:
            try:
                conn.execute(_INSERT_APPROVAL, approval_row(run_id, a, now, _json))
            except psycopg.errors.UniqueViolation:
                raise ConflictError(
                    f"run {run_id}: approval request {a.approval_id!r} already exists"
                ) from None
        if it.versions or it.rejected:
            with conn.cursor() as cur:
                if it.versions:
                    cur.executemany(
                        _UPSERT_VERSION, [version_row(run_id, v, _json) for v in it.versions]
                    )
                if it.rejected:
                    cur.executemany(_INSERT_REJECTED, [(run_id, d, c) for d, c in it.rejected])
        return bool(flag[0])

    def append_events(self, run_id: str, events: Sequence[NewEvent]) -> None:
        if not events:
            return
        now = time.time()
        with self._tx() as conn:
            self._lock_run(conn, run_id)
            with conn.cursor() as cur:
                cur.executemany(
                    _INSERT_EVENT,
                    [event_row(run_id, e, now, _json) for e in events],
                )

    def events(self, run_id: str, *, after_id: int = 0) -> list[Event]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, run_id, cycle, kind, ts, data FROM events "
                "WHERE run_id=%s AND id>%s ORDER BY id",
                (run_id, after_id),
            ).fetchall()
        return [Event(*r) for r in rows]

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
    ) -> JournalEntry:
        now = time.time()
        payload = _json(dict(data))
        with self._tx() as conn:
            # The fencing check takes the run's row lock: every journal writer of this run
            # queues here, so the read-check-write below cannot interleave with another.
            fenced = conn.execute(
                "UPDATE runs SET fencing_token=fencing_token WHERE run_id=%s "
                "AND fencing_token=%s RETURNING fencing_token",
                (run_id, token),
            ).fetchone()
            if fenced is None:
                if conn.execute("SELECT 1 FROM runs WHERE run_id=%s", (run_id,)).fetchone() is None:
                    raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
                raise StaleLeaseError(
                    f"run {run_id}: journal write {key!r} refused, fencing token {token} is stale"
                )
            existing = conn.execute(
                "SELECT status, attempts FROM journal WHERE run_id=%s AND key=%s", (run_id, key)
            ).fetchone()
            check_journal_expect(
                run_id, key, None if existing is None else existing[0], expect_status
            )
            if existing is None:
                row = conn.execute(
                    "INSERT INTO journal(run_id, key, kind, cycle, status, data, attempts, "
                    "created_at, updated_at, fencing_token) VALUES(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
                    f"RETURNING {_JOURNAL_COLS}",
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
                    "UPDATE journal SET kind=%s, cycle=%s, status=%s, data=%s, attempts=%s, "
                    "updated_at=%s, fencing_token=%s WHERE run_id=%s AND key=%s "
                    f"RETURNING {_JOURNAL_COLS}",
                    (
                        kind,
                        cycle,
                        status,
                        payload,
                        existing[1] if attempts is None else attempts,
                        now,
                        token,
                        run_id,
                        key,
                    ),
                ).fetchone()
            if events:
                with conn.cursor() as cur:
                    cur.executemany(
                        _INSERT_EVENT,
                        [event_row(run_id, e, now, _json) for e in events],
                    )
        assert row is not None
        return _journal(row)

    def journal(
        self, run_id: str, *, kind: str | None = None, key: str | None = None
    ) -> list[JournalEntry]:
        where, args = ["run_id=%s"], [run_id]
        if kind is not None:
            where.append("kind=%s")
            args.append(kind)
        if key is not None:
            where.append("key=%s")
            args.append(key)
        query = f"SELECT {_JOURNAL_COLS} FROM journal WHERE {' AND '.join(where)}"
        with self._conn() as conn:
            rows = conn.execute(query + " ORDER BY created_at, key", args).fetchall()
        return [_journal(r) for r in rows]

    # --- approvals and cancellation ----------------------------------------------------
    def approvals(self, *, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        where, args = [], []
        if run_id is not None:
            where.append("run_id=%s")
            args.append(run_id)
        if status is not None:
            where.append("status=%s")
            args.append(status)
        query = f"SELECT {_APPROVAL_COLS} FROM approvals"
        if where:
            query += " WHERE " + " AND ".join(where)
        with self._conn() as conn:
            rows = conn.execute(query + " ORDER BY requested_at, approval_id", args).fetchall()
        return [_approval(r) for r in rows]

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
        if status not in ("approved", "answered", "denied", "expired", "cancelled"):
            raise ApprovalError(f"unknown decision {status!r}")
        with self._tx() as conn:
            # The status guard makes the decision atomic: of two deciders, the second's UPDATE
            # waits for the first's commit, then matches nothing.
            row = conn.execute(
                "UPDATE approvals SET status=%s, decided_by=%s, decided_at=%s, note=%s, answer=%s "
                f"WHERE approval_id=%s AND status='pending' RETURNING {_APPROVAL_COLS}",
                (status, by, now, note, None if answer is None else _json(answer), approval_id),
            ).fetchone()
            if row is None:
                found = conn.execute(
                    "SELECT status, decided_by FROM approvals WHERE approval_id=%s",
                    (approval_id,),
                ).fetchone()
                if found is None:
                    raise ApprovalError(f"no approval request {approval_id!r}")
                raise ApprovalError(
                    f"approval {approval_id} was already {found[0]}"
                    + (f" by {found[1]}" if found[1] else "")
                )
            decided = _approval(row)
            self._lock_run(conn, decided.run_id)
            conn.execute(
                _INSERT_EVENT,
                (
                    decided.run_id,
                    decided.cycle,
                    "approval_decided",
                    now,
                    _json(
                        {"approval_id": approval_id, "status": status, "by": by, "note": note}
                        | ({} if answer is None else {"answer": answer})
                    ),
                ),
            )
        return decided

    def request_cancel(self, run_id: str) -> RunRecord:
        with self._tx() as conn:
            conn.execute("UPDATE runs SET cancel_requested=TRUE WHERE run_id=%s", (run_id,))
        return self.get_run(run_id)

    # --- feedback memory ---------------------------------------------------------------
    def memory_add(self, item: Mapping[str, Any]) -> None:
        values = list(_memory_values(item))
        for i in (6, 7, 12):  # rule, source, history: json columns, SQL NULL for no rule
            values[i] = None if values[i] is None else _json(loads(values[i]))
        with self._tx() as conn:
            try:
                conn.execute(
                    f"INSERT INTO memory({_MEMORY_COLS}) "
                    "VALUES(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    values,
                )
            except psycopg.errors.UniqueViolation:
                raise ConflictError(f"memory item {item['memory_id']!r} already exists") from None

    def memory_query(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
        limit: int | None = None,
        memory_id: str | None = None,
    ) -> list[dict[str, Any]]:
        where, args = _memory_where(scopes, status, memory_id, "%s")
        query = f"SELECT {_MEMORY_COLS} FROM memory"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_at DESC, memory_id DESC"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        with self._conn() as conn:
            rows = conn.execute(query, args).fetchall()
        return [_pg_memory_dict(r) for r in rows]

    def memory_set_status(
        self,
        memory_id: str,
        status: str,
        *,
        by: str,
        now: float,
        expect: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        _memory_check_status(status)
        with self._tx() as conn:
            # FOR UPDATE: two people deciding the same item at once are serialised here.
            row = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM memory WHERE memory_id=%s FOR UPDATE", (memory_id,)
            ).fetchone()
            if row is None:
                raise MemoryNotFoundError(f"no memory item {memory_id!r} in {self.url}")
            item = _pg_memory_dict(row)
            if item["status"] == status:
                return item
            _memory_expect(item, expect)
            history = [*item["history"], {"status": status, "by": by, "at": now}]
            conn.execute(
                "UPDATE memory SET status=%s, updated_at=%s, history=%s WHERE memory_id=%s",
                (status, now, _json(history), memory_id),
            )
            item.update(status=status, updated_at=now, history=history)
        return item

    def close(self) -> None:
        self._pool.close()


def _pg_memory_dict(row: Sequence[Any]) -> dict[str, Any]:
    # json columns arrive parsed; the rest is as in SQLite.
    keys = _MEMORY_COLS.replace('"', "").split(", ")
    return dict(zip(keys, row, strict=True))
