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
    assert "note: no run is of loop 'Q'" in got.err
    json.loads(got.out)  # the note goes to stderr: stdout stays one JSON document


def test_filters_that_match_say_nothing_more(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("runs", "metrics"):
        assert main([command, "--project", "alpha", "--loop", "L", "--store", db]) == 0
        assert "note:" not in capsys.readouterr().err
    # a filter that matches runs, with another that leaves none: only the one that none has
    assert main(["runs", "--project", "alpha", "--status", "failed", "--store", db]) == 0
    assert "note:" not in capsys.readouterr().err
