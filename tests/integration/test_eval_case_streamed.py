"""``loopwright export eval-cases`` writes a case as its cycles are read
(``trace.write_eval_case``): the bytes ``write_jsonl`` wrote for ``eval_case``'s document,
without holding it (counted with tracemalloc at two lengths, never timed)."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

from support.long_loops import rejecting_loop

import loopwright as lw
from loopwright import _redact
from loopwright.trace import eval_case, write_jsonl

SECRET = "sk-live-" + "q" * 24  # a key's shape: masked in the case, wherever it is


def _store(tmp_path: Path, cycles: int, *, fork: bool = True) -> Path:
    loop = rejecting_loop(cycles, lambda n: {f"p{n % 4}": f"draft {n} {SECRET} " + "x" * 500})
    task = {"goal": "g", "api_token": "t0ken", "artifacts": {"doc": {"p0": SECRET}}}
    db = tmp_path / f"{cycles}.db"
    with lw.Runtime(str(db)) as rt:
        run = rt.run_sync(loop, task, task_key="k")
        if fork:
            forked = rt.fork(run.run_id, at_cycle=cycles // 2, task_key="f")
            rt.resume_sync(forked.run_id, loop)
    return db


def test_the_case_written_is_eval_cases_document(tmp_path: Path) -> None:
    from loopwright.trace import write_eval_case

    db = _store(tmp_path, 30)
    with lw.Runtime(str(db)) as rt:
        for key in ("k", "f"):  # a run, and its fork (inherited cycles)
            run_id = rt.store.get_run(key).run_id
            want, got = io.StringIO(), io.StringIO()
            write_jsonl([eval_case(rt.store, run_id)], want)
            write_eval_case(rt.store, run_id, got)
            assert got.getvalue() == want.getvalue()
            assert SECRET not in got.getvalue() and "t0ken" not in got.getvalue()
            assert len(json.loads(got.getvalue())["cycles"]) == 30 - (15 if key == "f" else 0)


def _peak(tmp_path: Path, cycles: int) -> tuple[int, int]:
    """(tracemalloc peak of the export, bytes written)."""
    from loopwright.cli import main

    db = _store(tmp_path, cycles, fork=False)
    out = tmp_path / f"cases{cycles}.jsonl"
    _redact._clean_texts.clear()
    tracemalloc.start()
    try:
        assert main(["export", "eval-cases", "--store", str(db), "--out", str(out)]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, out.stat().st_size


def test_the_export_does_not_hold_a_case(tmp_path: Path) -> None:
    """A case was built whole, and then its JSON text, before a byte was written: a few times
    what it writes, a cycle at a time (5,000 cycles: 109 MB peak RSS for 8 MB written). Now a
    cycle's JSON goes to a temporary file as it is read."""
    _peak(tmp_path, 3)  # imports, before anything is counted
    # Both lengths above the redaction net's bounded cache of clean texts (256, one a cycle
    # here), emptied before each: it holds the same at both, and is not counted as growth.
    (short, out_short), (long, out_long) = _peak(tmp_path, 300), _peak(tmp_path, 1100)
    held, written = (long - short) / 800, (out_long - out_short) / 800
    assert held < 0.05 * written, (held, written)  # was 7.9x what it wrote; now about 0x
