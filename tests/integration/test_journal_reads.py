"""A resume looks up the retry entries of the cycle it runs next (``journal(run, kind="retry",
cycle=n)``); what that reads must not grow with the run's other journal entries (invariant 8;
bench/RESULTS.md, seventh stop). With ``ORDER BY`` in the statement SQLite chose the primary
key (run_id, key) and read every entry of the run, an effect's among them, one a cycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.effect_loops import noted_loop

import loopwright as lw


def _effect_run(tmp_path: Path, cycles: int) -> tuple[lw.Runtime, str]:
    loop = noted_loop(cycles)
    rt = lw.Runtime(tmp_path / f"s{cycles}.db", memory=False)
    r = rt.run_sync(loop, {"artifacts": {"doc": {"body": 0}}}, task_key="T")
    assert r.cycles == cycles
    assert len(rt.store.journal(r.run_id, kind="effect")) == cycles
    return rt, r.run_id


def _steps(rt: lw.Runtime, run_id: str, **kw: Any) -> tuple[int, list[Any]]:
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    db = rt.store._db  # type: ignore[attr-defined]
    db.set_progress_handler(count, 1)
    try:
        found = rt.store.journal(run_id, **kw)
    finally:
        db.set_progress_handler(None, 1)
    return steps[0], found


def test_the_next_cycles_retry_entries_are_read_by_index(tmp_path: Path) -> None:
    small, run_small = _effect_run(tmp_path, 10)
    big, run_big = _effect_run(tmp_path, 200)
    try:
        few, none_small = _steps(small, run_small, kind="retry", cycle=11)
        many, none_big = _steps(big, run_big, kind="retry", cycle=201)
        assert none_small == none_big == []
        # Before: ≈ 4 VM steps per journal entry of the run (≈ 800 more at 200 effects).
        assert many <= few + 20, (few, many)
        # the order is the same as before: by creation time, then key
        entries = big.store.journal(run_big, kind="effect")
        assert [e.cycle for e in entries] == list(range(1, 201))
    finally:
        small.close()
        big.close()
