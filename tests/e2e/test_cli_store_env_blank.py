"""`LOOPWRIGHT_STORE` set to blanks only (`export LOOPWRIGHT_STORE=" "`, a template's value left
blank): it named a file " " in the working folder, which `loopwright run` created as a new store
— invisible in `ls`, every task run again in it — and the read commands said "no store at   (from
$LOOPWRIGHT_STORE)" (outside49), where `--store " "` is refused. Now it is refused, one line,
exit 2, naming the variable; nothing is created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopwright.cli import main

MODULE = """
import loopwright as lw

def actor(ctx):
    return lw.Proposal.edit("doc", {"a": 1})

def check(state, proposal):
    return lw.Verdict(passed=True)
"""
SPEC = "name = 'blank'\n[actor]\nref = 'b.py:actor'\n[[verifiers]]\nref = 'b.py:check'\n"


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec, its module and a task in ``tmp_path``, the working folder."""
    (tmp_path / "b.py").write_text(MODULE)
    (tmp_path / "loop.toml").write_text(SPEC + "[contract.budget]\nmax_cycles = 2\n")
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"a": 0}}}))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "loop.toml", "--task", "t.json"],
        ["runs"],
        ["runs", "--json"],
        ["worker", "--once"],
        ["memory", "list"],
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("blank", [" ", "\t ", "\n"])
def test_a_blank_loopwright_store_is_refused_and_nothing_is_created(
    tmp_path: Path,
    args: list[str],
    blank: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _project(tmp_path, monkeypatch)
    monkeypatch.setenv("LOOPWRIGHT_STORE", blank)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"loopwright: error: $LOOPWRIGHT_STORE: is blank ({blank!r})"), err
    assert "unset it for the default store" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no store " ", no folder


def test_store_option_wins_over_a_blank_loopwright_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variable is read only when --store is not given: a blank one then is no mistake."""
    _project(tmp_path, monkeypatch)
    monkeypatch.setenv("LOOPWRIGHT_STORE", " ")
    store = str(tmp_path / "s.db")
    assert main(["run", "loop.toml", "--task", "t.json", "--store", store]) == 0
    capsys.readouterr()
    assert main(["runs", "--json", "--store", store]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
