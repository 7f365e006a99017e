"""An operation about one run, or one page, reads what it needs whatever the store holds (the
outside probe's 50,000-run store, helper scale fixes): each test pins the query plan or the
rows read, never a time."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.dashboard import dashboard

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


def _claim_steps(store: SQLiteStore) -> tuple[list[tuple[str, int]], int]:
    """A claim of one run, and the SQLite VM steps it took (a count of the rows it read)."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    store._db.set_progress_handler(count, 1)
    try:
        got = store.claim_runs("worker", 30, limit=1)
    finally:
        store._db.set_progress_handler(None, 1)
    return got, steps[0]


def test_a_claim_reads_no_more_when_more_runs_wait_for_a_person(tmp_path: Path) -> None:
    # Parked runs with a pending request, older than the one runnable run, used to be read
    # (and their approvals probed) by every claim: the work grew with them. Now a claim costs
    # the same with 10 or 200 of them waiting, and with 0 or 200 finished runs.
    costs = []
    for parked in (10, 200):
        with SQLiteStore(tmp_path / f"s{parked}.db") as s:
            for i in range(parked):
                _park(s, _create(s, f"p{i}"))
            for i in range(parked):  # finished runs, never candidates
                rid = _create(s, f"d{i}")
                token = s.acquire_lease(rid, "me", 60)
                s.commit(
                    rid, token, seq=1, cycle=1, state={"cycle": 1}, record=None,
                    events=[], run={"status": "accepted"},
                )  # fmt: skip
                s.release_lease(rid, token)
            ready = _create(s, "ready")
            got, steps = _claim_steps(s)
            assert [r for r, _ in got] == [ready]
            costs.append(steps)
    assert costs[1] < costs[0] * 1.5, costs


def test_a_parked_run_is_claimable_once_its_last_request_is_decided(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        rid = _create(s, "k")
        _park(s, rid, n=2)
        assert s.claim_runs("w", 30) == []
        s.decide_approval(f"ap-{rid}-0", status="approved", by="p", note=None, now=1.0)
        assert s.claim_runs("w", 30) == []  # one request still pending
        s.decide_approval(f"ap-{rid}-1", status="denied", by="p", note=None, now=2.0)
        [(got, _)] = s.claim_runs("w", 30)
        assert got == rid


def test_a_claim_passes_over_more_than_a_batch_of_live_local_leases(tmp_path: Path) -> None:
    # Candidates come in batches; leases of this host held by live processes are refused in
    # Python. A batch refused whole must not end the claim: the free run after it is taken.
    import os
    import socket

    from loopwright._owners import PROCESS_SPACE

    live = f"{socket.gethostname()}:{os.getpid()}:x:{PROCESS_SPACE}"
    with SQLiteStore(tmp_path / "s.db") as s:
        held = [_create(s, f"h{i:02}") for i in range(40)]
        for rid in held:
            s.acquire_lease(rid, live, 600)
        free = _create(s, "free")
        with s._tx() as db:  # the free run is the newest: every held one comes first
            db.execute("UPDATE runs SET updated_at = 1 WHERE run_id <> ?", (free,))
        assert [r for r, _ in s.claim_runs("w", 30, limit=5)] == [free]


def test_the_approvals_inbox_reads_one_page_in_the_store(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # /api/approvals and the inbox used to read every request of the store, then filter, sort
    # and slice in Python. Now the store pages them (keyset, newest first) and counts them.

    from loopwright.store._base import Store

    path = tmp_path / "s.db"
    with SQLiteStore(path) as s:
        runs = [_create(s, f"k{i}") for i in range(7)]
        for r in runs:
            _park(s, r)
        with s._tx() as db:  # two share a time: the id breaks the tie
            db.execute("UPDATE approvals SET requested_at = 5 WHERE run_id IN (?, ?)", runs[:2])
            db.execute("UPDATE approvals SET why = 'Needs Ana' WHERE run_id = ?", (runs[3],))
        want = Store.page_approvals(s, status="pending", limit=100)  # the default, in Python
        assert len(want) == 7
        assert Store.page_approvals(s, search="needs ANA", limit=100) == [
            a for a in want if a.run_id == runs[3]
        ]

    def store_wide(self: SQLiteStore, *, run_id: str | None = None, status: str | None = None):  # type: ignore[no-untyped-def]
        assert run_id is not None, "every request of the store read for one page"
        return real(self, run_id=run_id, status=status)

    real = SQLiteStore.approvals
    monkeypatch.setattr(SQLiteStore, "approvals", store_wide)
    client = dashboard(str(path), token="t" * 24)
    got, url = [], "/api/approvals?limit=3"
    while url:
        r = client.get(url)
        assert r.status_code == 200, r.text
        assert r.headers["X-Total-Count"] == "7"
        assert len(r.json()) <= 3
        got += [a["approval_id"] for a in r.json()]
        nxt = r.headers.get("X-Next-Cursor")
        url = f"/api/approvals?limit=3&after={nxt}" if nxt else ""
    assert got == [a.approval_id for a in want]
    r = client.get("/api/approvals?q=needs%20ana")
    assert [a["run_id"] for a in r.json()] == [runs[3]]
    assert r.headers["X-Total-Count"] == "1"
    assert client.get("/approvals").status_code == 200
