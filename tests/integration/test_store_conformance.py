"""The store conformance suite: every test runs unchanged on SQLite and on PostgreSQL.

The PostgreSQL half needs ``LOOPWRIGHT_TEST_PG`` (see ``conftest.py``); each test gets a schema
of its own, dropped afterwards. Races use one store instance per thread, as separate processes
or hosts would.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.records import cycle_record
from test_damaged_store_api import TASK as DAMAGED_TASK
from test_damaged_store_api import _loop as _damaged_loop

import loopwright as lw
from loopwright._owners import PROCESS_SPACE
from loopwright._record_codec import pack
from loopwright.store import (
    ClosedApproval,
    CommitRequest,
    NewApproval,
    NewEvent,
    Store,
    open_store,
)
from loopwright.store._live import NOTIFIED, LiveStore
from loopwright.store._schema import SQLITE_MIGRATIONS
from loopwright.store._sql_statements import EVENTS_IN_ONE


@dataclass
class Backend:
    name: str
    url: str
    latest: int  # the schema version this code writes
    execute: Callable[[str], None]  # a raw statement, outside the store

    def open(self) -> Store:
        return open_store(self.url)


def _sqlite_backend(path: Path) -> Backend:
    def execute(statement: str) -> None:
        db = sqlite3.connect(path)
        db.execute(statement)
        db.commit()
        db.close()

    return Backend("sqlite", f"sqlite:///{path}", len(SQLITE_MIGRATIONS), execute)


def _pg_backend(url: str) -> Backend:
    import psycopg

    from loopwright.store._pg_schema import PG_MIGRATIONS

    base, _, schema = url.rpartition("schema=")
    base = base.rstrip("?&")

    def execute(statement: str) -> None:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            conn.execute(statement)

    return Backend("postgres", url, len(PG_MIGRATIONS), execute)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return _sqlite_backend(tmp_path / "store.db")
    return _pg_backend(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    s = backend.open()
    try:
        yield s
    finally:
        s.close()


# --- helpers ------------------------------------------------------------------------------
def _create(store: Store, key: str = "k", *, run_id: str | None = None, **kw: Any) -> str:
    args: dict[str, Any] = {
        "loop_name": "loop",
        "project": "proj",
        "spec_ref": None,
        "loop_version": None,
        "contract": {"budget": {"max_cycles": 3}},
        "task": {"x": 1},
        "initial_state": {"cycle": 0},
    }
    args.update(kw)
    rec, created = store.create_run(run_id=run_id or f"run-{key}", task_key=key, **args)
    assert created
    return rec.run_id


def _leased(store: Store, key: str = "k", owner: str = "me") -> tuple[str, int]:
    run_id = _create(store, key)
    return run_id, store.acquire_lease(run_id, owner, 60)


def _commit(store: Store, run_id: str, token: int, seq: int, **kw: Any) -> bool:
    args: dict[str, Any] = {
        "cycle": seq,
        "state": {"cycle": seq},
        "record": {"cycle": seq},
        "events": [NewEvent(seq, "tick", {"n": seq})],
        "run": {"cycle": seq, "status": "running"},
    }
    args.update(kw)
    return store.commit(run_id, token, seq=seq, **args)


def _approval(approval_id: str, cycle: int = 1, **kw: Any) -> NewApproval:
    args: dict[str, Any] = {
        "approval_id": approval_id,
        "cycle": cycle,
        "kind": "risk",
        "rule": "rule",
        "what": f"do {approval_id}",
        "why": "money",
        "evidence": {"id": approval_id, "amounts": [1, 2]},
        "diff": "- a\n+ b",
        "action_hash": f"hash-{approval_id}",
        "expires_at": None,
    }
    args.update(kw)
    return NewApproval(**args)


def _park(store: Store, key: str = "k", *approval_ids: str) -> str:
    """A run parked awaiting the given approvals, its lease released as the engine does."""
    run_id, token = _leased(store, key)
    _commit(
        store,
        run_id,
        token,
        1,
        run={"status": "awaiting_approval"},
        approvals=[_approval(a) for a in approval_ids or ("ap-" + key,)],
    )
    store.release_lease(run_id, token)
    return run_id


def _snapshot(store: Store, run_id: str) -> tuple[Any, ...]:
    return (
        store.get_run(run_id),
        store.checkpoints(run_id),
        [(e.id, e.kind, e.data) for e in store.events(run_id)],
        store.approvals(run_id=run_id),
        store.journal(run_id),
    )


def _race(n: int, backend: Backend, work: Callable[[Store, int], Any]) -> list[Any]:
    """Run ``work(store, i)`` in ``n`` threads at once, each with a store of its own."""
    stores = [backend.open() for _ in range(n)]
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def target(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(stores[i], i)
        except Exception as exc:  # reported below, in the test's thread
            results[i] = exc

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        for s in stores:
            s.close()
    return results


# --- runs -----------------------------------------------------------------------------------
def test_create_is_idempotent_by_task_key(store: Store) -> None:
    run_id = _create(store, "key-1", contract={"z": 1, "a": {"y": 2, "b": 3}}, task={"q": "é"})
    rec, created = store.create_run(
        run_id="another-id",
        task_key="key-1",
        loop_name="other",
        project="other",
        spec_ref=None,
        loop_version=None,
        contract={},
        task={},
        initial_state={"different": True},
    )
    assert (rec.run_id, created, rec.loop_name, rec.status) == (run_id, False, "loop", "pending")
    # JSON comes back as written, key order included (a task rendered into a prompt must not
    # come back reordered).
    assert list(rec.contract) == ["z", "a"]
    assert list(rec.contract["a"]) == ["y", "b"]
    assert rec.task == {"q": "é"}
    assert [c.state for c in store.checkpoints(run_id)] == [{"cycle": 0}]
    assert [e.kind for e in store.events(run_id)] == ["run_created"]
    assert len(store.list_runs()) == 1


def test_concurrent_creators_make_exactly_one_run(backend: Backend, store: Store) -> None:
    def create(s: Store, i: int) -> tuple[str, bool]:
        rec, created = s.create_run(
            run_id=f"run-{i}",
            task_key="shared-key",
            loop_name="loop",
            project="proj",
            spec_ref=None,
            loop_version=None,
            contract={},
            task={},
            initial_state={"by": i},
        )
        return rec.run_id, created

    results = _race(8, backend, create)
    assert all(isinstance(r, tuple) for r in results), results
    winners = [run_id for run_id, created in results if created]
    assert len(winners) == 1
    assert {run_id for run_id, _ in results} == set(winners)
    [run] = store.list_runs()
    assert run.run_id == winners[0]
    assert len(store.checkpoints(run.run_id)) == 1
    assert [e.kind for e in store.events(run.run_id)] == ["run_created"]


def test_get_run_by_id_prefix_and_task_key(store: Store) -> None:
    first = _create(store, "key-1", run_id="run_a1")
    _create(store, "key-2", run_id="runxa2")
    assert store.get_run("run_a1").task_key == "key-1"
    assert store.get_run("key-2").run_id == "runxa2"  # by task key
    assert store.get_run("runx").run_id == "runxa2"  # by unique prefix
    assert store.get_run("run_").run_id == first  # "_" is literal, not a wildcard
    with pytest.raises(lw.RunNotFoundError, match="ambiguous"):
        store.get_run("run")
    with pytest.raises(lw.RunNotFoundError):
        store.get_run("nope")
    with pytest.raises(lw.RunNotFoundError):
        store.get_run("%")  # "%" is literal too


def test_get_run_refuses_a_task_key_that_starts_another_runs_id(store: Store) -> None:
    """A task key that is also the start of another run's id named one of the two unseen
    (the task key won): a decision or a rollback could go to the run not meant. Both are
    named instead; a whole run id, a key that starts only its own run's id, and a key under
    8 characters (an invoice number: a store's random ids would start with it by chance) are
    no ambiguity."""
    keyed = _create(store, "abcdef01", run_id="0000aaaa")
    other = _create(store, "k-2", run_id="abcdef0123")
    with pytest.raises(lw.RunNotFoundError, match="ambiguous") as refused:
        store.get_run("abcdef01")
    assert keyed in str(refused.value) and other in str(refused.value)
    assert store.get_run("0000aaaa").task_key == "abcdef01"
    assert store.get_run("abcdef0123").task_key == "k-2"
    assert store.get_run("abcdef012").run_id == other  # a prefix of one id, no such key
    _create(store, "ABCD", run_id="0000bbbb")  # a prefix is compared as written, as an id is
    assert store.get_run("ABCD").run_id == "0000bbbb"
    with pytest.raises(lw.RunNotFoundError, match="no run 'ABCDE'"):
        store.get_run("ABCDE")  # (SQLite's LIKE ignored case: it found 'abcdef0123')
    own = _create(store, "1234", run_id="12345678")
    assert store.get_run("1234").run_id == own
    for key, run_id in (("abc", "0000cccc"), ("f", "0000dddd"), ("1001", "0000eeee")):
        _create(store, key, run_id=run_id)
        _create(store, f"other-{key}", run_id=f"{key}999999")
        assert store.get_run(key).run_id == run_id  # whatever ids the store holds
    _create(store, "abcdef0123", run_id="fedc0000")  # another run's whole id as a task key
    assert store.get_run("abcdef0123").run_id == other  # a whole run id names that run


def test_list_runs_filters_and_order(store: Store) -> None:
    ids = []
    for i, (project, loop) in enumerate([("p1", "a"), ("p2", "a"), ("p1", "b"), ("p1", "a")]):
        ids.append(_create(store, f"k{i}", project=project, loop_name=loop))
        time.sleep(0.002)  # distinct creation times
    token = store.acquire_lease(ids[1], "me", 60)
    _commit(store, ids[1], token, 1, run={"status": "accepted"})
    assert [r.run_id for r in store.list_runs()] == ids[::-1]  # newest first
    assert [r.run_id for r in store.list_runs(project="p1")] == [ids[3], ids[2], ids[0]]
    assert [r.run_id for r in store.list_runs(loop_name="b")] == [ids[2]]
    assert [r.run_id for r in store.list_runs(status="accepted")] == [ids[1]]
    assert [r.run_id for r in store.list_runs(status="pending", project="p1", loop_name="a")] == [
        ids[3],
        ids[0],
    ]
    assert [r.run_id for r in store.list_runs(limit=2)] == [ids[3], ids[2]]
    assert store.list_runs(project="none") == []


def test_a_status_no_run_can_have_is_refused_naming_the_statuses(store: Store) -> None:
    """polish52b: ``list_runs(status="acepted")`` returned [] (read as "no such runs"); only
    the CLI checked the value. The store refuses it, ``count_runs`` alike, naming the field."""
    _create(store, "k0")
    for read in (store.list_runs, store.count_runs):
        with pytest.raises(lw.ConfigError) as err:
            read(status="acepted")
        assert err.value.field == "status"
        assert "acepted" in str(err.value) and "accepted" in err.value.message
    assert store.count_runs(status="pending") == 1


def test_the_loops_and_projects_of_the_runs_are_listed(store: Store) -> None:
    """``run_loops`` (leftovers48: ``--loop`` typos name the loops there are, as ``--project``
    typos name the projects), its SQL and its default for a store written before it alike."""
    assert store.run_loops() == store.run_projects() == []
    for i, (project, loop) in enumerate([("p2", "b"), ("", "a"), ("p1", "b")]):
        _create(store, f"k{i}", project=project, loop_name=loop)
    assert store.run_loops() == ["a", "b"] and store.run_projects() == ["p1", "p2"]
    assert Store.run_loops(store) == ["a", "b"]  # the protocol's default, from list_runs


def test_a_listing_keeps_none_of_the_runs_tasks(backend: Backend, store: Store) -> None:
    """A run's task is kept (for the states the store resolves next) when the run is looked
    up, not for every row of a listing: ``list_runs`` of many runs copied and kept each
    task."""
    for i in range(20):
        _create(store, f"k{i}", task={"i": i})
    listing = backend.open()  # a store that created none of them
    try:
        kept = listing._tasks  # type: ignore[attr-defined]
        assert len(listing.list_runs()) == 20
        assert len(kept) == 0  # before: 20
        assert listing.get_run("run-k3").task == {"i": 3}
        assert list(kept) == ["run-k3"]
    finally:
        listing.close()


class _Racing(dict[str, Any]):
    """A kept-task dict another thread changes while it is walked (iterating it raises)."""

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("dictionary changed size during iteration")


def test_letting_a_kept_task_go_survives_a_concurrent_change(store: Store) -> None:
    """The oldest kept task is let go while another thread may change the dict: what that
    raises (RuntimeError; KeyError when the key is gone already) fails no lookup."""
    racing = _Racing()
    store.__dict__["_tasks"] = racing
    for i in range(70):
        _create(store, f"k{i}")
    for i in range(70):
        assert store.get_run(f"run-k{i}").task_key == f"k{i}"  # before: RuntimeError
    assert len(racing) == 70  # nothing let go while every walk raised


# --- checkpoints, commits, events ----------------------------------------------------------
def test_checkpoints_latest_by_index_and_in_order(store: Store) -> None:
    run_id, token = _leased(store)
    for seq in range(1, 13):
        _commit(store, run_id, token, seq)
    latest = store.latest_checkpoint(run_id)
    assert (latest.seq, latest.cycle, latest.state, latest.record) == (
        12,
        12,
        {"cycle": 12},
        {"cycle": 12},
    )
    assert [c.seq for c in store.checkpoints(run_id)] == list(range(13))
    assert store.checkpoints(run_id)[0].record is None
    assert store.get_run(run_id).last_seq == 12
    before = _snapshot(store, run_id)
    with pytest.raises(lw.ConflictError):
        _commit(store, run_id, token, 12, run={"status": "accepted"})  # written once
    assert _snapshot(store, run_id) == before
    with pytest.raises(lw.RunNotFoundError):
        store.latest_checkpoint("nope")


def test_deltas_versions_and_digests_read_back_resolved(store: Store) -> None:
    """The append-only layout (invariant 8): a checkpoint is a full head or a delta from the one
    before; values are version rows written once (a status may change); the latest state is
    one snapshot plus the deltas after it, resolved with the versions it needs."""
    from loopwright import _state_codec as codec

    s = lw.TaskState.from_task({"artifacts": {"doc": {"p": "v1", "q": {"big": [1, 2]}}}})
    h0 = codec.head(s)
    rows0, written = codec.unwritten_versions(s, {})
    run_id = _create(store, initial_state=h0, initial_versions=rows0)
    token = store.acquire_lease(run_id, "me", 60)
    prev, base = h0, 0
    for seq in range(1, 8):
        s.set_part("doc", "p", f"v{seq + 1}", seq)
        s.artifacts["doc"].parts["p"].current.status = "rejected" if seq < 7 else "accepted"
        s.cycle, s.stall = seq, seq
        h = codec.head(s)
        rows, written = codec.unwritten_versions(s, written)
        snapshot = seq % 3 == 0
        _commit(
            store,
            run_id,
            token,
            seq,
            state=h if snapshot else codec.delta(prev, h),
            base=None if snapshot else base,
            versions=rows,
            rejected=[(f"d{seq}", seq)] if seq < 7 else [],
        )
        base = seq if snapshot else base
        prev = h
    latest = store.latest_checkpoint(run_id)
    back = latest.task_state()
    assert (latest.seq, back.cycle, back.stall) == (7, 7, 7)
    assert back.values() == {"doc": {"p": "v8", "q": {"big": [1, 2]}}}
    assert back.artifacts["doc"].parts["p"].accepted.value == "v8"  # type: ignore[union-attr]
    assert [v.value for v in back.artifacts["doc"].parts["p"].versions] == [
        f"v{i}" for i in range(1, 9)
    ]
    assert sorted(store.rejected_digests(run_id)) == [f"d{i}" for i in range(1, 7)]
    assert store.is_rejected(run_id, "d3") and not store.is_rejected(run_id, "d7")
    # every checkpoint resolves to the state it recorded, statuses as they were then
    cks = store.checkpoints(run_id)
    assert [c.task_state().artifacts["doc"].parts["p"].count for c in cks] == list(range(1, 9))
    assert [c.state["stall"] for c in cks[1:]] == list(range(1, 8))
    assert cks[4].task_state().artifacts["doc"].parts["p"].current.status == "rejected"
    # a version's status is updated in place: one row per version
    assert [(v.n, v.status) for v in store.versions(run_id, "doc/p")][-2:] == [
        (7, "rejected"),
        (8, "accepted"),
    ]


def _one_cycle_chain(store: Store, key: str, marks: int) -> str:
    """A run whose ``marks`` checkpoints after its first are all of cycle 1, deltas on the
    first (a long cycle's parks and effects): every one shares its snapshot."""
    from loopwright import _state_codec as codec

    s = lw.TaskState.from_task({"artifacts": {"doc": {"p": "v0"}}})
    prev = codec.head(s)
    rows, written = codec.unwritten_versions(s, {})
    run_id = _create(store, key, initial_state=prev, initial_versions=rows)
    token = store.acquire_lease(run_id, "me", 60)
    for seq in range(1, marks + 1):
        s.set_part("doc", "p", f"v{seq}", 1)
        s.cycle, s.stall = 1, seq
        h = codec.head(s)
        rows, written = codec.unwritten_versions(s, written)
        delta = codec.delta(prev, h)
        _commit(store, run_id, token, seq, cycle=1, state=delta, base=0, versions=rows)
        prev = h
    return run_id


def test_checkpoints_of_a_cycle_read_their_shared_chain_once(store: Store) -> None:
    """``checkpoints_at`` read the delta chain from the snapshot again for every checkpoint
    built on it (rows read grew with the square of a cycle's checkpoints): it is read once,
    and each checkpoint's record alone. The checkpoints are those ``checkpoints`` gives."""
    read: list[int] = []
    rows_of = store._checkpoint_rows  # type: ignore[attr-defined]

    def counted(*args: Any, **kw: Any) -> Any:
        got = rows_of(*args, **kw)
        read.append(len(got))
        return got

    store._checkpoint_rows = counted  # type: ignore[attr-defined]
    counts = {}
    for marks in (4, 16):
        run_id = _one_cycle_chain(store, f"k{marks}", marks)
        read.clear()
        picked = store.checkpoints_at(run_id, 1)
        counts[marks] = sum(read)
        whole = store.checkpoints(run_id)
        assert [c.seq for c in picked] == list(range(marks + 1))
        assert [(c.seq, c.cycle, c.record, dict(c.fields)) for c in picked] == [
            (c.seq, c.cycle, c.record, dict(c.fields)) for c in whole
        ]
        assert [c.state for c in picked[::5]] == [c.state for c in whole[::5]]
    # one chain and a row a checkpoint: 9 and 33 rows (before: 15 and 153)
    assert counts[16] <= 4 * counts[4], counts


def test_a_fork_is_created_whole_with_its_inheritance(store: Store) -> None:
    """``create_run(forked_from=…)``: the link, the inherited journal entries (marked) and
    the origin's rejected digests, in the one creating transaction."""
    origin, token = _leased(store, "origin")
    store.journal_put(
        origin,
        token,
        key="effect:pay:1",
        kind="effect",
        cycle=1,
        status="done",
        data={"result": {"ok": True}},
        attempts=1,
    )
    [entry] = store.journal(origin)
    rec = _create(
        store,
        "fork",
        initial_state={"cycle": 3},
        forked_from=(origin, 3),
        inherited=[entry],
        initial_rejected=[("d1", 1), ("d2", 2)],
    )
    got = store.get_run(rec)
    assert (got.forked_from, got.forked_at, got.cycle) == (origin, 3, 3)
    assert got.to_dict()["forked_from"] == origin
    [mine] = store.journal(rec)
    assert (mine.key, mine.status, mine.data["inherited_from"]) == (
        "effect:pay:1",
        "done",
        origin,
    )
    assert sorted(store.rejected_rows(rec)) == [("d1", 1), ("d2", 2)]
    assert store.latest_checkpoint(rec).cycle == 3


def test_commit_updates_the_run_columns(store: Store) -> None:
    run_id, token = _leased(store)
    packet = {"zeta": 1, "alpha": {"best": "x"}}
    _commit(
        store,
        run_id,
        token,
        1,
        run={
            "status": "stopped",
            "stop_reason": "no_progress",
            "best_score": 0.75,
            "cost_usd": 0.125,
            "tokens": 123,
            "seconds": 1.5,
            "packet": packet,
            "ended_at": 1234.5,
            "held_out_passed": 1,  # the engine passes ints for booleans
        },
    )
    rec = store.get_run(run_id)
    assert (rec.status, rec.stop_reason, rec.best_score, rec.cost_usd) == (
        "stopped",
        "no_progress",
        0.75,
        0.125,
    )
    assert (rec.tokens, rec.seconds, rec.ended_at, rec.last_seq) == (123, 1.5, 1234.5, 1)
    assert rec.held_out_passed is True
    assert rec.packet == packet
    assert list(rec.packet or {}) == ["zeta", "alpha"]
    assert rec.updated_at >= rec.created_at
    with pytest.raises(lw.StoreError):
        _commit(store, run_id, token, 2, run={"task_key": "hijack"})
    assert store.get_run(run_id).task_key == "k"


def test_stale_token_commit_writes_nothing(store: Store) -> None:
    run_id, old = _leased(store)
    _commit(store, run_id, old, 1)
    new = store.acquire_lease(run_id, "me", 60)  # re-taken, e.g. after a restart
    assert new == old + 1
    before = _snapshot(store, run_id)
    with pytest.raises(lw.StaleLeaseError):
        _commit(store, run_id, old, 2, approval=_approval("ap1"), run={"status": "accepted"})
    assert _snapshot(store, run_id) == before
    assert store.approvals() == []
    assert _commit(store, run_id, new, 2) is False  # the current holder still can


def test_commit_returns_the_cancel_flag(store: Store) -> None:
    run_id, token = _leased(store)
    assert _commit(store, run_id, token, 1) is False
    rec = store.request_cancel(run_id)
    assert rec.cancel_requested is True
    assert _commit(store, run_id, token, 2) is True
    assert store.get_run(run_id).cancel_requested is True


def _req(run_id: str, token: int, seq: int, **kw: Any) -> CommitRequest:
    args: dict[str, Any] = {
        "cycle": seq,
        "state": {"cycle": seq, "big": 2**70, "text": "é ✓"},
        "record": {"cycle": seq},
        "events": [NewEvent(seq, "tick", {"n": seq})],
        "run": {"cycle": seq, "status": "running"},
    }
    args.update(kw)
    return CommitRequest(run_id, token, seq, **args)


def test_a_record_is_stored_packed_and_read_back_whole(store: Store) -> None:
    """The store writes a cycle's record in its stored form (``_record_codec.pack``) unless the
    request says it already is (``packed``: the engine packs it before masking it); either way
    a reader gets the record as the engine built it."""
    run_id, token = _leased(store)
    record = cycle_record()
    store.commit_request(_req(run_id, token, 1, record=record))
    store.commit_request(_req(run_id, token, 2, record=pack(record), packed=True))
    got = {c.seq: c.record for c in store.checkpoints(run_id) if c.seq}
    assert got == {1: record, 2: record}


def test_the_default_commit_request_gives_commit_the_whole_record(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that implements only ``commit`` (the base class's ``commit_request``) is handed
    the record whole, as before ``CommitRequest.packed`` existed."""
    run_id, token = _leased(store)
    record = cycle_record()
    seen: list[Any] = []
    monkeypatch.setattr(store, "commit", lambda *a, **kw: seen.append(kw["record"]) or False)
    req = _req(run_id, token, 1, record=pack(record), packed=True)
    assert Store.commit_request(store, req) is False
    assert Store.commit_request(store, _req(run_id, token, 2, record=record)) is False
    assert seen == [record, record]


def _closing_park(store: Store) -> tuple[str, int]:
    """A parked run with requests ``c1`` (pending), ``c2`` (decided) and ``c3`` (pending),
    its lease taken again, as a cancel takes it."""
    run_id = _park(store, "closing", "c1", "c2", "c3")
    store.decide_approval("c2", status="approved", by="ann", note="yes", now=5.0)
    return run_id, store.acquire_lease(run_id, "me", 60)


def _closed(store: Store, run_id: str) -> tuple[Any, ...]:
    got = {a.approval_id: (a.status, a.decided_by, a.note) for a in store.approvals(run_id=run_id)}
    events = [
        (e.data["approval_id"], e.data["status"], e.data["by"], e.data["note"])
        for e in store.events(run_id)
        if e.kind == "approval_decided"
    ]
    return got, events


CLOSED = (
    {
        "c1": ("cancelled", "carol", "the run was cancelled"),
        "c2": ("approved", "ann", "yes"),
        "c3": ("cancelled", "carol", "the run was cancelled"),
    },
    [
        ("c2", "approved", "ann", "yes"),
        ("c1", "cancelled", "carol", "the run was cancelled"),
        ("c3", "cancelled", "carol", "the run was cancelled"),
    ],
)


def test_a_commit_closes_pending_requests_in_its_transaction(store: Store) -> None:
    """``CommitRequest.closes``: the pending requests named are cancelled with their
    ``approval_decided`` events; one already decided stays as it was. A commit refused (a stale
    token) closes nothing."""
    run_id, token = _closing_park(store)
    closes = [ClosedApproval(a, "carol", "the run was cancelled") for a in ("c1", "c2", "c3")]
    store.acquire_lease(run_id, "me", 60)  # ``token`` is stale now
    with pytest.raises(lw.StaleLeaseError):
        store.commit_request(_req(run_id, token, 2, closes=closes))
    assert [a.status for a in store.approvals(run_id=run_id)] == ["pending", "approved", "pending"]
    token = store.acquire_lease(run_id, "me", 60)
    store.commit_request(_req(run_id, token, 2, run={"status": "cancelled"}, closes=closes))
    assert _closed(store, run_id) == CLOSED
    assert store.get_run(run_id).status == "cancelled"


def test_commit_many_closes_requests_and_commits_the_rest(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch with a commit that closes requests goes commit by commit (a cancel is rare);
    every commit of it is written, the closures with theirs."""
    seen = _spy_batches(store, monkeypatch)
    run_id, token = _closing_park(store)
    other, otok = _leased(store, "other")
    closes = [ClosedApproval(a, "carol", "the run was cancelled") for a in ("c1", "c2", "c3")]
    out = store.commit_many([_req(other, otok, 1), _req(run_id, token, 2, closes=closes)])
    # (the closing commit's flag is set: requests were pending on its run as it committed,
    # which the flag reports, ``_sql_statements.ASKED``; the other run's is not)
    assert out == [False, True] and seen == []
    assert _closed(store, run_id) == CLOSED
    assert store.latest_checkpoint(other).seq == 1


def test_the_default_commit_request_closes_requests_after_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that implements only ``commit`` (the base class's ``commit_request``) has the
    requests closed after its commit, through ``decide_approval``."""
    run_id, token = _closing_park(store)
    closes = [ClosedApproval(a, "carol", "the run was cancelled") for a in ("c1", "c2", "c3")]
    order: list[str] = []
    commit, decide = store.commit, store.decide_approval

    def spy_commit(*a: Any, **kw: Any) -> bool:
        order.append("commit")
        return commit(*a, **kw)

    def spy_decide(aid: str, **kw: Any) -> Any:
        order.append(aid)
        return decide(aid, **kw)

    monkeypatch.setattr(store, "commit", spy_commit)
    monkeypatch.setattr(store, "decide_approval", spy_decide)
    # (True: requests were pending on the run as it committed, which the flag reports)
    assert Store.commit_request(store, _req(run_id, token, 2, closes=closes)) is True
    assert order == ["commit", "c1", "c2", "c3"]
    assert _closed(store, run_id) == CLOSED


def _spy_batches(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record whether each commit_many took the one-pass batch or fell back."""
    seen: list[str] = []
    orig = store._commit_batch  # type: ignore[attr-defined]

    def batch(*a: Any) -> Any:
        try:
            out = orig(*a)
        except Exception:
            seen.append("fallback")
            raise
        seen.append("batch")
        return out

    monkeypatch.setattr(store, "_commit_batch", batch)
    return seen


def test_commit_many_fences_and_reports_each_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _spy_batches(store, monkeypatch)
    ok, tok = _leased(store, "ok")
    stale, old = _leased(store, "stale")
    store.acquire_lease(stale, "me", 60)  # re-taken (a restart): ``old`` is stale now
    cancel, ctok = _leased(store, "cancel")
    store.request_cancel(cancel)
    parked, ptok = _leased(store, "parked")
    before = _snapshot(store, stale)
    out = store.commit_many(
        [
            _req(ok, tok, 1),
            _req(stale, old, 1),
            _req(cancel, ctok, 1),
            _req(parked, ptok, 1, run={"status": "awaiting_approval"}, approvals=[_approval("q")]),
        ]
    )
    assert seen == ["batch"]
    assert out[0] is False and out[2] is True and out[3] is False
    assert isinstance(out[1], lw.StaleLeaseError)
    assert _snapshot(store, stale) == before  # nothing of the stale commit written
    cp = store.latest_checkpoint(ok)
    assert (cp.seq, cp.state["big"], cp.state["text"]) == (1, 2**70, "é ✓")
    assert [e.kind for e in store.events(ok)][-1] == "tick"
    assert (store.get_run(ok).last_seq, store.get_run(ok).status) == (1, "running")
    assert store.get_run(parked).status == "awaiting_approval"
    assert [a.approval_id for a in store.approvals(run_id=parked)] == ["q"]


def test_commit_many_isolates_a_conflict_and_keeps_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _spy_batches(store, monkeypatch)
    a, ta = _leased(store, "a")
    b, tb = _leased(store, "b")
    c, tc = _leased(store, "c")
    _commit(store, b, tb, 1)
    events_b = len(store.events(b))
    # b's checkpoint 1 exists already: the batch attempt fails, commit by commit follows
    out = store.commit_many([_req(a, ta, 1), _req(b, tb, 1), _req(c, tc, 1)])
    assert seen == ["fallback"]
    assert out[0] is False and out[2] is False
    assert isinstance(out[1], lw.ConflictError)
    assert [cp.seq for cp in store.checkpoints(a)] == [0, 1]
    assert [cp.seq for cp in store.checkpoints(c)] == [0, 1]
    assert store.get_run(c).last_seq == 1
    assert len(store.events(b)) == events_b
    assert store.latest_checkpoint(b).state == {"cycle": 1}  # the first write stands
    # the same run twice in one batch: both, in order (commit by commit)
    seen.clear()
    out = store.commit_many([_req(a, ta, 2), _req(a, ta, 3, run={"status": "accepted"})])
    assert out == [False, False] and seen == []
    assert [cp.seq for cp in store.checkpoints(a)] == [0, 1, 2, 3]
    assert store.get_run(a).status == "accepted"


def test_commit_many_a_bad_column_fails_alone_and_a_database_error_fails_all(
    backend: Backend, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _spy_batches(store, monkeypatch)
    a, ta = _leased(store, "a")
    b, tb = _leased(store, "b")
    out = store.commit_many([_req(a, ta, 1, run={"task_key": "hijack"}), _req(b, tb, 1)])
    assert seen == []  # checked before any transaction: straight to commit by commit
    assert isinstance(out[0], lw.StoreError) and "cannot update run columns" in str(out[0])
    assert out[1] is False and store.get_run(b).last_seq == 1
    # a failure of the database itself (locked, connection lost) is not retried commit by
    # commit — that would only double the wait — and nothing is written
    if backend.name == "sqlite":
        error: Exception = sqlite3.OperationalError("database is locked")
    else:
        import psycopg

        error = psycopg.OperationalError("server closed the connection unexpectedly")

    def broken(*args: Any) -> Any:
        raise error

    per_item: list[str] = []
    orig_in = store._commit_in  # type: ignore[attr-defined]
    monkeypatch.setattr(store, "_commit_batch", broken)
    monkeypatch.setattr(
        store, "_commit_in", lambda *a, **k: per_item.append("x") or orig_in(*a, **k)
    )
    with pytest.raises((sqlite3.OperationalError, lw.StoreError)):
        store.commit_many([_req(a, ta, 1), _req(b, tb, 2)])
    assert per_item == []
    assert [cp.seq for cp in store.checkpoints(a)] == [0]


def test_events_in_order(store: Store) -> None:
    run_id, token = _leased(store)
    _commit(store, run_id, token, 1, events=[NewEvent(1, "a"), NewEvent(1, "b", {"k": [1]})])
    store.append_events(run_id, [NewEvent(1, "c", {"z": 1, "a": "ü"}), NewEvent(2, "d")])
    _commit(store, run_id, token, 2, events=[NewEvent(2, "e")])
    events = store.events(run_id)
    assert [e.kind for e in events] == ["run_created", "a", "b", "c", "d", "e"]
    assert [e.cycle for e in events] == [0, 1, 1, 1, 2, 2]
    ids = [e.id for e in events]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert events[2].data == {"k": [1]}
    assert list(events[3].data) == ["z", "a"]
    assert events[3].data["a"] == "ü"
    assert [e.kind for e in store.events(run_id, after_id=events[3].id)] == ["d", "e"]
    assert store.events(run_id, after_id=events[-1].id) == []
    assert all(isinstance(e.ts, float) for e in events)


@pytest.mark.parametrize("n", [1, 4, EVENTS_IN_ONE, EVENTS_IN_ONE + 1, 3 * EVENTS_IN_ONE])
def test_a_commits_events_are_its_rows_in_order(store: Store, n: int) -> None:
    """Up to ``EVENTS_IN_ONE`` a commit's events are written by one multi-row INSERT, more by
    ``executemany``: either way each is one row, in the order given, and a commit refused
    writes none of them."""

    def events(seq: int, n: int) -> list[NewEvent]:
        return [NewEvent(seq, f"e{seq}.{i}", {"i": i, "t": "ü" * (i % 3)}) for i in range(n)]

    run_id, token = _leased(store)
    given = events(1, n) + events(2, 2) + events(3, n)
    for seq, part in ((1, given[:n]), (2, given[n : n + 2]), (3, given[n + 2 :])):
        _commit(store, run_id, token, seq, events=part)
    got = store.events(run_id)[1:]  # (after run_created)
    assert [(e.cycle, e.kind, e.data) for e in got] == [(e.cycle, e.kind, e.data) for e in given]
    ids = [e.id for e in got]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    with pytest.raises(lw.StaleLeaseError):
        _commit(store, run_id, token - 1, 4, events=events(4, n))
    assert len(store.events(run_id)) == len(got) + 1


def test_was_notified_answers_for_its_run_key_and_target_only(store: Store) -> None:
    """A webhook delivery's "was this posted?" (``web/_notify.py``): false until a
    ``notified`` marker of the key for the target is in the run's log, then true for that run,
    key and target only: not another target, another key (one that begins as it does, too),
    another run, nor an event of another kind holding the same key and target. The store's
    indexed read answers as the protocol's default (every marker of the run read) does."""
    run_id, other = _create(store, "k"), _create(store, "k2")
    asked = [
        (run_id, "approval:ap-1", "t1"),
        (run_id, "approval:ap-1", "t2"),
        (run_id, "approval:ap-10", "t1"),
        (run_id, "approval:ap-", "t1"),
        (other, "approval:ap-1", "t1"),
    ]

    def answers() -> list[bool]:
        got = [store.was_notified(*a) for a in asked]
        assert got == [LiveStore.was_notified(store, *a) for a in asked]
        return got

    assert answers() == [False] * 5
    same = {"key": "approval:ap-1", "target": "t1", "attempts": 1}
    store.append_events(run_id, [NewEvent(1, "tick", dict(same))])  # not a marker
    assert answers() == [False] * 5
    store.append_events(run_id, [NewEvent(1, NOTIFIED, dict(same))])
    assert answers() == [True, False, False, False, False]
    # a summary's marker (one post for many requests) marks its key as delivered too
    summary = {"key": "approval:ap-10", "target": "t1", "attempts": 2, "summary": True}
    store.append_events(run_id, [NewEvent(1, NOTIFIED, summary)])
    assert answers() == [True, False, True, False, False]


def _two_runs_log(store: Store, cycles: tuple[int, ...], between: str) -> str:
    """A run whose checkpoint ``seq`` is at cycle ``cycles[seq - 1]`` (a cycle started and
    decided), each followed by an event of kind ``between`` outside a commit; another run's
    cycle starts interleaved with it. Returns the first run's id."""
    run_id, token = _leased(store)
    other, other_token = _leased(store, "k2")
    for seq, n in enumerate(cycles, 1):
        _commit(store, other, other_token, seq, events=[NewEvent(n, "cycle_started")])
        _commit(
            store,
            run_id,
            token,
            seq,
            cycle=n,
            events=[NewEvent(n, "cycle_started"), NewEvent(n, "decision", {"n": n})],
        )
        store.append_events(run_id, [NewEvent(n, between, {"at": n})])
    return run_id


def test_the_log_read_from_its_end(store: Store) -> None:
    """What a live tracer of a resumed session reads of a long log (trace/_live.py): its end
    backwards a page at a time, how many events come before a place with the positions of
    some kinds among them, and how often cycles started before it — as the whole log says
    (the base class's defaults, which read it all)."""
    run_id = _two_runs_log(store, (1, 2, 3, 2, 3), "resumed")  # 2 and 3 redone (a rollback's)
    evs = store.events(run_id)
    ids = [e.id for e in evs]
    assert store.events_tail(run_id, before_id=None, limit=4) == evs[::-1][:4]
    assert store.events_tail(run_id, before_id=ids[5], limit=100) == evs[:5][::-1]
    assert store.events_tail(run_id, before_id=ids[0], limit=3) == []
    for at in (ids[0], ids[7], ids[-1] + 1):
        got = store.event_positions(run_id, before_id=at, skip={"cycle_started", "decision"})
        assert got == Store.event_positions(
            store, run_id, before_id=at, skip={"cycle_started", "decision"}
        )
        assert got[0] == sum(1 for i in ids if i < at)
        starts = store.cycle_starts(run_id, before_id=at, cycles={2, 3, 9})
        assert starts == Store.cycle_starts(store, run_id, before_id=at, cycles={2, 3, 9})
        for n in (1, 2, 3, 9):
            kw = {"event_id": at, "cycle": n}
            assert store.in_cycle(run_id, **kw) == Store.in_cycle(store, run_id, **kw)
            kw = {"after_id": ids[1], "before_id": at, "cycle": n}
            assert store.next_start(run_id, **kw) == Store.next_start(store, run_id, **kw)
    skip = {"cycle_started", "decision", "run_created"}
    count, run_level = store.event_positions(run_id, before_id=ids[-1] + 1, skip=skip)
    assert count == len(evs) == 16
    assert [(p, e.data["at"]) for p, e in run_level] == [(4, 1), (7, 2), (10, 3), (13, 2), (16, 3)]
    assert store.cycle_starts(run_id, before_id=ids[-1] + 1, cycles={2, 3, 9}) == {2: 2, 3: 2}
    assert store.event_positions(run_id, before_id=ids[0], skip=skip) == (0, [])
    assert store.event_positions(run_id, before_id=ids[3], skip=()) == (
        3,
        list(zip([1, 2, 3], evs[:3], strict=True)),
    )
    # open at its decision, not after it; ``next_start``: the next start of that cycle or later
    assert store.in_cycle(run_id, event_id=ids[2], cycle=1)
    assert not store.in_cycle(run_id, event_id=ids[3], cycle=1)
    assert store.next_start(run_id, after_id=ids[3], before_id=ids[-1], cycle=2) == 2
    assert store.next_start(run_id, after_id=ids[9], before_id=ids[-1], cycle=2) == 2
    assert store.next_start(run_id, after_id=ids[-2], before_id=ids[-1], cycle=1) is None


# --- approvals ---------------------------------------------------------------------------------
def test_approvals_persist_and_are_decided_once(store: Store) -> None:
    run_id = _park(store, "k", "ap1", "ap2")
    other = _park(store, "k2", "ap3")
    pending = store.approvals(run_id=run_id, status="pending")
    assert [a.approval_id for a in pending] == ["ap1", "ap2"]
    a = pending[0]
    assert (a.run_id, a.cycle, a.kind, a.rule, a.what, a.why) == (
        run_id,
        1,
        "risk",
        "rule",
        "do ap1",
        "money",
    )
    assert (a.evidence, a.diff, a.action_hash, a.expires_at) == (
        {"id": "ap1", "amounts": [1, 2]},
        "- a\n+ b",
        "hash-ap1",
        None,
    )
    assert (a.status, a.decided_by, a.decided_at, a.note, a.answer) == (
        "pending",
        None,
        None,
        None,
        None,
    )
    before = store.clock()
    d = store.decide_approval("ap1", status="denied", by="zoe", note="no", now=2.0)
    assert (d.status, d.decided_by, d.note) == ("denied", "zoe", "no")
    # written on the store's clock (edit47): the writer's ``now`` on SQLite (one host), the
    # server's at the decision on PostgreSQL, whatever the deciding host's clock says
    if store.url.startswith("sqlite"):
        assert d.decided_at == 2.0
    else:
        assert d.decided_at is not None and before <= d.decided_at <= store.clock()
    with pytest.raises(lw.ApprovalError, match="already denied"):
        store.decide_approval("ap1", status="approved", by="yan", note=None, now=3.0)
    with pytest.raises(lw.ApprovalError):
        store.decide_approval("missing", status="approved", by="yan", note=None, now=3.0)
    with pytest.raises(lw.ApprovalError):
        store.decide_approval("ap2", status="maybe", by="yan", note=None, now=3.0)
    assert [a.approval_id for a in store.approvals(status="pending")] == ["ap2", "ap3"]
    assert [a.approval_id for a in store.approvals(run_id=other)] == ["ap3"]
    decided = [e for e in store.events(run_id) if e.kind == "approval_decided"]
    assert [e.data["status"] for e in decided] == ["denied"]
    assert decided[0].data["by"] == "zoe"


def test_one_request_by_id_and_the_latest_decided(store: Store) -> None:
    """``approval(id)`` reads one request; ``decided_approvals(n)`` the ``n`` decided requests
    most recently requested, newest first, pending ones left out; ``count_approvals`` counts —
    each as the base class's default (which reads every request) has it."""
    run_id = _park(store, "k", "d1", "d2", "d3", "d4")
    for aid, status in (("d1", "approved"), ("d2", "denied"), ("d4", "approved")):
        store.decide_approval(aid, status=status, by="zoe", note=None, now=9.0)
    got = store.approval("d2")
    assert got is not None and (got.run_id, got.status, got.decided_by) == (run_id, "denied", "zoe")
    assert store.approval("nope") is None
    assert [a.approval_id for a in store.decided_approvals(10)] == ["d4", "d2", "d1"]
    assert [a.approval_id for a in store.decided_approvals(2)] == ["d4", "d2"]
    assert store.decided_approvals(0) == []
    for n in (0, 2, 10):
        assert Store.decided_approvals(store, n) == store.decided_approvals(n)
    counts = [store.count_approvals(), store.count_approvals(status="pending")]
    assert counts == [4, 1]
    assert counts == [Store.count_approvals(store), Store.count_approvals(store, status="pending")]
    assert Store.approval(store, "d2") == got


def test_expired_requests_are_the_pending_ones_past_their_expiry(store: Store) -> None:
    """``expired_requests`` reads the pending requests whose ``expires_at`` has passed on the
    store's clock, soonest expired first, at most ``limit``: as the base class's default
    (which reads every pending request) has it."""
    now = store.clock()
    run_id, token = _leased(store, "k")
    expiring = {"e1": now - 5, "e2": now - 50, "e3": now - 1, "later": now + 3600, "never": None}
    _commit(
        store, run_id, token, 1, run={"status": "awaiting_approval"},
        approvals=[_approval(a, expires_at=at) for a, at in expiring.items()],
    )  # fmt: skip
    store.release_lease(run_id, token)
    store.decide_approval("e3", status="denied", by="zoe", note=None, now=9.0)  # decided
    got = [a.approval_id for a in store.expired_requests(limit=10)]
    assert got == ["e2", "e1"]
    assert [a.approval_id for a in store.expired_requests(limit=1)] == ["e2"]
    assert store.expired_requests(limit=0) == []
    assert [a.approval_id for a in Store.expired_requests(store, limit=10)] == got


def test_answer_column_round_trips(store: Store) -> None:
    run_id = _park(store, "k", "q1")
    answer = {"choice": "b", "values": [1, 2.5, None], "nested": {"z": 1, "a": 2}}
    d = store.decide_approval("q1", status="answered", by="ann", note=None, now=5.0, answer=answer)
    assert d.answer == answer
    [stored] = store.approvals(run_id=run_id)
    assert stored.answer == answer
    assert list(stored.answer["nested"]) == ["z", "a"]
    [event] = [e for e in store.events(run_id) if e.kind == "approval_decided"]
    assert event.data["answer"] == answer


def test_duplicate_approval_request_writes_nothing(store: Store) -> None:
    run_id, token = _leased(store)
    _commit(store, run_id, token, 1, approval=_approval("ap1"))
    before = _snapshot(store, run_id)
    with pytest.raises(lw.ConflictError):
        _commit(store, run_id, token, 2, approvals=[_approval("ap2"), _approval("ap1")])
    assert _snapshot(store, run_id) == before


def test_two_deciders_race_exactly_one_wins(backend: Backend, store: Store) -> None:
    rounds = 5
    run_id = _park(store, "k", *(f"ap{i}" for i in range(rounds)))
    stores = [backend.open(), backend.open()]
    outcomes: list[list[str]] = [[], []]
    barrier = threading.Barrier(2)

    def decide(i: int) -> None:
        for r in range(rounds):
            barrier.wait()
            try:
                stores[i].decide_approval(
                    f"ap{r}", status="approved", by=f"p{i}", note=None, now=1.0
                )
                outcomes[i].append("won")
            except lw.ApprovalError:
                outcomes[i].append("lost")

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for s in stores:
        s.close()
    for r in range(rounds):
        assert sorted([outcomes[0][r], outcomes[1][r]]) == ["lost", "won"]
        winner = "p0" if outcomes[0][r] == "won" else "p1"
        [a] = [a for a in store.approvals(run_id=run_id) if a.approval_id == f"ap{r}"]
        assert (a.status, a.decided_by) == ("approved", winner)
    decided = [e for e in store.events(run_id) if e.kind == "approval_decided"]
    assert len(decided) == rounds


# --- the effect/retry journal -------------------------------------------------------------
def _put(store: Store, run_id: str, token: int, key: str, **kw: Any) -> Any:
    args: dict[str, Any] = {"kind": "effect", "cycle": 1, "status": "started", "data": {}}
    args.update(kw)
    return store.journal_put(run_id, token, key=key, **args)


def test_journal_put_and_get(store: Store) -> None:
    run_id, token = _leased(store)
    e1 = _put(store, run_id, token, "pay:1", data={"z": 1, "a": 2}, expect_status="")
    assert (e1.key, e1.kind, e1.status, e1.attempts, e1.data) == (
        "pay:1",
        "effect",
        "started",
        0,
        {"z": 1, "a": 2},
    )
    assert list(e1.data) == ["z", "a"]
    assert e1.created_at == e1.updated_at
    time.sleep(0.002)
    _put(store, run_id, token, "step:a", kind="retry", attempts=2)
    e2 = _put(
        store,
        run_id,
        token,
        "pay:1",
        status="done",
        data={"receipt": "r-1"},
        expect_status="started",
        events=[NewEvent(1, "effect_done", {"key": "pay:1"})],
    )
    assert (e2.status, e2.attempts, e2.data, e2.created_at) == (
        "done",
        0,
        {"receipt": "r-1"},
        e1.created_at,
    )
    assert e2.updated_at > e1.updated_at
    assert _put(store, run_id, token, "step:a", kind="retry").attempts == 2  # None keeps it
    assert [e.key for e in store.journal(run_id)] == ["pay:1", "step:a"]  # by created_at
    assert [e.key for e in store.journal(run_id, kind="retry")] == ["step:a"]
    assert [e.status for e in store.journal(run_id, key="pay:1")] == ["done"]
    assert store.journal(run_id, key="nope") == []
    _put(store, run_id, token, "step:b", kind="retry", cycle=2)
    # a resume reads only the retry entries of the cycle it runs next
    assert [e.key for e in store.journal(run_id, kind="retry", cycle=2)] == ["step:b"]
    assert [e.key for e in store.journal(run_id, cycle=1)] == ["pay:1", "step:a"]
    assert store.journal(run_id, kind="retry", cycle=3) == []
    assert [e.kind for e in store.events(run_id)][-1] == "effect_done"


def test_journal_expect_status_and_stale_token_write_nothing(store: Store) -> None:
    run_id, token = _leased(store)
    _put(store, run_id, token, "pay:1", status="done")
    before = _snapshot(store, run_id)
    events = [NewEvent(1, "should_not_appear")]
    with pytest.raises(lw.ConflictError, match="already exists"):
        _put(store, run_id, token, "pay:1", expect_status="", events=events)
    with pytest.raises(lw.ConflictError, match="expected"):
        _put(store, run_id, token, "pay:1", expect_status="started", events=events)
    with pytest.raises(lw.ConflictError, match="does not exist"):
        _put(store, run_id, token, "pay:2", expect_status="started", events=events)
    new = store.acquire_lease(run_id, "me", 60)
    before = _snapshot(store, run_id)
    with pytest.raises(lw.StaleLeaseError):
        _put(store, run_id, token, "pay:3", events=events)
    assert _snapshot(store, run_id) == before
    assert _put(store, run_id, new, "pay:3").status == "started"
    with pytest.raises(lw.RunNotFoundError):
        _put(store, "nope", token, "pay:1")


def test_an_undone_claim_is_taken_only_at_a_generation_never_handed_out(store: Store) -> None:
    # The redo generation of an undone business action is the store's: an intent taking a
    # compensated claim must ask for a generation above the claim's (a failed one: at least
    # the claim's, the same key tried again); asked for less, nothing is written.
    from loopwright._errors import EffectKeyMoved

    a, ta = _leased(store, "a")
    b, tb = _leased(store, "b")
    claim = ("spend", "pay:I6", "h")
    assert store.effect_claim("spend", "pay:I6") is None
    _put(store, a, ta, "effect:pay:I6", status="intent", data={"generation": 1}, claim=claim)
    _put(store, a, ta, "effect:pay:I6", status="compensated", claim=claim)
    got = store.effect_claim("spend", "pay:I6")
    assert got is not None and (got.run_id, got.status, got.generation) == (a, "compensated", 1)
    before = _snapshot(store, b)
    events = [NewEvent(1, "should_not_appear")]
    for stale in ({"generation": 1}, {}):  # the refunded charge's generation (1 when unsaid)
        with pytest.raises(EffectKeyMoved) as moved:
            _put(
                store,
                b,
                tb,
                "effect:pay:I6",
                status="intent",
                data=stale,
                claim=claim,
                events=events,
            )
        assert moved.value.generation == 2
    assert _snapshot(store, b) == before and store.journal(b) == []
    _put(store, b, tb, "effect:pay:I6", status="intent", data={"generation": 2}, claim=claim)
    got = store.effect_claim("spend", "pay:I6")
    assert got is not None and (got.run_id, got.status, got.generation) == (b, "claimed", 2)
    _put(store, b, tb, "effect:pay:I6", status="failed", claim=claim)
    # a failed action never happened: taken again under the same generation
    _put(store, a, ta, "effect:pay:I6~2", status="intent", data={"generation": 2}, claim=claim)
    got = store.effect_claim("spend", "pay:I6")
    assert got is not None and (got.run_id, got.status, got.generation) == (a, "claimed", 2)


# --- leases -------------------------------------------------------------------------------
def test_lease_acquire_conflict_renew_release(store: Store) -> None:
    run_id = _create(store)
    before = time.time()
    t1 = store.acquire_lease(run_id, "elsewhere:1:a", 60)
    assert t1 == 1
    rec = store.get_run(run_id)
    assert (rec.lease_owner, rec.fencing_token) == ("elsewhere:1:a", 1)
    assert rec.lease_expires_at is not None
    assert before + 59 < rec.lease_expires_at < time.time() + 61  # 60 s from the acquire
    with pytest.raises(lw.ConflictError, match="being executed"):
        store.acquire_lease(run_id, "elsewhere:2:b", 60)
    t2 = store.acquire_lease(run_id, "elsewhere:1:a", 60)  # the holder may re-take
    assert t2 == t1 + 1
    before = time.time()
    store.renew_lease(run_id, t2, 600)
    assert before + 599 < store.get_run(run_id).lease_expires_at < time.time() + 601
    with pytest.raises(lw.StaleLeaseError):
        store.renew_lease(run_id, t1, 600)
    store.release_lease(run_id, t1)  # stale: no error, no effect
    assert store.get_run(run_id).lease_owner == "elsewhere:1:a"
    store.release_lease(run_id, t2)
    rec = store.get_run(run_id)
    assert (rec.lease_owner, rec.lease_expires_at, rec.fencing_token) == (None, None, 2)
    assert store.acquire_lease(run_id, "elsewhere:2:b", 60) == 3
    with pytest.raises(lw.RunNotFoundError):
        store.acquire_lease("nope", "me", 60)


def test_expired_lease_is_taken_over_and_fences_the_old_holder(store: Store) -> None:
    run_id = _create(store)
    old = store.acquire_lease(run_id, "elsewhere:1:x", -1)  # already expired
    new = store.acquire_lease(run_id, "me", 60)
    assert new == old + 1
    with pytest.raises(lw.StaleLeaseError):
        _commit(store, run_id, old, 1)
    with pytest.raises(lw.StaleLeaseError):
        store.renew_lease(run_id, old, 60)


def test_lease_of_a_dead_local_process_is_taken_over(store: Store) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    host = socket.gethostname()
    run_id = _create(store)
    t1 = store.acquire_lease(run_id, f"{host}:{proc.pid}:dead:{PROCESS_SPACE}", 3600)
    t2 = store.acquire_lease(run_id, f"{host}:{os.getpid()}:me:{PROCESS_SPACE}", 60)
    assert t2 == t1 + 1
    store.release_lease(run_id, t2)
    store.acquire_lease(run_id, f"elsewhere-{host}:{proc.pid}:x:{PROCESS_SPACE}", 3600)
    with pytest.raises(lw.ConflictError):
        store.acquire_lease(run_id, f"{host}:{os.getpid()}:me:{PROCESS_SPACE}", 60)


def test_a_dead_looking_pid_of_another_pid_namespace_waits_out_its_lease(store: Store) -> None:
    # From an outside probe (helper-45): two containers with one hostname. A pid that is no
    # process here may be a live worker in the other namespace, inside a payment: taking its
    # run over at once paid twice. Its name's space differs, so it waits for the lease.
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    host = socket.gethostname()
    run_id = _create(store)
    for other in (
        f"{host}:{proc.pid}:live:another-space",  # same host name, another pid namespace
        f"{host}:{proc.pid}:old",  # a name from before names carried their space
    ):
        t = store.acquire_lease(run_id, other, 3600)
        with pytest.raises(lw.ConflictError):
            store.acquire_lease(run_id, f"{host}:{os.getpid()}:me:{PROCESS_SPACE}", 60)
        assert store.claim_runs(f"{host}:{os.getpid()}:c:{PROCESS_SPACE}", 60, limit=5) == []
        store.release_lease(run_id, t)


# --- claiming runnable runs -------------------------------------------------------------------
def test_claim_takes_pending_and_expired_runs(store: Store) -> None:
    run_id = _create(store)
    now = time.time()
    [(claimed, token)] = store.claim_runs("w1", 30, now=now)
    assert (claimed, token) == (run_id, 1)
    rec = store.get_run(run_id)
    assert (rec.lease_owner, rec.fencing_token) == ("w1", 1)
    assert rec.lease_expires_at == pytest.approx(now + 30)
    assert store.claim_runs("w2", 30, now=now + 10) == []  # the lease is live
    with pytest.raises(lw.ConflictError):
        store.acquire_lease(run_id, "w2", 30)
    assert store.claim_runs("w2", 30, now=now + 31) == [(run_id, 2)]  # expired: taken over
    assert store.get_run(run_id).lease_owner == "w2"
    with pytest.raises(lw.StaleLeaseError):
        _commit(store, run_id, token, 1)  # w1 is fenced off
    _commit(store, run_id, 2, 1)
    assert store.claim_runs("w3", 30, limit=0, now=now + 100) == []


def test_claim_passes_over_the_runs_it_is_told_to_exclude(store: Store) -> None:
    now = time.time()
    mine, token = _leased(store, "mine")
    _commit(store, mine, token, 1)  # running, its lease about to lapse
    pending = _create(store, "pending")
    later = now + 3600  # every lease has lapsed by then
    assert store.claim_runs("w1", 30, limit=5, now=later, exclude={mine}) == [(pending, 1)]
    assert store.claim_runs("w1", 30, limit=5, now=later + 60, exclude=[mine, pending]) == []
    assert store.get_run(mine).fencing_token == token  # untouched
    assert [r for r, _ in store.claim_runs("w2", 30, limit=5, now=later + 60)] == [
        mine,
        pending,
    ]


def test_claim_picks_only_runnable_runs(store: Store) -> None:
    now = time.time()
    free = _create(store, "free")
    running, token = _leased(store, "running")
    _commit(store, running, token, 1)  # interrupted: running, lease held...
    store.release_lease(running, token)  # ...then released
    live, _ = _leased(store, "live")  # a live lease elsewhere
    done, token = _leased(store, "done")
    _commit(store, done, token, 1, run={"status": "accepted"})
    store.release_lease(done, token)
    parked = _park(store, "parked", "ap-parked")
    decided = _park(store, "decided", "ap-decided")
    store.decide_approval("ap-decided", status="approved", by="ann", note=None, now=now)
    claimed = dict(store.claim_runs("w", 30, limit=10, now=now))
    assert set(claimed) == {free, running, decided}
    assert (claimed[free], claimed[running], claimed[decided]) == (1, 2, 2)
    assert all(store.get_run(r).lease_owner == "w" for r in claimed)
    assert store.get_run(parked).lease_owner is None
    assert store.get_run(live).lease_owner == "me"
    assert store.get_run(done).lease_owner is None
    store.decide_approval("ap-parked", status="denied", by="ann", note=None, now=now)
    assert store.claim_runs("w", 30, limit=10, now=now) == [(parked, 2)]


def test_claim_respects_limit_and_oldest_update_first(store: Store) -> None:
    ids = []
    for i in range(5):
        ids.append(_create(store, f"k{i}"))
        time.sleep(0.002)
    token = store.acquire_lease(ids[0], "me", 60)
    _commit(store, ids[0], token, 1)  # ids[0] is now the most recently updated
    store.release_lease(ids[0], token)
    now = time.time()
    first = store.claim_runs("w", 30, limit=3, now=now)
    assert [r for r, _ in first] == ids[1:4]
    assert [t for _, t in first] == [1, 1, 1]
    assert store.claim_runs("w", 30, limit=10, now=now) == [(ids[4], 1), (ids[0], 2)]
    assert store.claim_runs("w", 30, limit=10, now=now) == []


def test_concurrent_claimers_never_share_a_run(backend: Backend, store: Store) -> None:
    ids = {_create(store, f"k{i:02d}") for i in range(20)}
    # Each claimer's first claim is made before either goes on: a thread scheduled late on a
    # loaded machine found every run claimed by the other (`assert b` failed). From there on
    # the two race freely.
    first = threading.Barrier(2, timeout=60)

    def claim_all(s: Store, i: int) -> list[tuple[str, int]]:
        got = s.claim_runs(f"w{i}", 60, limit=2)
        first.wait()
        while batch := s.claim_runs(f"w{i}", 60, limit=2):
            got += batch
            time.sleep(0.005)  # a little work between claims lets the other claimer in
        return got

    results = _race(2, backend, claim_all)
    assert all(isinstance(r, list) for r in results), results
    a, b = ({run_id for run_id, _ in r} for r in results)
    assert a
    assert b  # both really claimed (the first claims ran together, however scheduled)
    assert not a & b
    assert a | b == ids
    assert len(results[0]) + len(results[1]) == 20  # nothing claimed twice by one claimer
    assert all(token == 1 for r in results for _, token in r)
    for i, claimed in enumerate((a, b)):
        assert all(store.get_run(r).lease_owner == f"w{i}" for r in claimed)


# --- migrations and opening -------------------------------------------------------------------
_OPEN_AND_REPORT = (
    "import sys; from loopwright.store import open_store; "
    "s = open_store(sys.argv[1]); print(s.schema_version); s.close()"
)


def test_concurrent_first_opens_both_migrate_safely(backend: Backend) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AND_REPORT, backend.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outputs]
    assert [out.strip() for out, _ in outputs] == [str(backend.latest)] * 3
    with backend.open() as s:
        assert s.schema_version == backend.latest
        assert s.list_runs() == []


def test_reopening_keeps_data_and_version(backend: Backend) -> None:
    with backend.open() as s:
        run_id = _create(s)
    with backend.open() as s:
        assert s.get_run(run_id).task_key == "k"
        assert s.schema_version == backend.latest


def test_a_newer_schema_is_refused(backend: Backend) -> None:
    backend.open().close()
    backend.execute("UPDATE loopwright_meta SET value='999' WHERE key='schema_version'")
    with pytest.raises(lw.StoreCorruptError, match="newer"):
        backend.open()


def test_a_schema_version_that_is_no_number_is_damage(backend: Backend) -> None:
    backend.open().close()
    backend.execute("UPDATE loopwright_meta SET value='x' WHERE key='schema_version'")
    with pytest.raises(lw.StoreCorruptError, match="'x', not a number: the store is damaged"):
        backend.open()


def test_a_deleted_schema_version_row_is_damage(backend: Backend) -> None:
    """The version row deleted, the tables kept: opening migrated from 0 and failed on its
    first CREATE TABLE ("table runs already exists", a StoreUnavailableError on SQLite, a
    plain StoreError on PostgreSQL), saying nothing of what was wrong."""
    with backend.open() as s:
        run_id = _create(s)
    backend.execute("DELETE FROM loopwright_meta")
    for _ in range(2):  # refused untouched: the same again
        with pytest.raises(lw.StoreCorruptError) as info:
            backend.open()
        assert "loopwright_meta holds no schema_version row" in str(info.value)
        assert "restore it from a backup" in str(info.value)
    backend.execute(f"INSERT INTO loopwright_meta VALUES('schema_version', '{backend.latest}')")
    with backend.open() as s:
        assert s.get_run(run_id).task_key == "k"


@pytest.mark.parametrize(
    ("column", "value"),
    [("state", "{bad"), ("state", '"bad"'), ("record", "{bad"), ("record", "[1]")],
)
def test_a_checkpoint_value_changed_in_sql_is_damage(
    backend: Backend, column: str, value: str
) -> None:
    """A checkpoint's JSON changed in SQL raised the parser's JSONDecodeError (or an
    AttributeError from deep in a reader) at the Python API, naming nothing."""
    with lw.Runtime(backend.url) as rt:
        run_id = rt.run_sync(_damaged_loop(3), DAMAGED_TASK, task_key="d").run_id
        seq = rt.store.latest_checkpoint(run_id).seq
        before = rt.store.checkpoints(run_id)
    if backend.name == "postgres" and value == "{bad":
        import psycopg

        # a json column refuses text that is no JSON: that damage cannot reach a reader
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            backend.execute(f"UPDATE checkpoints SET {column}='{value}' WHERE seq={seq}")
        with lw.Runtime(backend.url) as rt:
            assert rt.store.checkpoints(run_id) == before
        return
    backend.execute(f"UPDATE checkpoints SET {column}='{value}' WHERE seq={seq}")
    with lw.Runtime(backend.url) as rt:
        calls: list[Callable[[], Any]] = [
            lambda: rt.store.checkpoints(run_id),
            lambda: list(rt.store.iter_checkpoints(run_id)),
        ]
        if column == "state":
            calls += [
                lambda: rt.store.latest_checkpoint(run_id),
                lambda: rt.result(run_id),
                lambda: rt.resume_sync(run_id, _damaged_loop(5)),
            ]
        else:
            calls.append(lambda: list(rt.store.iter_records(run_id)))
        for call in calls:
            with pytest.raises(lw.StoreCorruptError) as info:
                call()
            text = str(info.value)
            assert f"store: {rt.store.url}: a stored value in table checkpoints" in text
            assert f"run {run_id!r}, row {seq}, column {column} is damaged" in text
            assert "restore it from a backup" in text


def test_request_cancel_of_an_unknown_run(store: Store) -> None:
    with pytest.raises(lw.RunNotFoundError):
        store.request_cancel("nope")


# --- backend-specific edges -------------------------------------------------------------------
def test_open_store_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "psycopg" or m.startswith("psycopg.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # an import of it now fails
    monkeypatch.delitem(sys.modules, "loopwright.store.postgres", raising=False)
    with pytest.raises(lw.ConfigError, match=r"pip install 'loopwright\[postgres\]'"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


@pytest.mark.postgres
def test_postgres_refuses_a_schema_with_foreign_tables(pg_schema: tuple[str, str]) -> None:
    import psycopg

    base, schema = pg_schema
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".runs (id INTEGER)')
    with pytest.raises(lw.StoreCorruptError, match="did not create"):
        open_store(f"{base}?schema={schema}")
    with psycopg.connect(base, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema=%s", (schema,)
        ).fetchall()
    assert tables == [("runs",)]  # untouched: no meta table, nothing else


@pytest.mark.postgres
def test_postgres_url_options_and_password_redaction(pg_schema: tuple[str, str]) -> None:
    from loopwright.store.postgres import PostgresStore, _split_url

    conninfo, shown, own = _split_url(
        "postgresql://u:s3cret@h:5432/db?sslmode=disable&schema=lw_x&pool_max=4"
    )
    assert conninfo == "postgresql://u:s3cret@h:5432/db?sslmode=disable"
    assert "s3cret" not in shown
    assert own == {"schema": "lw_x", "pool_max": "4"}
    base, schema = pg_schema
    with PostgresStore(base, schema=schema, pool_min=0, pool_max=2) as s:
        assert s.schema == schema
        assert s.list_runs() == []
    with pytest.raises(lw.ConfigError):
        PostgresStore(f"{base}?pool_max=many", schema=schema)
    with pytest.raises(lw.StoreError, match="cannot open store"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


@pytest.mark.postgres
def test_postgres_ends_a_transaction_a_frozen_process_left_idle(pg_url: str) -> None:
    # From an outside probe (helper-45): a worker SIGSTOPped inside a commit kept its row
    # locks, so its runs were neither taken over when its lease expired nor cancellable. The
    # server now ends such a transaction; here the "frozen" one is a connection of the store
    # that begins, locks a run, and does nothing more.
    import psycopg

    from loopwright.store.postgres import PostgresStore

    base, _, schema = pg_url.rpartition("schema=")
    with pytest.raises(lw.ConfigError, match="idle_tx_timeout_s"):
        PostgresStore(f"{pg_url}&idle_tx_timeout_s=-1")
    with PostgresStore(f"{pg_url}&idle_tx_timeout_s=1", pool_min=0, pool_max=2) as s:
        run_id = _create(s)
        with s._pool.connection() as frozen:
            assert frozen.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("1s",)
            frozen.execute("BEGIN")
            frozen.execute("SELECT 1 FROM runs WHERE run_id=%s FOR UPDATE", (run_id,))
            with psycopg.connect(base.rstrip("?&"), autocommit=True) as other:
                other.execute(f'SET search_path TO "{schema}"')
                # waits for the server to end the idle transaction: an event, not a duration
                # (the bound is only there so that a regression fails instead of hanging)
                for _ in range(600):
                    try:
                        other.execute(
                            "SELECT 1 FROM runs WHERE run_id=%s FOR UPDATE NOWAIT", (run_id,)
                        )
                        break
                    except psycopg.errors.LockNotAvailable:
                        time.sleep(0.1)
                else:
                    pytest.fail("the idle transaction kept its lock")
            with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
                frozen.execute("SELECT 1")  # its transaction, and session, were ended
    with open_store(pg_url) as s, s._pool.connection() as conn:  # type: ignore[attr-defined]
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("15s",)


@pytest.mark.postgres
def test_postgres_ends_a_transaction_left_idle_after_a_batch_write(pg_url: str) -> None:
    # From an outside probe (helper-56): frozen right after a commit's several-row INSERT
    # (events, rejected digests), the session stayed idle in transaction for good: psycopg's
    # executemany pipelines, and after a pipeline the server does not arm the timeout. The
    # store's batch writes now go as plain statements.
    import psycopg

    from loopwright.store._rows import event_row
    from loopwright.store.postgres import PostgresStore

    base, _, schema = pg_url.rpartition("schema=")
    with PostgresStore(f"{pg_url}&idle_tx_timeout_s=1", pool_min=0, pool_max=2) as s:
        run_id = _create(s)
        events = [NewEvent(0, "note", {"i": i}) for i in range(3)]
        with s._pool.connection() as frozen:
            frozen.execute("BEGIN")
            frozen.execute("SELECT 1 FROM runs WHERE run_id=%s FOR UPDATE", (run_id,))
            rows = [event_row(run_id, e, time.time(), s._js) for e in events]
            s._executemany(frozen, s._q.insert_event, rows)
            with psycopg.connect(base.rstrip("?&"), autocommit=True) as other:
                other.execute(f'SET search_path TO "{schema}"')
                for _ in range(300):  # an event, not a duration (see the test above)
                    try:
                        other.execute(
                            "SELECT 1 FROM runs WHERE run_id=%s FOR UPDATE NOWAIT", (run_id,)
                        )
                        break
                    except psycopg.errors.LockNotAvailable:
                        time.sleep(0.1)
                else:
                    pytest.fail("the transaction left idle after a batch write kept its lock")
            with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
                frozen.execute("SELECT 1")


def test_postgres_batch_writes_are_multi_row_statements_with_executemany_semantics() -> None:
    from loopwright.store.postgres import MAX_PARAMS, multi_row

    ins = "INSERT INTO t(a, b) VALUES(%s,%s) ON CONFLICT DO NOTHING"
    [(sql, args)] = list(multi_row(ins, [(1, 2), (3, 4), (5, 6)]))
    assert sql == "INSERT INTO t(a, b) VALUES (%s,%s), (%s,%s), (%s,%s) ON CONFLICT DO NOTHING"
    assert args == [1, 2, 3, 4, 5, 6]
    # an upsert keeps the last row of a key, as three upserts in turn would
    up = (
        "INSERT INTO versions(run_id, ref, n, value) VALUES(%s,%s,%s,%s) "
        "ON CONFLICT(run_id, ref, n) DO UPDATE SET value=excluded.value"
    )
    [(sql, args)] = list(
        multi_row(up, [("r", "a", 1, "x"), ("r", "b", 1, "y"), ("r", "a", 1, "z")])
    )
    assert sql.count("(%s,%s,%s,%s)") == 2
    assert args == ["r", "a", 1, "z", "r", "b", 1, "y"]
    # large batches are cut under the protocol's parameter limit
    many = list(multi_row(ins, [(i, i) for i in range(MAX_PARAMS)]))
    assert len(many) == 2 and sum(len(a) for _s, a in many) == 2 * MAX_PARAMS
    # anything else (an UPDATE), or one row, goes as it is
    upd = "UPDATE runs SET x=%s WHERE run_id=%s"
    assert list(multi_row(upd, [(1, "a"), (2, "b")])) == [(upd, (1, "a")), (upd, (2, "b"))]
    assert list(multi_row(ins, [(1, 2)])) == [(ins, (1, 2))]


@pytest.mark.postgres
def test_postgres_claimers_skip_locked_runs_without_waiting(pg_url: str) -> None:
    import psycopg

    base, _, schema = pg_url.rpartition("schema=")
    with open_store(pg_url) as s:
        ids = [_create(s, f"k{i}") for i in range(3)]
        with psycopg.connect(base.rstrip("?&"), autocommit=True) as locker:
            locker.execute(f'SET search_path TO "{schema}"')
            with locker.transaction():  # another claimer (or a commit) holds the oldest run
                locker.execute("SELECT 1 FROM runs WHERE run_id=%s FOR UPDATE", (ids[0],))
                got: list[list[tuple[str, int]]] = []
                t = threading.Thread(target=lambda: got.append(s.claim_runs("w", 60, limit=3)))
                t.start()
                t.join(timeout=60)  # a claim that waits for the lock waits until it is freed
                assert not t.is_alive(), "claim_runs waited for a locked row"
        t.join(timeout=60)
        assert got == [[(ids[1], 1), (ids[2], 1)]]
        assert s.claim_runs("w", 60, limit=3) == [(ids[0], 1)]


@pytest.mark.postgres
def test_postgres_a_decision_takes_the_run_before_the_request(pg_url: str) -> None:
    """A commit locks the run's row, then the requests it closes (a cancel); a decision takes
    them in the same order, so the two wait for each other instead of deadlocking. Held here:
    the run's row, as a cancel's commit holds it. The decision must wait for it without
    having taken the request's row."""
    import psycopg

    base, _, schema = pg_url.rpartition("schema=")
    with open_store(pg_url) as s:
        run_id = _park(s, "k", "ap-lock")
        with psycopg.connect(base.rstrip("?&"), autocommit=True) as locker:
            locker.execute(f'SET search_path TO "{schema}"')
            with locker.transaction():
                locker.execute("SELECT 1 FROM runs WHERE run_id=%s FOR UPDATE", (run_id,))
                got: list[Any] = []
                t = threading.Thread(
                    target=lambda: got.append(
                        s.decide_approval("ap-lock", status="approved", by="x", note=None, now=1.0)
                    )
                )
                t.start()
                # until the decision waits on a lock (a state, not a duration: the bound only
                # stops a broken run from hanging)
                waiting = 0
                for _ in range(6000):
                    waiting = locker.execute(  # backends this transaction blocks
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
                    ).fetchone()[0]
                    if waiting or not t.is_alive():
                        break
                    threading.Event().wait(0.01)
                assert waiting, "the decision did not wait for the run's row"
                with psycopg.connect(base.rstrip("?&"), autocommit=True) as probe:
                    probe.execute(f'SET search_path TO "{schema}"')
                    with probe.transaction():  # the request's row is free: no lock was taken
                        probe.execute(
                            "SELECT 1 FROM approvals WHERE approval_id=%s FOR UPDATE NOWAIT",
                            ("ap-lock",),
                        )
        t.join(timeout=60)
        assert [a.status for a in got] == ["approved"]


@pytest.mark.postgres
def test_postgres_leases_follow_the_server_clock(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers on hosts whose clocks disagree still agree on who holds a lease: expiry is set
    and compared on the database server's clock."""
    from loopwright.store import (  # the shared SQL core's modules read the writer's clock
        _sql_commit,
        _sql_core,
        _sql_journal,
        _sql_migrations,
        _sql_reads,
        _sql_runs,
    )

    real = time.time
    skew = {"s": 0.0}

    class SkewedTime:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        @staticmethod
        def time() -> float:
            return real() + skew["s"]

    sqlmods = (_sql_commit, _sql_core, _sql_journal, _sql_migrations, _sql_reads, _sql_runs)
    for sqlmod in sqlmods:
        monkeypatch.setattr(sqlmod, "time", SkewedTime())
    a, b = open_store(pg_url), open_store(pg_url)
    try:
        run_id = _create(a, "clock")
        token = a.acquire_lease(run_id, "w1", 60)
        skew["s"] = 3600.0  # b's host runs an hour ahead
        assert b.claim_runs("w2", 60) == []  # the lease is live on the server's clock
        with pytest.raises(lw.ConflictError, match=r"lease for \d+ s more"):
            b.acquire_lease(run_id, "w2", 60)
        # a commit from a host an hour ahead keeps "30 s from now", not "an hour and 30 s"
        # (bounds taken around each call: however long it takes, not how fast it is)
        t0 = real()
        _commit(a, run_id, token, 1, run={"lease_expires_at": time.time() + 3600 + 30})
        expires, t1 = a.get_run(run_id).lease_expires_at, real()
        assert t0 + 25 - (t1 - t0) < expires < t1 + 35, (expires - t0, t1 - t0)
        t0 = real()
        a.renew_lease(run_id, token, 10)
        expires, t1 = a.get_run(run_id).lease_expires_at, real()
        assert t0 + 5 < expires < t1 + 15, (expires - t0, t1 - t0)
        # b's host an hour behind: a lease that ran out on the server is free for it at once
        a.renew_lease(run_id, token, 0.5)
        time.sleep(0.8)
        skew["s"] = -3600.0
        assert b.claim_runs("w2", 60) == [(run_id, token + 1)]
    finally:
        a.close()
        b.close()


def test_a_run_pages_counts_and_kinds_read_in_the_store(store: Store) -> None:
    """The run page's counts by kind and its events of some kinds (the newest ``limit``,
    oldest first) are what the base class's defaults, reading the whole log, say; another
    run's events are not counted."""
    run_id = _two_runs_log(store, (1, 2, 3, 2), "edited")
    counts = store.event_counts(run_id)
    assert counts == Store.event_counts(store, run_id)
    assert counts["cycle_started"] == counts["decision"] == counts["edited"] == 4
    assert sum(counts.values()) == len(store.events(run_id))
    assert store.event_counts("no-such-run") == {}
    for kinds in ({"edited"}, {"edited", "decision"}, {"nothing"}, set()):
        for limit in (None, 0, 1, 3, 100):
            got = store.events_of_kinds(run_id, kinds, limit=limit)
            assert got == Store.events_of_kinds(store, run_id, kinds, limit=limit)
    newest = store.events_of_kinds(run_id, {"edited"}, limit=2)
    assert [e.data["at"] for e in newest] == [3, 2]
    # a limit over the kinds' count (below twice it: where a negative slice start cut some)
    # gives every one of them, in the store and in the base class
    every = [e for e in store.events(run_id) if e.kind == "edited"]
    for limit in (4, 5, 7, 8):
        assert store.events_of_kinds(run_id, {"edited"}, limit=limit) == every
        assert Store.events_of_kinds(store, run_id, {"edited"}, limit=limit) == every
