"""`loopwright metrics` in a narrow terminal (COLUMNS=40): the table squeezed its value and basis
columns to "…" and "0…" — a metrics command whose figures could not be read (outside49). Now,
narrower than the table, each metric is a line and its figures whole on the next."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main


def _actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit("doc", {"a": 1}, usage=lw.Usage(cost_usd=0.0125, tokens=300))


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=state.artifacts["doc"].values().get("a") == 1)


def _store(tmp_path: Path) -> str:
    store = str(tmp_path / "s.db")
    loop = lw.Loop(
        name="narrow",
        actor=_actor,
        verifiers=[lw.Check(fn=_check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    with lw.Runtime(store) as rt:
        for key in ("n-1", "n-2"):
            assert rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key=key).accepted
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
    assert lines[lines.index("cost_per_accepted_usd") + 1] == "$0.0125  (0.025 / 2)", out
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
    assert main(["metrics", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "┃ metric" in out and "…" not in out, out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80, out
