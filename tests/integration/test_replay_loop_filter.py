"""`replay` and `fit-stop` on SOURCE 'store' read one loop's runs with --loop (--project), say
on stderr when they pool runs of several loops, and name a filter no run has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main
from loopwright.replay import load_source, mixed_loops, traces_from_store


def _store(tmp_path: Path) -> Path:
    def actor(state: lw.TaskState) -> lw.Proposal:
        return lw.Proposal(changes={"doc/a": "x"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    path = tmp_path / "s.db"
    with lw.Runtime(str(path)) as rt:
        for name, n in (("alpha", 2), ("beta", 1)):
            loop = lw.Loop(
                name=name,
                actor=actor,
                verifiers=[check],
                project=f"p-{name}",
                contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
            )
            for i in range(n):
                task = {"artifacts": {"doc": {"a": ""}}}
                rt.run_sync(loop, task, task_key=f"{name}-{i}")
    return path


def test_the_python_api_filters_by_loop_and_project(tmp_path: Path) -> None:
    path = _store(tmp_path)
    with lw.store.open_store(str(path)) as st:
        every = load_source("store", st)
        assert sorted(t.task_key for t in every) == ["alpha-0", "alpha-1", "beta-0"]
        assert mixed_loops(every) == (
            "note: the runs are of 2 loops, pooled: alpha (2), beta (1); "
            "give --loop NAME for one loop's runs"
        )
        alpha = load_source("store", st, loop="alpha")
        assert sorted(t.task_key for t in alpha) == ["alpha-0", "alpha-1"]
        assert mixed_loops(alpha) is None
        assert [t.task_key for t in load_source("store", st, project="p-beta")] == ["beta-0"]
        assert [t.task_key for t in traces_from_store(st, loop="beta")] == ["beta-0"]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    got = capsys.readouterr()
    return code, got.out, got.err


def test_cli_replay_and_fit_stop_take_loop_and_say_pooled_loops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _store(tmp_path)
    contract = tmp_path / "c.toml"
    contract.write_text("[contract.budget]\nmax_cycles = 3\n")
    base = ["replay", "store", "--contract", str(contract), "--store", str(path), "--json"]
    code, out, err = _cli(capsys, *base)
    assert code == 0, err
    assert "pooled: alpha (2), beta (1); give --loop NAME" in err
    code, out, err = _cli(capsys, *base, "--loop", "alpha")
    assert code == 0, err
    assert "pooled" not in err
    assert json.loads(out)["recorded"]["runs"] == 2
    code, out, err = _cli(capsys, *base, "--loop", "alpah")
    assert code == 2
    assert "no run is of loop 'alpah'" in err
    fit = ["fit-stop", "store", "--store", str(path), "--folds", "2", "--json"]
    code, out, err = _cli(capsys, *fit, "--loop", "alpha")
    assert "pooled" not in err and "no run" not in err
    code, out, err = _cli(capsys, *fit)
    assert "pooled: alpha (2), beta (1)" in err
    code, out, err = _cli(capsys, *fit, "--project", "nope")
    assert code == 2
    assert "no run has project 'nope'" in err
    # a file is not filtered: said, not ignored
    runs = tmp_path / "runs.jsonl"
    assert _cli(capsys, *base, "--save-traces", str(runs))[0] == 0
    code, out, err = _cli(capsys, "replay", str(runs), "--contract", str(contract), "--loop", "a")
    assert code == 2
    assert "filter the runs of the store" in err
