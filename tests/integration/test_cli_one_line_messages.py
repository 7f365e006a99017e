"""Every command's one-line message (a summary, ``wrote X to PATH``, a ready line, a hint) is
one line in a pipe, with the paths and names in it as given (stop 51): Rich folded such a line
at its 80 columns, so a script reading it found half of it, and read ``[b]`` in a path or a
name as markup, so the path printed was not the file written."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from support.long_loops import rejecting_loop

import loopwright as lw
from loopwright.cli import main

LDB = Path(__file__).parents[1] / "data/ldb/humaneval/reflexion/gpt-4o-2024-05-13.jsonl"
# A folder whose name alone is longer than a pipe's 80 columns, with markup's brackets in it.
FOLDER = "a-folder-with-a-rather-long-name-" * 3 + "[b]"
KEY = "a-task-key-long-enough-to-fold-[b]-" * 2  # (a task key, a scope key)
NAME = "someone-with-a-long-name-[b]-" * 2  # (a person: at most 64 characters)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COLUMNS", "80")  # as in a pipe, whatever runs the tests
    monkeypatch.chdir(tmp_path)
    here = tmp_path / FOLDER
    here.mkdir()
    with lw.Runtime(str(here / "s.db")) as rt:
        rt.run_sync(rejecting_loop(2, lambda n: {"p": f"draft {n}"}), {"goal": "g"}, task_key="k")
    return here


def _run_id(store: Path) -> str:
    with lw.Runtime(str(store)) as rt:
        return rt.store.get_run("k").run_id


# (command, then for each line said: the parts that one line of its output holds, in order).
# {f} is the folder, {s} the store, {r} the run's id, {ldb} a few LDB runs (a quick fit)
CASES: list[tuple[str, list[str], *tuple[list[str], ...]]] = [
    (
        "import-ldb",
        ["import", "ldb", str(LDB), "--out", "{f}/tasks.jsonl"],
        ["wrote 164 task(s) to {f}/tasks.jsonl (round budget: ", "; no visible tests: "],
    ),
    (
        "fit-stop",
        ["fit-stop", "{ldb}", "--folds", "2", "--out", "{f}/c.toml"],
        ["chosen: ", " candidates, ", " s)"],
        ["wrote contract to {f}/c.toml"],
    ),
    (
        "trace",
        ["trace", "{r}", "--store", "{s}", "--out", "{f}/t.jsonl"],
        ["wrote ", " line(s) of run {r} to {f}/t.jsonl"],
    ),
    (
        "export-eval-cases",
        ["export", "eval-cases", "--store", "{s}", "--out", "{f}/e.jsonl"],
        ["wrote 1 eval case(s) to {f}/e.jsonl"],
    ),
    (
        "memory-add",
        ["memory", "add", "--store", "{s}", "--scope", "project", "--key", KEY, "use tabs"],
        [" added: active (project " + KEY + ", correction)"],
    ),
    (
        "fork",
        ["fork", "k", "--at-cycle", "1", "--key", KEY, "--by", "ann", "--store", "{s}"],
        ["forked run {r12} at cycle 1: new run ", " (task key " + KEY + ")"],
    ),
    (
        "edit",
        ["edit", "k", "doc/p", "--value", "mine", "--by", NAME, "--store", "{s}"],
        ["run {r12}: doc/p edited by " + NAME + ", now "],
    ),
    (
        "worker",
        ["worker", "--once", "--store", "{s}"],
        [" on ", "{f}/s.db: claiming up to ", " run(s) (until idle)"],
    ),
    (
        "audit",
        ["audit", "--store", "{s}"],
        [" add user user " + NAME + ": allowed (cli) roles="],
    ),
]


@pytest.mark.parametrize(
    ("argv", "said"), [(c[1], c[2:]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_message_is_one_line_with_its_path_and_names_as_given(
    folder: Path,
    argv: list[str],
    said: tuple[list[str], ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = folder / "s.db"
    ldb = folder.parent / "ldb.jsonl"
    ldb.write_text("".join(LDB.read_text(encoding="utf-8").splitlines(keepends=True)[:24]))
    run_id = _run_id(store)
    if argv[0] == "audit":  # a store with users keeps an audit log
        assert main(["users", "add", NAME, "--role", "admin", "--store", str(store)]) == 0
    capsys.readouterr()

    def filled(text: str) -> str:
        return (
            text.replace("{f}", str(folder))
            .replace("{s}", str(store))
            .replace("{r12}", run_id[:12])
            .replace("{r}", run_id)
            .replace("{ldb}", str(ldb))
        )

    code = main([filled(a) for a in argv])
    got = capsys.readouterr()
    assert code == 0, got.err
    lines = (got.out + got.err).splitlines()
    for parts in said:
        wanted = [filled(p) for p in parts]
        whole = [
            line
            for line in lines
            if all(p in line for p in wanted)
            and all(line.index(a) < line.index(b) for a, b in pairwise(wanted))
        ]
        assert whole, (wanted, lines)
