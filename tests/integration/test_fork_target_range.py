"""A fork or rollback to a cycle the run never concluded is refused with the range of cycles it
has, read from its records a page at a time (``Store.iter_fields``), not from every checkpoint
and every version of the run (an outside probe: a fork to a cycle past the end of a 4,810-cycle
run peaked at 124 MB, against 39 MB at 200 cycles)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from test_metrics_streaming import _long_loop

import loopwright as lw
from loopwright._errors import ConfigError


def test_a_cycle_the_run_lacks_is_refused_with_its_range(url: str) -> None:
    """The message names the first and last concluded cycle, after a rollback too (a rolled
    back run concludes its cycles again), on both stores; a cycle it has still forks."""
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_long_loop(12), {"artifacts": {"doc": {}}}, task_key="w")
        rt.rollback(r.run_id, 8, by="dave")
        for bad in (13, 10**6):
            with pytest.raises(ConfigError, match=r"no completed checkpoint for cycle \d+ "):
                rt.fork(r.run_id, at_cycle=bad)
            with pytest.raises(ConfigError) as err:
                rt.rollback(r.run_id, bad, by="dave")
            assert str(err.value).endswith(
                f"run {r.run_id} has no completed checkpoint for cycle {bad} (it has cycles 0..12)"
            ), str(err.value)
        forked = rt.fork(r.run_id, at_cycle=12, task_key="w~")
        assert rt.store.latest_checkpoint(forked.run_id).cycle == 12


def test_refusing_a_cycle_the_run_lacks_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """Four times the cycles, not four times the memory: the peak while refusing a fork and a
    rollback to a cycle past the end is a page of rows. (Every checkpoint and every version
    listed: 100 → 400 cycles of 4 KB values took about 4× the memory.)"""
    peaks: dict[int, int] = {}
    for cycles in (100, 400):
        url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_long_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            assert r.cycles == cycles
            with pytest.raises(ConfigError):  # warm: statements prepared, modules imported
                rt.fork(r.run_id, at_cycle=cycles + 1)
            tracemalloc.start()
            try:
                with pytest.raises(ConfigError, match=rf"cycles 0\.\.{cycles}\)"):
                    rt.fork(r.run_id, at_cycle=cycles + 1)
                with pytest.raises(ConfigError, match=rf"cycles 0\.\.{cycles}\)"):
                    rt.rollback(r.run_id, cycles + 1, by="dave")
                peaks[cycles] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    assert peaks[400] < 2 * peaks[100], peaks
