"""A ``sqlite:///`` store URL whose path holds a ``#`` (a directory named ``drafts#2``) is
refused with a message that says why, not opened at the path cut at the ``#``: URL parsing
reads ``#...`` as a fragment, so the store was silently created (and the run written) at
``.../drafts`` beside the directory the user named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.store import open_store


def _runs(url: str) -> subprocess.CompletedProcess[str]:
    """`loopwright runs --store URL`, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "loopwright", "runs", "--store", url],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_hash_in_a_sqlite_url_is_refused_not_cut(tmp_path: Path) -> None:
    (tmp_path / "drafts#2").mkdir()
    url = f"sqlite:///{tmp_path}/drafts#2/s.db"
    with pytest.raises(lw.ConfigError, match="#") as err:
        open_store(url)
    assert err.value.field == "store"
    assert "file path" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drafts#2"]  # nothing made at .../drafts
    with pytest.raises(lw.ConfigError, match="#"):
        lw.Runtime(url)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drafts#2"]


def test_the_same_path_given_as_a_path_opens(tmp_path: Path) -> None:
    (tmp_path / "drafts#2").mkdir()
    store = open_store(str(tmp_path / "drafts#2" / "s.db"))
    try:
        assert (tmp_path / "drafts#2" / "s.db").exists()
    finally:
        store.close()


def test_the_cli_says_why_too(tmp_path: Path) -> None:
    (tmp_path / "drafts#2").mkdir()
    (tmp_path / "drafts").write_bytes(b"")  # what the cut URL names: not to be opened
    url = f"sqlite:///{tmp_path}/drafts#2/s.db"
    out = _runs(url)
    assert out.returncode == 2, out.stderr
    assert "'#' ends the path" in out.stderr
    assert "Traceback" not in out.stderr
    assert (tmp_path / "drafts").read_bytes() == b""


def test_a_percent_encoded_path_is_decoded(tmp_path: Path) -> None:
    """``sqlite:///…/my%20runs/s.db`` opened (and created) a folder named ``my%20runs``: a
    URL's path is percent-encoded, so ``%20`` is a space, ``%23`` a '#', ``%3F`` a '?'."""
    (tmp_path / "my runs#2?").mkdir()
    url = f"sqlite:///{tmp_path}/my%20runs%232%3F/s%20db.db"
    with lw.Runtime(url) as rt:
        assert rt.store.list_runs() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my runs#2?"]
    assert (tmp_path / "my runs#2?" / "s db.db").is_file()
    # the CLI's reading commands find it at the same path
    out = _runs(url)
    assert out.returncode == 0, out.stderr


def test_a_store_the_url_named_before_decoding_is_not_left_for_a_new_one(
    tmp_path: Path,
) -> None:
    """A store made before, at the literal ``a%20b.db``, is not silently replaced by a new,
    empty ``a b.db`` (every effect would run again): refused, saying which file exists."""
    with lw.Runtime(tmp_path / "a%20b.db"):
        pass
    with pytest.raises(lw.ConfigError, match="plain file path") as err:
        open_store(f"sqlite:///{tmp_path}/a%20b.db")
    assert "a b.db" in str(err.value) and "a%20b.db" in str(err.value)
    assert not (tmp_path / "a b.db").exists()


def test_the_ray_executor_keeps_the_decoded_path(tmp_path: Path) -> None:
    from loopwright.executors.ray import absolute_store_url
    from loopwright.store import sqlite_url_path

    url = absolute_store_url(f"sqlite:///{tmp_path}/a%2541%20b.db?durability=process")
    assert sqlite_url_path(url) == f"{tmp_path}/a%41 b.db"
    assert url.endswith("?durability=process")


def test_a_read_command_names_the_file_the_url_named_before_decoding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review (stop 42): ``loopwright runs --store sqlite:///…/a%20b.db`` of a store made
    before, at the literal ``a%20b.db``, said "no store at …/a b.db": open_store's word for
    it (the file that exists, how to name it) was never reached by the read commands."""
    from loopwright.cli import main

    with lw.Runtime(tmp_path / "a%20b.db"):
        pass
    assert main(["runs", "--store", f"sqlite:///{tmp_path}/a%20b.db"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no store at" not in err and "a%20b.db' does" in err and "plain file path" in err


def test_open_store_takes_a_path_as_runtime_does(tmp_path: Path) -> None:
    """``Runtime(Path(...))`` opened the store while ``open_store(Path(...))`` (and so
    ``web.create_app(Path(...))``) raised ``TypeError: argument of type 'PosixPath' is not
    iterable``; anything else that is no store name is a ``ConfigError`` naming ``store``."""
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        assert rt.store.list_runs() == []
    st = open_store(db)
    try:
        assert st.list_runs() == []
    finally:
        st.close()
    for wrong in (42, b"s.db", ["s.db"]):
        with pytest.raises(lw.ConfigError, match="a path or a store URL") as info:
            open_store(wrong)  # type: ignore[arg-type]
        assert info.value.field == "store"
