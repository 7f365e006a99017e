"""A parked run whose every open request has expired is claimed by a worker, which concludes it
as the contract says: expiry escalates (DESIGN §2), SQLite and PostgreSQL.

Expiry was recorded only when someone resumed the run or tried to decide the request; a claim
counted an expired, undecided request as open (``runs.open_requests``), so ``loopwright
worker`` left the run ``awaiting_approval`` for ever. Now a worker's poll records the requests
expired on the store's clock (``Store.expired_requests``, through the partial index
``approvals_expiring``), and then claims the runs parked on them.

Expiry is placed in the past by moving the request's ``expires_at`` (on the store's clock: the
server's on PostgreSQL), never by waiting.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK
from test_effects_engine import Payments, Script, make_loop, with_effects
from test_pg_claim_scale import _create, _request

import loopwright as lw
from loopwright._authority import expire
from loopwright._worker import Worker
from loopwright.store import Store, open_store
from loopwright.store._pg_schema import PG_MIGRATIONS
from loopwright.store._schema import APPROVALS_EXPIRING_SQL, SQLITE_MIGRATIONS
from loopwright.store.sqlite import SQLiteStore


def _park(rt: lw.Runtime) -> tuple[lw.RunResult, lw.Loop, Payments]:
    """A run parked on a payment's request that expires in ten minutes."""
    bank = Payments()
    pay = bank.effect()
    rule = lw.PolicyRule(kind="spend", action="require", name="pay", expires_after_s=600)
    actor = Script(
        with_effects(lw.Proposal.edit("doc", TARGET), pay.call(invoice="A-1", amount=5.0))
    )
    loop = make_loop(actor, [pay], approvals=lw.ApprovalPolicy((rule,)))
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    return r, loop, bank


def _expired(store: Store, approval_id: str) -> None:
    """The request's time is over on the store's clock (moved there, not waited for)."""
    m = store._MARK  # type: ignore[attr-defined]
    with store._tx() as conn:  # type: ignore[attr-defined]
        conn.execute(
            f"UPDATE approvals SET expires_at = {m} WHERE approval_id = {m}",
            (store.clock() - 1, approval_id),
        )


def _decided(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(run_id) if e.kind == "approval_decided"]


def test_a_worker_concludes_a_run_whose_request_expired(url: str) -> None:
    with lw.Runtime(url) as rt:
        r, loop, bank = _park(rt)
        req = rt.pending_approval(r.run_id)
        _expired(rt.store, req.approval_id)
        ended: list[lw.RunResult] = []
        stats = asyncio.run(
            Worker(rt, loops={loop.name: loop}, poll_s=0.001, on_result=ended.append).run(once=True)
        )
        # before: claimed 0, the run left awaiting_approval until a person acted
        assert stats.claimed == 1, stats
        assert [x.status for x in ended] == ["escalated"]
        got = rt.store.get_run(r.run_id)
        assert got.status == "escalated"
        assert "expired" in str(got.packet["cause"]), got.packet
        assert got.packet["evidence"]["approval"]["status"] == "expired"
        assert rt.store.approval(req.approval_id).status == "expired"  # type: ignore[union-attr]
        assert bank.executed == []  # nothing approved ran
        # recorded once, by loopwright; a person's late approval is refused, adds nothing
        assert [(d["status"], d["by"]) for d in _decided(rt, r.run_id)] == [
            ("expired", "loopwright")
        ]
        with pytest.raises(lw.ApprovalError):
            rt.approve(r.run_id, by="fin")
        assert len(_decided(rt, r.run_id)) == 1


def test_a_request_not_yet_expired_is_left_alone(url: str) -> None:
    with lw.Runtime(url) as rt:
        r, loop, bank = _park(rt)  # ten minutes to go
        stats = asyncio.run(Worker(rt, loops={loop.name: loop}, poll_s=0.001).run(once=True))
        assert stats.claimed == 0, stats
        assert rt.store.get_run(r.run_id).status == "awaiting_approval"
        assert rt.pending_approval(r.run_id).status == "pending"
        assert _decided(rt, r.run_id) == []
        assert bank.executed == []


def test_a_decision_that_lands_first_wins_over_expiry(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A person's approval, checked before the request expired, commits between the worker's
    # read of the expired requests and its recording of them: the approval stands, the
    # expiry is not recorded over it, and the run goes on as approved.
    with lw.Runtime(url) as rt:
        r, loop, bank = _park(rt)
        req = rt.pending_approval(r.run_id)
        _expired(rt.store, req.approval_id)
        store = rt.store
        real = store.expired_requests

        polls: list[list[str]] = []

        def then_approved(*, limit: int) -> list[lw.Approval]:
            due = real(limit=limit)
            polls.append([a.approval_id for a in due])
            if len(polls) == 1:  # the first poll's read, then the person's decision lands
                store.decide_approval(
                    req.approval_id, status="approved", by="fin", note=None, now=store.clock()
                )
            return due

        monkeypatch.setattr(store, "expired_requests", then_approved)
        ended: list[lw.RunResult] = []
        asyncio.run(
            Worker(rt, loops={loop.name: loop}, poll_s=0.001, on_result=ended.append).run(once=True)
        )
        assert polls[0] == [req.approval_id]
        assert rt.store.approval(req.approval_id).status == "approved"  # type: ignore[union-attr]
        assert [(d["status"], d["by"]) for d in _decided(rt, r.run_id)] == [("approved", "fin")]
        assert [x.status for x in ended] == ["accepted"]
        assert [p["invoice"] for p in bank.executed] == ["A-1"]  # paid once


def test_a_run_waits_while_any_of_its_requests_is_still_open(url: str) -> None:
    with open_store(url) as s:
        rid = _create(s, "k")
        token = s.acquire_lease(rid, "me", 60)
        s.commit(
            rid, token, seq=1, cycle=1, state={"cycle": 1}, record={"cycle": 1}, events=[],
            run={"cycle": 1, "status": "awaiting_approval"},
            approvals=[_request(rid, 0), _request(rid, 1)],
        )  # fmt: skip
        s.release_lease(rid, token)
        _expired(s, f"ap-{rid}-0")
        [due] = s.expired_requests(limit=10)
        assert due.approval_id == f"ap-{rid}-0"
        expire(s, due)
        assert s.expired_requests(limit=10) == []  # recorded: no longer read
        assert s.claim_runs("w", 30) == []  # one request still open
        _expired(s, f"ap-{rid}-1")
        [due] = s.expired_requests(limit=10)
        expire(s, due)
        assert [r for r, _ in s.claim_runs("w", 30)] == [rid]


def test_sqlite_reads_expired_requests_by_their_partial_index(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        seen: list[tuple[str, Any]] = []
        real = s._all

        def spy(query: str, args: Any) -> Any:
            seen.append((query, args))
            return real(query, args)

        s._all = spy  # type: ignore[method-assign]
        s.expired_requests(limit=5)
        [(query, args)] = seen
        plan = "\n".join(str(r[-1]) for r in s._db.execute("EXPLAIN QUERY PLAN " + query, args))
        # a range of the index (its expired end), not every pending request
        assert "USING INDEX approvals_expiring (" in plan and "expires_at<?)" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # in index order: no sort


def _step(migrations: list[list[str]]) -> int:
    """The version a store is at before the step that makes ``approvals_expiring`` (SQLite's
    v19 -> 18, PostgreSQL's v17 -> 16, as numbered when written)."""
    return next(i for i, m in enumerate(migrations) if APPROVALS_EXPIRING_SQL in m)


def test_an_sqlite_store_before_the_index_gains_it_when_it_migrates(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SQLiteStore(db):
        pass
    raw = sqlite3.connect(db)
    raw.execute("DROP INDEX approvals_expiring")
    raw.execute(
        "UPDATE loopwright_meta SET value = ? WHERE key = 'schema_version'",
        (str(_step(SQLITE_MIGRATIONS)),),
    )
    raw.commit()
    raw.close()
    with SQLiteStore(db) as s:
        assert s.schema_version == len(SQLITE_MIGRATIONS)
        names = {r[0] for r in s._db.execute("SELECT name FROM sqlite_master")}
        assert "approvals_expiring" in names


@pytest.mark.postgres
def test_a_pg_store_before_the_index_gains_it_when_it_migrates(pg_url: str) -> None:
    with open_store(pg_url) as s, s._tx() as conn:  # type: ignore[attr-defined]  # as it was
        conn.execute("DROP INDEX approvals_expiring")
        conn.execute(
            "UPDATE loopwright_meta SET value = %s WHERE key = 'schema_version'",
            (str(_step(PG_MIGRATIONS)),),
        )
    with open_store(pg_url) as s:
        assert s.schema_version == len(PG_MIGRATIONS)  # type: ignore[attr-defined]
        names = s._all(  # type: ignore[attr-defined]
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()", []
        )
        assert ("approvals_expiring",) in [tuple(r) for r in names]


@pytest.mark.postgres
def test_pg_reads_only_the_expired_requests(pg_url: str) -> None:
    from test_pg_claim_scale import _names, _rows_read

    with open_store(pg_url) as s:
        rid = _create(s, "k")
        cols = "approval_id, run_id, cycle, kind, what, why, evidence, action_hash, status"
        with s._tx() as conn:  # type: ignore[attr-defined]
            # many requests decided, never expiring, or expiring later; three expired
            conn.execute(
                f"INSERT INTO approvals({cols}, requested_at, expires_at) "
                "SELECT 'x' || i, %s, 1, 'effect', 'w', 'y', '{}', 'h', "
                "CASE WHEN i %% 3 = 0 THEN 'approved' ELSE 'pending' END, i, "
                "CASE WHEN i %% 3 = 1 THEN NULL ELSE 1e12 + i END "
                "FROM generate_series(1, 3000) i",
                (rid,),
            )
            conn.execute(
                "UPDATE approvals SET expires_at = 1, status = 'pending' "
                "WHERE approval_id IN ('x3', 'x6', 'x9')"
            )
        seen: list[tuple[str, Any]] = []
        real = s._all  # type: ignore[attr-defined]

        def spy(query: str, args: Any) -> Any:
            seen.append((query, args))
            return real(query, args)

        s._all = spy  # type: ignore[attr-defined]
        got = s.expired_requests(limit=100)
        assert [a.approval_id for a in got] == ["x3", "x6", "x9"]
        [(query, args)] = seen
        with s._conn() as conn, conn.transaction(force_rollback=True):  # type: ignore[attr-defined]
            conn.execute("ANALYZE approvals")
            [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, args).fetchone()
        assert "approvals_expiring" in _names(plan["Plan"]), plan
        assert _rows_read(plan["Plan"]) <= 10, plan  # the three, not the 3,000


def test_a_worker_settles_a_refund_request_that_expired_after_an_edit(url: str) -> None:
    # A cancelled run (A paid; F, its fork, inherited the payment) was edited while its refund
    # waited for a person, so it was parked on that request. The request then expired: no
    # worker took the run, which stayed parked until a person resumed it. Now a worker's poll
    # records the expiry, claims the run, the refund is not run (expired undecided) and the
    # person's edit is judged.
    from test_edit_while_refund_waits import _cancelled_under_a_fork
    from test_redo_keys import ALLOW, Provider
    from test_reused_refunds import compensation_requests

    provider = Provider()
    rule = lw.PolicyRule(
        kind="spend", effect="pay.compensate", action="require", expires_after_s=3600
    )
    with lw.Runtime(url) as rt:
        loop, a = _cancelled_under_a_fork(rt, provider, lw.ApprovalPolicy((rule, *ALLOW.rules)))
        assert rt.edit(a, "doc/c", 7, by="ed").status == "awaiting_approval"  # an hour to go
        [req] = compensation_requests(rt, a)
        _expired(rt.store, req.approval_id)
        ended: list[lw.RunResult] = []
        worker = Worker(rt, loops={loop.name: loop}, poll_s=0.001, on_result=ended.append)
        asyncio.run(worker.run(once=True))
        assert a in [x.run_id for x in ended]  # before: not claimed, parked until a person acted
        assert rt.store.approval(req.approval_id).status == "expired"  # type: ignore[union-attr]
        assert provider.collected() == 5.0  # the refund expired undecided: not run
        [settled] = [e.data for e in rt.store.events(a) if e.kind == "compensations"]
        assert [(c["status"], c["why"]) for c in settled["results"]] == [
            ("not_run", "request expired")
        ]
        assert rt.result(a).state.values()["doc"]["c"] == 7
        checked = [c.record for c in rt.store.checkpoints(a) if c.record]
        assert any(rec.get("check_only") for rec in checked)  # the edit judged


def test_expired_requests_are_read_on_the_stores_clock_sqlite(tmp_path: Path) -> None:
    # (review49c) SQLite compared expires_at with time.time(), not the store's clock() that
    # sets it and that ``expire`` decides on: a store whose clock was moved (as the web's
    # expired-card tests move it) found no request expired, and its worker claimed nothing
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r, loop, _bank = _park(rt)
        req = rt.pending_approval(r.run_id)
        assert rt.store.expired_requests(limit=10) == []
        later = rt.store.clock() + 3600.0  # an hour on, past its ten minutes
        rt.store.clock = lambda: later  # type: ignore[method-assign]
        found = rt.store.expired_requests(limit=10)
        assert [a.approval_id for a in found] == [req.approval_id]  # before: []
        stats = asyncio.run(Worker(rt, loops={loop.name: loop}, poll_s=0.001).run(once=True))
        assert stats.claimed == 1 and rt.store.get_run(r.run_id).status == "escalated"
