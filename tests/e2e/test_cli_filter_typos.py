"""A ``--project`` or ``--loop`` that no run has is said (newuser46): ``runs --project nope``
printed an empty table and ``metrics --project nope`` all n/a, as if the filter had matched
runs that did nothing, so a typo in a project's name went unnoticed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main


@pytest.fixture
def db(tmp_path: Path) -> str:
    loop = lw.Loop(
        name="L",
        actor=lambda ctx: lw.Proposal.edit("a", {"x": 1}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="ok")],
        contract=lw.Contract.from_dict({"budget": {"max_cycles": 2}}),
    )
    path = str(tmp_path / "s.db")
    with lw.Runtime(path) as rt:
        rt.run_sync(loop, {"artifacts": {"a": {"x": 0}}}, task_key="k", project="alpha")
    return path


@pytest.mark.parametrize("command", ["runs", "metrics"])
def test_a_project_no_run_has_is_said_with_the_projects_there_are(
    db: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--project", "alpah", "--store", db]) == 0
    err = capsys.readouterr().err
    assert "note: no run has project 'alpah' (projects: alpha)" in err


@pytest.mark.parametrize("command", ["runs", "metrics"])
def test_a_loop_no_run_has_is_said_and_json_stays_json(
    db: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--loop", "Q", "--store", db, "--json"]) == 0
    got = capsys.readouterr()
    # the loops the store knows, as a --project typo names the projects (leftovers48: it
    # said "see `loopwright runs`", and `runs --loop Q` said so of itself)
    assert "note: no run is of loop 'Q' (loops: L)" in got.err
    json.loads(got.out)  # the note goes to stderr: stdout stays one JSON document


@pytest.mark.parametrize("kind", ["eval-cases", "preference-pairs"])
def test_an_export_filter_no_run_has_is_said(
    db: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export`` wrote nothing and said only "wrote 0", whatever was mistyped (leftovers48)."""
    assert main(["export", kind, "--loop", "Q", "--project", "alpah", "--store", db]) == 0
    err = capsys.readouterr().err
    assert "note: no run is of loop 'Q' (loops: L)" in err
    assert "note: no run has project 'alpah' (projects: alpha)" in err
    assert main(["export", kind, "--loop", "L", "--store", db]) == 0
    assert "note:" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["replay", "fit-stop"])
def test_a_loop_no_run_has_names_the_loops_in_replay_and_fit_stop(
    db: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    contract = tmp_path / "c.toml"
    contract.write_text("[contract.budget]\nmax_cycles = 3\n")
    more = ["--contract", str(contract)] if command == "replay" else []
    assert main([command, "store", *more, "--loop", "Q", "--store", db]) == 2
    assert "no run is of loop 'Q' (loops: L)" in capsys.readouterr().err


def test_filters_that_match_say_nothing_more(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("runs", "metrics"):
        assert main([command, "--project", "alpha", "--loop", "L", "--store", db]) == 0
        assert "note:" not in capsys.readouterr().err
    # a filter that matches runs, with another that leaves none: only the one that none has
    assert main(["runs", "--project", "alpha", "--status", "failed", "--store", db]) == 0
    assert "note:" not in capsys.readouterr().err
