"""The SQLite store: durability settings, schema, refusal of foreign files, leases, races."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._owners import PROCESS_SPACE
from loopwright.store import NewApproval, NewEvent, open_store
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


def _commit(store: SQLiteStore, run_id: str, token: int, seq: int, **kw: Any) -> bool:
    return store.commit(
        run_id,
        token,
        seq=seq,
        cycle=seq,
        state={"cycle": seq},
        record={"cycle": seq},
        events=[NewEvent(seq, "tick", {"n": seq})],
        run={"cycle": seq, "status": "running"},
        **kw,
    )


def test_wal_and_full_sync(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        assert isinstance(s, SQLiteStore)
        assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert s.schema_version == len(SQLITE_MIGRATIONS)
    raw = sqlite3.connect(store_path)
    row = raw.execute("SELECT value FROM loopwright_meta WHERE key='schema_version'").fetchone()
    raw.close()
    assert int(row[0]) == len(SQLITE_MIGRATIONS)


def test_process_durability_is_opt_in(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/p.db?durability=process") as s:
        assert isinstance(s, SQLiteStore)
        assert s._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with pytest.raises(lw.ConfigError):
        open_store(f"sqlite:///{tmp_path}/p.db?durability=yolo")
    with pytest.raises(lw.ConfigError, match="store"):
        open_store("ftp://nowhere")


def test_reopening_is_idempotent(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id = _create(s)
    with SQLiteStore(store_path) as s:
        assert s.get_run(run_id).task_key == "k"


def test_foreign_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE customers (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(lw.StoreCorruptError, match="did not create") as info:
        SQLiteStore(path)
    assert "customers" in str(info.value)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")] == [
        "customers"
    ]
    db.close()


def test_garbage_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database at all\n" * 200)
    with pytest.raises(lw.StoreCorruptError, match="not a usable loopwright store"):
        SQLiteStore(path)
    assert path.read_bytes().startswith(b"this is not")


def test_a_store_in_a_folder_the_user_may_not_write_is_not_called_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite keeps a WAL store's -wal and -shm beside it: in a read-only folder even reading
    # fails with "attempt to write a readonly database". (Tests run as root, which may write
    # anywhere: the folder's permission and SQLite's answer are stood in for.)
    path = tmp_path / "s.db"
    SQLiteStore(path).close()

    def readonly(self: SQLiteStore) -> None:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(SQLiteStore, "_configure", readonly)
    with pytest.raises(lw.StoreCorruptError, match="not a usable loopwright store"):
        SQLiteStore(path)  # a writable folder: the message stays (damage is possible)
    # the file (not its folder) read-only: from an outside probe (helper-54), it was "not a
    # usable loopwright store"
    monkeypatch.setattr("loopwright.store.sqlite.os.access", lambda p, mode: p != path)
    with pytest.raises(lw.StoreError, match="the file is not writable") as caught:
        SQLiteStore(path)
    assert not isinstance(caught.value, lw.StoreCorruptError)
    monkeypatch.setattr("loopwright.store.sqlite.os.access", lambda p, mode: False)
    with pytest.raises(lw.StoreError, match="is not writable by this user") as caught:
        SQLiteStore(path)
    assert not isinstance(caught.value, lw.StoreCorruptError)


def test_an_in_memory_store_runs_a_loop() -> None:
    # ":memory:" has no file for a WAL; it was refused with "cannot enable WAL"
    loop = lw.Loop(
        name="m",
        actor=lambda ctx: lw.Proposal.edit("doc", {"n": ctx.cycle}),
        verifiers=[lambda s, p: lw.Verdict(passed=s.values()["doc"]["n"] >= 3)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=5)),
    )
    with lw.Runtime(":memory:") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"n": 0}}})
    assert (r.status, r.cycles) == ("accepted", 3)
    part = r.state.part("doc/n")
    assert part is not None and [v.value for v in part.versions] == [0, 1, 2, 3]


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(lw.ConfigError, match="directory"):
        SQLiteStore(tmp_path)


def test_newer_schema_is_refused(store_path: Path) -> None:
    SQLiteStore(store_path).close()
    db = sqlite3.connect(store_path)
    db.execute("UPDATE loopwright_meta SET value='999' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(lw.StoreCorruptError, match="newer"):
        SQLiteStore(store_path)


def test_idempotent_create_and_lookup(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id = _create(s, "key-1")
        rec, created = s.create_run(
            run_id="other",
            task_key="key-1",
            loop_name="l",
            project="p",
            spec_ref=None,
            loop_version=None,
            contract={},
            task={},
            initial_state={},
        )
        assert (rec.run_id, created) == (run_id, False)
        assert s.get_run("key-1").run_id == run_id  # by task key
        assert s.get_run("run-ke").run_id == run_id  # by unique prefix
        _create(s, "key-2")
        with pytest.raises(lw.RunNotFoundError, match="ambiguous"):
            s.get_run("run-key")
        with pytest.raises(lw.RunNotFoundError):
            s.get_run("nope")
        assert len(s.list_runs()) == 2


def test_latest_checkpoint_after_many_cycles(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id = _create(s)
        token = s.acquire_lease(run_id, "me", 60)
        for seq in range(1, 301):
            _commit(s, run_id, token, seq)
        ck = s.latest_checkpoint(run_id)
        assert (ck.seq, ck.cycle, ck.state) == (300, 300, {"cycle": 300})
        assert s.get_run(run_id).last_seq == 300
        plan = " ".join(
            str(r)
            for r in s._db.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM checkpoints WHERE run_id=? ORDER BY seq DESC LIMIT 1",
                (run_id,),
            )
        )
        assert "SEARCH" in plan  # by index, whatever the number of cycles
        with pytest.raises(lw.ConflictError):
            _commit(s, run_id, token, 300)  # a checkpoint is written once


def test_stale_fencing_token_writes_nothing(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id = _create(s)
        old = s.acquire_lease(run_id, "a", 60)
        _commit(s, run_id, old, 1)
        new = s.acquire_lease(run_id, "a", 60)  # re-taken (e.g. after a restart)
        assert new > old
        before = (len(s.checkpoints(run_id)), len(s.events(run_id)), s.get_run(run_id))
        approval = NewApproval("ap1", 2, "risk", "r", "w", "y", {}, None, "h", None)
        with pytest.raises(lw.StaleLeaseError):
            _commit(s, run_id, old, 2, approval=approval)
        after = (len(s.checkpoints(run_id)), len(s.events(run_id)), s.get_run(run_id))
        assert after == before
        assert s.approvals() == []
        with pytest.raises(lw.StaleLeaseError):
            s.renew_lease(run_id, old, 60)
        s.release_lease(run_id, old)  # no error, and no effect
        assert s.get_run(run_id).lease_owner == "a"


def test_live_owner_holds_the_lease(store_path: Path) -> None:
    host = socket.gethostname()
    with SQLiteStore(store_path) as s:
        run_id = _create(s)
        s.acquire_lease(
            run_id, f"{host}:{os.getpid()}:other:{PROCESS_SPACE}", 60
        )  # this process is alive
        with pytest.raises(lw.ConflictError, match="being executed"):
            s.acquire_lease(run_id, f"{host}:{os.getpid()}:me:{PROCESS_SPACE}", 60)
        s.acquire_lease(
            run_id, f"{host}:{os.getpid()}:other:{PROCESS_SPACE}", 60
        )  # the holder may re-take


def test_lease_of_a_dead_pid_on_this_host_is_taken_over(store_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    host = socket.gethostname()
    with SQLiteStore(store_path) as s:
        run_id = _create(s)
        t1 = s.acquire_lease(run_id, f"{host}:{proc.pid}:dead:{PROCESS_SPACE}", 3600)
        t2 = s.acquire_lease(run_id, f"{host}:{os.getpid()}:me:{PROCESS_SPACE}", 60)
        assert t2 == t1 + 1
        # an owner on another host is not judged by local pids: it must expire first
        s.release_lease(run_id, t2)
        s.acquire_lease(run_id, f"elsewhere-{host}:{proc.pid}:x:{PROCESS_SPACE}", 3600)
        with pytest.raises(lw.ConflictError):
            s.acquire_lease(run_id, f"{host}:{os.getpid()}:me:{PROCESS_SPACE}", 60)


def test_expired_lease_is_taken_over(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id = _create(s)
        first = s.acquire_lease(run_id, "elsewhere:1:x", -1)  # already expired
        taken = s.acquire_lease(run_id, "me", 60)
        # a new fencing token: whatever the old holder commits now is refused
        assert taken == first + 1
        rec = s.get_run(run_id)
        assert (rec.lease_owner, rec.fencing_token) == ("me", taken)


def _park(s: SQLiteStore) -> str:
    run_id = _create(s)
    token = s.acquire_lease(run_id, "me", 60)
    _commit(
        s,
        run_id,
        token,
        1,
        approval=NewApproval(
            "ap1", 1, "risk", "rule", "apply it", "money", {"k": 1}, "- a\n+ b", "hash", None
        ),
    )
    return run_id


def test_decide_approval_race_has_exactly_one_winner(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        _park(s)
    for _ in range(5):
        with SQLiteStore(store_path) as s:
            s._db.execute("UPDATE approvals SET status='pending', decided_by=NULL")
        stores = [SQLiteStore(store_path), SQLiteStore(store_path)]
        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        def decide(
            store: SQLiteStore,
            who: str,
            barrier: threading.Barrier = barrier,
            outcomes: list[str] = outcomes,
        ) -> None:
            barrier.wait()
            try:
                store.decide_approval("ap1", status="approved", by=who, note=None, now=1.0)
                outcomes.append("won")
            except lw.ApprovalError:
                outcomes.append("lost")

        threads = [
            threading.Thread(target=decide, args=(st, f"p{i}")) for i, st in enumerate(stores)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for st in stores:
            st.close()
        assert sorted(outcomes) == ["lost", "won"]


def test_approval_persisted_and_decided_once(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id = _park(s)
        [a] = s.approvals(run_id=run_id, status="pending")
        assert (a.what, a.why, a.evidence, a.diff) == ("apply it", "money", {"k": 1}, "- a\n+ b")
        d = s.decide_approval("ap1", status="denied", by="z", note="n", now=2.0)
        assert (d.status, d.decided_by, d.note) == ("denied", "z", "n")
        with pytest.raises(lw.ApprovalError, match="already denied"):
            s.decide_approval("ap1", status="approved", by="y", note=None, now=3.0)
        with pytest.raises(lw.ApprovalError):
            s.decide_approval("missing", status="approved", by="y", note=None, now=3.0)
        with pytest.raises(lw.ApprovalError):
            s.decide_approval("ap1", status="maybe", by="y", note=None, now=3.0)
        assert any(e.kind == "approval_decided" for e in s.events(run_id))


def test_commit_reports_cancellation_and_refuses_unknown_columns(store_path: Path) -> None:
    with SQLiteStore(store_path) as s:
        run_id = _create(s)
        token = s.acquire_lease(run_id, "me", 60)
        assert _commit(s, run_id, token, 1) is False
        s.request_cancel(run_id)
        assert _commit(s, run_id, token, 2) is True
        with pytest.raises(lw.StoreError):
            s.commit(
                run_id,
                token,
                seq=3,
                cycle=3,
                state={},
                record=None,
                events=[],
                run={"task_key": "hijack"},
            )


def test_a_store_on_a_read_only_file_system_is_not_called_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From an outside probe (stop 40), a store on a read-only mount: SQLite cannot open its
    # -wal and -shm files there and says "unable to open database file" (not "readonly"), which
    # was reported as "not a usable loopwright store" (StoreCorruptError); and a new store
    # there failed with a bare OSError (EROFS) from removing a temporary name that was never
    # made. (Tests run as root on a writable disk: SQLite's answer and the folder's state are
    # stood in for.)
    path = tmp_path / "s.db"
    SQLiteStore(path).close()

    def cannot_open(self: SQLiteStore) -> None:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(SQLiteStore, "_configure", cannot_open)
    monkeypatch.setattr("loopwright.store.sqlite.os.access", lambda p, mode: False)
    with pytest.raises(lw.StoreError, match="is not writable by this user") as caught:
        SQLiteStore(path)
    assert not isinstance(caught.value, lw.StoreCorruptError)
    assert "read-only file system" in str(caught.value)
    monkeypatch.undo()

    real_unlink = Path.unlink

    def erofs(self: Path, missing_ok: bool = False) -> None:
        if self.name.endswith((".new", ".new-wal", ".new-shm")):
            raise OSError(30, "Read-only file system", str(self))
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", erofs)
    new = tmp_path / "new.db"
    SQLiteStore(new).close()  # the cleanup of names never made does not fail the open
    assert new.is_file()


def test_a_store_dropped_without_close_closes_its_connection(tmp_path: Path) -> None:
    """A store (a ``Runtime`` not used as a context manager) dropped without ``close()``
    closes its connection when collected, instead of leaving it to the garbage collector,
    which from Python 3.13 warns (``ResourceWarning: unclosed database``) in whatever code
    runs then: 38 tests of this suite failed so on 3.13 with warnings as errors."""
    import gc

    rt = lw.Runtime(str(tmp_path / "dropped.db"))
    db = rt.store._db  # type: ignore[attr-defined]
    assert db.execute("SELECT 1").fetchone() == (1,)
    del rt
    gc.collect()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        db.execute("SELECT 1")
