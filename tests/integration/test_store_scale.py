"""An operation about one run, or one page, reads what it needs whatever the store holds (the
outside probe's 50,000-run store, helper scale fixes): each test pins the query plan or the
rows read, never a time."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loopwright.store import NewApproval
from loopwright.store.sqlite import SQLiteStore


def _create(store: SQLiteStore, key: str) -> str:
    rec, created = store.create_run(
        run_id=f"run-{key}",
        task_key=key,
        loop_name="l",
        project="p",
        spec_ref=None,
        loop_version=None,
        contract={"budget": {"max_cycles": 1}},
        task={"x": 1},
        initial_state={"cycle": 0},
    )
    assert created
    return rec.run_id


def _park(store: SQLiteStore, run_id: str, n: int = 1) -> None:
    token = store.acquire_lease(run_id, "me", 60)
    store.commit(
        run_id,
        token,
        seq=1,
        cycle=1,
        state={"cycle": 1},
        record={"cycle": 1},
        events=[],
        run={"cycle": 1, "status": "awaiting_approval"},
        approvals=[
            NewApproval(
                approval_id=f"ap-{run_id}-{i}",
                cycle=1,
                kind="effect",
                rule=None,
                what="pay",
                why="over limit",
                evidence={},
                diff=None,
                action_hash="h",
                expires_at=None,
            )
            for i in range(n)
        ],
    )
    store.release_lease(run_id, token)


@contextmanager
def _statements(store: SQLiteStore) -> Iterator[list[str]]:
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        store._db.set_trace_callback(None)


def _plan(db: sqlite3.Connection, sql: str, args: tuple[object, ...]) -> str:
    return "\n".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))


def test_one_runs_pending_requests_are_read_by_their_own_index(tmp_path: Path) -> None:
    # approve/deny/resume ask approvals(run_id=X, status='pending'): the plan must search by
    # the run (not every pending request of the store, via approvals_status) and need no sort.
    with SQLiteStore(tmp_path / "s.db") as s:
        runs = [_create(s, f"k{i}") for i in range(3)]
        for r in runs:
            _park(s, r)
        with _statements(s) as seen:
            got = s.approvals(run_id=runs[1], status="pending")
        assert [a.run_id for a in got] == [runs[1]]
        (sql,) = [q for q in seen if "FROM approvals" in q]
        plan = s._db.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
        text = "\n".join(str(r[-1]) for r in plan)
        assert "approvals_run_status (run_id=? AND status=?)" in text, text
        assert "TEMP B-TREE" not in text, text
