"""An eval case of a long run holds its cycles' records, not every checkpoint and every
cycle's context: what it keeps grows with what it writes (counted with tracemalloc at two
lengths, never timed; bench/read_paths.py measures the export at 2,000 and 20,000 cycles)."""

from __future__ import annotations

import gc
import json
import sqlite3
import tracemalloc
from contextlib import closing
from pathlib import Path

import pytest
from support.long_loops import rejecting_loop

import loopwright as lw
from loopwright.trace import _run_cycles, eval_case

PARTS = 16  # a context shows every part: the more parts, the more a kept context costs


def _loop(cycles: int) -> lw.Loop:
    return rejecting_loop(cycles, lambda n: {f"p{n % PARTS}": f"draft {n} " + "x" * 1000})


def _case(tmp_path: Path, cycles: int) -> tuple[int, int]:
    """(tracemalloc peak of eval_case, bytes of the case as JSON)."""
    task = {"goal": "g", "artifacts": {"doc": {f"p{i}": "y" * 1000 for i in range(PARTS)}}}
    with lw.Runtime(str(tmp_path / f"{cycles}.db")) as rt:
        result = rt.run_sync(_loop(cycles), task, task_key="k")
        tracemalloc.start()
        try:
            case = eval_case(rt.store, result.run_id)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert len(case["cycles"]) == cycles
    return peak, len(json.dumps(case))


def test_an_eval_case_keeps_what_it_writes_not_every_context(tmp_path: Path) -> None:
    """Each cycle's context (every part's value) was kept beside its record, and every
    checkpoint of the run was listed at once: 10.9 KB a cycle held for 1.5 KB written. Now
    the checkpoints are read a page at a time and a cycle keeps its context's id only."""
    peak_short, out_short = _case(tmp_path, 60)
    peak_long, out_long = _case(tmp_path, 240)
    held = (peak_long - peak_short) / 180
    written = (out_long - out_short) / 180
    # the case's own objects (and its redacted copy) cost a few times its JSON; was 7.2×
    assert held <= 5.5 * written, (held, written)


def _export_peak(tmp_path: Path, runs: int, *, grown_from: Path | None = None) -> int:
    """tracemalloc peak of ``loopwright export eval-cases`` over a store of ``runs`` ended
    runs of 40 cycles each: a new store, or a copy of ``grown_from``'s (the runs it holds,
    ``k0``...) with the runs after them added (the 4-page store is the 2-page one and two
    pages more: running its first 20 runs again was a third of this file's CPU, stop 56)."""
    from loopwright.cli import main

    db = tmp_path / f"runs{runs}.db"
    task = {"goal": "g", "artifacts": {"doc": {f"p{i}": "y" * 1000 for i in range(PARTS)}}}
    had = 0
    if grown_from is not None:
        with closing(sqlite3.connect(grown_from)) as a, closing(sqlite3.connect(db)) as b:
            a.backup(b)  # (its runs ended, its Runtime closed: a consistent copy)
        with lw.Runtime(str(db)) as rt:
            had = len(rt.store.list_runs())
    with lw.Runtime(str(db)) as rt:
        for i in range(had, runs):
            rt.run_sync(_loop(40), task, task_key=f"k{i}")
        assert len(rt.store.list_runs()) == runs
    out = tmp_path / f"cases{runs}.jsonl"
    # The garbage of what ran before, collected first: otherwise when the collector runs inside
    # the measurement (set by whatever the process allocated before, pytest's plugins included)
    # moved the peak of the 4-run export by 14 % (0.80 or 0.91 MB), with or without -n.
    gc.collect()
    tracemalloc.start()
    try:
        assert main(["export", "eval-cases", "--store", str(db), "--out", str(out)]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(out.read_text(encoding="utf-8").splitlines()) == runs
    return peak


# Runs listed at a time in the export test (the store's page, 10, made smaller there): what the
# test tells apart does not depend on the page's size, two pages of runs against four. At 4 a
# page the peaks are 1.00x apart; listing every run at once (the defect) 1.63x, building every
# case before writing the first 1.73x (1.81x and 1.87x at 10 a page), for half the CPU (stop 56).
PAGE = 4


def test_the_export_holds_one_case_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export eval-cases`` listed every run of the store at once (a row holds its task and
    packet: ~230 KB each here while read) and built every case before writing the first: its
    memory grew with the number of runs. The runs are now listed a page at a time and each
    case is written as it is built: at two pages of runs and at four, the same peak."""
    assert PAGE < _run_cycles.RUNS_PAGE
    monkeypatch.setattr(_run_cycles, "RUNS_PAGE", PAGE)
    _export_peak(tmp_path, 1)  # the modules it imports, imported before anything is counted
    # Both stores hold at least a page of runs (PAGE): a store of 4 held less than a page of
    # 10, and its peak was 2.3-2.7x below the 40-run one's for that alone (the bound was 2.5x).
    few = _export_peak(tmp_path, 2 * PAGE)
    many = _export_peak(tmp_path, 4 * PAGE, grown_from=tmp_path / f"runs{2 * PAGE}.db")
    assert many <= 1.3 * few, (few, many)  # 1.00x; listing every run at once: 1.74x


def _pairs_peak(tmp_path: Path, cycles: int) -> int:
    from loopwright.trace import preference_pairs

    task = {"goal": "g", "artifacts": {"doc": {f"p{i}": "y" * 1000 for i in range(PARTS)}}}
    with lw.Runtime(str(tmp_path / f"pairs{cycles}.db")) as rt:
        result = rt.run_sync(_loop(cycles), task, task_key="k")
        tracemalloc.start()
        try:
            pairs = preference_pairs(rt.store, run_ids=[result.run_id])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert pairs == []  # no cycle did better than another: nothing to pair
    return peak


def test_preference_pairs_keep_the_contexts_of_their_pairs_alone(tmp_path: Path) -> None:
    """Every cycle's context (every part's value) and the values after it were kept for the
    whole search, paired or not (756 KB at 60 cycles, 2,696 KB at 240: 3.6x); they are read
    again for the cycles a pair holds (601 KB, 1,235 KB: the records alone grow)."""
    _pairs_peak(tmp_path, 2)  # imports, before anything is counted
    few, many = _pairs_peak(tmp_path, 60), _pairs_peak(tmp_path, 240)
    assert many <= 2.8 * few, (few, many)
