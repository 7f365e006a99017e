"""The JSON API's whole-run documents are written as the store's pages are read, not built
whole: ``/api/runs/{id}`` (40 MB of JSON, ~420 MB of objects at 20,000 cycles: bench/RESULTS.md,
stop 37) and ``/api/runs/{id}/spans`` (25 MB, ~420 MB). The same bytes as the document built whole, and memory that does not grow with the
run (measured without a client that keeps the body: the response's chunks are dropped)."""

from __future__ import annotations

import importlib.util
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("fastapi")
from pydantic import TypeAdapter
from support.dashboard import dashboard
from test_metrics_streaming import _long_loop, _mixed_store

import loopwright as lw
from loopwright._contract import TERMINAL_STATUSES
from loopwright._mid_cycle_records import by_id
from loopwright._state import TaskState
from loopwright.store import Store, open_store
from loopwright.trace._spans import build_spans
from loopwright.web import create_app
from loopwright.web._views import (
    artifacts_view,
    chart_points,
    decided_while_parked,
    edits_view,
    ended_row,
    events_view,
    journal_view,
    next_action_here,
    stop_cause_of,
    stop_words,
    timeline,
)
from loopwright.web._waterfall import waterfall_rows

TOKEN = "t" * 32
LOCAL = "http://127.0.0.1"


def whole_document(st: Store, run_id: str) -> bytes:
    """``/api/runs/{id}`` as it was built before it was streamed: every checkpoint, event and
    version read at once, the dict written as FastAPI wrote it."""
    rec = st.get_run(run_id)
    cks = st.checkpoints(run_id)
    state = cks[-1].task_state() if cks else TaskState()
    approvals = st.approvals(run_id=run_id)
    run = rec.to_dict()
    run["stop_words"] = (
        "its request was decided; it waits to be resumed"
        if decided_while_parked(rec, approvals) is not None
        else stop_words(rec)
    )
    run["stop_cause"] = stop_cause_of(rec)
    run.update(over_budget_usd=0.0, over_budget_tokens=0)  # (these runs end within their budgets)
    doc = {
        "run": run,
        "next_action": state.next_action,
        "next_action_here": next_action_here(rec, state, approvals),
        "journal": journal_view(st.journal(run_id)),
        "events": events_view(st.events(run_id)),
        "plan": [s.to_dict() for s in state.plan],
        # (and the cycle an ended run ended inside, which has no record: feedback43)
        "timeline": [
            *timeline(cks, ended=rec.status in TERMINAL_STATUSES, decided=by_id(approvals)),
            *ended_row(st, rec),
        ],
        "chart": [
            {"cycle": p.cycle, "best_score": p.best, "spent_usd": p.spent, "improved": p.improved}
            for p in chart_points(cks)
        ],
        "artifacts": [
            {"ref": pv.ref, "status": pv.status, "versions": pv.versions}
            for pv in artifacts_view(state)
        ],
        "approvals": [a.to_dict() for a in approvals],
        "edits": edits_view(st.events(run_id)),
        "packet": rec.packet,
    }
    return TypeAdapter(dict[str, Any]).dump_json(doc)  # as FastAPI wrote the returned dict


def whole_spans(st: Store, run_id: str) -> bytes:
    """``/api/runs/{id}/spans`` as it was built before it was streamed: the whole tree."""
    rec = st.get_run(run_id)
    spans = build_spans(rec, st.events(run_id), st.checkpoints(run_id), st.approvals(run_id=run_id))
    rows = [r.to_dict() for r in waterfall_rows(spans, max_cycles=None)]
    return TypeAdapter(list[dict[str, Any]]).dump_json(rows)


def test_the_streamed_documents_are_the_documents_built_whole(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Byte for byte, ``/api/runs/{id}`` and ``/api/runs/{id}/spans`` of every run of a mixed
    store (effects, approvals approved, denied and answered, a rollback, a fork, edits, a crash
    and a retry), a run with model calls and a run of 60 cycles."""
    _mixed_store(url, tmp_path, monkeypatch)
    with lw.Runtime(url) as rt:
        rt.run_sync(_long_loop(60), {"artifacts": {"doc": {}}}, task_key="long")
    if importlib.util.find_spec("openai") is not None:
        from test_model_calls import make_model_run

        make_model_run(tmp_path, store=url)
    client = dashboard(url, token=TOKEN)
    with open_store(url) as st:
        runs = st.list_runs()
        assert len(runs) > 5
        assert type(st).iter_checkpoints is not Store.iter_checkpoints  # the paged read
        for rec in runs:
            # the paged checkpoints are the listed ones: seq, cycle, record, time, fields, state
            paged, listed = list(st.iter_checkpoints(rec.run_id)), st.checkpoints(rec.run_id)
            assert [(c.seq, c.cycle, c.record, c.created_at, dict(c.fields)) for c in paged] == [
                (c.seq, c.cycle, c.record, c.created_at, dict(c.fields)) for c in listed
            ]
            assert [c.state for c in paged[-3:]] == [c.state for c in listed[-3:]]
            got = client.get(f"/api/runs/{rec.run_id}")
            assert got.status_code == 200
            assert got.headers["content-type"] == "application/json"
            assert got.content == whole_document(st, rec.run_id), rec.run_id
            got = client.get(f"/api/runs/{rec.run_id}/spans")
            assert got.status_code == 200
            assert got.headers["content-type"] == "application/json"
            assert got.content == whole_spans(st, rec.run_id), rec.run_id
    assert client.get("/api/runs/nope").status_code == 404
    assert client.get("/api/runs/nope/spans").status_code == 404


async def _drained(app: Any, path: str) -> tuple[int, int]:
    """GET ``path`` of ``app`` (ASGI), its chunks counted and dropped: the status, the bytes."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    status, size = [0], [0]
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status[0] = message["status"]
        elif message["type"] == "http.response.body":
            size[0] += len(message.get("body", b""))

    await app(scope, receive, send)
    return status[0], size[0]


def peak_of_get(app: Any, path: str) -> tuple[int, int]:
    """The ``tracemalloc`` peak of one GET of ``path`` (after one to warm), and its bytes."""
    anyio.run(_drained, app, path)
    tracemalloc.start()
    try:
        status, size = anyio.run(_drained, app, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 200, (path, status)
    return peak, size


@pytest.fixture(scope="module")
def long_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, str]]:
    """Runs of 100 and 400 cycles of 4 KB values (``_long_loop``), each in a store of its own."""
    out = {}
    for cycles in (100, 400):
        path = tmp_path_factory.mktemp("api") / f"r{cycles}.db"
        url = f"sqlite:///{path}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_long_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            assert r.cycles == cycles
        out[cycles] = (url, r.run_id)
    return out


def test_the_run_documents_memory_does_not_grow_with_the_run(
    long_runs: dict[int, tuple[str, str]],
) -> None:
    """Four times the cycles, four times the bytes sent, not four times the memory: before, the
    document was built whole (checkpoints, events, versions, then the JSON) — 100 → 400 cycles
    took ~4x the memory."""
    peaks, sizes = {}, {}
    for cycles, (url, rid) in long_runs.items():
        app = create_app(url, token=TOKEN)
        peaks[cycles], sizes[cycles] = peak_of_get(app, f"/api/runs/{rid}")
        app.state.store.close()
    assert sizes[400] > 3 * sizes[100]  # the document holds the whole run
    assert peaks[400] < 2 * peaks[100], peaks


def test_the_span_rows_memory_does_not_grow_with_the_run(
    long_runs: dict[int, tuple[str, str]],
) -> None:
    """Every cycle's span rows, not the run's whole tree built first (before, 100 → 400
    cycles took ~4x the memory): a cycle's spans at a time, the rows kept on disk past 256 KB
    until the run's own row, which comes first, is known."""
    peaks, sizes = {}, {}
    for cycles, (url, rid) in long_runs.items():
        app = create_app(url, token=TOKEN)
        peaks[cycles], sizes[cycles] = peak_of_get(app, f"/api/runs/{rid}/spans")
        app.state.store.close()
    assert sizes[400] > 3 * sizes[100]
    assert peaks[400] < 2 * peaks[100], peaks
