"""A file to write is refused as an input only when both name one regular file (stop 51): the
CLI's ``--out`` guard compared any file, so ``fit-stop /dev/stdin --out /dev/stdout`` on one
terminal was refused as writing over its input; the LDB importer repeated the same check."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopwright._errors import ConfigError
from loopwright.cli._options import out_folder
from loopwright.importers.ldb import check_not_source


@pytest.fixture
def terminal() -> Iterator[Path]:
    """A terminal's device (a pseudo-terminal's), as ``/dev/stdin`` and ``/dev/stdout`` name
    it when both are the same terminal."""
    pty = pytest.importorskip("pty")
    leader, follower = pty.openpty()
    try:
        yield Path(os.ttyname(follower))
    finally:
        os.close(follower)
        os.close(leader)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("device", ["terminal", "fifo"])
def test_a_terminal_or_a_pipe_read_and_written_is_not_written_over(
    device: str, request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(device)
    out_folder(path, "--out", [path, str(path)])  # (fit-stop's, replay's guard): no refusal
    check_not_source(path, path, "--out")  # (import ldb's)
    from loopwright._same_file import same_regular_file

    assert not same_regular_file(path, path)


def test_one_regular_file_by_any_name_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwright._same_file import same_regular_file

    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs.jsonl"
    runs.write_text("{}\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(runs)
    hard = tmp_path / "hard.jsonl"
    os.link(runs, hard)
    for name in (runs, link, hard, Path("./runs.jsonl")):
        assert same_regular_file(name, runs)
        with pytest.raises(ConfigError, match="is an input of this command") as info:
            out_folder(name, "--report", ["runs.jsonl"])
        assert info.value.field == "--report"
        with pytest.raises(ConfigError, match="is the file being imported"):
            check_not_source(runs, name)
    other = tmp_path / "other.jsonl"
    other.write_text("{}\n")
    for elsewhere in (other, tmp_path / "not-there.jsonl"):
        assert not same_regular_file(elsewhere, runs)
        out_folder(elsewhere, "--out", [runs])
        check_not_source(runs, elsewhere)
    assert not same_regular_file("a\0b", runs)  # (a name no file can have: not an input)
