"""``loopwright show RUN --json`` and ``GET /api/runs/{id}`` read each cycle record of the run
once: both read every record twice, first for the cycles that concluded (a mid-cycle record's
row depends on it), then to show them (7-15 % of their time: bench/view_costs.py). Counted at
the store, where a stored record is decoded, for every run of a mixed store: effects whose
cycle concluded later, cycles parked and never concluded, parked then approved, a rollback."""

from __future__ import annotations

import collections
import contextlib
import io
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from support.dashboard import dashboard
from test_metrics_streaming import _mixed_store

from loopwright.cli import main
from loopwright.store import open_store
from loopwright.store._sql_core import SQLCore

TOKEN = "t" * 32


def _api(client: TestClient, run_id: str) -> bytes:
    got = client.get(f"/api/runs/{run_id}")
    assert got.status_code == 200, got.text
    return got.content


def _show_json(url: str, run_id: str) -> bytes:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", run_id, "--json", "--store", url]) == 0
    return out.getvalue().encode()


def test_each_record_is_read_once(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _mixed_store(url, tmp_path, monkeypatch)
    with open_store(url) as st:
        runs = st.list_runs()
        stored = {
            r.run_id: [s for s, _c, rec in st.iter_records(r.run_id) if rec is not None]
            for r in runs
        }
    reads: collections.Counter[int] = collections.Counter()
    decode = SQLCore._stored_record

    def counting(self: SQLCore, raw: Any, run_id: str, seq: Any) -> dict[str, Any] | None:
        if raw is not None:
            reads[int(seq)] += 1
        return decode(self, raw, run_id, seq)

    monkeypatch.setattr(SQLCore, "_stored_record", counting)
    client = dashboard(url, token=TOKEN)
    assert len(runs) > 5
    views = {"api": lambda rid: _api(client, rid), "show": lambda rid: _show_json(url, rid)}
    shown = {}
    for rec in runs:
        seqs = stored[rec.run_id]
        for view, read in views.items():
            reads.clear()
            shown[rec.run_id, view] = read(rec.run_id)
            # every record once; the latest may be read a second time, with the latest state
            # (the document's state: ``latest_checkpoint``)
            last = seqs[-1] if seqs else None
            once = {s: n for s, n in reads.items() if s != last}
            assert once == dict.fromkeys(seqs[:-1], 1), (rec.task_key, view)
            assert last is None or reads[last] in (1, 2), (rec.task_key, view)

    # held back past the bound (every mid-cycle record), the concluded cycles read whole:
    # the same bytes
    from loopwright import _mid_cycle_records

    monkeypatch.setattr(_mid_cycle_records, "HOLD", 0)
    for rec in runs:
        for view, read in views.items():
            assert read(rec.run_id) == shown[rec.run_id, view], (rec.task_key, view)
