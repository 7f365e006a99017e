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
    out = subprocess.run(
        [sys.executable, "-m", "loopwright", "runs", "--store", url],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "'#' ends the path" in out.stderr
    assert "Traceback" not in out.stderr
    assert (tmp_path / "drafts").read_bytes() == b""
