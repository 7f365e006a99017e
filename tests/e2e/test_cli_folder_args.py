"""Two user mistakes whose answer misled (outside49): a task file option naming a folder
(`--tasks .`) was answered "no task file at ." — the folder is there, the person looks for a
missing file — and `loopwright ui --store ""` (an unset variable) started the dashboard on the
default store, where every other command refuses an empty --store."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwright.cli import main

SPEC = "name = 'f'\n[actor]\nref = 'f.py:actor'\n[[verifiers]]\nref = 'f.py:check'\n"
MODULE = """
import loopwright as lw

def actor(ctx):
    return lw.Proposal.edit("doc", {"a": 1})

def check(state, proposal):
    return lw.Verdict(passed=True)
"""


@pytest.mark.parametrize("command", ["run", "check"])
@pytest.mark.parametrize("option", ["--task", "--tasks"])
def test_a_task_file_option_naming_a_folder_says_it_is_a_folder(
    tmp_path: Path,
    command: str,
    option: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "f.py").write_text(MODULE)
    (tmp_path / "loop.toml").write_text(SPEC + "[contract.budget]\nmax_cycles = 2\n")
    (tmp_path / "tasks").mkdir()
    monkeypatch.chdir(tmp_path)
    store = str(tmp_path / "s.db")
    store_opt = ["--store", store] if command == "run" else []  # (check opens no store)
    assert main([command, "loop.toml", option, "tasks", *store_opt]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"loopwright: error: {option}: tasks is a directory, not a task file: name the file"
    ), err
    assert not Path(store).exists()  # refused before anything ran


def test_ui_refuses_an_empty_store_option_as_every_command_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # (a port no server can have: the command ends at the first refusal, before listening)
    assert main(["ui", "--store", "", "--port", "99999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopwright: error: --store: is empty;"), err


@pytest.mark.parametrize(
    ("args", "where", "what"),
    [
        (["fork", "r1", "--at-cycle", "0", "--contract", "dir"], "--contract", "contract file"),
        (["replay", "store", "--contract", "dir"], "--contract", "contract file"),
        (["fit-stop", "store", "--base", "dir"], "--base", "contract file"),
        (["import", "ldb", "dir", "--out", "t.jsonl"], "SOURCE", "report file"),
    ],
)
def test_a_contract_or_report_file_naming_a_folder_says_it_is_a_folder(
    tmp_path: Path,
    args: list[str],
    where: str,
    what: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The neighbours of ``--tasks .`` (review50b): a contract file or an LDB report naming a
    folder was answered "no contract file at dir", "no file at dir"."""
    (tmp_path / "dir").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOOPWRIGHT_STORE", str(tmp_path / "s.db"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert (
        err.strip()
        == f"loopwright: error: {where}: dir is a directory, not a {what}: name the file"
    ), err


@pytest.mark.parametrize("option", ["--out", "--report", "--plot"])
def test_fit_stop_refuses_a_folder_to_write_before_it_fits(
    tmp_path: Path,
    option: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fit-stop --out DIR`` fitted (minutes, on many runs), then could not write, and the
    contract it fitted was printed nowhere: the folder is refused before any run is read."""
    from loopwright.replay import _fit

    (tmp_path / "dir").mkdir()
    monkeypatch.chdir(tmp_path)

    def fitted(*args: object, **kwargs: object) -> None:
        raise AssertionError("fitted before refusing the folder")

    monkeypatch.setattr(_fit, "fit_stop", fitted)
    monkeypatch.setattr(_fit, "check_plot", lambda: None)  # (matplotlib need not be here)
    assert main(["fit-stop", "runs.jsonl", option, "dir"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"loopwright: error: {option}: dir is a directory: name a file to write"
