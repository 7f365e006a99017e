"""A PostgreSQL claim reads a bounded number of rows, as SQLite's does (test_store_scale.py):
``runs.open_requests`` (kept by triggers on ``approvals``) and the partial index
``runs_claimable`` in claim order. The claim used to sort every open run and probe every
parked run's approvals (outside probe: 19-37 ms a claim with 5,000 pending and 5,000 parked
runs). Pinned by the rows the claim's statement reads (EXPLAIN ANALYZE), never a time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from loopwright.store import NewApproval, Store, open_store


def _create(store: Store, key: str) -> str:
    rec, created = store.create_run(
        run_id=f"run-{key}", task_key=key, loop_name="l", project="p", spec_ref=None,
        loop_version=None, contract={"budget": {"max_cycles": 1}}, task={"x": 1},
        initial_state={"cycle": 0},
    )  # fmt: skip
    assert created
    return rec.run_id


def _request(run_id: str, i: int) -> NewApproval:
    return NewApproval(
        approval_id=f"ap-{run_id}-{i}", cycle=1, kind="effect", rule=None, what="pay",
        why="over limit", evidence={}, diff=None, action_hash="h", expires_at=None,
    )  # fmt: skip


def _park(store: Store, run_id: str, n: int = 1) -> None:
    token = store.acquire_lease(run_id, "me", 60)
    store.commit(
        run_id, token, seq=1, cycle=1, state={"cycle": 1}, record={"cycle": 1}, events=[],
        run={"cycle": 1, "status": "awaiting_approval"},
        approvals=[_request(run_id, i) for i in range(n)],
    )  # fmt: skip
    store.release_lease(run_id, token)


def _finish(store: Store, run_id: str) -> None:
    token = store.acquire_lease(run_id, "me", 60)
    store.commit(
        run_id, token, seq=1, cycle=1, state={"cycle": 1}, record=None, events=[],
        run={"status": "accepted"},
    )  # fmt: skip
    store.release_lease(run_id, token)


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows every node of an EXPLAIN ANALYZE plan produced or filtered out, all loops."""
    loops = int(plan.get("Actual Loops", 1))
    own = (
        float(plan.get("Actual Rows", 0))
        + float(plan.get("Rows Removed by Filter", 0))
        + float(plan.get("Rows Removed by Index Recheck", 0))
    )
    return round(own * loops) + sum(_rows_read(p) for p in plan.get("Plans", []))


def _names(plan: dict[str, Any]) -> set[str]:
    names = {str(plan.get("Index Name", "")), str(plan.get("Relation Name", ""))}
    for p in plan.get("Plans", []):
        names |= _names(p)
    return names - {""}


@contextmanager
def _statements(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """The statements the store runs in its transactions meanwhile, with their arguments."""
    seen: list[tuple[str, Any]] = []
    real = store._tx  # type: ignore[attr-defined]

    class Spy:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, query: Any, args: Any = None) -> Any:
            seen.append((query, args))
            return self._conn.execute(query, args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    @contextmanager
    def spied() -> Iterator[Any]:
        with real() as conn:
            yield Spy(conn)

    store._tx = spied  # type: ignore[attr-defined]
    try:
        yield seen
    finally:
        store._tx = real  # type: ignore[attr-defined]


def _claim_cost(store: Store) -> tuple[list[str], int, set[str]]:
    """A claim of one run; then the rows its candidate queries read, and what they read them
    by (EXPLAIN ANALYZE of the same statements, rolled back)."""
    with _statements(store) as seen:
        got = [r for r, _ in store.claim_runs("worker", 30, limit=1, now=1e12)]
    # the candidates (runs runnable by status, and runs in progress whose lease lapsed), read
    # in one statement, then the chosen ones locked
    locking = [(q, a) for q, a in seen if str(q).startswith("(SELECT") or "SKIP LOCKED" in str(q)]
    assert len(locking) == 2, locking
    read, names = 0, set()
    with store._conn() as conn, conn.transaction(force_rollback=True):  # type: ignore[attr-defined]
        conn.execute("ANALYZE runs")
        conn.execute("ANALYZE approvals")
        for query, args in locking:
            [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, args).fetchone()
            read += _rows_read(plan["Plan"])
            names |= _names(plan["Plan"])
    return got, read, names


@pytest.mark.postgres
def test_a_pg_claim_reads_no_more_when_more_runs_wait_for_a_person(pg_url: str) -> None:
    # Parked runs with a pending request and finished runs, all older than the one runnable
    # run, used to be read (and the parked ones' approvals probed) by every claim. Now a claim
    # reads as many rows with 10 or 400 of each.
    costs = []
    base, _, schema = pg_url.rpartition("schema=")
    for parked in (10, 400):
        url = f"{base}schema={schema}_{parked}"
        try:
            with open_store(url) as s:
                for i in range(parked):
                    _park(s, _create(s, f"p{i}"))
                    _finish(s, _create(s, f"d{i}"))
                ready = _create(s, "ready")
                got, read, names = _claim_cost(s)
                assert got == [ready]
                if parked == 400:  # (a table of 21 rows is read whole, as it should be)
                    assert "runs_claimable" in names, names
                assert "approvals" not in names, names  # no request probed
                costs.append(read)
        finally:
            import psycopg

            with psycopg.connect(base.rstrip("?&"), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}_{parked}" CASCADE')
    assert costs[1] <= costs[0] + 2, costs


def test_a_parked_run_is_claimable_once_its_last_request_is_decided(url: str) -> None:
    with open_store(url) as s:
        rid = _create(s, "k")
        _park(s, rid, n=2)
        assert s.claim_runs("w", 30) == []
        s.decide_approval(f"ap-{rid}-0", status="approved", by="p", note=None, now=1.0)
        assert s.claim_runs("w", 30) == []  # one request still pending
        s.decide_approval(f"ap-{rid}-1", status="denied", by="p", note=None, now=2.0)
        [(got, token)] = s.claim_runs("w", 30)
        assert got == rid and token == 2  # fenced: one more than the park's lease


def test_the_claim_keeps_its_order_and_passes_over_held_leases(url: str) -> None:
    with open_store(url) as s:
        ids = [_create(s, f"k{i}") for i in range(6)]
        s.acquire_lease(ids[0], "live-worker", 600)  # held: passed over
        _park(s, ids[1])  # waits for a person
        _park(s, ids[2])
        s.decide_approval(f"ap-{ids[2]}-0", status="approved", by="p", note=None, now=1.0)
        got = [r for r, _ in s.claim_runs("w", 30, limit=10)]
        want = [r.run_id for r in sorted(
            (s.get_run(r) for r in ids if r not in (ids[0], ids[1])),
            key=lambda r: (r.updated_at, r.run_id),
        )]  # fmt: skip
        assert got == want
        assert s.claim_runs("w2", 30, limit=10) == []  # all held now


@pytest.mark.postgres
def test_a_v7_store_counts_its_pending_requests_when_it_migrates(pg_url: str) -> None:
    # The v8 migration fills open_requests for the runs already stored: a run parked on two
    # requests, one on a decided one, one never parked.
    with open_store(pg_url) as s:
        two, decided, free = _create(s, "two"), _create(s, "decided"), _create(s, "free")
        _park(s, two, n=2)
        _park(s, decided)
        s.decide_approval(f"ap-{decided}-0", status="approved", by="p", note=None, now=1.0)
        with s._tx() as conn:  # type: ignore[attr-defined]  # as v7 left it
            for undo in (
                "DROP INDEX runs_claimable",
                "DROP TRIGGER approvals_open_insert ON approvals",
                "DROP TRIGGER approvals_open_delete ON approvals",
                "DROP TRIGGER approvals_open_update ON approvals",
                "DROP FUNCTION loopwright_open_requests()",
                "ALTER TABLE runs DROP COLUMN open_requests",
                "UPDATE loopwright_meta SET value = '7' WHERE key = 'schema_version'",
            ):
                conn.execute(undo)
    with open_store(pg_url) as s:
        counts = dict(s._all("SELECT run_id, open_requests FROM runs", []))  # type: ignore[attr-defined]
        assert counts == {two: 2, decided: 0, free: 0}
        assert {r for r, _ in s.claim_runs("w", 30, limit=5)} == {decided, free}
        s.decide_approval(f"ap-{two}-1", status="denied", by="p", note=None, now=2.0)
        assert s.claim_runs("w", 30, limit=5) == []
        s.decide_approval(f"ap-{two}-0", status="approved", by="p", note=None, now=3.0)
        assert [r for r, _ in s.claim_runs("w", 30, limit=5)] == [two]


@pytest.mark.postgres
def test_the_count_is_kept_whoever_writes_the_requests(pg_url: str) -> None:
    # The triggers fire for any writer: here a session whose search_path does not name the
    # store's schema, inserting, moving and deleting requests by hand.
    import psycopg

    base, _, schema = pg_url.rpartition("schema=")
    with open_store(pg_url) as s:
        a, b = _create(s, "a"), _create(s, "b")
        with psycopg.connect(base.rstrip("?&"), autocommit=True) as conn:
            conn.execute("SET search_path TO public")
            cols = "approval_id, run_id, cycle, kind, what, why, evidence, action_hash, status"
            conn.execute(
                f'INSERT INTO "{schema}".approvals({cols}, requested_at) VALUES '
                "('x1', %s, 1, 'effect', 'w', 'y', '{}', 'h', 'pending', 1), "
                "('x2', %s, 1, 'effect', 'w', 'y', '{}', 'h', 'pending', 2), "
                "('x3', %s, 1, 'effect', 'w', 'y', '{}', 'h', 'approved', 3)",
                (a, a, b),
            )
            conn.execute(
                f"UPDATE \"{schema}\".approvals SET run_id = %s WHERE approval_id = 'x2'", (b,)
            )
            conn.execute(
                f"UPDATE \"{schema}\".approvals SET status = 'pending' WHERE approval_id = 'x3'"
            )
            conn.execute(f"DELETE FROM \"{schema}\".approvals WHERE approval_id = 'x1'")
        counts = dict(s._all("SELECT run_id, open_requests FROM runs", []))  # type: ignore[attr-defined]
        assert counts == {a: 0, b: 2}


@pytest.mark.postgres
def test_a_claim_locks_no_run_it_will_not_take(pg_url: str) -> None:
    # A claim of one read two kinds of candidates (runs runnable by status, runs in progress
    # whose lease lapsed) and locked up to `limit` of each to its commit, taking only the
    # oldest: a second claimer, meanwhile, skipped the other and came back empty though that
    # run was free. Claimer A is held between its locks and its claim.
    with open_store(pg_url) as a, open_store(pg_url) as b:
        older = _create(a, "P")  # pending
        newer = _create(a, "R")  # in progress, its lease lapsed (claims at now=1e12)
        token = a.acquire_lease(newer, "crashed-worker", 30)
        a.commit(
            newer, token, seq=1, cycle=1, state={"cycle": 1}, record=None, events=[],
            run={"status": "running"},
        )  # fmt: skip
        paused, go = threading.Event(), threading.Event()
        real = a._tx  # type: ignore[attr-defined]

        class Hold:
            def __init__(self, conn: Any) -> None:
                self._conn = conn

            def execute(self, query: Any, args: Any = None) -> Any:
                if str(query).startswith("UPDATE runs r SET lease_owner"):
                    paused.set()
                    go.wait(30)
                return self._conn.execute(query, args)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._conn, name)

        @contextmanager
        def held() -> Iterator[Any]:
            with real() as conn:
                yield Hold(conn)

        a._tx = held  # type: ignore[attr-defined]
        got: dict[str, Any] = {}
        claimer = threading.Thread(
            target=lambda: got.setdefault("A", a.claim_runs("A", 30, limit=1, now=1e12))
        )
        claimer.start()
        try:
            assert paused.wait(30), "claimer A never reached its claim"
            got["B"] = b.claim_runs("B", 30, limit=1, now=1e12)
        finally:
            go.set()
            claimer.join(30)
        assert [r for r, _ in got["A"]] == [older]
        assert [r for r, _ in got["B"]] == [newer]


@pytest.mark.postgres
def test_a_claim_passes_over_runs_locked_elsewhere_and_takes_the_next(pg_url: str) -> None:
    # Candidates are read without a lock: one another transaction holds is passed over and
    # the next one read in its place, in claim order, until `limit` are taken.
    import psycopg

    base, _, schema = pg_url.rpartition("schema=")
    with open_store(pg_url) as s:
        ids = [_create(s, f"k{i}") for i in range(5)]
        with psycopg.connect(base.rstrip("?&")) as other:
            other.execute(f'SET search_path TO "{schema}"')
            other.execute(
                "SELECT run_id FROM runs WHERE run_id = ANY(%s) FOR UPDATE", ([ids[0], ids[2]],)
            )
            got = [r for r, _ in s.claim_runs("w", 30, limit=2, now=1e12)]
            assert got == [ids[1], ids[3]]
            other.rollback()
        assert [r for r, _ in s.claim_runs("w2", 30, limit=5, now=1e12)] == [ids[0], ids[2], ids[4]]
