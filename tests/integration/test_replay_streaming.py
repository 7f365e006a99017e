"""``loopwright replay store`` reads each run's checkpoints and events a page at a time
(``Store.iter_fields``, ``Store.iter_events``), not every checkpoint of the run listed at once
(289 MB at 20,000 cycles: bench/RESULTS.md, stop 37): the same traces and the same report as
the whole-run reads, and memory that does not grow with the run's states."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pytest
from test_metrics_streaming import _long_loop, _mixed_store

import loopwright as lw
from loopwright.replay import replay, traces_from_store, write_traces
from loopwright.store import Store, open_store

CONTRACTS = {
    "short": lw.Contract(budget=lw.Budget(max_cycles=2)),
    "cheap": lw.Contract(budget=lw.Budget(max_cycles=50, max_cost_usd=0.15)),
    "plateau": lw.Contract(success=lw.Success(min_score=0.9), no_progress=lw.NoProgress(cycles=1)),
}


def _replayed(st: Store) -> tuple[str, str]:
    traces = list(traces_from_store(st))
    out = io.StringIO()
    write_traces(traces, out)
    return out.getvalue(), json.dumps(replay(traces, CONTRACTS).to_dict(), sort_keys=True)


def test_streamed_replay_is_the_whole_run_replay(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Byte for byte, traces and report, for a mixed store (effects, approvals, a rollback, a
    fork, edits, a crash, model calls) against the reads of the whole run at once (the base
    ``Store`` methods, over ``checkpoints`` and ``events``)."""
    _mixed_store(url, tmp_path, monkeypatch)
    pytest.importorskip("openai")
    from test_model_calls import make_model_run

    make_model_run(tmp_path, store=url)
    with open_store(url) as st:
        assert type(st).iter_fields is not Store.iter_fields  # the paged reads are tested
        streamed = _replayed(st)
        with monkeypatch.context() as m:
            m.setattr(type(st), "iter_fields", Store.iter_fields)
            m.setattr(type(st), "iter_events", Store.iter_events)
            whole = _replayed(st)
        rolled_back = any(
            (r or {}).get("decision") == "rollback"
            for run in st.list_runs()
            for _, _, r in st.iter_records(run.run_id)
        )
        forks = {r.run_id for r in st.list_runs() if r.forked_from}
    assert streamed == whole
    # the mix is what it claims to be: runs replayed, one rolled back (left out), a fork
    lines = streamed[0].splitlines()
    assert len(lines) > 5 and rolled_back
    assert forks & {json.loads(x).get("run_id") for x in lines}, forks
    report = json.loads(streamed[1])
    assert report["recorded"]["runs"] == len(lines)


def test_replay_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """Four times the cycles, not four times the memory: a page of checkpoints at a time and
    a small trace a cycle. (Every checkpoint listed at once: 100 → 400 cycles of 4 KB values
    took about 4× the memory.)"""
    peaks: dict[int, int] = {}
    for cycles in (100, 400):
        url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_long_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            assert r.cycles == cycles
        with open_store(url) as st:
            replay(list(traces_from_store(st)), CONTRACTS)  # warm: statements, imports
            tracemalloc.start()
            try:
                (trace,) = traces_from_store(st)
                replay([trace], CONTRACTS)
                peaks[cycles] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert len(trace.cycles) == cycles
    assert peaks[400] < 2 * peaks[100], peaks
