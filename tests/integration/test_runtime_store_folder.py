"""``Runtime(path)`` refuses a new store in a folder that does not exist, as the CLI's ``--store``
does (api49): it made the folders and a new, empty store, so a mistyped path in a deployed
program ran every task again and paid its effects again (the effects journal is per store).
The default store's folder, ``./.loopwright``, is still made."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw


def _refused(store: str | None) -> str:
    with pytest.raises(lw.ConfigError) as info:
        lw.Runtime(store)
    assert info.value.field == "store"
    return info.value.message


@pytest.mark.parametrize("form", ["path", "sqlite-url", "pathlike"])
def test_a_store_in_a_missing_folder_is_refused(tmp_path: Path, form: str) -> None:
    typo = tmp_path / "typo" / "dir" / "x.db"
    given: str = {"path": str(typo), "sqlite-url": f"sqlite:///{typo}"}.get(form, "")
    with pytest.raises(lw.ConfigError) as info:
        lw.Runtime(typo if form == "pathlike" else given)
    message = info.value.message
    assert f"no folder {typo.parent} for the store {typo}" in message
    assert f"os.makedirs({str(typo.parent)!r}, exist_ok=True)" in message
    assert "leave the store out" in message and ".loopwright/loopwright.db" in message
    assert not (tmp_path / "typo").exists()


def test_loopwright_store_in_a_missing_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    typo = tmp_path / "typo" / "x.db"
    monkeypatch.setenv("LOOPWRIGHT_STORE", str(typo))
    message = _refused(None)
    assert "from $LOOPWRIGHT_STORE" in message and "unset LOOPWRIGHT_STORE" in message
    assert not typo.parent.exists()


def test_an_existing_folder_and_the_default_folder_are_still_made_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPWRIGHT_STORE", raising=False)
    with lw.Runtime(tmp_path / "new.db"):
        pass
    assert (tmp_path / "new.db").is_file()
    with lw.Runtime():  # ./.loopwright made when missing
        pass
    assert (tmp_path / ".loopwright" / "loopwright.db").is_file()
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    with lw.Runtime(".loopwright/code_repair.db"):  # (examples/code_repair's README)
        pass
    assert (other / ".loopwright" / "code_repair.db").is_file()
    # an existing store is opened wherever it is; the folder made first: a new store there
    (tmp_path / "made").mkdir()
    with lw.Runtime(str(tmp_path / "made" / "s.db")):
        pass
    assert (tmp_path / "made" / "s.db").is_file()


def test_the_cli_makes_loopwrights_own_folder_for_any_store_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rule for both (``_store_folder``): ``--store .loopwright/other.db`` in a checkout
    without ``./.loopwright`` was refused by the CLI while ``Runtime`` took it."""
    from loopwright.cli._stores import creatable_store

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPWRIGHT_STORE", raising=False)
    assert creatable_store(".loopwright/other.db") == ".loopwright/other.db"
    with pytest.raises(lw.ConfigError, match="no folder"):
        creatable_store("typo/other.db")


def test_a_tilde_path_is_refused_saying_it_is_not_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path is read as it is: ``Runtime("~/runs/lw.db")`` made a folder named ``~`` in the
    working directory and a new store in it."""
    monkeypatch.chdir(tmp_path)
    message = _refused("~/runs/lw.db")
    assert "'~' is not expanded" in message and "os.path.expanduser" in message
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("named", ["file:data/x.db", "file:data/x.db?mode=rwc"])
def test_an_sqlite_uri_filename_in_a_folder_that_exists_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    # (review49c) ``file:data/x.db`` names data/x.db to an SQLite built with URI filenames;
    # it was refused for a folder ``file:data``, also where the store exists
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    lw.Runtime(named).close()  # before: ConfigError "no folder file:data"
    lw.Runtime(named).close()  # and once it exists
    # its own folder missing, it is refused, naming that folder
    with pytest.raises(lw.ConfigError) as info:
        lw.Runtime("file:nodata/x.db")
    assert "no folder nodata for the store file:nodata/x.db" in info.value.message


@pytest.mark.postgres
def test_a_missing_postgres_schema_is_refused_naming_the_store_it_may_mean(
    pg_url: str, pg_schema: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``?schema=`` typo made a new, empty schema: every task ran and paid again (stop 50).
    Refused as a missing folder is, naming the store of the database closest to it; the
    schema created (``CREATE SCHEMA``), a store is started in it."""
    import psycopg
    from conftest import pg_create_schema, pg_drop_schema

    base, schema = pg_schema
    with lw.Runtime(pg_url):  # the fixture created the schema: a store starts in it
        pass
    typo = schema[:-1]  # (a letter left out)
    url = f"{base}{'&' if '?' in base else '?'}schema={typo}"
    database = psycopg.conninfo.conninfo_to_dict(base)["dbname"]
    try:
        message = _refused(url)
        assert message.startswith(
            f"no schema {typo!r} in database {database!r} (from the store argument); "
            f"did you mean {schema!r}?"
        ), message
        assert f'CREATE SCHEMA "{typo}";' in message and "check ?schema=" in message
        monkeypatch.setenv("LOOPWRIGHT_STORE", url)
        assert "(from $LOOPWRIGHT_STORE)" in _refused(None)
        with psycopg.connect(base) as conn:
            found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname=%s", (typo,))
            assert found.fetchone() is None  # nothing created
        pg_create_schema(base, typo)  # the person's own opt-in, as os.makedirs is
        with lw.Runtime(url) as rt:
            assert rt.store.count_runs() == 0
    finally:
        pg_drop_schema(base, typo)
