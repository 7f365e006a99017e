"""An eval case of a fork holds the cycles it inherited: its origin's up to the fork point. It
found them by listing the origin's every checkpoint (``store.checkpoints``), so the case of a
fork made early in a long run cost what the whole origin did (an outside probe: 4× the memory
from 40 to 240 cycles). It now finds the fork point among the origin's checkpoints of that
cycle and reads the checkpoints up to it a page at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_metrics_streaming import _long_loop

import loopwright as lw
from loopwright.store import _base, _protocol_checkpoints, _sql_reads
from loopwright.trace import eval_case


def _case_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cycles: int
) -> tuple[int, dict[str, Any]]:
    """The case of a fork at cycle 10 of a run of ``cycles``, and how many checkpoints the
    store built to write it (a count of rows read: the same on every run, unlike calls,
    which move with the run ids' digits)."""
    url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_long_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
        assert r.cycles == cycles
        short = lw.Contract(budget=lw.Budget(max_cycles=12))
        fork = rt.fork(r.run_id, at_cycle=10, contract=short, task_key="f")
        assert rt.resume_sync(fork.run_id, _long_loop(12)).cycles == 12
        built = [0]

        class Counted(_base.Checkpoint):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                built[0] += 1
                super().__init__(*args, **kwargs)

        with monkeypatch.context() as m:
            m.setattr(_protocol_checkpoints, "Checkpoint", Counted)
            m.setattr(_sql_reads, "Checkpoint", Counted)
            case = eval_case(rt.store, fork.run_id)
    return built[0], case


def test_a_forks_case_costs_the_same_whatever_its_origin_did_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    few, case_few = _case_reads(tmp_path, monkeypatch, 60)
    many, case_many = _case_reads(tmp_path, monkeypatch, 600)
    for case in (case_few, case_many):  # the origin's cycles 1..10, then the fork's 11 and 12
        inherited = case["inherited_cycles"]
        assert isinstance(inherited, list) and isinstance(case["cycles"], list)
        assert [c["cycle"] for c in inherited] == list(range(1, 11)), inherited
        assert [c["cycle"] for c in case["cycles"]] == [11, 12]
    # ten times the origin's cycles after the fork point; before, every one of them was read
    assert many == few, (few, many)
