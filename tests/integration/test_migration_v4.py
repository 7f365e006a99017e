"""A store written by the release before the append-only layout (SQLite schema v3, full states
in every checkpoint) opens with today's code, migrates to v4 in place, reads back as it was,
and its unfinished run resumes onto the new layout. The fixture was made by that release:
``tests/data/v3_store/make_fixture.py`` says how."""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import pytest
from support.release_stores import copied_store

import loopwright as lw
from loopwright.store._schema import SQLITE_MIGRATIONS

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "v3_store" / "loopwright.db"


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    return copied_store(FIXTURE, tmp_path, "3")  # really the old layout


def test_a_v3_store_migrates_and_reads_back_as_it_was(old_store: Path) -> None:
    raw = sqlite3.connect(old_store)
    before = raw.execute(
        "SELECT run_id, seq, state, record FROM checkpoints ORDER BY 1, 2"
    ).fetchall()
    raw.close()
    with lw.Runtime(old_store) as rt:
        assert rt.store.schema_version == len(SQLITE_MIGRATIONS)  # type: ignore[attr-defined]
        runs = {r.task_key: r for r in rt.store.list_runs()}
        assert {k: (r.status, r.cycle) for k, r in runs.items()} == {
            "accepted": ("accepted", 4),
            "stopped": ("stopped", 6),
            "parked": ("awaiting_approval", 2),
        }
        n = 0
        for rec in runs.values():
            for ck in rt.store.checkpoints(rec.run_id):
                n += 1
                assert ck.state["cycle"] == ck.cycle
            done = rt.result(rec.run_id)
            body = done.state.artifacts["doc"].parts["body"]
            assert [v.value for v in body.versions][: rec.cycle + 1] == [
                "",
                *(f"draft {i}" for i in range(1, rec.cycle + 1)),
            ]
        assert n == len(before)  # every old checkpoint is still there
    raw = sqlite3.connect(old_store)
    after = raw.execute(
        "SELECT run_id, seq, state, record FROM checkpoints ORDER BY 1, 2"
    ).fetchall()
    indexes = {
        r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE tbl_name='approvals'")
    }
    raw.close()
    assert after == before  # migrated rows are kept byte for byte
    # v10: one run's requests by (run_id, status, order); the old prefix index is gone
    assert "approvals_run_status" in indexes
    assert "approvals_run" not in indexes
    # v19: the pending requests that can expire, by expiry (a worker's poll records them)
    assert "approvals_expiring" in indexes


def test_a_parked_v3_run_resumes_onto_the_new_layout(old_store: Path) -> None:

    # by its path, under a name of its own: two fixtures are both `make_fixture.py`, and a
    # plain import in a worker that ran the other file would get the other's module
    spec = importlib.util.spec_from_file_location(
        "make_fixture_v3", FIXTURE.parent / "make_fixture.py"
    )
    assert spec is not None and spec.loader is not None
    fx = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fx)
    loop = lw.Loop(
        name="fixture",
        actor=fx.actor,
        verifiers=[fx.check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )
    with lw.Runtime(old_store, snapshot_every=2) as rt:
        rec = rt.store.get_run("parked")
        rt.answer(rec.run_id, "t1", by="ana")
        r = rt.resume_sync(rec.run_id, loop)
        assert (r.status, r.stop_reason) == ("accepted", "success")
        body = r.state.artifacts["doc"].parts["body"]
        assert [v.value for v in body.versions] == ["", "draft 1", "draft 2", "draft 4", "draft 5"]
        # the old inline versions were written as rows by the first new commit
        rows = rt.store._version_rows(rec.run_id, ref="doc/body")  # type: ignore[attr-defined]
        assert [row[1] for row in rows] == [1, 2, 3, 4, 5]
        new = [c for c in rt.store._checkpoint_rows(rec.run_id, latest=False) if c.base is not None]  # type: ignore[attr-defined]
        assert any(c.seq != c.base for c in new)  # deltas now
        assert rt.store.checkpoints(rec.run_id)[-1].task_state().values() == r.state.values()


def test_events_lose_autoincrement_and_keep_their_ids(old_store: Path) -> None:
    """v7 rebuilds ``events`` without AUTOINCREMENT (its sqlite_sequence row was one more page
    per commit): every event keeps its id, and new ones follow the largest."""
    raw = sqlite3.connect(old_store)
    before = raw.execute(
        "SELECT id, run_id, cycle, kind, ts, data FROM events ORDER BY id"
    ).fetchall()
    raw.close()
    with lw.Runtime(old_store) as rt:
        run = next(r for r in rt.store.list_runs() if r.task_key == "parked")
        rt.store.append_events(run.run_id, [lw.store.NewEvent(run.cycle, "note", {"x": 1})])
        ids = [e.id for e in rt.store.events(run.run_id)]
    raw = sqlite3.connect(old_store)
    after = raw.execute(
        "SELECT id, run_id, cycle, kind, ts, data FROM events ORDER BY id"
    ).fetchall()
    (sql,) = raw.execute("SELECT sql FROM sqlite_master WHERE name='events'").fetchone()
    seq = raw.execute("SELECT name FROM sqlite_sequence WHERE name='events'").fetchall()
    raw.close()
    assert "AUTOINCREMENT" not in sql.upper() and seq == []
    assert after[: len(before)] == before  # byte for byte, ids included
    assert ids[-1] == max(r[0] for r in before) + 1  # the new event follows the largest id
