"""Replay from Python (outside probe pyapi47): ``replay.replay`` given the iterator that
``traces_from_store`` returns judged every contract on no runs (the recorded side read the
iterator, each contract then found it spent): a silent wrong answer. And a wrong argument to
``replay``, ``simulate``, ``fit_stop``, ``load_source`` or ``lw.load_spec`` (a dict for a
contract, a store or a string for the traces, a number for a path) was an ``AttributeError`` or
``TypeError`` from inside; each is now a ``ConfigError`` naming it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright import replay

TIGHT = lw.Contract(budget=lw.Budget(max_cycles=2))


def _store(tmp_path: Path) -> str:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"t": f"v{ctx.cycle}"}, usage=lw.Usage(cost_usd=0.1))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.cycle >= 4, score=min(1.0, state.cycle / 4))

    loop = lw.Loop(
        name="r",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )
    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        for i in range(3):
            rt.run_sync(loop, {"artifacts": {"doc": {"t": "x"}}}, task_key=f"k{i}")
    return db


def test_replay_reads_an_iterator_of_traces_once_for_every_contract(tmp_path: Path) -> None:
    db = _store(tmp_path)
    with lw.Runtime(db) as rt:
        listed = replay.replay(list(replay.traces_from_store(rt.store)), {"tight": TIGHT})
        streamed = replay.replay(
            replay.traces_from_store(rt.store), {"tight": TIGHT, "same": TIGHT}
        )
    assert listed.recorded.runs == streamed.recorded.runs == 3
    assert [t.runs for t, _ in streamed.contracts] == [3, 3]
    assert streamed.contracts[0][0] == listed.contracts[0][0]
    assert streamed.contracts[0][0].cycles == 6  # each run stopped at 2 cycles


CALLS: dict[str, tuple[str, Callable[[list[replay.RunTrace], Any], Any]]] = {
    "contracts as a list": ("contracts", lambda tr, st: replay.replay(tr, [TIGHT])),
    "a contract as tables": (
        "contracts",
        lambda tr, st: replay.replay(tr, {"x": {"budget": {"max_cycles": 2}}}),
    ),
    "traces as 'store'": ("traces", lambda tr, st: replay.replay("store", {"x": TIGHT})),  # type: ignore[arg-type]
    "traces as the store": ("traces", lambda tr, st: replay.replay(st, {"x": TIGHT})),
    "traces of dicts": ("traces", lambda tr, st: replay.replay([{"run_id": "a"}], {"x": TIGHT})),  # type: ignore[list-item]
    "simulate with tables": ("contract", lambda tr, st: replay.simulate(tr[0], {"budget": 1})),  # type: ignore[arg-type]
    "simulate of a run id": ("trace", lambda tr, st: replay.simulate("k0", TIGHT)),  # type: ignore[arg-type]
    "fit_stop of 'store'": ("traces", lambda tr, st: replay.fit_stop("store")),  # type: ignore[arg-type]
    "fit_stop with a base as tables": (
        "base",
        lambda tr, st: replay.fit_stop(tr, base={"budget": {"max_cycles": 2}}),  # type: ignore[arg-type]
    ),
    "load_source of a number": ("SOURCE", lambda tr, st: replay.load_source(5)),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", sorted(CALLS))
def test_a_wrong_replay_argument_is_a_config_error(tmp_path: Path, case: str) -> None:
    field, call = CALLS[case]
    with lw.Runtime(_store(tmp_path)) as rt:
        traces = list(replay.traces_from_store(rt.store))
        with pytest.raises(lw.ConfigError) as err:
            call(traces, rt.store)
    assert err.value.field == field, err.value


def test_load_spec_of_a_number_is_a_spec_error() -> None:
    with pytest.raises(lw.SpecError) as err:
        lw.load_spec(5)  # type: ignore[arg-type]
    assert err.value.field == "spec"


def test_traces_from_store_takes_a_path_as_compute_metrics_does(tmp_path: Path) -> None:
    """Outside probe outside50a: ``traces_from_store("runs.db")`` — the path a user gives
    ``compute_metrics`` — was an ``AttributeError: 'str' object has no attribute 'list_runs'``
    from inside the iterator. A path or store URL of an existing store is now read (opened
    and closed by the iterator), as ``compute_metrics`` reads one."""
    db = _store(tmp_path)
    with lw.Runtime(db) as rt:
        by_store = [t.run_id for t in replay.traces_from_store(rt.store)]
    assert len(by_store) == 3
    assert [t.run_id for t in replay.traces_from_store(db)] == by_store
    assert [t.run_id for t in replay.traces_from_store(Path(db), loop="r")] == by_store
    assert [t.run_id for t in replay.traces_from_store(f"sqlite:///{db}")] == by_store
    assert [t.run_id for t in replay.load_source("store", db)] == by_store
    report = replay.replay(replay.traces_from_store(db), {"tight": TIGHT})
    assert report.recorded.runs == 3 and report.contracts[0][0].cycles == 6


def test_traces_from_store_refuses_what_is_no_store_when_called(tmp_path: Path) -> None:
    """A wrong store is a ``ConfigError`` naming ``store`` at the call, not at the first
    ``next()``; a path with no store there is refused without leaving an empty store behind."""
    with pytest.raises(lw.ConfigError) as err:
        replay.traces_from_store(5)  # type: ignore[arg-type]
    assert err.value.field == "store"
    missing = tmp_path / "typo.db"
    with pytest.raises(lw.ConfigError, match="no store at") as err:
        replay.traces_from_store(str(missing))
    assert err.value.field == "store"
    with pytest.raises(lw.ConfigError, match="no store at"):
        replay.load_source("store", missing)
    assert not missing.exists()
