"""A damaged store at the Python API: ``StoreCorruptError`` naming the store, saying what is
wrong and what to do, with the driver's error as its ``__cause__`` — not ``sqlite3``'s or
psycopg's own error (the CLI and the dashboard said it in one line; a program using the API got
``sqlite3.DatabaseError: database disk image is malformed``, a PostgreSQL one a plain
``StoreError``). Real stores, damaged as files are: truncated, a header overwritten, pages in
the middle overwritten, a table dropped or altered."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import pg_create_schema

import loopwright as lw
from loopwright.store import open_store

TASK = {"artifacts": {"doc": {"body": ""}}}


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"{ctx.cycle:04d} " + "x" * 3000})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("no", "doc", "body"),))

    return lw.Loop(
        name="damaged",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str]:
    """A store file (closed: its WAL folded in) holding one ended 60-cycle run of 3 KB values."""
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        run_id = rt.run_sync(_loop(60), TASK, task_key="d").run_id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]
    return db, run_id


def _overwrite(db: Path, at: int, size: int) -> None:
    with open(db, "r+b") as fh:
        fh.seek(at)
        fh.write(b"\xa5" * size)


def _damaged(info: pytest.ExceptionInfo[lw.StoreCorruptError], db: Path, says: str) -> None:
    exc = info.value
    assert type(exc) is lw.StoreCorruptError
    assert str(db) in str(exc)  # which store
    assert says in str(exc)  # what is wrong
    assert "restore it from a backup" in str(exc)  # what to do
    assert type(exc.__cause__) is sqlite3.DatabaseError  # the driver's own error, kept


def _api(run_id: str) -> dict[str, Callable[[lw.Runtime], Any]]:
    """The calls a program makes on a store: reads (as `show` does), a resume, a new run."""
    return {
        "get_run": lambda rt: rt.store.get_run(run_id),
        "list_runs": lambda rt: rt.store.list_runs(),
        "result": lambda rt: rt.result(run_id),
        "checkpoints": lambda rt: rt.store.checkpoints(run_id),
        "events": lambda rt: rt.store.events(run_id),
        "resume": lambda rt: rt.resume_sync(run_id, _loop(80)),
        "run": lambda rt: rt.run_sync(_loop(3), TASK, task_key="another"),
    }


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda db: os.truncate(db, db.stat().st_size // 2), id="truncated"),
        pytest.param(lambda db: _overwrite(db, 0, 100), id="header-overwritten"),
    ],
)
def test_a_store_damaged_at_its_start_or_end_is_refused_when_opened(
    stored: tuple[Path, str], damage: Callable[[Path], None]
) -> None:
    db, _ = stored
    damage(db)
    before = db.read_bytes()
    with pytest.raises(lw.StoreCorruptError) as info:
        lw.Runtime(db)
    _damaged(info, db, "is not a usable loopwright store")
    with pytest.raises(lw.StoreCorruptError) as info:
        open_store(str(db))
    _damaged(info, db, "is not a usable loopwright store")
    assert db.read_bytes() == before  # refused untouched


def test_pages_overwritten_in_the_middle_fail_every_call_that_reads_them(
    stored: tuple[Path, str],
) -> None:
    db, run_id = stored
    size = db.stat().st_size
    con = sqlite3.connect(db)
    (page_size,) = con.execute("PRAGMA page_size").fetchone()
    # the schema's own pages are kept whole: it outgrew its first page as migrations added
    # indexes, and where its others lie moves with every schema change
    schema = {n for (n,) in con.execute("SELECT pageno FROM dbstat WHERE name='sqlite_schema'")}
    con.close()
    middle = range(size // 3 // page_size, 2 * size // 3 // page_size)
    hit = [n for n in middle if n + 1 not in schema]  # (dbstat counts pages from 1)
    assert len(hit) >= len(middle) - len(schema) > 0
    for n in hit:  # b-tree pages of several tables
        _overwrite(db, n * page_size, page_size)
    for name, call in _api(run_id).items():
        # (opening reads the schema, which is whole)
        with lw.Runtime(db) as rt, pytest.raises(lw.StoreCorruptError) as info:
            call(rt)
        _damaged(info, db, "database disk image is malformed")
        assert "is damaged" in str(info.value), name


def test_one_table_s_page_overwritten_fails_its_reads_only(stored: tuple[Path, str]) -> None:
    db, run_id = stored
    con = sqlite3.connect(db)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='checkpoints'").fetchone()
    (page_size,) = con.execute("PRAGMA page_size").fetchone()
    con.close()
    _overwrite(db, (root - 1) * page_size, page_size)
    with lw.Runtime(db) as rt:
        assert rt.store.get_run(run_id).cycle == 60  # the run's row is whole
        for call in (lambda: rt.result(run_id), lambda: rt.resume_sync(run_id, _loop(80))):
            with pytest.raises(lw.StoreCorruptError) as info:
                call()
            _damaged(info, db, "malformed")


def test_a_dropped_table(stored: tuple[Path, str]) -> None:
    db, run_id = stored
    con = sqlite3.connect(db)
    con.execute("DROP TABLE events")
    con.commit()
    con.close()
    with lw.Runtime(db) as rt:
        with pytest.raises(lw.StoreCorruptError) as info:
            rt.store.events(run_id)
        # (not a cause of its own: "no such table" is an OperationalError, as a lock is)
        assert type(info.value.__cause__) is sqlite3.OperationalError
        assert str(db) in str(info.value) and "no such table: events" in str(info.value)
        with pytest.raises(lw.StoreCorruptError, match="no such table: events") as info:
            rt.run_sync(_loop(3), TASK, task_key="another")  # its first write
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)


def test_a_constraint_is_not_damage(stored: tuple[Path, str]) -> None:
    """What the store relies on the driver for (a duplicate key) keeps its own error."""
    db, _ = stored
    with lw.Runtime(db) as rt:
        store: Any = rt.store
        with pytest.raises(sqlite3.IntegrityError), store._tx() as conn:
            conn.execute("INSERT INTO loopwright_meta(key, value) VALUES('schema_version', 'x')")
        with pytest.raises(sqlite3.IntegrityError), store._conn() as conn:
            conn.execute("INSERT INTO loopwright_meta(key, value) VALUES('schema_version', 'x')")


# --- PostgreSQL -----------------------------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize(
    "alter",
    [
        pytest.param("DROP TABLE {s}.checkpoints CASCADE", id="dropped-table"),
        pytest.param("ALTER TABLE {s}.checkpoints DROP COLUMN record", id="dropped-column"),
    ],
)
def test_postgres_tables_dropped_or_altered(pg_schema: tuple[str, str], alter: str) -> None:
    import psycopg
    from psycopg import sql

    base, schema = pg_schema
    url = pg_create_schema(base, schema)
    with lw.Runtime(url) as rt:
        run_id = rt.run_sync(_loop(3), TASK, task_key="d").run_id
        shown = rt.store.url  # the URL without a password
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL(alter.format(s="{}")).format(sql.Identifier(schema)))
    with lw.Runtime(url) as rt:
        assert rt.store.get_run(run_id).cycle == 3  # the runs table is whole
        for call in (
            lambda: rt.result(run_id),
            lambda: rt.store.checkpoints(run_id),
            lambda: rt.resume_sync(run_id, _loop(5)),
        ):
            with pytest.raises(lw.StoreCorruptError) as info:
                call()
            text = str(info.value)
            assert f"store: {shown} is damaged" in text
            assert "Undefined" in text and "restore it from a backup" in text
            assert isinstance(
                info.value.__cause__,
                psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn,
            )


@pytest.mark.postgres
def test_postgres_damage_names_the_store_without_its_password(
    pg_schema: tuple[str, str],
) -> None:
    import psycopg
    from psycopg import sql

    base, schema = pg_schema
    if "@" not in base or ":" in base.split("://", 1)[1].split("@", 1)[0]:
        pytest.skip("the test server's URL has no user to add a password to, or has one")
    scheme, rest = base.split("://", 1)
    user, host = rest.split("@", 1)
    secret = "hunter2-not-shown"
    pg_create_schema(base, schema)
    url = f"{scheme}://{user}:{secret}@{host}{'&' if '?' in host else '?'}schema={schema}"
    try:
        rt = lw.Runtime(url)
    except lw.StoreError as exc:  # a server that checks passwords refuses it
        pytest.skip(f"the test server checks passwords: {exc}")
    with rt:
        run_id = rt.run_sync(_loop(2), TASK, task_key="d").run_id
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE {}.events CASCADE").format(sql.Identifier(schema)))
        with pytest.raises(lw.StoreCorruptError) as caught:
            rt.store.events(run_id)
    assert secret not in str(caught.value)
    assert f"{user}:***@" in str(caught.value) and schema in str(caught.value)
