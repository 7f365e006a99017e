"""The SQLite store's write transaction (``SQLiteStore._tx``): whatever ends it — the body
raising, the database refusing the body, or COMMIT itself failing — nothing of it is kept, the
store's lock is free again and the connection holds no open transaction, so the next write
works. Faults are placed by wrapping the connection, never by timing."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from loopwright import StoreUnavailableError
from loopwright.store.sqlite import SQLiteStore


class _FailingCommit:
    """The store's cursor, except that its next COMMIT raises ``error``."""

    def __init__(self, db: sqlite3.Cursor, error: Exception) -> None:
        self._db, self._error = db, error

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and self._error is not None:
            err, self._error = self._error, None
            raise err
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def _lock_is_free(store: SQLiteStore) -> bool:
    """Whether another thread can take the store's lock now (an RLock is re-entrant for
    this thread, so the check must come from another)."""
    got: list[bool] = []

    def take() -> None:
        ok = store._lock.acquire(blocking=False)
        if ok:
            store._lock.release()
        got.append(ok)

    t = threading.Thread(target=take)
    t.start()
    t.join()
    return got[0]


def _count(store: SQLiteStore) -> int:
    with store._conn() as conn:
        return int(conn.execute("SELECT count(*) FROM scratch").fetchone()[0])


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "tx.db")
    with s._tx() as conn:
        conn.execute("CREATE TABLE scratch (n INTEGER PRIMARY KEY)")
    return s


def test_a_committed_write_is_kept_and_the_lock_released(store: SQLiteStore) -> None:
    with store._tx() as conn:
        conn.execute("INSERT INTO scratch VALUES (1)")
    assert _count(store) == 1
    assert _lock_is_free(store)
    assert not store._db.in_transaction


def test_the_body_raising_rolls_back_and_raises_it_unchanged(store: SQLiteStore) -> None:
    with pytest.raises(KeyError), store._tx() as conn:
        conn.execute("INSERT INTO scratch VALUES (1)")
        raise KeyError("the caller's own error")
    assert _count(store) == 0
    assert _lock_is_free(store)
    assert not store._db.in_transaction


def test_a_database_failure_in_the_body_is_the_store_being_unavailable(
    store: SQLiteStore,
) -> None:
    with pytest.raises(StoreUnavailableError), store._tx() as conn:
        conn.execute("INSERT INTO scratch VALUES (1)")
        raise sqlite3.OperationalError("disk I/O error")
    assert _count(store) == 0
    assert _lock_is_free(store)


def test_a_failed_commit_keeps_nothing_and_leaves_no_transaction_open(
    store: SQLiteStore,
) -> None:
    real, cursor = store._db, store._cur  # (the transaction's COMMIT runs on its cursor)
    store._cur = _FailingCommit(cursor, sqlite3.OperationalError("disk I/O error"))  # type: ignore[assignment]
    try:
        with pytest.raises(StoreUnavailableError, match="disk I/O error"), store._tx() as conn:
            conn.execute("INSERT INTO scratch VALUES (1)")
    finally:
        store._cur = cursor
    assert not real.in_transaction
    assert _lock_is_free(store)
    assert _count(store) == 0
    with store._tx() as conn:  # the next write works
        conn.execute("INSERT INTO scratch VALUES (2)")
    assert _count(store) == 1


def test_a_commit_refused_by_a_constraint_is_rolled_back_too(store: SQLiteStore) -> None:
    # A deferred foreign key is checked at COMMIT: SQLite refuses the COMMIT and keeps the
    # transaction open, which the next BEGIN IMMEDIATE would trip over.
    with store._tx() as conn:
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute("CREATE TABLE child (pid INTEGER REFERENCES parent(id))")
    with pytest.raises(sqlite3.IntegrityError), store._tx() as conn:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute("INSERT INTO child VALUES (42)")
    assert not store._db.in_transaction
    assert _lock_is_free(store)
    with store._conn() as conn:
        assert conn.execute("SELECT count(*) FROM child").fetchone()[0] == 0
    with store._tx() as conn:
        conn.execute("INSERT INTO scratch VALUES (3)")
    assert _count(store) == 1
