"""`loopwright show` and `loopwright diff` print values as JSON (``true``, ``null``, double
quotes), as ``--json`` does, not as Python's repr (``True``, ``None``, ``'info'``): a newcomer
walking the CLI read ``('info', False, [{'speaker': ...`` (helper fix/small44)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main

VALUE = {"level": "info", "ok": False, "none": None, "turns": [{"speaker": "ana"}]}
# each key is a part of its own (doc/level, doc/ok, ...): the value shown for each
SHOWN = {"level": '"info"', "ok": "false", "none": "null", "turns": '[{"speaker": "ana"}]'}


def _loop(cycles: int) -> lw.Loop:
    return lw.Loop(
        name="values",
        actor=lambda ctx: lw.Proposal.edit("doc", VALUE),
        verifiers=[lw.Check(fn=lambda state, proposal: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, str]:
    monkeypatch.setenv("COLUMNS", "240")
    store = str(tmp_path / "s.db")
    with lw.Runtime(store) as rt:
        a = rt.run_sync(_loop(1), {"artifacts": {"doc": {}}}, task_key="a").run_id
        b = rt.run_sync(_loop(2), {"artifacts": {"doc": {}}}, task_key="b").run_id
    return store, a, b


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _no_repr(out: str) -> None:
    for python in ("'info'", "False", "None", "{'"):
        assert python not in out, (python, out)


def test_show_prints_an_artifact_as_json(
    runs: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store, a, _ = runs
    out = _cli(capsys, "show", a, "--store", store)
    for key, shown in SHOWN.items():
        [line] = [x for x in out.splitlines() if f"doc/{key} " in x and "accepted" in x]
        assert line.rstrip().endswith(f"accepted   {shown}"), line
    _no_repr(out)
    doc = json.loads(_cli(capsys, "show", a, "--json", "--store", store))
    [doc_artifact] = doc["state"]["artifacts"]
    parts = {p["name"]: p["versions"][-1]["value"] for p in doc_artifact["parts"]}
    assert parts == VALUE  # --json: unchanged, the values themselves


def test_diff_prints_values_as_json(
    runs: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store, a, b = runs
    out = _cli(capsys, "diff", a, b, "--store", store)
    for key, shown in SHOWN.items():
        if key != "level":  # a string is shown bare in diff's narrow columns, as before
            assert f"= doc/{key}: {shown} (accepted) | {shown} (accepted)" in out, out
    assert "max_cycles: 1 -> 2" in out, out
    _no_repr(out)
    doc = json.loads(_cli(capsys, "diff", a, b, "--json", "--store", store))
    parts = {p["part"]: p["a"]["value"] for p in doc["parts"]}
    assert parts == {f"doc/{k}": v for k, v in VALUE.items()}
