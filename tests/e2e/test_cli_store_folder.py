"""A store path in a folder that does not exist is refused by every command that may create a
store (leftovers48): ``run --store /typo/dir/x.db`` made the folders and a new store there, so
every task ran again and its effects were paid again (the effects journal is per store), while
``memory add`` and ``users add`` refused it. The default store's folder is still made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_bad_inputs import TASK, lw, refused


@pytest.fixture
def task(project: Path) -> Path:
    (project / "t.json").write_text(json.dumps(TASK))
    return project / "t.json"


@pytest.mark.parametrize(
    "command",
    [
        ("run", "loop.toml", "--task", "t.json"),
        ("run", "loop.toml", "--task", "t.json", "--executor", "ray"),
        ("demo",),
        ("worker", "--poll", "1"),
        ("users", "add", "root", "--role", "admin"),
        ("memory", "add", "hi", "--scope", "project", "--key", "p", "--by", "x"),
    ],
    ids=["run", "run-ray", "demo", "worker", "users-add", "memory-add"],
)
@pytest.mark.parametrize("via", ["--store", "LOOPWRIGHT_STORE"])
def test_a_store_in_a_missing_folder_is_refused(
    project: Path, task: Path, command: tuple[str, ...], via: str
) -> None:
    typo = project / "typo" / "dir" / "x.db"
    if via == "--store":
        r = lw(*command, "--store", str(typo), cwd=project)
        line = refused(r, "no folder", "does not exist", "drop --store")
    else:
        r = lw(*command, cwd=project, env={"LOOPWRIGHT_STORE": str(typo)})
        line = refused(r, "no folder", "does not exist", "unset LOOPWRIGHT_STORE")
    assert f"mkdir -p {typo.parent}" in line and ".loopwright/loopwright.db" in line
    assert not (project / "typo").exists()


def test_the_default_store_and_an_existing_folder_are_still_created(
    project: Path, task: Path
) -> None:
    r = lw("run", "loop.toml", "--task", "t.json", cwd=project, env={"LOOPWRIGHT_STORE": ""})
    assert r.returncode == 0, r.stderr
    assert (project / ".loopwright" / "loopwright.db").is_file()
    # the default path named, in a checkout without ./.loopwright: the same store, made
    other = project / "other"
    other.mkdir()
    (other / "t.json").write_text(json.dumps(TASK))
    for name in ("loop.toml", "loopmod.py"):
        (other / name).write_text((project / name).read_text())
    r = lw("run", "loop.toml", "--task", "t.json", "--store", ".loopwright/loopwright.db",
           cwd=other)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (other / ".loopwright" / "loopwright.db").is_file()
    # a new store in a folder that exists: made
    r = lw("run", "loop.toml", "--task", "t.json", cwd=project, store=project / "new.db")
    assert r.returncode == 0, r.stderr
    assert (project / "new.db").is_file()
