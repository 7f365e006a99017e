"""stop 50: ``fit-stop`` and ``replay`` of many long runs hold one run's cycles at a time, not
every run's (five runs of 10,000 cycles were 134 MB for ``fit-stop``), with the same output.

A spy on ``simulate`` counts the ``RunTrace`` objects alive each time it is handed another run:
one, whatever the number of runs (before: every run read, all at once)."""

from __future__ import annotations

import errno
import gc
import io
import json
from pathlib import Path
from typing import Any

import pytest

import loopwright.replay._fit as fit_mod
import loopwright.replay._fit_score as fit_score
import loopwright.replay._report as report_mod
import loopwright.replay._spill as spill
from loopwright import ConfigError, Contract
from loopwright.cli import main
from loopwright.replay import (
    Call,
    CycleTrace,
    FitResult,
    RunTrace,
    fit_stop,
    iter_source,
    load_contract,
    load_source,
    simulate,
    write_traces,
)
from loopwright.replay._fit import Grid

LDB = Path(__file__).resolve().parents[1] / "data" / "ldb" / "humaneval"
LDB_FILE = LDB / "reflexion" / "gpt-4o-2024-05-13.jsonl"


def _run(i: int, n: int) -> RunTrace:
    """Task ``t{i}``: its score rises to 1.0 at cycle ``n`` for two runs in three, else it
    plateaus for ``n`` cycles; costs vary by cycle (a median to read, quantiles to take)."""
    ok = i % 3 != 2
    scores = [min(1.0, 0.2 + 0.8 * k / n) if ok else 0.3 for k in range(1, n + 1)]
    cycles = tuple(
        CycleTrace(
            cycle=k,
            calls=(Call("actor", 0.01 + 0.001 * (k % 7), 100 + k), Call("verifier:visible")),
            verdicts={"visible": {"passed": s >= 1.0, "score": s}},
            score=s,
            held_out_passed=(s >= 1.0) if k == n else None,
            seconds=0.5,
        )
        for k, s in enumerate(scores, 1)
    )
    return RunTrace(
        run_id=f"r{i}",
        task_key=f"t{i}",
        cycles=cycles,
        required=("visible",),
        recorded={
            "status": "accepted" if ok else "stopped",
            "stop_reason": "success" if ok else "budget_cycles",
            "cycles": n,
            "cost_usd": sum(c.cost_usd for c in cycles),
            "tokens": sum(c.tokens for c in cycles),
            "held_out_passed": ok,
        },
    )


@pytest.fixture(scope="module")
def runs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Nine runs in a run-trace file, written once: every test only reads it."""
    path = tmp_path_factory.mktemp("runs") / "runs.jsonl"
    write_traces((_run(i, 30 + 7 * i) for i in range(9)), path)
    return path


@pytest.fixture(scope="module")
def fit_on_the_list(runs_file: Path) -> FitResult:
    """``fit_stop`` of the runs read into a list (as before spilling), 3 folds, the default
    settings: computed once, the reference of two tests."""
    return fit_stop(load_source(runs_file), folds=3)


def _live_runs() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is RunTrace)


class _Spy:
    """``simulate``, counting the runs alive each time it is handed another run."""

    def __init__(self) -> None:
        self.before = _live_runs()
        self.most = 0
        self.last: int | None = None
        self.runs = 0

    def __call__(self, trace: RunTrace, contract: Contract) -> Any:
        if id(trace) != self.last:
            self.last = id(trace)
            self.runs += 1
            self.most = max(self.most, _live_runs() - self.before)
        return simulate(trace, contract)


def _report(d: dict[str, Any]) -> dict[str, Any]:
    d.pop("seconds", None)
    return d


def test_fit_stop_holds_one_run_at_a_time(
    runs_file: Path,
    fit_on_the_list: FitResult,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = fit_on_the_list  # every run in a list, as before
    monkeypatch.setattr(spill, "HELD_CYCLES", 0, raising=False)  # every run in the file
    spy = _Spy()
    monkeypatch.setattr(fit_score, "simulate", spy)
    monkeypatch.setattr(fit_mod, "simulate", spy)
    out = tmp_path / "report.json"
    assert main(["fit-stop", str(runs_file), "--folds", "3", "--json", "--report", str(out)]) == 0
    capsys.readouterr()
    assert spy.runs >= 9  # (every run judged)
    assert spy.most == 1, f"{spy.most} runs held at once while judging one"
    got = json.loads(out.read_text())
    assert got["contract_toml"] == expected.to_toml()
    assert _report({k: got[k] for k in expected.report()}) == _report(expected.report())


# Each axis of the search with two values or one (the runs are 30 to 86 cycles: caps at 5 and
# 40 both stop some): the settings below are the fit's choices (what it saves, how it picks, how
# it deals the folds, what it keeps), judged on the same runs read the same way; the default
# grid's ≈ 1,000 candidates each made these two pairs ≈ 7.5 s of CPU (now ≈ 1 s), and the
# default settings' pair is the module's fit, on the default grid (stop 56).
RUNS_GRID = Grid(
    no_progress_cycles=(1, 3),
    min_deltas=(0.0, 0.05),
    max_cycles=(5, 40),
    cost_quantiles=(0.9,),
    marginal_multiples=(4.0, 32.0),
)


# Each fit setting once, each memory setting (all spilled, some held, all held) at least once:
# the 12 pairs cost the suite ≈ 70 s of CPU for what these 4 show.
@pytest.mark.parametrize(
    ("kwargs", "held"),
    [
        ({}, 0),
        ({"optimise": "attempts", "choose": "best", "seed": 3, "grid": RUNS_GRID}, 100),
        ({"keep_by": "held-out", "keep": 0.9, "grid": RUNS_GRID}, None),
        ({"grid": Grid(cost_quantiles=(), marginal_multiples=())}, 0),
    ],
)
def test_a_fit_on_spilled_runs_is_the_fit_on_the_list(
    runs_file: Path, fit_on_the_list: FitResult, held: int | None, kwargs: dict[str, Any]
) -> None:
    listed = load_source(runs_file)
    with spill.SpilledRuns(iter_source(runs_file), held_cycles=held) as runs:
        assert len(runs) == 9 and list(runs) == listed  # (read back as written, in order)
        assert runs.spilled == {0: 9, 100: 7, None: 0}[held]
        got = fit_stop(runs, folds=3, **kwargs)
    # (the default settings' fit on the list is the module's, computed once)
    want = fit_stop(listed, folds=3, **kwargs) if kwargs else fit_on_the_list
    assert got.to_toml() == want.to_toml()
    assert _report(got.report()) == _report(want.report())


# Every axis of the search, each with two values or one: what a spilled fit could get wrong is
# what it reads back (the runs' figures, the quantiles of their costs, the median cycle cost, the
# hazard tables, each candidate judged on each run), and each axis reads it as the full grid
# does; the full grid's 1,732 evaluations of these 164 runs (four fits: ≈ 25 s of CPU) judged
# more candidates on the same runs read the same way (now 126 each, ≈ 0.5 s).
LDB_GRID = Grid(
    no_progress_cycles=(1, 3),
    min_deltas=(0.0, 0.05),
    max_cycles=(2, 5),
    cost_quantiles=(0.9,),
    marginal_multiples=(4.0, 32.0),
)


def test_a_fit_of_the_ldb_recordings_spilled_is_the_same(tmp_path: Path) -> None:
    path = LDB_FILE
    listed = load_source(path)
    base = tmp_path / "base.toml"
    base.write_text("[contract.budget]\nmax_cycles = 6\n[contract.no_progress]\ncycles = 3\n")
    for kwargs in ({}, {"base": load_contract(base)}):
        with spill.SpilledRuns(iter_source(path), held_cycles=0) as runs:
            assert runs.spilled == len(listed) == 164  # (every run read back from the file)
            got = fit_stop(runs, grid=LDB_GRID, **kwargs)  # type: ignore[arg-type]
        want = fit_stop(listed, grid=LDB_GRID, **kwargs)  # type: ignore[arg-type]
        # (each kind of candidate was judged: plateau rules, caps, cost caps, marginal return)
        params = [c.params for c in want.candidates]
        assert any(p.max_cost_usd is not None for p in params)
        assert any(p.value_per_success_usd is not None for p in params)
        assert any(p.no_progress_cycles == 3 and p.min_delta == 0.05 for p in params)
        assert got.to_toml() == want.to_toml()
        assert _report(got.report()) == _report(want.report())


def test_replay_holds_one_run_at_a_time(
    runs_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    contract = tmp_path / "c.toml"
    contract.write_text("[contract.budget]\nmax_cycles = 20\n[contract.no_progress]\ncycles = 3\n")
    saved = tmp_path / "saved.jsonl"
    argv = ["replay", str(runs_file), "--contract", str(contract), "--json"]
    assert main(argv) == 0
    expected = json.loads(capsys.readouterr().out)
    spy = _Spy()
    monkeypatch.setattr(report_mod, "simulate", spy)
    assert main([*argv, "--save-traces", str(saved)]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    assert spy.runs == 9
    assert spy.most == 1, f"{spy.most} runs held at once while judging one"
    assert saved.read_bytes() == runs_file.read_bytes()  # (written as read, one at a time)


def test_a_bad_run_late_in_the_file_leaves_save_traces_as_it_was(
    runs_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(runs_file.read_text() + '{"format": "loopwright.run-trace/1"}\n')
    contract = tmp_path / "c.toml"
    contract.write_text("[contract.budget]\nmax_cycles = 20\n")
    saved = tmp_path / "saved.jsonl"
    saved.write_text("what was there\n")
    argv = ["replay", str(bad), "--contract", str(contract), "--save-traces", str(saved)]
    assert main(argv) == 2
    assert "bad.jsonl:10: malformed run trace" in capsys.readouterr().err
    assert saved.read_text() == "what was there\n"
    # (no temporary file left beside the one kept; the runs file is the module's, elsewhere)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "c.toml", "saved.jsonl"]


class _FullDisk(io.BytesIO):
    """A temporary file on a disk with no room left."""

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def _no_temp_folder(*args: Any, **kwargs: Any) -> Any:
    raise FileNotFoundError(errno.ENOENT, "No usable temporary directory found")


@pytest.mark.parametrize("made", [_FullDisk, _no_temp_folder], ids=["disk-full", "no-folder"])
def test_a_spill_that_cannot_be_written_is_said_naming_tmpdir(
    runs_file: Path,
    made: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """fit-stop keeps runs past ``HELD_CYCLES`` cycles in a temporary file: a full disk, or
    no temporary folder that can be written, was ``internal error: OSError`` (exit 1); it is
    said, naming where and TMPDIR (review51a). The Python API gets the ``ConfigError``."""
    monkeypatch.setattr(spill, "HELD_CYCLES", 0, raising=False)
    monkeypatch.setattr(spill.tempfile, "TemporaryFile", made)
    if made is _no_temp_folder:
        monkeypatch.setattr(spill.tempfile, "gettempdir", _no_temp_folder)
    assert main(["fit-stop", str(runs_file), "--folds", "3"]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err
    assert "TMPDIR" in err and "could not be written" in err, err
    if made is _FullDisk:
        assert "No space left on device" in err and "a temporary file in " in err
    with pytest.raises(ConfigError, match="TMPDIR"):
        spill.SpilledRuns(iter_source(runs_file), held_cycles=0)


@pytest.mark.parametrize("held", [0, 2, 10_000])
def test_closed_spilled_runs_count_none_and_refuse_iteration(held: int) -> None:
    """Closed, a pool counts no run and refuses to be read, at once and in an iteration begun
    before (it said ``len`` 4 and raised ``I/O operation on closed file``, or, all held in
    memory, read back nothing as if there were no runs)."""
    runs = spill.SpilledRuns([_run(i, 2) for i in range(4)], held_cycles=held)
    assert len(runs) == 4
    begun = iter(runs)
    assert next(begun).run_id == _run(0, 2).run_id
    runs.close()
    assert len(runs) == 0
    with pytest.raises(ValueError, match="recorded runs were closed"):
        iter(runs)
    with pytest.raises(ValueError, match="recorded runs were closed"):
        next(begun)
    runs.close()  # again: nothing
    assert len(runs) == 0


def test_fit_stop_says_what_it_wrote_on_one_line_as_named(
    runs_file: Path,
    fit_on_the_list: FitResult,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``wrote report to PATH`` is one line in a pipe, with the path as given: Rich folded it
    at 80 columns, and read ``[b]`` in a folder's name as markup (the path printed was not
    the file written). The fit is the module's (what the line says is not about the fit: a
    fit of these runs again was ≈ 1.9 s of CPU), the command's own reading and writing as
    ever."""
    monkeypatch.setenv("COLUMNS", "80")
    asked: list[dict[str, Any]] = []

    def fitted(traces: Any, **kwargs: Any) -> FitResult:
        asked.append({"runs": len(traces), "folds": kwargs["folds"]})
        return fit_on_the_list

    monkeypatch.setattr(fit_mod, "fit_stop", fitted)
    folder = tmp_path / ("a-folder-with-a-long-name-" * 2 + "[b]")
    folder.mkdir()
    out = folder / "report.json"
    assert main(["fit-stop", str(runs_file), "--folds", "3", "--report", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"wrote report to {out}" in lines
    assert out.is_file()
    assert asked == [{"runs": 9, "folds": 3}]  # (the command's fit, of the file's runs)


def test_fit_stop_given_a_generator_holds_what_the_cli_holds(
    fit_on_the_list: FitResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop 52: the Python API read a generator of runs into a list (every run's cycles at
    once, growing with the runs) where ``fit-stop`` spilled them: it now spills an iterator
    too (past ``HELD_CYCLES``; 0 here: every run in the file), with the same fit."""
    monkeypatch.setattr(spill, "HELD_CYCLES", 0, raising=False)
    spy = _Spy()
    monkeypatch.setattr(fit_score, "simulate", spy)
    monkeypatch.setattr(fit_mod, "simulate", spy)
    got = fit_stop((_run(i, 30 + 7 * i) for i in range(9)), folds=3)
    assert spy.runs >= 9
    assert spy.most == 1, f"{spy.most} runs held at once while judging one"
    assert got.to_toml() == fit_on_the_list.to_toml()
    assert _report(got.report()) == _report(fit_on_the_list.report())


def test_fit_stop_refuses_a_generators_bad_item_and_leaves_no_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[spill.SpilledRuns] = []
    real = spill.SpilledRuns.__init__

    def kept(self: spill.SpilledRuns, *a: Any, **kw: Any) -> None:
        made.append(self)
        real(self, *a, **kw)

    monkeypatch.setattr(spill.SpilledRuns, "__init__", kept)
    monkeypatch.setattr(spill, "HELD_CYCLES", 0, raising=False)
    with pytest.raises(ConfigError, match="item 2 is a str, not a RunTrace"):
        fit_stop(x for x in [_run(0, 3), _run(1, 3), "r2"])  # type: ignore[misc]
    runs = (_run(i, 30 + 7 * i) for i in range(9))
    assert [m._fh for m in made] == [None]  # (the refused read's file closed at once)
    fit_stop(runs, folds=3, grid=Grid(cost_quantiles=(), marginal_multiples=()))
    assert len(made) == 2 and made[1]._closed and made[1]._fh is None  # closed when it ended
