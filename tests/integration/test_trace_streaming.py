"""``loopwright trace --format otlp-json`` writes a run's spans a cycle's at a time as the log
is read a page at a time (``iter_spans``): the same bytes as the document built whole
(``otlp_trace``), and memory that does not grow with the run (the tree built first held 504 MB
at 20,000 cycles: bench/RESULTS.md, stop 37)."""

from __future__ import annotations

import io
import json
import os
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from test_metrics_streaming import _long_loop, _mixed_store

import loopwright as lw
from loopwright.store import open_store
from loopwright.trace import otlp_trace, write_otlp


def _kind(span: dict[str, object]) -> str:
    attrs = {a["key"]: a["value"] for a in span["attributes"]}  # type: ignore[attr-defined]
    return str(attrs["loopwright.span.kind"]["stringValue"])


def test_streamed_otlp_is_the_document_built_whole(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Byte for byte, for every run of a mixed store: effects, approvals (approved, denied,
    answered), held-out checks, model calls, a rollback, a fork, a crash and a retry, edits."""
    _mixed_store(url, tmp_path, monkeypatch)
    pytest.importorskip("openai")
    from test_model_calls import make_model_run

    make_model_run(tmp_path, store=url)  # a retried model call, a reviewer's, an effect
    kinds: Counter[str] = Counter()
    events: Counter[str] = Counter()
    with open_store(url) as st:
        runs = st.list_runs()
        for r in runs:
            out = io.StringIO()
            n = write_otlp(st, r.run_id, out)
            doc = otlp_trace(st, r.run_id)
            assert out.getvalue() == json.dumps(doc, separators=(",", ":")) + "\n", r.task_key
            spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
            assert n == len(spans)
            kinds.update(_kind(s) for s in spans)
            events.update(e["name"] for s in spans for e in s["events"])
    # the mix is what it claims to be
    assert len(runs) > 5
    for kind in ("run", "cycle", "actor", "verifier", "effect", "approval", "model"):
        assert kinds[kind], (kind, kinds)
    for name in ("rolled_back", "approval_decided", "retry", "resumed"):
        assert events[name], (name, events)


def test_otlp_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """Four times the cycles, not four times the memory: the peak while writing a run's spans
    is a window of its log, a position per event and the run span. (The tree built first:
    100 → 400 cycles of 4 KB values took about 4× the memory.)"""
    peaks: dict[int, int] = {}
    for cycles in (100, 400):
        url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_long_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            assert r.cycles == cycles
        with open_store(url) as st, open(os.devnull, "w", encoding="utf-8") as sink:
            write_otlp(st, r.run_id, sink)  # warm: statements prepared, modules imported
            tracemalloc.start()
            try:
                n = write_otlp(st, r.run_id, sink)
                peaks[cycles] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert n > 2 * cycles
    assert peaks[400] < 2 * peaks[100], peaks


def test_diff_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """``loopwright diff`` (``compare_runs``) reads the runs' records a page at a time, not
    every checkpoint (266 MB at 20,000 cycles): four times the cycles, not four times the
    memory (a score per cycle is all that grows). Same document as the checkpoints give."""
    from loopwright._compare import compare_runs

    peaks: dict[int, int] = {}
    for cycles in (100, 400):
        url = f"sqlite:///{tmp_path / f'd{cycles}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_long_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            rt.rollback(r.run_id, cycles // 2, by="dave")
            rt.fork(r.run_id, at_cycle=cycles // 4, task_key="w~")
        with open_store(url) as st:
            compare_runs(st, "w", "w~")  # warm: statements prepared, modules imported
            tracemalloc.start()
            try:
                doc = compare_runs(st, "w", "w~")
                peaks[cycles] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            want = {
                int(c.record.get("cycle", c.cycle)): c.record.get("score")
                for c in st.checkpoints(r.run_id)
                if c.record and "proposal" in c.record
            }
        assert {s["cycle"]: s["a"] for s in doc["scores"] if s["a"] is not None} == {
            k: v for k, v in want.items() if v is not None
        }
        assert len(doc["scores"]) == cycles
    assert peaks[400] < 2 * peaks[100], peaks
