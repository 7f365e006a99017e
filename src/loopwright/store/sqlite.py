"""The embedded SQLite store (the default): WAL, ``synchronous=FULL``, versioned schema.

Durability modes:
    ``full`` (default): every checkpoint survives power loss (``synchronous=FULL``).
    ``process``: survives a crash of the process, not of the machine (``synchronous=NORMAL``);
        faster on slow disks. Choose it with ``sqlite:///path.db?durability=process``.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
from ._schema import SQLITE_MIGRATIONS

__all__ = ["SQLiteStore"]

_RUN_COLS = (
    "run_id, task_key, loop_name, project, status, stop_reason, cycle, best_score, cost_usd, "
    "tokens, seconds, spec_ref, loop_version, contract, task, packet, created_at, updated_at, "
    "ended_at, cancel_requested, lease_owner, lease_expires_at, fencing_token, last_seq, "
    "held_out_passed"
)
_APPROVAL_COLS = APPROVAL_COLS
_JOURNAL_COLS = "run_id, key, kind, cycle, status, data, attempts, created_at, updated_at"


_dumps = dumps


_INSERT_CHECKPOINT = f"INSERT INTO checkpoints({INSERT_CHECKPOINT_COLS}) VALUES(?,?,?,?,?,?,?,?)"
# A version is written once; then only its status changes (and, after a rollback
# reused its number, its value: the rolled-back timeline's versions are not kept).
_UPSERT_VERSION = (
    f"INSERT INTO versions({INSERT_VERSION_COLS}) VALUES(?,?,?,?,?,?) "
    "ON CONFLICT(run_id, ref, n) DO UPDATE SET cycle=excluded.cycle, "
    "status=excluded.status, value=excluded.value"
)
_INSERT_REJECTED = (
    f"INSERT INTO rejected({INSERT_REJECTED_COLS}) VALUES(?,?,?) ON CONFLICT DO NOTHING"
)
_INSERT_EVENT = f"INSERT INTO events({INSERT_EVENT_COLS}) VALUES(?,?,?,?,?)"
_INSERT_APPROVAL = f"INSERT INTO approvals({APPROVAL_COLS}) VALUES({','.join('?' * 17)})"


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
        contract=loads(row[13]),
        task=loads(row[14]),
        packet=loads(row[15]) if row[15] else None,
        created_at=row[16],
        updated_at=row[17],
        ended_at=row[18],
        cancel_requested=bool(row[19]),
        lease_owner=row[20],
        lease_expires_at=row[21],
        fencing_token=row[22],
        last_seq=row[23],
        held_out_passed=None if row[24] is None else bool(row[24]),
    )


def _approval(row: Sequence[Any]) -> Approval:
    return Approval(
        approval_id=row[0],
        run_id=row[1],
        cycle=row[2],
        kind=row[3],
        rule=row[4],
        what=row[5],
        why=row[6],
        evidence=loads(row[7]),
        diff=row[8],
        action_hash=row[9],
        status=row[10],
        requested_at=row[11],
        expires_at=row[12],
        decided_by=row[13],
        decided_at=row[14],
        note=row[15],
        answer=None if row[16] is None else loads(row[16]),
    )


def _journal(row: Sequence[Any]) -> JournalEntry:
    return JournalEntry(
        run_id=row[0],
        key=row[1],
        kind=row[2],
        cycle=row[3],
        status=row[4],
        data=loads(row[5]),
        attempts=row[6],
        created_at=row[7],
        updated_at=row[8],
    )


def owner_is_dead(owner: str) -> bool:
    """Whether a lease owner named ``host:pid:…`` is a process on this host that no longer
    exists. Lets a restarted process take over at once after a crash instead of waiting for
    the lease to expire; owners on other hosts still wait for expiry."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie (killed, not yet reaped by its parent) still answers kill(0): read its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


class SQLiteStore(Store):
    """A loopwright store in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str], *, durability: str = "full") -> None:
        if durability not in ("full", "process"):
            raise ConfigError("must be 'full' or 'process'", field="store.durability")
        self.path = Path(path)
        self.durability = durability
        self.url = f"sqlite:///{self.path}"
        self._lock = threading.RLock()
        if self.path.exists() and self.path.is_dir():
            raise ConfigError(f"{self.path} is a directory, not a store file", field="store")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the store's folder {self.path.parent}: {exc}"
            ) from None
        try:
            self._db = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from None
        try:
            self._refuse_foreign()
            self._configure()
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreCorruptError(
                f"{self.path} is not a usable loopwright store ({exc})"
            ) from None
        except StoreError:
            self._db.close()
            raise

    # --- setup --------------------------------------------------------------------------
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
        if str(mode).lower() != "wal":
            raise StoreError(f"cannot enable WAL on {self.path} (got {mode})")
        sync = "FULL" if self.durability == "full" else "NORMAL"
        db.execute(f"PRAGMA synchronous = {sync}")
        db.execute("PRAGMA foreign_keys = ON")

    def _migrate(self) -> None:
        db = self._db
        with self._tx():
            db.execute(
                "CREATE TABLE IF NOT EXISTS loopwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            row = db.execute(
                "SELECT value FROM loopwright_meta WHERE key='schema_version'"
            ).fetchone()
            version = int(row[0]) if row else 0
            latest = len(SQLITE_MIGRATIONS)
            if version > latest:
                raise StoreCorruptError(
                    f"{self.path} has schema version {version}, newer than this loopwright "
                    f"understands ({latest}); upgrade loopwright"
                )
            for i in range(version, latest):
                for statement in SQLITE_MIGRATIONS[i]:
                    db.execute(statement)
            db.execute(
                "INSERT INTO loopwright_meta(key, value) VALUES('schema_version', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (str(latest),),
            )

    @property
    def schema_version(self) -> int:
        row = self._db.execute(
            "SELECT value FROM loopwright_meta WHERE key='schema_version'"
        ).fetchone()
        return int(row[0])

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE: take the write lock up front so two writers queue instead of deadlocking.
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            else:
                db.execute("COMMIT")

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
        with self._tx() as db:
            row = db.execute(
                f"SELECT {_RUN_COLS} FROM runs WHERE task_key=?", (task_key,)
            ).fetchone()
            if row is not None:
                return _run(row), False
            db.execute(
                "INSERT INTO runs(run_id, task_key, loop_name, project, status, spec_ref, "
                "loop_version, contract, task, created_at, updated_at) "
                "VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    task_key,
                    loop_name,
                    project,
                    "pending",
                    spec_ref,
                    loop_version,
                    _dumps(contract),
                    _dumps(task),
                    now,
                    now,
                ),
            )
            db.execute(
                "INSERT INTO checkpoints(run_id, seq, cycle, state, record, fencing_token, "
                "created_at, base) VALUES(?,?,?,?,?,?,?,?)",
                (run_id, 0, 0, _dumps(initial_state), None, 0, now, 0),
            )
            if initial_versions:
                db.executemany(
                    _UPSERT_VERSION, [version_row(run_id, v, _dumps) for v in initial_versions]
                )
            db.execute(
                "INSERT INTO events(run_id, cycle, kind, ts, data) VALUES(?,?,?,?,?)",
                (run_id, 0, "run_created", now, _dumps({"task_key": task_key, "loop": loop_name})),
            )
            row = db.execute(f"SELECT {_RUN_COLS} FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return _run(row), True

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            db = self._db
            row = db.execute(f"SELECT {_RUN_COLS} FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                row = db.execute(
                    f"SELECT {_RUN_COLS} FROM runs WHERE task_key=?", (run_id,)
                ).fetchone()
            if row is None and run_id:
                rows = db.execute(
                    f"SELECT {_RUN_COLS} FROM runs WHERE run_id LIKE ? ESCAPE '\\' LIMIT 2",
                    (run_id.replace("%", "\\%").replace("_", "\\_") + "%",),
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
                where.append(f"{col}=?")
                args.append(val)
        sql = f"SELECT {_RUN_COLS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, run_id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            return [_run(r) for r in self._db.execute(sql, args).fetchall()]

    # --- leases -------------------------------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> int:
        now = time.time()
        with self._tx() as db:
            row = db.execute(
                "SELECT lease_owner, lease_expires_at, fencing_token FROM runs WHERE run_id=?",
                (run_id,),
            ).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
            holder, expires, token = row
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
            db.execute(
                "UPDATE runs SET lease_owner=?, lease_expires_at=?, fencing_token=? WHERE run_id=?",
                (owner, now + ttl_s, token, run_id),
            )
        return int(token)

    def claim_runs(
        self, owner: str, ttl_s: float, *, limit: int = 1, now: float | None = None
    ) -> list[tuple[str, int]]:
        if limit <= 0:
            return []
        now = time.time() if now is None else now
        # One IMMEDIATE transaction: the write lock is held from the choice to the claim, so
        # concurrent claimers (other connections, other processes) queue and never overlap.
        # A lease still live but held by a process of this host that has died is free too
        # (as ``acquire_lease`` treats it): its runs need not wait out the TTL.
        host = f"{socket.gethostname()}:"
        with self._tx() as db:
            candidates = db.execute(
                "SELECT run_id, fencing_token, lease_owner, lease_expires_at FROM runs r WHERE "
                "(lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at < ? "
                "OR substr(lease_owner, 1, ?) = ?) AND "
                "(status IN ('pending', 'running') OR (status = 'awaiting_approval' AND NOT EXISTS "
                "(SELECT 1 FROM approvals a WHERE a.run_id = r.run_id AND a.status = 'pending'))) "
                "ORDER BY updated_at, run_id",
                (now, len(host), host),
            ).fetchall()
            rows = [
                (run_id, token)
                for run_id, token, lease_owner, expires in candidates
                if lease_owner is None
                or expires is None
                or expires < now
                or owner_is_dead(str(lease_owner))
            ][: int(limit)]
            db.executemany(
                "UPDATE runs SET lease_owner=?, lease_expires_at=?, fencing_token=? WHERE run_id=?",
                [(owner, now + ttl_s, token + 1, run_id) for run_id, token in rows],
            )
        return [(run_id, int(token) + 1) for run_id, token in rows]

    def renew_lease(self, run_id: str, token: int, ttl_s: float) -> None:
        with self._tx() as db:
            cur = db.execute(
                "UPDATE runs SET lease_expires_at=? WHERE run_id=? AND fencing_token=?",
                (time.time() + ttl_s, run_id, token),
            )
            if cur.rowcount != 1:
                raise StaleLeaseError(f"run {run_id}: lease lost (token {token} is stale)")

    def release_lease(self, run_id: str, token: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET lease_owner=NULL, lease_expires_at=NULL "
                "WHERE run_id=? AND fencing_token=?",
                (run_id, token),
            )

    # --- checkpoints and events ----------------------------------------------------------
    def _checkpoint_rows(self, run_id: str, *, latest: bool) -> list[CheckpointRow]:
        with self._lock:
            db = self._db
            last = db.execute(
                "SELECT seq, COALESCE(base, seq) FROM checkpoints WHERE run_id=? "
                "ORDER BY seq DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            if last is None:
                return []
            rows = db.execute(
                "SELECT seq, cycle, state, CASE WHEN ? OR seq=? THEN record END, created_at, "
                "COALESCE(base, seq) FROM checkpoints WHERE run_id=? AND seq>=? ORDER BY seq",
                (not latest, last[0], run_id, last[1] if latest else -1),
            ).fetchall()
        return [
            CheckpointRow(r[0], r[1], loads(r[2]), loads(r[3]) if r[3] else None, r[4], r[5])
            for r in rows
        ]

    def _version_rows(
        self,
        run_id: str,
        *,
        ref: str | None = None,
        keys: Collection[tuple[str, int]] | None = None,
    ) -> list[VersionRow]:
        sql = "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=?"
        with self._lock:
            rows: list[Any]
            if keys is not None:
                rows = []
                for k in keys:  # each a primary-key lookup: as many as the state holds
                    rows.extend(self._db.execute(sql + " AND ref=? AND n=?", (run_id, *k)))
            elif ref is not None:
                rows = self._db.execute(sql + " AND ref=? ORDER BY n", (run_id, ref)).fetchall()
            else:
                rows = self._db.execute(sql + " ORDER BY ref, n", (run_id,)).fetchall()
        return [(r[0], r[1], r[2], r[3], loads(r[4])) for r in rows]

    def is_rejected(self, run_id: str, digest: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM rejected WHERE run_id=? AND digest=?", (run_id, digest)
            ).fetchone()
        return row is not None

    def rejected_digests(self, run_id: str) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT digest FROM rejected WHERE run_id=?", (run_id,)
            ).fetchall()
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
        with self._tx() as db:
            return self._commit_in(db, req, cols, now)

    def commit_many(self, items: Sequence[CommitRequest]) -> list[bool | StoreError]:
        """Several runs' commits in ONE transaction (one sync to disk): each is fenced on its
        own — a stale one is reported and left out, the others commit.

        Fast path: one fencing read for the whole batch (the write lock, held from BEGIN
        IMMEDIATE, keeps every token as read until COMMIT), then one ``executemany`` per table.
        A bad column set, a run twice in the batch, or a value the database refuses (a
        duplicate checkpoint or request, an integer too large) takes the slow path instead: one
        savepoint per commit, so each failure is its own run's. A failure of the database
        itself (locked, disk full) fails the whole batch, as one transaction."""
        if not items:
            return []
        now = time.time()
        try:  # a bad column set goes commit by commit, where it fails alone
            cols = [self._run_cols(it.run, it.seq) for it in items]
        except StoreError:
            cols = None
        if cols is not None and len({it.run_id for it in items}) == len(items):
            try:
                with self._tx() as db:
                    return self._commit_batch(db, items, cols, now)
            except BatchRefused:
                pass  # nothing was written: commit by commit, below
        out: list[bool | StoreError] = []
        with self._tx() as db:
            for it in items:
                db.execute("SAVEPOINT lw_commit")
                try:
                    ok = self._commit_in(db, it, self._run_cols(it.run, it.seq), now)
                except Exception as exc:  # this run's commit only: the others go on
                    db.execute("ROLLBACK TO lw_commit")
                    db.execute("RELEASE lw_commit")
                    out.append(
                        exc
                        if isinstance(exc, StoreError)
                        else StoreError(f"run {it.run_id}: commit failed: {exc}")
                    )
                    continue
                db.execute("RELEASE lw_commit")
                out.append(ok)
        return out

    def _commit_batch(
        self,
        db: sqlite3.Connection,
        items: Sequence[CommitRequest],
        cols: Sequence[dict[str, Any]],
        now: float,
    ) -> list[bool | StoreError]:
        ids = [it.run_id for it in items]
        owner: dict[str, tuple[int, int]] = {}
        for i in range(0, len(ids), 500):  # under any build's limit on bound parameters
            chunk = ids[i : i + 500]
            found = db.execute(
                "SELECT run_id, fencing_token, cancel_requested FROM runs "
                f"WHERE run_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            owner.update((r[0], (r[1], r[2])) for r in found)
        rows = batch_rows(items, cols, owner, now, js=_dumps)
        try:
            for names, updates in rows.updates.items():
                assignments = ", ".join(f"{k}=?" for k in names)
                db.executemany(
                    f"UPDATE runs SET {assignments}, updated_at=? "
                    "WHERE run_id=? AND fencing_token=?",
                    updates,
                )
            db.executemany(_INSERT_CHECKPOINT, rows.checkpoints)
            if rows.events:
                db.executemany(_INSERT_EVENT, rows.events)
            if rows.approvals:
                db.executemany(_INSERT_APPROVAL, rows.approvals)
            if rows.versions:
                db.executemany(_UPSERT_VERSION, rows.versions)
            if rows.rejected:
                db.executemany(_INSERT_REJECTED, rows.rejected)
        except sqlite3.OperationalError:
            raise  # the database, not a value (locked, disk full...): every commit fails
        except (sqlite3.Error, OverflowError, ValueError, TypeError) as exc:
            raise BatchRefused(str(exc)) from exc
        return rows.results

    @staticmethod
    def _run_cols(run: Mapping[str, Any], seq: int) -> dict[str, Any]:
        cols = run_cols(run, seq)
        if "packet" in cols and cols["packet"] is not None:
            cols["packet"] = _dumps(cols["packet"])
        return cols

    def _commit_in(self, db: Any, it: CommitRequest, cols: dict[str, Any], now: float) -> bool:
        run_id, token = it.run_id, it.token
        assignments = ", ".join(f"{k}=?" for k in cols)
        flag = db.execute(
            f"UPDATE runs SET {assignments}, updated_at=? WHERE run_id=? AND fencing_token=? "
            "RETURNING cancel_requested",
            (*cols.values(), now, run_id, token),
        ).fetchone()
        if flag is None:
            raise StaleLeaseError(
                f"run {run_id}: checkpoint refused, fencing token {token} is stale"
            )
        try:
            db.execute(
                _INSERT_CHECKPOINT,
                checkpoint_row(it, now, _dumps),
            )
        except sqlite3.IntegrityError:
            raise ConflictError(f"run {run_id}: checkpoint {it.seq} already written") from None
        if it.events:
            db.executemany(_INSERT_EVENT, [event_row(run_id, e, now, _dumps) for e in it.events])
        for a in it.approvals:
            try:
                db.execute(_INSERT_APPROVAL, approval_row(run_id, a, now, _dumps))
            except sqlite3.IntegrityError:
                raise ConflictError(
                    f"run {run_id}: approval request {a.approval_id!r} already exists"
                ) from None
        if it.versions:
            db.executemany(_UPSERT_VERSION, [version_row(run_id, v, _dumps) for v in it.versions])
        if it.rejected:
            db.executemany(_INSERT_REJECTED, [(run_id, d, c) for d, c in it.rejected])
        return bool(flag[0])

    def append_events(self, run_id: str, events: Sequence[NewEvent]) -> None:
        now = time.time()
        with self._tx() as db:
            db.executemany(
                "INSERT INTO events(run_id, cycle, kind, ts, data) VALUES(?,?,?,?,?)",
                [(run_id, e.cycle, e.kind, now, _dumps(dict(e.data))) for e in events],
            )

    def events(self, run_id: str, *, after_id: int = 0) -> list[Event]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE run_id=? AND id>? "
                "ORDER BY id",
                (run_id, after_id),
            ).fetchall()
        return [Event(r[0], r[1], r[2], r[3], r[4], loads(r[5])) for r in rows]

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
        payload = _dumps(dict(data))
        with self._tx() as db:
            # As in commit: the fencing check is a guarded write inside the transaction, so no
            # other executor can take the lease between the check and the writes below (the
            # write lock is held; on a server database the row lock is).
            fenced = db.execute(
                "UPDATE runs SET fencing_token=fencing_token WHERE run_id=? AND fencing_token=? "
                "RETURNING fencing_token",
                (run_id, token),
            ).fetchone()
            if fenced is None:
                if db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is None:
                    raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
                raise StaleLeaseError(
                    f"run {run_id}: journal write {key!r} refused, fencing token {token} is stale"
                )
            existing = db.execute(
                "SELECT status, attempts FROM journal WHERE run_id=? AND key=?", (run_id, key)
            ).fetchone()
            check_journal_expect(
                run_id, key, None if existing is None else existing[0], expect_status
            )
            if existing is None:
                db.execute(
                    "INSERT INTO journal(run_id, key, kind, cycle, status, data, attempts, "
                    "created_at, updated_at, fencing_token) VALUES(?,?,?,?,?,?,?,?,?,?)",
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
                )
            else:
                db.execute(
                    "UPDATE journal SET kind=?, cycle=?, status=?, data=?, attempts=?, "
                    "updated_at=?, fencing_token=? WHERE run_id=? AND key=?",
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
                )
            if events:
                db.executemany(
                    "INSERT INTO events(run_id, cycle, kind, ts, data) VALUES(?,?,?,?,?)",
                    [(run_id, e.cycle, e.kind, now, _dumps(dict(e.data))) for e in events],
                )
            row = db.execute(
                f"SELECT {_JOURNAL_COLS} FROM journal WHERE run_id=? AND key=?", (run_id, key)
            ).fetchone()
        return _journal(row)

    def journal(
        self, run_id: str, *, kind: str | None = None, key: str | None = None
    ) -> list[JournalEntry]:
        where, args = ["run_id=?"], [run_id]
        if kind is not None:
            where.append("kind=?")
            args.append(kind)
        if key is not None:
            where.append("key=?")
            args.append(key)
        sql = f"SELECT {_JOURNAL_COLS} FROM journal WHERE {' AND '.join(where)}"
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY created_at, key", args).fetchall()
        return [_journal(r) for r in rows]

    # --- approvals and cancellation ----------------------------------------------------
    def approvals(self, *, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        where, args = [], []
        if run_id is not None:
            where.append("run_id=?")
            args.append(run_id)
        if status is not None:
            where.append("status=?")
            args.append(status)
        sql = f"SELECT {_APPROVAL_COLS} FROM approvals"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY requested_at, approval_id", args).fetchall()
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
        with self._tx() as db:
            row = db.execute(
                f"SELECT {_APPROVAL_COLS} FROM approvals WHERE approval_id=?", (approval_id,)
            ).fetchone()
            if row is None:
                raise ApprovalError(f"no approval request {approval_id!r}")
            current = _approval(row)
            if current.status != "pending":
                raise ApprovalError(
                    f"approval {approval_id} was already {current.status}"
                    + (f" by {current.decided_by}" if current.decided_by else "")
                )
            # The status guard in WHERE makes the decision atomic even across processes.
            cur = db.execute(
                "UPDATE approvals SET status=?, decided_by=?, decided_at=?, note=?, answer=? "
                "WHERE approval_id=? AND status='pending'",
                (status, by, now, note, None if answer is None else _dumps(answer), approval_id),
            )
            if cur.rowcount != 1:
                raise ApprovalError(f"approval {approval_id} was decided concurrently")
            db.execute(
                "INSERT INTO events(run_id, cycle, kind, ts, data) VALUES(?,?,?,?,?)",
                (
                    current.run_id,
                    current.cycle,
                    "approval_decided",
                    now,
                    _dumps(
                        {"approval_id": approval_id, "status": status, "by": by, "note": note}
                        | ({} if answer is None else {"answer": answer})
                    ),
                ),
            )
            row = db.execute(
                f"SELECT {_APPROVAL_COLS} FROM approvals WHERE approval_id=?", (approval_id,)
            ).fetchone()
        return _approval(row)

    def request_cancel(self, run_id: str) -> RunRecord:
        with self._tx() as db:
            db.execute("UPDATE runs SET cancel_requested=1 WHERE run_id=?", (run_id,))
        return self.get_run(run_id)

    # --- feedback memory ---------------------------------------------------------------
    def memory_add(self, item: Mapping[str, Any]) -> None:
        values = _memory_values(item)
        try:
            with self._tx() as db:
                db.execute(
                    f"INSERT INTO memory({_MEMORY_COLS}) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    values,
                )
        except sqlite3.IntegrityError:
            raise ConflictError(f"memory item {item['memory_id']!r} already exists") from None

    def memory_query(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
        limit: int | None = None,
        memory_id: str | None = None,
    ) -> list[dict[str, Any]]:
        where, args = _memory_where(scopes, status, memory_id, "?")
        sql = f"SELECT {_MEMORY_COLS} FROM memory"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, memory_id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [_memory_dict(r) for r in rows]

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
        with self._tx() as db:
            row = db.execute(
                f"SELECT {_MEMORY_COLS} FROM memory WHERE memory_id=?", (memory_id,)
            ).fetchone()
            if row is None:
                raise MemoryNotFoundError(f"no memory item {memory_id!r} in {self.url}")
            item = _memory_dict(row)
            if item["status"] == status:
                return item
            _memory_expect(item, expect)
            history = [*item["history"], {"status": status, "by": by, "at": now}]
            db.execute(
                "UPDATE memory SET status=?, updated_at=?, history=? WHERE memory_id=?",
                (status, now, _dumps(history), memory_id),
            )
            item.update(status=status, updated_at=now, history=history)
        return item

    def close(self) -> None:
        with self._lock:
            self._db.close()


# --- feedback memory ---------------------------------------------------------------------------
_MEMORY_COLS = (
    'memory_id, scope, scope_key, signal, strength, text, rule, source, "by", status, '
    "created_at, updated_at, history"
)
_MEMORY_STATUSES = ("active", "candidate", "forgotten")


def _memory_values(item: Mapping[str, Any]) -> tuple[Any, ...]:
    """The row of a memory item (``MemoryItem.to_dict()`` keys), JSON columns as text."""
    try:
        rule = item.get("rule")
        return (
            item["memory_id"],
            item["scope"],
            item.get("scope_key") or "",
            item["signal"],
            float(item["strength"]),
            item["text"],
            None if rule is None else _dumps(rule),
            _dumps(dict(item.get("source") or {})),
            item["by"],
            item["status"],
            float(item["created_at"]),
            float(item["updated_at"]),
            _dumps(list(item.get("history") or [])),
        )
    except KeyError as exc:
        raise StoreError(f"memory item lacks {exc.args[0]!r}") from None


def _memory_dict(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "memory_id": row[0],
        "scope": row[1],
        "scope_key": row[2],
        "signal": row[3],
        "strength": row[4],
        "text": row[5],
        "rule": None if row[6] is None else loads(row[6]),
        "source": loads(row[7]),
        "by": row[8],
        "status": row[9],
        "created_at": row[10],
        "updated_at": row[11],
        "history": loads(row[12]),
    }


def _memory_where(
    scopes: Sequence[tuple[str, str | None]] | None,
    status: str | None,
    memory_id: str | None,
    mark: str,
) -> tuple[list[str], list[Any]]:
    """WHERE clauses and arguments of ``memory_query`` (``mark``: the driver's placeholder)."""
    where: list[str] = []
    args: list[Any] = []
    if scopes is not None:
        ors = []
        for scope, key in scopes:
            if key is None:
                ors.append(f"scope={mark}")
                args.append(scope)
            else:
                ors.append(f"(scope={mark} AND scope_key={mark})")
                args.extend((scope, key))
        where.append("(" + " OR ".join(ors) + ")" if ors else "1=0")
    if status is not None:
        where.append(f"status={mark}")
        args.append(status)
    if memory_id is not None:
        where.append(f"memory_id={mark}")
        args.append(memory_id)
    return where, args


def _memory_check_status(status: str) -> None:
    if status not in _MEMORY_STATUSES:
        raise StoreError(f"unknown memory status {status!r}; one of {', '.join(_MEMORY_STATUSES)}")


def _memory_expect(item: Mapping[str, Any], expect: Sequence[str] | None) -> None:
    if expect is not None and item["status"] not in expect:
        raise ConflictError(
            f"memory item {item['memory_id']} is {item['status']}, not {' or '.join(expect)}"
        )
