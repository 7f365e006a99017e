"""`loopwright metrics` in a narrow terminal (COLUMNS=40): the table squeezed its value and basis
columns to "…" and "0…" — a metrics command whose figures could not be read (outside49). Now,
narrower than the table, each metric is a line and its figures whole on the next."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopwright.cli import main

MODULE = """
import loopwright as lw

def actor(ctx):
    return lw.Proposal.edit("doc", {"a": 1}, usage=lw.Usage(cost_usd=0.0125, tokens=300))

def check(state, proposal):
    return lw.Verdict(passed=state.artifacts["doc"].values().get("a") == 1)
"""
SPEC = """
name = "narrow"
[actor]
ref = "narrow.py:actor"
[[verifiers]]
ref = "narrow.py:check"
[contract.budget]
max_cycles = 3
"""


def _store(tmp_path: Path, cost: float = 0.0125) -> str:
    """Two runs, each accepted in one cycle for ``cost`` dollars, made as a user makes them."""
    (tmp_path / "narrow.py").write_text(MODULE.replace("0.0125", repr(cost)))
    (tmp_path / "loop.toml").write_text(SPEC)
    task = {"artifacts": {"doc": {"a": 0}}}
    lines = [json.dumps({**task, "task_key": key}) for key in ("n-1", "n-2")]
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    store = str(tmp_path / "s.db")
    args = ["run", str(tmp_path / "loop.toml"), "--tasks", str(tmp_path / "tasks.jsonl")]
    assert main([*args, "--store", store]) == 0
    return store


@pytest.mark.parametrize("columns", ["40", "60"])
def test_metrics_in_a_narrow_terminal_keeps_every_figure_whole(
    tmp_path: Path,
    columns: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _store(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    assert main(["metrics", "--store", store, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["metrics", "--store", store]) == 0
    out = capsys.readouterr().out
    head = out.split("Stop reasons")[0]  # (the two small tables after it fit as they are)
    assert "…" not in head, out
    assert max(len(line.rstrip()) for line in head.splitlines()) <= int(columns), out
    lines = [line.strip() for line in head.splitlines()]
    # each metric by its whole name, its value and basis whole on the line after it
    assert lines[lines.index("cost_per_accepted_usd") + 1] == "$0.0125  ($0.025 / 2)", out
    assert lines[lines.index("task_completion_rate") + 1] == "1.000  (2 / 2)", out
    assert lines[lines.index("cycles_to_accepted") + 1] == "1.000  (2 / 2)", out
    for name in doc["basis"]:
        assert name in lines, (name, out)


def test_metrics_in_a_wide_enough_terminal_is_still_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    assert main(["metrics", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "┃ metric" in out and "…" not in out, out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80, out


def test_the_basis_shows_dollars_as_the_values_show_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spend of $681.9129 over 2 accepted runs: the basis read "681.9129 / 2" beside whole
    counts (polish53); it is "$681.91 / 2" as the values show dollars, and `--json` keeps
    every digit."""
    store = _store(tmp_path, cost=340.95645)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "40")
    capsys.readouterr()
    assert main(["metrics", "--store", store]) == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.split("Stop reasons")[0].splitlines()]
    assert lines[lines.index("cost_per_accepted_usd") + 1] == "$340.96  ($681.91 / 2)", out
    assert lines[lines.index("progress_per_usd") + 1] == "0.003 /$  (2 / $681.91)", out
    frac = lines[lines.index("spend_after_last_improvement_frac") + 1]
    assert frac == "0.000  ($0 / $681.91)", out
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["metrics", "--store", store, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["basis"]["cost_per_accepted_usd"] == [681.9129, 2], doc["basis"]
