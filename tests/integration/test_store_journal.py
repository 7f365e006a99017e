"""The store's effect/retry journal, approval answers, multi-approval commits, schema v2."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.store import JournalEntry, NewApproval, NewEvent
from loopwright.store._schema import SQLITE_MIGRATIONS
from loopwright.store.sqlite import SQLiteStore


def _create(store: SQLiteStore, key: str = "k") -> str:
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


def _leased(store: SQLiteStore, key: str = "k") -> tuple[str, int]:
    run_id = _create(store, key)
    return run_id, store.acquire_lease(run_id, "me", 60)


def _put(store: SQLiteStore, run_id: str, token: int, key: str, **kw: Any) -> JournalEntry:
    args: dict[str, Any] = {"kind": "effect", "cycle": 1, "status": "started", "data": {}}
    args.update(kw)
    return store.journal_put(run_id, token, key=key, **args)


def _approval(approval_id: str, cycle: int = 1) -> NewApproval:
    return NewApproval(
        approval_id, cycle, "risk", "rule", f"do {approval_id}", "why", {"id": approval_id},
        None, f"hash-{approval_id}", None,
    )  # fmt: skip


def _snapshot(store: SQLiteStore, run_id: str) -> tuple[Any, ...]:
    return (
        store.journal(run_id),
        [(e.id, e.kind, e.data) for e in store.events(run_id)],
        store.get_run(run_id),
    )


# --- journal ------------------------------------------------------------------------------


def test_insert_update_and_list(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        before = time.time()
        first = _put(s, run_id, token, "send:1", data={"to": "a@b"}, attempts=1)
        assert first == JournalEntry(
            run_id, "send:1", "effect", 1, "started", {"to": "a@b"}, 1,
            first.created_at, first.created_at,
        )  # fmt: skip
        assert first.created_at >= before
        time.sleep(0.01)
        done = _put(s, run_id, token, "send:1", cycle=2, status="done", data={"id": 7}, attempts=2)
        assert (done.status, done.cycle, done.data, done.attempts) == ("done", 2, {"id": 7}, 2)
        assert done.created_at == first.created_at  # an update keeps the creation time
        assert done.updated_at > first.updated_at
        time.sleep(0.01)
        _put(s, run_id, token, "retry:x", kind="retry", data={"err": "timeout"})
        _put(s, run_id, token, "charge:1", status="started")

        listed = s.journal(run_id)
        assert [e.key for e in listed] == ["send:1", "retry:x", "charge:1"]  # oldest first
        assert listed[0] == done
        assert [e.key for e in s.journal(run_id, kind="effect")] == ["send:1", "charge:1"]
        assert [e.key for e in s.journal(run_id, kind="retry")] == ["retry:x"]
        assert s.journal(run_id, key="retry:x")[0].data == {"err": "timeout"}
        assert s.journal(run_id, kind="retry", key="send:1") == []
        assert s.journal("another-run") == []
        assert done.to_dict() == {
            "run_id": run_id,
            "key": "send:1",
            "kind": "effect",
            "cycle": 2,
            "status": "done",
            "data": {"id": 7},
            "attempts": 2,
            "created_at": done.created_at,
            "updated_at": done.updated_at,
        }


def test_entries_with_equal_creation_time_are_ordered_by_key(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        for key in ("b", "c", "a"):
            _put(s, run_id, token, key)
        s._db.execute("UPDATE journal SET created_at=1.0")
        assert [e.key for e in s.journal(run_id)] == ["a", "b", "c"]


def test_attempts_none_keeps_the_stored_count(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        assert _put(s, run_id, token, "k1").attempts == 0  # default on insert
        assert _put(s, run_id, token, "k1", attempts=3).attempts == 3
        kept = _put(s, run_id, token, "k1", status="failed", attempts=None)
        assert (kept.status, kept.attempts) == ("failed", 3)
        assert s.journal(run_id, key="k1")[0].attempts == 3
        assert _put(s, run_id, token, "k1", attempts=0).attempts == 0  # explicit 0 is honoured


def test_events_are_appended_in_the_same_write(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        n = len(s.events(run_id))
        _put(
            s,
            run_id,
            token,
            "send:1",
            events=[NewEvent(1, "effect_started", {"key": "send:1"}), NewEvent(1, "note")],
        )
        new = s.events(run_id)[n:]
        assert [(e.cycle, e.kind, e.data) for e in new] == [
            (1, "effect_started", {"key": "send:1"}),
            (1, "note", {}),
        ]


def test_stale_token_is_rejected_and_writes_nothing(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, old = _leased(s)
        _put(s, run_id, old, "send:1", attempts=1)
        new = s.acquire_lease(run_id, "me", 60)
        assert new > old
        before = _snapshot(s, run_id)
        ev = [NewEvent(1, "effect_done", {"key": "send:1"})]
        with pytest.raises(lw.StaleLeaseError, match="stale"):
            _put(s, run_id, old, "send:1", status="done", attempts=2, events=ev)  # update
        with pytest.raises(lw.StaleLeaseError):
            _put(s, run_id, old, "send:2", events=ev)  # insert
        assert _snapshot(s, run_id) == before
        assert s.journal(run_id, key="send:2") == []
        # the current holder still writes
        assert _put(s, run_id, new, "send:1", status="done").status == "done"
        stored = s._db.execute("SELECT fencing_token FROM journal WHERE key='send:1'").fetchone()
        assert stored[0] == new


def test_unknown_run_is_reported(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        with pytest.raises(lw.RunNotFoundError):
            _put(s, "nope", 1, "k")
        assert s.journal("nope") == []


def test_expect_status_must_not_exist(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        created = _put(s, run_id, token, "send:1", expect_status="", data={"v": 1})
        assert created.status == "started"
        before = _snapshot(s, run_id)
        with pytest.raises(lw.ConflictError, match="already exists"):
            _put(
                s,
                run_id,
                token,
                "send:1",
                status="done",
                data={"v": 2},
                expect_status="",
                events=[NewEvent(1, "dup")],
            )
        assert _snapshot(s, run_id) == before
        assert s.journal(run_id)[0].data == {"v": 1}


def test_expect_status_wrong_or_missing(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        _put(s, run_id, token, "send:1", status="started", attempts=1)
        before = _snapshot(s, run_id)
        with pytest.raises(lw.ConflictError, match="has status 'started', expected 'pending'"):
            _put(s, run_id, token, "send:1", status="done", expect_status="pending",
                 events=[NewEvent(1, "x")])  # fmt: skip
        with pytest.raises(lw.ConflictError, match="does not exist"):
            _put(s, run_id, token, "send:2", status="done", expect_status="started",
                 events=[NewEvent(1, "x")])  # fmt: skip
        assert _snapshot(s, run_id) == before
        # the matching status lets the transition through
        done = _put(s, run_id, token, "send:1", status="done", expect_status="started")
        assert (done.status, done.attempts) == ("done", 1)


def test_journal_survives_reopening(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        written = [
            _put(s, run_id, token, "a", data={"n": [1, 2]}, attempts=2),
            _put(s, run_id, token, "b", kind="retry", status="failed"),
        ]
    with SQLiteStore(store_path) as s:
        assert s.journal(run_id) == written
        assert s.journal(run_id, kind="retry") == written[1:]


# --- approvals ------------------------------------------------------------------------------


def test_decide_approval_stores_the_answer(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        s.commit(
            run_id,
            token,
            seq=1,
            cycle=1,
            state={},
            record=None,
            events=[],
            run={"status": "awaiting_approval"},
            approvals=[_approval("ap1"), _approval("ap2")],
        )
        [pending, _] = s.approvals(run_id=run_id)
        assert pending.answer is None
        answer = {"choice": "b", "amount": 12.5, "tags": ["x"]}
        d = s.decide_approval("ap1", status="approved", by="z", note=None, now=2.0, answer=answer)
        assert d.answer == answer
        assert d.to_dict()["answer"] == answer
        plain = s.decide_approval("ap2", status="denied", by="z", note="no", now=3.0)
        assert plain.answer is None
        decided = {
            e.data["approval_id"]: e.data for e in s.events(run_id) if e.kind == "approval_decided"
        }
        assert decided["ap1"]["answer"] == answer
        assert "answer" not in decided["ap2"]
    with SQLiteStore(store_path) as s:
        by_id = {a.approval_id: a for a in s.approvals(run_id=run_id)}
        assert by_id["ap1"].answer == answer
        assert by_id["ap2"].answer is None
        raw = s._db.execute("SELECT answer FROM approvals WHERE approval_id='ap1'").fetchone()
        assert json.loads(raw[0]) == answer


def test_commit_persists_several_approvals(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        s.commit(
            run_id,
            token,
            seq=1,
            cycle=1,
            state={"cycle": 1},
            record=None,
            events=[NewEvent(1, "parked")],
            run={"status": "awaiting_approval"},
            approval=_approval("ap0"),
            approvals=[_approval("ap1"), _approval("ap2")],
        )
        pending = s.approvals(run_id=run_id, status="pending")
        assert sorted(a.approval_id for a in pending) == ["ap0", "ap1", "ap2"]
        by_id = {a.approval_id: a for a in pending}
        assert (by_id["ap2"].what, by_id["ap2"].evidence, by_id["ap2"].action_hash) == (
            "do ap2",
            {"id": "ap2"},
            "hash-ap2",
        )
        assert len({a.requested_at for a in pending}) == 1  # one transaction


def test_commit_with_duplicate_approvals_writes_nothing(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, token = _leased(s)
        before = (s.checkpoints(run_id), s.events(run_id), s.get_run(run_id))
        with pytest.raises(lw.ConflictError, match="ap1"):
            s.commit(
                run_id,
                token,
                seq=1,
                cycle=1,
                state={},
                record=None,
                events=[NewEvent(1, "parked")],
                run={"status": "awaiting_approval"},
                approvals=[_approval("ap1"), _approval("ap1")],
            )
        assert (s.checkpoints(run_id), s.events(run_id), s.get_run(run_id)) == before
        assert s.approvals() == []


def test_stale_commit_writes_none_of_the_approvals(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id, old = _leased(s)
        s.acquire_lease(run_id, "me", 60)
        with pytest.raises(lw.StaleLeaseError):
            s.commit(
                run_id,
                old,
                seq=1,
                cycle=1,
                state={},
                record=None,
                events=[],
                run={},
                approvals=[_approval("ap1"), _approval("ap2")],
            )
        assert s.approvals() == []


# --- schema v2 ------------------------------------------------------------------------------


def _v1_store(path: Path) -> None:
    """A store file as loopwright with only schema version 1 wrote it, with one parked run."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE loopwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for statement in SQLITE_MIGRATIONS[0]:
        db.execute(statement)
    db.execute("INSERT INTO loopwright_meta(key, value) VALUES('schema_version', '1')")
    db.execute(
        "INSERT INTO runs(run_id, task_key, loop_name, project, status, contract, task, "
        "created_at, updated_at, fencing_token) VALUES(?,?,?,?,?,?,?,?,?,?)",
        ("run-old", "old-key", "l", "p", "awaiting_approval", "{}", '{"x":1}', 1.0, 1.0, 4),
    )
    db.execute(
        "INSERT INTO checkpoints(run_id, seq, cycle, state, record, fencing_token, created_at) "
        "VALUES('run-old', 0, 0, '{\"cycle\":0}', NULL, 0, 1.0)"
    )
    db.execute(
        "INSERT INTO approvals(approval_id, run_id, cycle, kind, rule, what, why, evidence, "
        "diff, action_hash, status, requested_at) "
        "VALUES('ap-old', 'run-old', 0, 'risk', NULL, 'w', 'y', '{}', NULL, 'h', 'pending', 1.0)"
    )
    db.commit()
    db.close()


def test_v1_store_is_migrated_in_place_and_keeps_its_data(store_path: Path) -> None:
    _v1_store(store_path)
    assert len(SQLITE_MIGRATIONS) >= 2
    with SQLiteStore(store_path) as s:
        assert s.schema_version == len(SQLITE_MIGRATIONS)
        run = s.get_run("run-old")
        assert (run.task_key, run.status, run.task, run.fencing_token) == (
            "old-key",
            "awaiting_approval",
            {"x": 1},
            4,
        )
        assert s.latest_checkpoint("run-old").state == {"cycle": 0}
        [old] = s.approvals(run_id="run-old")
        assert (old.approval_id, old.status, old.answer) == ("ap-old", "pending", None)
        assert s.journal("run-old") == []
        token = s.acquire_lease("run-old", "me", 60)
        assert token == 5
        assert _put(s, "run-old", token, "e1").key == "e1"
        decided = s.decide_approval(
            "ap-old", status="approved", by="z", note=None, now=2.0, answer="yes"
        )
        assert decided.answer == "yes"
        index = s._db.execute(
            "SELECT sql FROM sqlite_master WHERE type='index' AND tbl_name='journal'"
        ).fetchall()
        assert any("run_id, kind" in (r[0] or "") for r in index)
    with SQLiteStore(store_path) as s:  # reopening a v2 file migrates nothing again
        assert s.schema_version == len(SQLITE_MIGRATIONS)
        assert [e.key for e in s.journal("run-old")] == ["e1"]
        assert s.list_runs()[0].run_id == "run-old"
