"""A store written by the release at SQLite schema v18 opens with today's code (migrating it
forward in place, if today's schema is newer), keeps every row it had, reads back through the
API as that release wrote it, and its parked run resumes; a store claiming a newer schema is
refused, saying so. The fixture was made by that release: ``tests/data/v18_store/
make_fixture.py`` says how. A later migration (issue 14: fewer pages a cycle) is tested here
against a real v18 store, not one built by the migrating code itself."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.release_stores import copied_store

import loopwright as lw
from loopwright.store._schema import SQLITE_MIGRATIONS

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "v18_store" / "loopwright.db"

# What a reader needs, table by table, as v18 had it (each table's rows in key order).
TABLES = {
    "runs": "run_id",
    "run_tasks": "run_id",
    "checkpoints": "run_id, seq",
    "versions": "run_id, ref, n",
    "rejected": "run_id, digest",
    "events": "id",
    "approvals": "approval_id",
    "journal": "run_id, key",
    "effect_keys": "kind, key",
}


def _rows(db: Path, columns: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Each table's rows, in the columns ``columns`` names for it (default: all it has)."""
    raw = sqlite3.connect(db)
    try:
        out: dict[str, Any] = {}
        for table, order in TABLES.items():
            cols = (columns or {}).get(table) or [
                r[1] for r in raw.execute(f"PRAGMA table_info({table})")
            ]
            out[table] = (
                cols,
                raw.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order}").fetchall(),
            )
        return out
    finally:
        raw.close()


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    return copied_store(FIXTURE, tmp_path, "18")  # really the release's layout


def _fixture_loop() -> lw.Loop:
    # by its path, under a name of its own: two fixtures are both `make_fixture.py`, and a
    # plain import in a worker that ran the other file would get the other's module
    spec = importlib.util.spec_from_file_location(
        "make_fixture_v18", FIXTURE.parent / "make_fixture.py"
    )
    assert spec is not None and spec.loader is not None
    fx = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fx)
    return fx.make_loop()


def test_a_v18_store_keeps_every_row(old_store: Path) -> None:
    before = _rows(old_store)
    assert {t: len(rows) for t, (_c, rows) in before.items()} == {
        "runs": 3,
        "run_tasks": 3,
        "checkpoints": 20,
        "versions": 21,
        "rejected": 11,
        "events": 61,
        "approvals": 1,
        "journal": 1,
        "effect_keys": 1,
    }
    with lw.Runtime(old_store) as rt:
        assert rt.store.schema_version == len(SQLITE_MIGRATIONS)  # type: ignore[attr-defined]
    # every row the release wrote is there, byte for byte, in the columns it had
    after = _rows(old_store, {t: cols for t, (cols, _r) in before.items()})
    assert after == before


def test_a_v18_store_reads_back_as_written(old_store: Path) -> None:
    raw = sqlite3.connect(old_store)
    logs = {
        run: raw.execute(
            "SELECT id, cycle, kind, data FROM events WHERE run_id=? ORDER BY id", (run,)
        ).fetchall()
        for (run,) in raw.execute("SELECT run_id FROM runs")
    }
    raw.close()
    with lw.Runtime(old_store) as rt:
        runs = {r.task_key: r for r in rt.store.list_runs()}
        assert {k: (r.status, r.cycle) for k, r in runs.items()} == {
            "accepted": ("accepted", 4),
            "stopped": ("stopped", 6),
            "parked": ("awaiting_approval", 2),
        }
        for rec in runs.values():
            state = rt.result(rec.run_id).state
            body = state.artifacts["doc"].parts["body"]
            assert [v.value for v in body.versions] == [
                "",
                *(f"draft {i}" for i in range(1, rec.cycle + 1)),
            ]
            # the run's log as the release wrote it: ids, cycles, kinds and data
            assert [(e.id, e.cycle, e.kind, e.data) for e in rt.store.events(rec.run_id)] == [
                (i, c, k, json.loads(d)) for i, c, k, d in logs[rec.run_id]
            ]
            assert logs[rec.run_id][0][2] == "run_created"
            assert [c.cycle for c in rt.store.checkpoints(rec.run_id)][-1] == rec.cycle
        accepted = runs["accepted"].run_id
        assert rt.result(accepted).state.values()["doc"]["body"] == "draft 4"
        [entry] = rt.store.journal(accepted)
        assert (entry.kind, entry.status, entry.cycle) == ("effect", "done", 4)
        assert entry.data["result"] == {"noted": 4, "key": "note:note:4"}
        [ask] = rt.store.approvals(run_id=runs["parked"].run_id)
        assert (ask.status, ask.what) == ("pending", "which title?")


def test_a_parked_v18_run_resumes(old_store: Path) -> None:
    with lw.Runtime(old_store) as rt:
        rec = rt.store.get_run("parked")
        rt.answer(rec.run_id, "t1", by="ana")
        r = rt.resume_sync(rec.run_id, _fixture_loop())
        assert (r.status, r.stop_reason) == ("accepted", "success")
        body = r.state.artifacts["doc"].parts["body"]
        assert [v.value for v in body.versions] == ["", "draft 1", "draft 2", "draft 4", "draft 5"]
        assert rt.store.checkpoints(rec.run_id)[-1].task_state().values() == r.state.values()


def test_a_store_of_a_newer_release_is_refused(old_store: Path) -> None:
    newer = len(SQLITE_MIGRATIONS) + 1
    raw = sqlite3.connect(old_store)
    raw.execute(f"UPDATE loopwright_meta SET value='{newer}' WHERE key='schema_version'")
    raw.commit()
    raw.close()
    before = _rows(old_store)
    with (
        pytest.raises(lw.StoreCorruptError, match="newer than this loopwright understands"),
        lw.Runtime(old_store) as rt,
    ):
        rt.store.list_runs()
    assert _rows(old_store) == before  # refused untouched
