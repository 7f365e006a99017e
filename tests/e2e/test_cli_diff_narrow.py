"""`loopwright diff` in a terminal narrower than its two columns: each row was printed at a fixed
30 characters a side and the terminal wrapped B's value under A's (COLUMNS=40: "run
5c7f6a34ec6e4fdb" then "f850cb0af8dd42b4" on a line of its own, with no label), and a part's
line wider than the terminal (80 columns, the width of a pipe, for values of any length) ran A
and B together across two lines (outside49). Now the columns shrink to the terminal, and
narrower than a whole run id A and B are stacked under their label, each on its own line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from loopwright.cli import main

MODULE = """
import loopwright as lw

def actor(ctx):
    return lw.Proposal.edit("doc", {"note": ctx.task["note"]})

def check(state, proposal):
    return lw.Verdict(passed=True)
"""
SPEC = """
name = "narrow-diff"
[actor]
ref = "nd.py:actor"
[[verifiers]]
ref = "nd.py:check"
[contract.budget]
max_cycles = 2
"""


@pytest.fixture
def two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str, str]:
    """The store, and two accepted runs' ids, whose one part holds a long text each."""
    (tmp_path / "nd.py").write_text(MODULE)
    (tmp_path / "loop.toml").write_text(SPEC)
    store = str(tmp_path / "s.db")
    for key, note in (("left", "the harbour wall in the rain " * 3), ("right", "a map " * 9)):
        task = {"note": note, "artifacts": {"doc": {"note": ""}}}
        (tmp_path / f"{key}.json").write_text(json.dumps(task))
        args = ["run", str(tmp_path / "loop.toml"), "--task", str(tmp_path / f"{key}.json")]
        assert main([*args, "--task-key", key, "--store", store]) == 0
    capsys.readouterr()
    assert main(["runs", "--json", "--store", store]) == 0
    ids = {r["task_key"]: r["run_id"] for r in json.loads(capsys.readouterr().out)}
    return store, ids["left"], ids["right"]


@pytest.fixture
def diff_at(
    two_runs: tuple[str, str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[str], list[str]]:
    """``loopwright diff left right`` in a terminal of the given columns: its lines, none wider."""

    def run(columns: str) -> list[str]:
        monkeypatch.setenv("COLUMNS", columns)
        monkeypatch.setenv("NO_COLOR", "1")
        assert main(["diff", "left", "right", "--store", two_runs[0]]) == 0
        lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
        assert max(len(line) for line in lines) <= int(columns), "\n".join(lines)
        return lines

    return run


def test_diff_in_40_columns_stacks_a_and_b_under_each_label(
    two_runs: tuple[str, str, str], diff_at: Callable[[str], list[str]]
) -> None:
    _, a, b = two_runs
    lines = diff_at("40")
    at = lines.index("run")
    assert lines[at + 1 : at + 3] == [f"  A {a}", f"  B {b}"], lines  # whole, usable ids
    at = lines.index("task")
    assert lines[at + 1 : at + 3] == ["  A left", "  B right"], lines
    at = lines.index("  ≠ doc/note")
    assert lines[at + 1].startswith("      A the harbour wall"), lines
    assert lines[at + 1].endswith("… (accepted)"), lines
    assert lines[at + 2].startswith("      B a map a map") and "(accepted)" in lines[at + 2]


def test_diff_in_80_columns_keeps_the_two_columns_and_stacks_a_long_part(
    two_runs: tuple[str, str, str], diff_at: Callable[[str], list[str]]
) -> None:
    _, a, b = two_runs
    lines = diff_at("80")
    assert lines[0].split() == ["run", a, b], lines  # side by side, on one line
    at = lines.index("  ≠ doc/note")  # its one line would be 87 characters: stacked
    assert lines[at + 1].startswith("      A the harbour wall in the"), lines
    assert lines[at + 2].startswith("      B a map a map"), lines


def test_diff_wide_enough_keeps_a_part_on_one_line(diff_at: Callable[[str], list[str]]) -> None:
    lines = diff_at("120")
    [line] = [x for x in lines if "doc/note" in x]
    assert line.startswith("  ≠ doc/note: the harbour wall in the") and " | a map a map" in line
