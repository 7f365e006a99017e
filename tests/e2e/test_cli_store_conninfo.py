"""A libpq key=value connection string (``host=db password=s3cret dbname=x``) given as
``--store`` or ``LOOPWRIGHT_STORE``, or an ``sqlite://user:password@…`` URL, was read as a file
path: a new SQLite store was created whose file NAME held the password (invariant 9). Now it
is refused, one line, exit 2, without echoing the secret, and nothing is created; a store file
that already exists at such a name still opens (docs/storage.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwright import ConfigError
from loopwright.cli import main
from loopwright.store import open_store

from .test_cli_store_env_blank import _project

SECRET = "s3cret"
SHAPED = [
    f"host=127.0.0.1 password={SECRET} dbname=x",
    f"password={SECRET}",
    f"dbname = x password = {SECRET}",
    f"a=1 b={SECRET}",
    f"sqlite://u:{SECRET}@h/x.db",
]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "args",
    [["run", "loop.toml", "--task", "t.json"], ["runs"], ["worker", "--once"]],
    ids=" ".join,
)
@pytest.mark.parametrize("via", ["--store", "env"])
@pytest.mark.parametrize("store", SHAPED)
def test_a_connection_string_store_is_refused_without_echoing_it(
    tmp_path: Path,
    args: list[str],
    via: str,
    store: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _project(tmp_path, monkeypatch)
    if via == "env":
        monkeypatch.setenv("LOOPWRIGHT_STORE", store)
    else:
        monkeypatch.delenv("LOOPWRIGHT_STORE", raising=False)
        args = [*args, "--store", store]
    before = _tree(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("loopwright: error: "), err
    assert "Traceback" not in err
    assert SECRET not in err
    assert ("postgresql://" in err) and ("sqlite:///" in err), err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("store", SHAPED)
def test_open_store_refuses_it_with_a_config_error(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        open_store(store)
    assert info.value.field == "store"
    assert SECRET not in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["user=bob.db", "a=1 b=2", "runs@v2.db"])
def test_an_existing_store_with_such_a_name_still_opens(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # created through sqlite:///, the way docs/storage.md gives for a new store of such a name
    open_store(f"sqlite:///{name.replace(' ', '%20')}").close()
    assert (tmp_path / name).is_file()
    for url in (name, f"sqlite:///{name.replace(' ', '%20')}"):
        open_store(url).close()
    # and the CLI reads it
    assert main(["runs", "--store", name]) == 0
