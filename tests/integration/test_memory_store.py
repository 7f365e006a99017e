"""Feedback memory in the store: the ``memory_*`` methods and ``FeedbackMemory`` over them, each
test on SQLite and on PostgreSQL (``LOOPWRIGHT_TEST_PG``, a schema per test; see conftest.py).
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._memory import FeedbackMemory, MemoryNotFoundError
from loopwright.store import Store, open_store
from loopwright.store._pg_schema import PG_MIGRATIONS
from loopwright.store._schema import SQLITE_MIGRATIONS
from loopwright.store._sql_migrations import _ADD_COLUMN


@dataclass
class Backend:
    name: str
    url: str
    migrations: list[list[str]]
    # Statements run outside the store, on a fresh database with only loopwright_meta.
    execute_all: Callable[[list[str]], None]

    def open(self) -> Store:
        return open_store(self.url)


def _sqlite_backend(path: Path) -> Backend:
    def execute_all(statements: list[str]) -> None:
        db = sqlite3.connect(path)
        for statement in statements:
            if statement in _ADD_COLUMN:  # (a step the migrations runner runs in Python)
                for _column, add in _ADD_COLUMN[statement]:
                    db.execute(add)
                continue
            db.execute(statement)
        db.commit()
        db.close()

    return Backend("sqlite", f"sqlite:///{path}", SQLITE_MIGRATIONS, execute_all)


def _pg_backend(url: str) -> Backend:
    import psycopg
    from psycopg import sql

    base, _, schema = url.rpartition("schema=")
    base = base.rstrip("?&")

    def execute_all(statements: list[str]) -> None:
        with psycopg.connect(base, autocommit=True) as conn, conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            for statement in statements:
                conn.execute(statement)

    return Backend("postgres", url, PG_MIGRATIONS, execute_all)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return _sqlite_backend(tmp_path / "store.db")
    return _pg_backend(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    s = backend.open()
    try:
        yield s
    finally:
        s.close()


def _item(memory_id: str, **kw: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "memory_id": memory_id,
        "scope": "project",
        "scope_key": "A",
        "signal": "correction",
        "strength": 1.0,
        "text": f"text of {memory_id}",
        "rule": None,
        "source": {"run_id": "r1", "cycle": 3, "part": "doc/a"},
        "by": "ann",
        "status": "active",
        "created_at": 100.0,
        "updated_at": 100.0,
        "history": [],
    }
    item.update(kw)
    return item


# --- the store methods --------------------------------------------------------------------
def test_add_and_query_round_trip_every_field(store: Store) -> None:
    rule = {"z": 1, "a": {"nested": [1, 2.5, None, "x"]}}
    store.memory_add(_item("m1", rule=rule, text="Blue palette — not teal"))
    store.memory_add(_item("m2", rule=None, source={}))
    [m1] = store.memory_query(memory_id="m1")
    assert m1 == _item("m1", rule=rule, text="Blue palette — not teal")
    assert list(m1["rule"]) == ["z", "a"]  # key order survives, as in the other JSON columns
    [m2] = store.memory_query(memory_id="m2")
    assert (m2["rule"], m2["source"], m2["history"]) == (None, {}, [])


def test_a_duplicate_id_is_a_conflict_and_writes_nothing(store: Store) -> None:
    store.memory_add(_item("m1", text="first"))
    with pytest.raises(lw.ConflictError, match="m1"):
        store.memory_add(_item("m1", text="second"))
    assert [r["text"] for r in store.memory_query()] == ["first"]


def test_query_filters_by_scope_pairs_status_id_and_limit(store: Store) -> None:
    rows = [
        _item("a", scope="project", scope_key="A", created_at=1.0),
        _item("b", scope="project", scope_key="B", created_at=2.0),
        _item("c", scope="task", scope_key="A", created_at=3.0),
        _item("d", scope="global", scope_key="", status="candidate", created_at=4.0),
        _item("e", scope="project", scope_key="A", status="forgotten", created_at=5.0),
    ]
    for r in rows:
        store.memory_add(r)

    def ids(**kw: Any) -> list[str]:
        return [r["memory_id"] for r in store.memory_query(**kw)]

    assert ids() == ["e", "d", "c", "b", "a"]  # newest first
    assert ids(scopes=[("project", "A")]) == ["e", "a"]
    assert ids(scopes=[("project", "A")], status="active") == ["a"]
    assert ids(scopes=[("project", None)]) == ["e", "b", "a"]
    assert ids(scopes=[("task", "A"), ("global", "")]) == ["d", "c"]
    assert ids(scopes=[("task", "B")]) == []
    assert ids(scopes=[]) == []
    assert ids(status="candidate") == ["d"]
    assert ids(limit=2) == ["e", "d"]
    assert ids(memory_id="b") == ["b"]


def test_set_status_records_history_and_is_guarded(store: Store) -> None:
    store.memory_add(_item("g", scope="global", scope_key="", status="candidate"))
    row = store.memory_set_status("g", "active", by="bob", now=200.0, expect=("candidate",))
    assert (row["status"], row["updated_at"]) == ("active", 200.0)
    assert row["history"] == [{"status": "active", "by": "bob", "at": 200.0}]
    assert store.memory_query(memory_id="g") == [row]
    # The status it already has: nothing written.
    same = store.memory_set_status("g", "active", by="eve", now=300.0, expect=("candidate",))
    assert same == row
    store.memory_set_status("g", "forgotten", by="bob", now=400.0)
    with pytest.raises(lw.ConflictError, match="forgotten"):
        store.memory_set_status("g", "active", by="eve", now=500.0, expect=("candidate",))
    [after] = store.memory_query(memory_id="g")
    assert after["status"] == "forgotten"
    assert [h["by"] for h in after["history"]] == ["bob", "bob"]


def test_set_status_of_an_unknown_id_or_to_an_unknown_status(store: Store) -> None:
    with pytest.raises(MemoryNotFoundError, match="nope"):
        store.memory_set_status("nope", "active", by="a", now=1.0)
    store.memory_add(_item("m"))
    with pytest.raises(lw.StoreError, match="unknown memory status"):
        store.memory_set_status("m", "deleted", by="a", now=1.0)
    assert store.memory_query(memory_id="m")[0]["status"] == "active"


def test_concurrent_confirmations_record_one_decision(backend: Backend, store: Store) -> None:
    """Many people confirming the same candidate at once: one change, one history entry."""
    store.memory_add(_item("g", scope="global", scope_key="", status="candidate"))
    stores = [backend.open() for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def confirm(s: Store, i: int) -> None:
        try:
            barrier.wait()
            s.memory_set_status("g", "active", by=f"p{i}", now=float(i), expect=("candidate",))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=confirm, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s in stores:
        s.close()
    assert errors == []
    [row] = store.memory_query(memory_id="g")
    assert row["status"] == "active"
    assert len(row["history"]) == 1


def test_confirm_racing_forget_never_revives_a_forgotten_item(
    backend: Backend, store: Store
) -> None:
    """A person forgets a candidate while another confirms it: whatever the interleaving, it
    ends forgotten, and its history tells the true order (no lost update)."""
    n = 12
    for i in range(n):
        store.memory_add(_item(f"g{i}", scope="global", scope_key="", status="candidate"))
    confirmer, forgetter = backend.open(), backend.open()
    barrier = threading.Barrier(2)
    refused: list[str] = []
    errors: list[BaseException] = []

    def confirm_all() -> None:
        for i in range(n):
            try:
                barrier.wait(30)
                confirmer.memory_set_status(
                    f"g{i}", "active", by="c", now=float(i), expect=("candidate",)
                )
            except lw.ConflictError:
                refused.append(f"g{i}")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    def forget_all() -> None:
        for i in range(n):
            try:
                barrier.wait(30)
                forgetter.memory_set_status(f"g{i}", "forgotten", by="f", now=float(i))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    threads = [threading.Thread(target=confirm_all), threading.Thread(target=forget_all)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    confirmer.close()
    forgetter.close()
    assert errors == []
    for i in range(n):
        [row] = store.memory_query(memory_id=f"g{i}")
        assert row["status"] == "forgotten", row
        order = [h["status"] for h in row["history"]]
        if f"g{i}" in refused:
            assert order == ["forgotten"], row
        else:
            assert order == ["active", "forgotten"], row


def test_memory_writes_need_no_run_or_lease(store: Store) -> None:
    assert store.list_runs() == []
    FeedbackMemory(store).add(scope="task", scope_key="t", signal="edit", text="x", by="a")
    assert len(store.memory_query()) == 1


# --- FeedbackMemory on each backend ---------------------------------------------------------
def test_scoping_on_each_backend(store: Store) -> None:
    mem = FeedbackMemory(store)
    mem.add(scope="project", scope_key="A", signal="correction", text="blue palette", by="ann")
    mem.add(scope="task", scope_key="A:page-3", signal="reflection", text="palette drift", by="r")
    g = mem.add(scope="global", signal="correction", text="never crop faces", by="ann")

    def texts(task_key: str, project: str) -> list[str]:
        got = mem.retrieve(task_key=task_key, project=project, query="palette")
        return sorted(it.text for it in got)

    assert texts("A:page-3", "A") == ["blue palette", "palette drift"]
    assert texts("A:page-4", "A") == ["blue palette"]
    assert texts("B:page-3", "B") == []
    mem.confirm(g.memory_id, by="bob")
    assert texts("B:page-3", "B") == ["never crop faces"]
    assert texts("A:page-3", "A") == ["blue palette", "never crop faces", "palette drift"]


def test_forget_hides_on_each_backend(store: Store) -> None:
    mem = FeedbackMemory(store)
    it = mem.add(scope="project", scope_key="A", signal="correction", text="blue", by="ann")
    mem.forget(it.memory_id, by="bob")
    assert mem.retrieve(task_key="t", project="A") == []
    assert mem.get(it.memory_id).status == "forgotten"


def test_propose_global_on_each_backend(store: Store) -> None:
    mem = FeedbackMemory(store)
    for p in ("A", "B"):
        mem.add(scope="project", scope_key=p, signal="edit", text="Wide margins", by="a")
    assert mem.propose_global(min_projects=3) == []
    mem.add(scope="project", scope_key="C", signal="correction", text="wide margins.", by="a")
    [cand] = mem.propose_global(min_projects=3)
    assert (cand.scope, cand.status, cand.source["projects"]) == (
        "global",
        "candidate",
        ["A", "B", "C"],
    )
    assert mem.propose_global(min_projects=3) == []
    assert mem.retrieve(task_key="t", project="Z") == []
    mem.confirm(cand.memory_id, by="ann")
    assert [it.memory_id for it in mem.retrieve(task_key="t", project="Z")] == [cand.memory_id]


def test_memory_persists_across_reopening(backend: Backend) -> None:
    with backend.open() as s:
        mem = FeedbackMemory(s)
        kept = mem.add(
            scope="project",
            scope_key="A",
            signal="correction",
            text="blue",
            rule={"palette": "blue"},
            source={"run_id": "r", "cycle": 1, "part": "p"},
            by="ann",
        )
        cand = mem.add(scope="global", signal="repeated", text="g", by="x")
        mem.confirm(cand.memory_id, by="bob")
    with backend.open() as s:
        mem = FeedbackMemory(s)
        got = mem.retrieve(task_key="t", project="A")
        assert [it.memory_id for it in got] == [kept.memory_id, cand.memory_id]
        assert got[0] == kept
        assert [(h["status"], h["by"]) for h in got[1].history] == [("active", "bob")]


def test_an_older_store_gains_the_memory_table_and_keeps_its_runs(backend: Backend) -> None:
    """A store written before feedback memory existed is migrated in place on opening."""
    memory_version = next(
        i for i, m in enumerate(backend.migrations) if any("CREATE TABLE memory" in s for s in m)
    )
    statements = [
        "CREATE TABLE loopwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        *(s for m in backend.migrations[:memory_version] for s in m),
        f"INSERT INTO loopwright_meta(key, value) VALUES('schema_version', '{memory_version}')",
        "INSERT INTO runs(run_id, task_key, loop_name, project, status, contract, task, "
        "created_at, updated_at) VALUES('run-old', 'old-key', 'l', 'A', 'stopped', '{}', "
        "'{}', 1.0, 1.0)",
    ]
    backend.execute_all(statements)
    with backend.open() as s:
        assert s.schema_version == len(backend.migrations)  # type: ignore[attr-defined]
        assert s.get_run("run-old").project == "A"
        mem = FeedbackMemory(s)
        mem.add(scope="project", scope_key="A", signal="correction", text="blue", by="ann")
        assert [it.text for it in mem.retrieve(task_key="old-key", project="A")] == ["blue"]


# --- search in the store ------------------------------------------------------------------
def _search(
    store: Store,
    scopes: list[tuple[str, str]],
    query: str,
    limit: int = 5,
    ranked: int | None = None,
) -> list[str]:
    from loopwright._memory import RELEVANCE_FLOOR, query_terms
    from loopwright.store._base import MemorySearch

    search = MemorySearch(scopes, query_terms(query), limit, RELEVANCE_FLOOR, ranked)
    [rows] = store.memory_search([search])
    return [r["memory_id"] for r in rows]


def test_a_capped_search_scores_only_the_newest_matches_on_each_backend(store: Store) -> None:
    # ``ranked``: the newest matches are scored for relevance, an older one ranks as a
    # non-match (the floor, by strength). The oldest item matches best: scored, it comes
    # first; past the cap, among the non-matches (at the floor: by strength, then id).
    store.memory_add(_item("best", text="dragon wings dragon wings", created_at=1.0))
    for i in range(4):
        store.memory_add(_item(f"n{i}", text=f"dragon wings sketch {i} pose", created_at=2.0 + i))
    store.memory_add(_item("none", strength=0.9, text="typography", created_at=9.0))
    a = [("project", "A")]
    every = _search(store, a, "dragon wings", limit=10)
    assert every[0] == "best" and every[-1] == "none"
    assert _search(store, a, "dragon wings", limit=10, ranked=5) == every  # all 5 scored
    capped = _search(store, a, "dragon wings", limit=10, ranked=4)
    assert capped[4:] == ["best", "none"] and sorted(capped[:4]) == ["n0", "n1", "n2", "n3"]
    one = _search(store, a, "dragon wings", limit=10, ranked=1)
    assert one == ["n3", "best", "n0", "n1", "n2", "none"]


def test_search_ranks_in_the_store_on_each_backend(store: Store) -> None:
    store.memory_add(_item("wings", strength=0.4, text="dragon wings shading"))
    store.memory_add(_item("kerning", strength=0.6, text="typography kerning"))
    store.memory_add(_item("rule", strength=0.4, text="x", rule={"palette": "blue"}))
    store.memory_add(_item("other", scope="project", scope_key="B", text="dragon wings"))
    store.memory_add(_item("gone", status="forgotten", text="dragon wings"))
    a = [("project", "A")]
    # a match first (plural folded by the stemmer), then the rest by strength
    assert _search(store, a, "the dragons' wings look flat") == ["wings", "kerning", "rule"]
    assert _search(store, a, "palettes")[0] == "rule"  # the rule is searched too
    # no query: by strength; at equal strength and age, by id
    assert _search(store, a, "") == ["kerning", "rule", "wings"]
    assert _search(store, a, "dragon", limit=1) == ["wings"]
    assert _search(store, [("project", "B"), ("task", "A")], "dragon") == ["other"]
    assert _search(store, [], "dragon") == []
    store.memory_set_status("wings", "forgotten", by="a", now=200.0)
    assert _search(store, a, "dragon wings") == ["kerning", "rule"]
    # several searches in one call, each answered on its own
    from loopwright._memory import memory_search

    got = store.memory_search(
        [memory_search(a, "palette"), memory_search([("project", "B")], ""), memory_search([], "")]
    )
    assert [[r["memory_id"] for r in rows] for rows in got] == [["rule", "kerning"], ["other"], []]


def _first_step(backend: Backend, sqlite: str, postgres: str) -> int:
    """The version before the first migration holding a statement with ``sqlite`` (or
    ``postgres``) in it: where a test of that migration puts its store (the migration was the
    last when the test was written; later ones follow it)."""
    needle = sqlite if backend.name == "sqlite" else postgres
    return next(i for i, m in enumerate(backend.migrations) if any(needle in s for s in m))


def test_items_stored_before_search_existed_are_found(backend: Backend) -> None:
    """The migration that adds the full-text index fills it from the items already stored."""
    before = _first_step(backend, "CREATE VIRTUAL TABLE memory_fts", "search tsvector")
    statements = [
        "CREATE TABLE loopwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        *(s for m in backend.migrations[:before] for s in m),
        f"INSERT INTO loopwright_meta(key, value) VALUES('schema_version', '{before}')",
        "INSERT INTO memory(memory_id, scope, scope_key, signal, strength, text, rule, source, "
        "\"by\", status, created_at, updated_at) VALUES('old', 'project', 'A', "
        "'correction', 0.5, 'never crop the wings', NULL, '{}', 'ann', 'active', 1.0, 1.0)",
        "INSERT INTO memory(memory_id, scope, scope_key, signal, strength, text, rule, source, "
        "\"by\", status, created_at, updated_at) VALUES('old2', 'project', 'A', "
        "'correction', 1.0, 'blue palette', NULL, '{}', 'ann', 'active', 1.0, 1.0)",
    ]
    backend.execute_all(statements)
    with backend.open() as s:
        assert _search(s, [("project", "A")], "wings") == ["old", "old2"]
        FeedbackMemory(s).add(
            scope="project", scope_key="A", signal="edit", text="wing tips", by="ann"
        )
        got = _search(s, [("project", "A")], "wing")
        assert len(got) == 3
        assert "old" in got[:2]  # both matches (the new one indexed by its insert) ...
        assert got[2] == "old2"  # ... before the stronger item that does not match


def test_a_store_migrated_keeps_only_active_items_words_in_its_search_index(
    backend: Backend,
) -> None:
    """The migration that takes the words of items that are not active out of the index (a
    search for a word reads every indexed row holding it, so a long run's forgotten
    reflections slowed every later recall); active items stay findable."""
    before = _first_step(backend, "WHEN new.status = 'active'", "CASE WHEN status = 'active'")
    row = (
        "INSERT INTO memory(memory_id, scope, scope_key, signal, strength, text, rule, source, "
        "\"by\", status, created_at, updated_at) VALUES('{id}', 'task', 't', 'reflection', 0.3, "
        "'{text}', NULL, '{{}}', 'reflector', '{status}', 1.0, 1.0)"
    )
    backend.execute_all(
        [
            "CREATE TABLE loopwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            *(s for m in backend.migrations[:before] for s in m),
            f"INSERT INTO loopwright_meta(key, value) VALUES('schema_version', '{before}')",
            row.format(id="kept", text="crop the wings less", status="active"),
            *(
                row.format(id=f"old{i}", text=f"crop the wings, try {i}", status="forgotten")
                for i in range(3)
            ),
            row.format(id="cand", text="crop the tail", status="candidate"),
        ]
    )
    indexed = (
        "SELECT count(*) FROM memory_fts('crop')"
        if backend.name == "sqlite"
        else "SELECT count(*) FROM memory WHERE search @@ to_tsquery('english', 'crop')"
    )
    with backend.open() as s:
        assert s.schema_version == len(backend.migrations)  # type: ignore[attr-defined]
        assert s._all(indexed, [])[0][0] == 1  # type: ignore[attr-defined]
        assert _search(s, [("task", "t")], "crop wings") == ["kept"]
        s.memory_set_status("cand", "active", by="ann", now=2.0)
        assert s._all(indexed, [])[0][0] == 2  # type: ignore[attr-defined]
        assert _search(s, [("task", "t")], "tail") == ["cand", "kept"]


def test_the_sqlite_search_index_follows_status_changes(tmp_path: Path) -> None:
    """Triggers keep the index in step: an item's words and scope tag are in it exactly while
    it is active, whoever changes it (the store, or SQL run by hand). A forgotten item's words
    would still be read by every search for them (FTS5 reads a word's whole row list)."""
    from loopwright.store._schema import memory_tag
    from loopwright.store.sqlite import SQLiteStore

    path = tmp_path / "s.db"
    with SQLiteStore(path) as s:
        s.memory_add(_item("a", text="dragon wings"))
        s.memory_add(_item("b", text="dragon tail"))
        s.memory_add(_item("g", scope="global", scope_key="", status="candidate", text="dragon"))
    tagged = f'tag : "{memory_tag("project", "A")}"'
    glob = f'tag : "{memory_tag("global", "")}"'

    def count(match: str) -> int:
        db = sqlite3.connect(path)
        try:
            return int(db.execute("SELECT count(*) FROM memory_fts(?)", (match,)).fetchone()[0])
        finally:
            db.close()

    assert (count(tagged), count(glob), count("dragon")) == (2, 0, 2)
    with SQLiteStore(path) as s:
        s.memory_set_status("a", "forgotten", by="x", now=1.0)
        s.memory_set_status("g", "active", by="x", now=1.0)
    assert (count(tagged), count(glob), count(f"wings AND {tagged}")) == (1, 1, 0)
    assert (count("wings"), count("dragon")) == (0, 2)  # a's words left with its status
    db = sqlite3.connect(path)
    db.execute("UPDATE memory SET text='sea serpent' WHERE memory_id='b'")
    db.execute("DELETE FROM memory WHERE memory_id='g'")
    db.commit()
    db.close()
    assert (count(tagged), count(glob), count("dragon"), count("serpent")) == (1, 0, 0, 1)


def test_the_pruned_search_equals_ranking_every_item(tmp_path: Path) -> None:
    """The store skips matches and non-matches that cannot place; on random items and queries
    its answer equals ranking every item of the scopes by the documented rule."""
    import random

    from loopwright._memory import RELEVANCE_FLOOR, query_terms
    from loopwright.store._base import MemorySearch
    from loopwright.store._schema import memory_tag
    from loopwright.store.sqlite import SQLiteStore

    rng = random.Random(7)
    words = [f"w{i}" for i in range(40)]
    scopes = [("task", "t1"), ("task", "t2"), ("project", "A"), ("project", "B"), ("global", "")]
    with SQLiteStore(tmp_path / "s.db") as s:
        for i in range(400):
            scope, key = rng.choice(scopes)
            s.memory_add(
                _item(
                    f"m{i:03d}",
                    scope=scope,
                    scope_key=key,
                    status=rng.choice(["active"] * 4 + ["forgotten"]),
                    strength=rng.choice([0.3, 0.4, 0.6, 1.0]),
                    updated_at=float(rng.randrange(5)),
                    text=" ".join(rng.choices(words[: rng.randrange(5, 40)], k=rng.randint(1, 8))),
                )
            )
        db = sqlite3.connect(tmp_path / "s.db")
        rows = {r["memory_id"]: r for r in s.memory_query(status="active")}
        rowid = dict(db.execute("SELECT memory_id, rowid FROM memory").fetchall())
        for _ in range(40):
            pairs = rng.sample(scopes[:2], 1) + rng.sample(scopes[2:4], 1) + [scopes[4]]
            terms = query_terms(" ".join(rng.choices(words, k=rng.randint(0, 6))))
            limit = rng.randint(1, 12)
            ranked = rng.choice([None, None, 1, 3, 10, 1000])  # the newest scored, or all
            raw: dict[int, float] = {}
            if terms:
                tags = " OR ".join(f'"{memory_tag(a, b)}"' for a, b in pairs)
                match = f"{{text rule}} : ({' OR '.join(terms)}) AND tag : ({tags})"
                raw = dict(
                    db.execute(
                        "SELECT rowid, -bm25(memory_fts, 1.0, 1.0, 0.0) FROM memory_fts(?)",
                        (match,),
                    ).fetchall()
                )
                if ranked is not None:
                    raw = {k: raw[k] for k in sorted(raw, reverse=True)[:ranked]}
            top = max(raw.values(), default=0.0)

            def key(
                r: dict[str, Any], raw: dict[int, float] = raw, top: float = top
            ) -> tuple[Any, ...]:
                got = raw.get(rowid[r["memory_id"]])
                rel = RELEVANCE_FLOOR
                if got is not None and top > 0:
                    rel += (1 - RELEVANCE_FLOOR) * got / top
                order = {"task": 0, "project": 1, "global": 2}[r["scope"]]
                score = round(r["strength"] * rel, 9)
                return (-score, order, -r["strength"], -r["updated_at"], r["memory_id"])

            mine = [r for r in rows.values() if (r["scope"], r["scope_key"]) in pairs]
            want = [r["memory_id"] for r in sorted(mine, key=key)[:limit]]
            [got] = s.memory_search([MemorySearch(pairs, terms, limit, RELEVANCE_FLOOR, ranked)])
            assert [r["memory_id"] for r in got] == want, (pairs, terms, limit, ranked)
        db.close()


def test_a_recall_costs_the_same_with_150_or_1500_matches_once_capped(tmp_path: Path) -> None:
    # FTS5's bm25() reads every match's row: a recall scoring every match grew with them
    # (≈ 35 VM steps and a statement a match, every cycle). Capped, FTS5 hands the matches out
    # newest first and stops: the same work at 150 and at 1,500.
    from loopwright.store.sqlite import SQLiteStore

    cost: dict[tuple[int, int | None], tuple[int, int]] = {}
    for n in (150, 1500):
        with SQLiteStore(tmp_path / f"m{n}.db") as s:
            for i in range(n):
                s.memory_add(
                    _item(f"m{i:05d}", scope="task", scope_key="t", text=f"fix the title {i}")
                )
            mem = FeedbackMemory(s)
            for ranked in (100, None):
                steps, statements = [0], [0]

                def step(steps: list[int] = steps) -> int:
                    steps[0] += 1
                    return 0

                s._db.set_progress_handler(step, 1)
                s._db.set_trace_callback(lambda _q, n=statements: n.__setitem__(0, n[0] + 1))
                try:
                    got = mem.retrieve(task_key="t", project="", query="title", ranked=ranked)
                finally:
                    s._db.set_progress_handler(None, 1)
                    s._db.set_trace_callback(None)
                assert len(got) == 5
                cost[n, ranked] = (steps[0], statements[0])
    assert cost[1500, None][0] > 5 * cost[150, None][0], cost  # what the measure sees
    assert cost[1500, 100][0] <= 1.1 * cost[150, 100][0], cost
    # FTS5's own reads: a few more in a bigger index (its segments), not one a match
    assert cost[1500, 100][1] <= 1.5 * cost[150, 100][1] < cost[1500, None][1] / 5, cost


def _reference(
    store: Store, pairs: list[tuple[str, str]], terms: list[str], ranked: int | None, limit: int
) -> tuple[list[str], int]:
    """The documented rule over every item, with each backend's own relevance (bm25 over all of
    FTS5's matches; ts_rank) read without any cap: the newest ``ranked`` matches keep theirs.
    Also how many in-scope items match."""
    from loopwright._memory import RELEVANCE_FLOOR
    from loopwright.store._schema import memory_tag

    active = [
        r for r in store.memory_query(status="active") if (r["scope"], r["scope_key"]) in pairs
    ]
    if store.url.startswith("sqlite"):
        db = store._db  # type: ignore[attr-defined]
        tags = " OR ".join(f'"{memory_tag(a, b)}"' for a, b in pairs)
        match = f"{{text rule}} : ({' OR '.join(terms)}) AND tag : ({tags})"
        got = db.execute(
            "SELECT m.memory_id, -bm25(memory_fts, 1.0, 1.0, 0.0) FROM memory_fts(?) f "
            "JOIN memory m ON m.rowid = f.rowid ORDER BY f.rowid DESC",
            (match,),
        ).fetchall()
    else:
        with store._conn() as conn:  # type: ignore[attr-defined]
            got = conn.execute(
                "SELECT memory_id, ts_rank(search, q) FROM memory, "
                "to_tsquery('english'::regconfig, %s) q WHERE search @@ q "
                "ORDER BY created_at DESC, memory_id DESC",
                (" | ".join(f"'{t}'" for t in terms),),
            ).fetchall()
    in_scope = {r["memory_id"] for r in active}
    newest = [k for k, _ in got if k in in_scope]
    keep = set(newest if ranked is None else newest[:ranked])
    raw = {k: float(v) for k, v in got if k in keep}
    top = max(raw.values(), default=0.0)

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        rel = RELEVANCE_FLOOR
        if r["memory_id"] in raw and top > 0:
            rel += (1 - RELEVANCE_FLOOR) * raw[r["memory_id"]] / top
        order = {"task": 0, "project": 1, "global": 2}[r["scope"]]
        return (-round(r["strength"] * rel, 9), order, -r["strength"], -r["updated_at"],
                r["memory_id"])  # fmt: skip

    return [r["memory_id"] for r in sorted(active, key=key)[:limit]], len(newest)


def test_a_capped_search_equals_the_uncapped_rule_around_the_cap(store: Store) -> None:
    """The capped search reads the newest ``ranked`` matches scope by scope (PostgreSQL's
    ``memory_recent``) and merges them: its answer is the rule applied to every item, at caps
    below, at and above the number of matches, with matches interleaved across scopes, ties on
    ``created_at`` and items of other scopes and statuses around."""
    import random

    from loopwright._memory import query_terms

    rng = random.Random(11)
    scopes = [("task", "t1"), ("project", "A"), ("global", ""), ("project", "B")]
    words = ["dragon", "wings", "scale", "claw", "tail", "sky"]
    for i in range(240):
        scope, key = scopes[i % 4] if i % 5 else rng.choice(scopes)
        store.memory_add(
            _item(
                f"m{i:03d}",
                scope=scope,
                scope_key=key,
                status="forgotten" if i % 13 == 0 else "active",
                strength=rng.choice([0.3, 0.6, 1.0]),
                created_at=float(i // 3),  # ties: three items a second
                updated_at=float(rng.randrange(4)),
                text=" ".join(rng.choices(words, k=rng.randint(1, 5)))
                + (" plain note" if i % 2 else ""),
            )
        )
    pairs = [("task", "t1"), ("project", "A"), ("global", "")]
    for query in ("dragon", "wings claw", "sky tail scale"):
        terms = query_terms(query)
        _, n = _reference(store, pairs, terms, None, 1)
        assert n > 60  # matches in every scope
        for ranked in (1, 2, n // 3, n // 2, n - 1, n, n + 1, 1000, None):
            for limit in (1, 5, 17):
                want, _ = _reference(store, pairs, terms, ranked, limit)
                got = _search(store, pairs, query, limit=limit, ranked=ranked)
                assert got == want, (query, ranked, limit)


def _hit_rows_read(plan: dict[str, Any]) -> int:
    """Rows of ``memory`` the ``hit`` CTE of a search's plan read (EXPLAIN ANALYZE)."""

    def walk(node: dict[str, Any], inside: bool) -> int:
        inside = inside or node.get("Subplan Name") == "CTE hit"
        own = 0
        if inside and node.get("Relation Name") == "memory":
            read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            read += node.get("Rows Removed by Index Recheck", 0)
            own = read * node.get("Actual Loops", 1)
        return own + sum(walk(child, inside) for child in node.get("Plans", []))

    return walk(plan["Plan"], False)


@pytest.mark.postgres
def test_a_capped_search_reads_the_same_rows_at_1500_or_6000_matches_on_postgres(
    pg_url: str,
) -> None:
    # The GIN index hands over every match in no order: a capped search read and sorted all of
    # them to keep the newest ``ranked`` (v10's memory_recent walks each scope newest first and
    # stops). Rows read, from the plan: the same at both sizes, and about the cap.
    from loopwright._memory import RELEVANCE_FLOOR, query_terms
    from loopwright.store._base import MemorySearch
    from loopwright.store._rows import memory_values

    ranked = 100
    pairs = (("task", "t1"), ("project", "A"), ("global", ""))
    search = MemorySearch(pairs, tuple(query_terms("dragon wings")), 15, RELEVANCE_FLOOR, ranked)
    read: dict[int, int] = {}
    s = open_store(pg_url)
    try:
        done = 0
        for n in (1500, 6000):
            items = [
                _item(
                    f"m{i:05d}",
                    scope=pairs[i % 3][0] if i % 2 else "project",
                    scope_key=pairs[i % 3][1] if i % 2 else "B",  # another project's matches
                    created_at=float(i),
                    text=f"dragon wings note {i}",
                )
                for i in range(done, n)
            ]
            done = n
            with s._tx() as conn, conn.cursor() as cur:  # type: ignore[attr-defined]
                cur.executemany(
                    s._q.insert_memory,  # type: ignore[attr-defined]
                    [memory_values(it, s._js) for it in items],  # type: ignore[attr-defined]
                )
            with s._conn() as conn:  # type: ignore[attr-defined]
                conn.execute("ANALYZE memory")  # the statistics autovacuum keeps
                query, args = s._memory_search_sql(search)  # type: ignore[attr-defined]
                [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, args).fetchone()
            read[n] = _hit_rows_read(plan)
    finally:
        s.close()
    # (at 1,500 the planner may still take the GIN index: the whole table is a few pages)
    assert read[6000] <= min(read[1500], 3 * ranked), read


@pytest.mark.postgres
def test_a_v9_postgres_store_gains_memory_recent_and_the_step_can_run_again(pg_url: str) -> None:
    with open_store(pg_url) as s:
        s.memory_add(_item("old", text="dragon wings"))
        with s._tx() as conn:  # type: ignore[attr-defined]  # as v9 left it
            conn.execute("DROP INDEX memory_recent")
            conn.execute("UPDATE loopwright_meta SET value = '9' WHERE key = 'schema_version'")
    with open_store(pg_url) as s:
        assert s.schema_version == len(PG_MIGRATIONS)  # type: ignore[attr-defined]
        [step] = [m for m in PG_MIGRATIONS if any("memory_recent" in x for x in m)]
        assert PG_MIGRATIONS.index(step) == 9  # v10
        with s._tx() as conn:  # type: ignore[attr-defined]
            for statement in step:
                conn.execute(statement)  # IF NOT EXISTS: a second run changes nothing
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
                )
            ]
        assert names.count("memory_recent") == 1
        assert _search(s, [("project", "A")], "dragon", ranked=10) == ["old"]


def test_the_adder_check_reads_the_row_the_confirm_changes(
    backend: Backend, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a store with users the person who added a candidate does not confirm it. The check
    read the item in a query of its own, before the confirm's transaction: a candidate of
    ann's that appeared between the two (another process's write) was confirmed by ann. It
    is now checked on the row the confirm locks and changes, whatever happens before."""
    store.add_user("ann", roles=["operator"], limits={}, by="root", now=1.0)
    added: list[str] = []

    def arrive() -> None:  # ann's candidate lands now, from another process
        if not added:
            added.append("g")
            with backend.open() as other:
                other.memory_add(_item("g", scope="global", scope_key="", status="candidate"))

    query, set_status = store.memory_query, store.memory_set_status

    def query_then_arrive(*a: Any, **kw: Any) -> list[dict[str, Any]]:
        rows = query(*a, **kw)
        arrive()
        return rows

    def arrive_then_set(*a: Any, **kw: Any) -> dict[str, Any]:
        arrive()
        return set_status(*a, **kw)

    monkeypatch.setattr(store, "memory_query", query_then_arrive)
    monkeypatch.setattr(store, "memory_set_status", arrive_then_set)
    with pytest.raises(lw.NotPermittedError, match="Ann added memory g"):
        FeedbackMemory(store).confirm("g", by="Ann")
    [row] = store.memory_query(memory_id="g")
    assert row["status"] == "candidate" and row["history"] == []
    assert FeedbackMemory(store).confirm("g", by="bob").status == "active"  # another person


_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2


def test_a_row_written_straight_into_the_store_keeps_no_secret(store: Store) -> None:
    """``FeedbackMemory.add`` masks secrets; ``Store.memory_add`` called straight kept a key
    in the text, rule and source as given (invariant 9), and a recall handed it on."""
    store.memory_add(
        _item(
            "m1",
            text=f"call it with {_KEY} please",
            rule={"api_key": "hunter2-long-enough", "nested": [f"Bearer {_KEY}"]},
            source={"run_id": "r1", "url": "https://bob:pa55w0rd@example.com/x"},
        )
    )
    [m1] = store.memory_query(memory_id="m1")
    stored = repr(m1)
    for secret in (_KEY, "hunter2-long-enough", "pa55w0rd"):
        assert secret not in stored
    assert m1["text"].startswith("call it with ") and m1["text"].endswith(" please")
    found = FeedbackMemory(store).retrieve(task_key="t", project="A", query="call")
    assert [m.memory_id for m in found] == ["m1"] and _KEY not in repr(found)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("rule", {"verdicts": [{"name": "audit", "held_out": True}]}),
        ("source", {"run_id": "r1", "checks": {"Held-Out": ["x"]}}),
    ],
)
def test_a_row_written_straight_into_the_store_with_a_held_out_marker_is_refused(
    store: Store, where: str, value: dict[str, Any]
) -> None:
    """The held-out screen ran in ``FeedbackMemory.add`` only: ``Store.memory_add`` kept a
    marked row, which ``retrieve`` then returned (invariant 3)."""
    with pytest.raises(lw.ConfigError, match="held-out verdicts never enter memory"):
        store.memory_add(_item("m1", **{where: value}))
    assert store.memory_query() == []


def test_a_negative_zero_strength_is_stored_as_zero(store: Store) -> None:
    """``Store.memory_add`` given a strength of -0.0 kept it on PostgreSQL (SQLite reads it
    back as 0.0): the resumed reflection and a model's prompt then said ``-0``."""
    store.memory_add(_item("z", strength=-0.0))
    [z] = store.memory_query(memory_id="z")
    assert math.copysign(1.0, z["strength"]) == 1.0
