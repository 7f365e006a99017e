"""Feedback memory: validation, scoping, ranking, global proposals, status changes and the CLI.

Runs on an SQLite store in ``tmp_path``; ``tests/integration/test_memory_store.py`` runs the
store half on PostgreSQL too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._memory import (
    DEFAULT_STRENGTH,
    MEMORY_SIGNALS,
    PROPOSER,
    RELEVANCE_FLOOR,
    FeedbackMemory,
    MemoryItem,
    MemoryNotFoundError,
    feedback_key,
    query_terms,
)
from loopwright.store.sqlite import SQLiteStore


class Clock:
    """A clock that moves one second per reading: creation order is unambiguous."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "store.db")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def mem(store: SQLiteStore) -> FeedbackMemory:
    return FeedbackMemory(store, clock=Clock())


def _texts(items: list[MemoryItem]) -> list[str]:
    return [it.text for it in items]


# --- the hierarchy ------------------------------------------------------------------------
def test_default_strength_follows_the_seed_hierarchy() -> None:
    assert set(DEFAULT_STRENGTH) == set(MEMORY_SIGNALS)
    s = DEFAULT_STRENGTH
    assert s["correction"] == 1.0
    assert s["correction"] > s["export"] > s["accept"] == s["reject"] > s["repeated"]
    assert s["repeated"] > s["edit"] > s["reflection"] > 0
    assert all(0 < v <= 1 for v in s.values())


# --- add and its validation ---------------------------------------------------------------
def test_add_task_and_project_items_are_active_with_default_strength(mem: FeedbackMemory) -> None:
    it = mem.add(
        scope="project",
        scope_key="A",
        signal="edit",
        text="  Widen the gutter  ",
        rule={"gutter_px": 12},
        source={"run_id": "r1", "cycle": 2, "part": "page/1"},
        by="ann",
    )
    assert (it.scope, it.scope_key, it.status, it.strength) == ("project", "A", "active", 0.4)
    assert it.text == "Widen the gutter"
    assert it.rule == {"gutter_px": 12}
    assert it.source == {"run_id": "r1", "cycle": 2, "part": "page/1"}
    assert it.history == ()
    assert mem.get(it.memory_id) == it
    task = mem.add(scope="task", scope_key="t1", signal="reject", text="no", by="ann", strength=0.9)
    assert (task.status, task.strength) == ("active", 0.9)


def test_global_items_are_always_candidates_until_a_person_confirms(mem: FeedbackMemory) -> None:
    it = mem.add(scope="global", signal="correction", text="Never crop faces", by="ann")
    assert it.status == "candidate"
    assert it.scope_key == ""
    assert mem.retrieve(task_key="t", project="p") == []
    confirmed = mem.confirm(it.memory_id, by="bob")
    assert confirmed.status == "active"
    assert confirmed.by == "ann"  # who gave it stays; who confirmed it is in the history
    assert [(h["status"], h["by"]) for h in confirmed.history] == [("active", "bob")]
    assert _texts(mem.retrieve(task_key="t", project="p")) == ["Never crop faces"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"scope": "team"}, "scope"),
        ({"signal": "like"}, "signal"),
        ({"scope": "task", "scope_key": ""}, "scope_key"),
        ({"scope": "project", "scope_key": "   "}, "scope_key"),
        ({"scope": "global", "scope_key": "A"}, "scope_key"),
        ({"text": "   "}, "text"),
        ({"text": "x" * 10_001}, "text"),
        ({"text": 3}, "text"),
        ({"rule": ["not", "a", "dict"]}, "rule"),
        ({"rule": {"x": object()}}, "rule"),
        ({"rule": {"x": float("nan")}}, "rule"),
        ({"source": "run-1"}, "source"),
        ({"source": {"held_out": True}}, "source"),
        ({"by": ""}, "by"),
        # a NUL: PostgreSQL's text refuses it (a StoreError), SQLite kept it; refused alike
        ({"text": "use PO-1\x00 always"}, "text"),
        ({"scope_key": "A\x00"}, "scope_key"),
        ({"by": "a\x00nn"}, "by"),
        ({"strength": 1.5}, "strength"),
        ({"strength": -0.1}, "strength"),
        ({"strength": float("inf")}, "strength"),
        ({"strength": True}, "strength"),
    ],
)
def test_add_rejects_bad_input_naming_the_field(
    mem: FeedbackMemory, kwargs: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {
        "scope": "project",
        "scope_key": "A",
        "signal": "correction",
        "text": "ok",
        "by": "ann",
    }
    args.update(kwargs)
    with pytest.raises(lw.ConfigError) as info:
        mem.add(**args)
    assert info.value.field == field
    assert mem.list() == []


def test_a_rule_alone_is_enough(mem: FeedbackMemory) -> None:
    it = mem.add(scope="task", scope_key="t", signal="edit", text="", rule={"k": 1}, by="a")
    assert (it.text, it.rule) == ("", {"k": 1})


def test_memory_item_round_trips_through_a_dict(mem: FeedbackMemory) -> None:
    it = mem.add(
        scope="task", scope_key="t", signal="export", text="final", rule={"a": [1]}, by="a"
    )
    again = MemoryItem.from_dict(json.loads(json.dumps(it.to_dict())))
    assert again == it
    assert list(it.to_dict()) == [
        "memory_id",
        "scope",
        "scope_key",
        "signal",
        "strength",
        "text",
        "rule",
        "source",
        "by",
        "status",
        "created_at",
        "updated_at",
        "history",
    ]


# --- scoping ------------------------------------------------------------------------------
def test_project_feedback_is_retrieved_for_its_project_only(mem: FeedbackMemory) -> None:
    mem.add(scope="project", scope_key="A", signal="correction", text="blue palette", by="ann")
    mem.add(scope="project", scope_key="B", signal="correction", text="red palette", by="bob")
    a = mem.retrieve(task_key="A:t1", project="A", query="which palette")
    b = mem.retrieve(task_key="B:t1", project="B", query="which palette")
    c = mem.retrieve(task_key="C:t1", project="C", query="which palette blue red")
    assert _texts(a) == ["blue palette"]
    assert _texts(b) == ["red palette"]
    assert c == []


def test_task_feedback_is_retrieved_for_that_task_only(mem: FeedbackMemory) -> None:
    mem.add(scope="task", scope_key="t1", signal="reflection", text="wings cut off", by="r")
    assert _texts(mem.retrieve(task_key="t1", project="A", query="wings")) == ["wings cut off"]
    assert mem.retrieve(task_key="t2", project="A", query="wings") == []
    # A project named like the task does not see it either.
    assert mem.retrieve(task_key="x", project="t1", query="wings") == []


def test_retrieve_filters_scopes_even_if_the_store_returned_more(
    mem: FeedbackMemory, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem.add(scope="project", scope_key="B", signal="correction", text="B's rule", by="a")
    mem.add(scope="task", scope_key="other", signal="correction", text="other task", by="a")
    mem.add(scope="project", scope_key="A", signal="edit", text="A's rule", by="a")

    def sloppy(searches: list[Any]) -> list[list[dict[str, Any]]]:
        # a broken store: ignores the scope filter
        return [store.memory_query(status="active") for _ in searches]

    def sloppy_recall(recalls: list[Any]) -> list[tuple[Any, Any]]:
        return [(sloppy([r[0]])[0], sloppy([r[1]])[0]) for r in recalls]

    monkeypatch.setattr(store, "memory_search", sloppy)
    monkeypatch.setattr(store, "memory_recall", sloppy_recall)
    assert _texts(mem.retrieve(task_key="t", project="A", query="rule")) == ["A's rule"]


def test_a_project_key_does_not_leak_into_task_scope(mem: FeedbackMemory) -> None:
    mem.add(scope="project", scope_key="same", signal="correction", text="p-rule", by="a")
    assert mem.retrieve(task_key="same", project="other") == []
    assert _texts(mem.retrieve(task_key="other", project="same")) == ["p-rule"]


def test_forget_hides_from_retrieval_but_keeps_the_item(mem: FeedbackMemory) -> None:
    it = mem.add(scope="project", scope_key="A", signal="correction", text="blue", by="ann")
    gone = mem.forget(it.memory_id, by="bob")
    assert gone.status == "forgotten"
    assert [(h["status"], h["by"]) for h in gone.history] == [("forgotten", "bob")]
    assert mem.retrieve(task_key="t", project="A") == []
    assert [x.memory_id for x in mem.list(status="forgotten")] == [it.memory_id]
    assert mem.forget(it.memory_id, by="bob").history == gone.history  # idempotent


def test_confirm_refuses_a_forgotten_item_and_unknown_ids(mem: FeedbackMemory) -> None:
    it = mem.add(scope="global", signal="repeated", text="x", by="a")
    mem.forget(it.memory_id, by="bob")
    with pytest.raises(lw.ConflictError, match="forgotten"):
        mem.confirm(it.memory_id, by="bob")
    assert mem.get(it.memory_id).status == "forgotten"
    with pytest.raises(MemoryNotFoundError):
        mem.confirm("nope", by="bob")
    with pytest.raises(MemoryNotFoundError):
        mem.forget("nope", by="bob")
    with pytest.raises(MemoryNotFoundError):
        mem.get("nope")
    with pytest.raises(lw.ConfigError) as info:
        mem.confirm(it.memory_id, by=" ")
    assert info.value.field == "by"


def test_confirming_an_active_item_changes_nothing(mem: FeedbackMemory) -> None:
    it = mem.add(scope="task", scope_key="t", signal="accept", text="x", by="a")
    again = mem.confirm(it.memory_id, by="b")
    assert again == it


# --- ranking ------------------------------------------------------------------------------
def test_empty_query_ranks_by_strength(mem: FeedbackMemory) -> None:
    for signal in ("reflection", "edit", "correction", "export", "accept"):
        mem.add(scope="project", scope_key="A", signal=signal, text=f"{signal} note", by="a")
    got = mem.retrieve(task_key="t", project="A", limit=3)
    assert [it.signal for it in got] == ["correction", "export", "accept"]


def test_relevance_scales_strength(mem: FeedbackMemory) -> None:
    mem.add(
        scope="project", scope_key="A", signal="edit", text="dragon wings shading", by="a"
    )  # 0.4, matches the query
    mem.add(
        scope="project", scope_key="A", signal="accept", text="typography kerning", by="a"
    )  # 0.6, does not match
    got = mem.retrieve(task_key="t", project="A", query="the dragon wings look flat")
    assert _texts(got) == ["dragon wings shading", "typography kerning"]
    # With no query the stronger one wins again.
    assert _texts(mem.retrieve(task_key="t", project="A"))[0] == "typography kerning"


def test_an_irrelevant_strong_correction_still_fills_a_free_slot(mem: FeedbackMemory) -> None:
    mem.add(scope="project", scope_key="A", signal="correction", text="never sign", by="a")
    got = mem.retrieve(task_key="t", project="A", query="completely unrelated words")
    assert _texts(got) == ["never sign"]


def test_ties_put_task_before_project_before_global(mem: FeedbackMemory) -> None:
    g = mem.add(scope="global", signal="correction", text="global note", by="a")
    mem.confirm(g.memory_id, by="b")
    mem.add(scope="project", scope_key="A", signal="correction", text="project note", by="a")
    mem.add(scope="task", scope_key="t", signal="correction", text="task note", by="a")
    got = mem.retrieve(task_key="t", project="A")
    assert [it.scope for it in got] == ["task", "project", "global"]


def test_the_rule_counts_for_relevance(mem: FeedbackMemory) -> None:
    mem.add(scope="task", scope_key="t", signal="edit", text="a", rule={"palette": "blue"}, by="x")
    mem.add(scope="task", scope_key="t", signal="edit", text="b", rule={"font": "serif"}, by="x")
    assert _texts(mem.retrieve(task_key="t", project="", query="palette"))[0] == "a"
    assert _texts(mem.retrieve(task_key="t", project="", query="serif fonts"))[0] == "b"


def test_limit_and_duplicates_across_scopes(mem: FeedbackMemory) -> None:
    mem.add(scope="project", scope_key="A", signal="edit", text="Keep margins wide", by="a")
    mem.add(scope="task", scope_key="t", signal="correction", text="keep margins  WIDE.", by="a")
    for i in range(6):
        mem.add(scope="project", scope_key="A", signal="reflection", text=f"note {i}", by="r")
    got = mem.retrieve(task_key="t", project="A", query="margins", limit=3)
    assert len(got) == 3
    # The same feedback in two scopes comes once, from its best-ranked scope.
    assert [it.scope for it in got if "margins" in it.text.lower()] == ["task"]
    assert mem.retrieve(task_key="t", project="A", limit=0) == []
    with pytest.raises(lw.ConfigError) as info:
        mem.retrieve(task_key="t", project="A", limit=-1)
    assert info.value.field == "limit"


def test_plurals_match_and_a_match_outranks_a_stronger_non_match(mem: FeedbackMemory) -> None:
    mem.add(scope="task", scope_key="t", signal="edit", text="red dragon", by="a")  # 0.4
    mem.add(scope="task", scope_key="t", signal="accept", text="blue sky", by="a")  # 0.6
    # the best match has relevance 1 (0.4 × 1 = 0.4), a non-match the floor (0.6 × 0.1)
    assert RELEVANCE_FLOOR * 0.6 < 0.4
    assert _texts(mem.retrieve(task_key="t", project="", query="dragons")) == [
        "red dragon",
        "blue sky",
    ]
    assert _texts(mem.retrieve(task_key="t", project="", query="colours")) == [
        "blue sky",  # no match at all: strength alone
        "red dragon",
    ]


def test_the_better_match_ranks_first_at_equal_strength(mem: FeedbackMemory) -> None:
    mem.add(scope="task", scope_key="t", signal="edit", text="dragon sky", by="a")
    mem.add(scope="task", scope_key="t", signal="edit", text="dragon wings", by="a")
    mem.add(scope="task", scope_key="t", signal="edit", text="sea shells", by="a")
    got = mem.retrieve(task_key="t", project="", query="dragon wings")
    assert _texts(got) == ["dragon wings", "dragon sky", "sea shells"]


def test_query_terms_drop_stop_words_and_repeats() -> None:
    assert query_terms("The dragon's WINGS, the dragon: a x") == ["dragon", "wings"]
    assert query_terms("") == []
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32


def test_feedback_key_ignores_case_spacing_and_final_punctuation() -> None:
    assert feedback_key("Keep  margins wide.", None) == feedback_key("keep margins WIDE", None)
    assert feedback_key("x", {"a": 1, "b": 2}) == feedback_key("X", {"b": 2, "a": 1})
    assert feedback_key("x", {"a": 1}) != feedback_key("x", {"a": 2})


# --- global proposals ---------------------------------------------------------------------
def _in_projects(mem: FeedbackMemory, text: str, projects: str, **kw: Any) -> None:
    for p in projects:
        mem.add(scope="project", scope_key=p, signal="correction", text=text, by="a", **kw)


def test_propose_global_needs_enough_distinct_projects(mem: FeedbackMemory) -> None:
    _in_projects(mem, "Short captions", "AAB")  # two projects, three items
    assert mem.propose_global(min_projects=3) == []
    _in_projects(mem, "short captions.", "C")
    [cand] = mem.propose_global(min_projects=3)
    assert (cand.scope, cand.status, cand.signal, cand.by) == (
        "global",
        "candidate",
        "repeated",
        PROPOSER,
    )
    assert cand.text == "Short captions"  # the earliest wording
    assert cand.source["projects"] == ["A", "B", "C"]
    assert len(cand.source["memory_ids"]) == 4
    # Not retrieved (not even in a fourth project) until a person confirms it.
    assert mem.retrieve(task_key="t", project="D") == []
    mem.confirm(cand.memory_id, by="ann")
    assert _texts(mem.retrieve(task_key="t", project="D")) == ["Short captions"]


def test_propose_global_is_idempotent_and_respects_a_refusal(mem: FeedbackMemory) -> None:
    _in_projects(mem, "no lens flare", "ABC")
    [cand] = mem.propose_global()
    assert mem.propose_global() == []
    _in_projects(mem, "no lens flare", "D")  # more support does not propose it again
    assert mem.propose_global() == []
    mem.forget(cand.memory_id, by="ann")  # a person declined it
    assert mem.propose_global() == []
    assert len(mem.list(scope="global", status=None)) == 1


def test_propose_global_ignores_inactive_items_and_other_rules(mem: FeedbackMemory) -> None:
    _in_projects(mem, "bold title", "AB")
    mem.add(scope="project", scope_key="C", signal="edit", text="bold title", rule={"w": 7}, by="a")
    assert mem.propose_global(min_projects=3) == []  # C's rule differs
    it = mem.add(scope="project", scope_key="D", signal="edit", text="Bold title", by="a")
    mem.forget(it.memory_id, by="a")
    assert mem.propose_global(min_projects=3) == []  # D's is forgotten
    mem.add(scope="task", scope_key="E", signal="edit", text="bold title", by="a")
    assert mem.propose_global(min_projects=3) == []  # task scope does not count
    assert len(mem.propose_global(min_projects=2)) == 1


@pytest.mark.parametrize("bad", [1, 0, True, 2.5])
def test_propose_global_needs_at_least_two_projects(mem: FeedbackMemory, bad: Any) -> None:
    with pytest.raises(lw.ConfigError) as info:
        mem.propose_global(min_projects=bad)
    assert info.value.field == "min_projects"


# --- list ---------------------------------------------------------------------------------
def test_list_filters_and_orders_newest_first(mem: FeedbackMemory) -> None:
    a = mem.add(scope="project", scope_key="A", signal="edit", text="1", by="a")
    b = mem.add(scope="task", scope_key="A", signal="edit", text="2", by="a")
    c = mem.add(scope="project", scope_key="B", signal="edit", text="3", by="a")
    g = mem.add(scope="global", signal="edit", text="4", by="a")
    ids = lambda items: [it.memory_id for it in items]  # noqa: E731
    assert ids(mem.list()) == [g.memory_id, c.memory_id, b.memory_id, a.memory_id]
    assert ids(mem.list(scope="project")) == [c.memory_id, a.memory_id]
    assert ids(mem.list(scope="project", scope_key="A")) == [a.memory_id]
    assert ids(mem.list(scope_key="A")) == [b.memory_id, a.memory_id]
    assert ids(mem.list(status="candidate")) == [g.memory_id]
    assert ids(mem.list(limit=2)) == [g.memory_id, c.memory_id]
    with pytest.raises(lw.ConfigError):
        mem.list(status="gone")  # type: ignore[arg-type]


def test_memory_persists_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as s:
        it = FeedbackMemory(s).add(
            scope="project", scope_key="A", signal="correction", text="blue", by="ann"
        )
    with SQLiteStore(path) as s:
        assert FeedbackMemory(s).retrieve(task_key="t", project="A") == [it]


def test_memory_not_found_is_a_lookup_error() -> None:
    assert issubclass(MemoryNotFoundError, lw.LoopwrightError)
    assert issubclass(MemoryNotFoundError, LookupError)


# --- CLI ----------------------------------------------------------------------------------
def _cli(capsys: pytest.CaptureFixture[str], store: Path, *args: str) -> tuple[int, str, str]:
    from loopwright.cli import _memory_cmd, main

    assert _memory_cmd.memory_app is not None
    code = main(["memory", *args, "--store", str(store)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_add_list_confirm_forget_propose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    code, out, _ = _cli(
        capsys, db, "add", "Use a blue palette", "--scope", "project", "--key", "A", "--json"
    )
    assert code == 0
    added = json.loads(out)
    assert (added["status"], added["signal"], added["strength"]) == ("active", "correction", 1.0)
    for p in "BC":
        code, _, _ = _cli(
            capsys, db, "add", "use a blue palette", "--scope", "project", "--key", p, "--by", "z"
        )
        assert code == 0
    code, out, _ = _cli(capsys, db, "propose", "--json")
    assert code == 0
    [cand] = json.loads(out)
    assert cand["status"] == "candidate"
    assert cand["source"]["projects"] == ["A", "B", "C"]
    code, out, _ = _cli(capsys, db, "propose", "--json")
    assert json.loads(out) == []
    code, out, _ = _cli(capsys, db, "list", "--scope", "global", "--json")
    assert [x["memory_id"] for x in json.loads(out)] == [cand["memory_id"]]
    code, out, _ = _cli(capsys, db, "confirm", cand["memory_id"], "--by", "ann", "--json")
    assert code == 0
    assert json.loads(out)["status"] == "active"
    code, out, _ = _cli(capsys, db, "forget", added["memory_id"], "--by", "ann")
    assert code == 0
    assert "forgotten" in out
    code, out, _ = _cli(capsys, db, "list", "--json")  # forgotten items are hidden by default
    assert added["memory_id"] not in [x["memory_id"] for x in json.loads(out)]
    assert len(json.loads(out)) == 3
    code, out, _ = _cli(capsys, db, "list", "--status", "all", "--json")
    assert len(json.loads(out)) == 4
    code, out, _ = _cli(capsys, db, "list")
    assert code == 0
    assert "feedback memory (3)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "x", "--scope", "task"], "--key: task scope needs the task key"),
        (["add", "x", "--scope", "team", "--key", "k"], "--scope: must be one of"),
        (["add", "x", "--scope", "task", "--key", "k", "--signal", "meh"], "--signal"),
        (["add", "x", "--scope", "task", "--key", "k", "--rule", "{"], "--rule: not JSON"),
        # a traceback (RecursionError) from the JSON reader, or from add's encoder
        (
            [
                "add",
                "x",
                "--scope",
                "task",
                "--key",
                "k",
                "--rule",
                '{"a":' * 5000 + "1" + "}" * 5000,
            ],
            "--rule: nested too deeply",
        ),
        (
            [
                "add",
                "x",
                "--scope",
                "task",
                "--key",
                "k",
                "--rule",
                '{"a":' * 500 + "1" + "}" * 500,
            ],
            "--rule: nested deeper than 100 levels",
        ),
        (["add", "x", "--scope", "task", "--key", "k", "--strength", "2"], "--strength: must be"),
        (["add", " ", "--scope", "task", "--key", "k"], "TEXT: give the feedback as text"),
        (["add", "x", "--scope", "global", "--key", "k"], "--key: global scope takes no key"),
        (["confirm", "nope", "--by", "ann"], "no memory item 'nope'"),
        (["forget", "nope", "--by", "ann"], "no memory item 'nope'"),
        (["propose", "--min-projects", "1"], "--min-projects: must be an integer"),
        (["list", "--status", "gone"], "--status"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    SQLiteStore(tmp_path / "s.db").close()  # a store that exists: a missing one is refused first
    code, out, err = _cli(capsys, tmp_path / "s.db", *args)
    assert code == 2
    assert message in err
    assert err.startswith("loopwright: error: ")
    assert err.count("\n") == 1
    assert out == ""


def test_many_duplicates_still_fill_the_limit(mem: FeedbackMemory) -> None:
    # the same feedback in many wordings crowds the store's first rows; retrieve asks again
    for i in range(30):
        mem.add(
            scope="project",
            scope_key="A",
            signal="correction",
            text="Same  note" + "." * (i % 2),
            by="a",
        )
    mem.add(scope="project", scope_key="A", signal="reflection", text="other one", by="a")
    mem.add(scope="project", scope_key="A", signal="reflection", text="other two", by="a")
    got = mem.retrieve(task_key="t", project="A", limit=3)
    assert _texts(got)[1:] == ["other two", "other one"]  # newer first at equal score
    assert got[0].text.startswith("Same  note")


@pytest.mark.parametrize("given", ["./.loopwright/loopwright.db", None, 5])
def test_feedback_memory_needs_a_store(given: object) -> None:
    """Outside probe pyapi47: ``FeedbackMemory("runs.db")`` (or the Runtime) was taken, and
    its first ``add`` or ``list`` an AttributeError from inside."""
    with pytest.raises(lw.ConfigError) as err:
        FeedbackMemory(given)  # type: ignore[arg-type]
    assert err.value.field == "store"


def test_feedback_memory_refuses_a_runtime(tmp_path: Path) -> None:
    with lw.Runtime(str(tmp_path / "s.db")) as rt, pytest.raises(lw.ConfigError) as err:
        FeedbackMemory(rt)  # type: ignore[arg-type]
    assert "runtime.store" in str(err.value)


# --- invariant 3's screen, at any depth (outside probe, stop 51) -----------------------------
@pytest.mark.parametrize(
    ("kwargs", "at"),
    [
        ({"source": {"held_out": True}}, "held_out"),
        ({"source": {"verdicts": [{"held_out": True}]}}, "verdicts[0].held_out"),
        ({"source": {"a": {"b": [1, {"c": {"Held-Out": "yes"}}]}}}, "a.b[1].c.Held-Out"),
        ({"source": {"task": {"held_out": {"tests": "assert f() == 1"}}}}, "task.held_out"),
        ({"source": {"x": [[{"heldOut": 1}]]}}, "x[0][0].heldOut"),
        ({"rule": {"expected": {"held_out": {"answer": 42}}}}, "expected.held_out"),
        ({"rule": {"checks": [{"name": "audit", "held_out": True}]}}, "checks[0].held_out"),
    ],
)
def test_add_refuses_held_out_material_nested_anywhere(
    mem: FeedbackMemory, kwargs: dict[str, Any], at: str
) -> None:
    """``{"verdicts": [{"held_out": true}]}`` was accepted: only the source's top level was
    looked at, and a rule (which, unlike the source, a later actor is shown) not at all."""
    field = next(iter(kwargs))
    with pytest.raises(lw.ConfigError) as info:
        mem.add(scope="task", scope_key="t", signal="correction", text="ok", by="a", **kwargs)
    assert info.value.field == field
    assert f"marked held out at {at}" in str(info.value)
    assert mem.list(status=None) == []


@pytest.mark.parametrize(
    "value",
    [
        {"held_out": False},
        {"held_out": []},
        {"verdicts": [{"held_out": 0}], "note": "held_out"},
        {"checks": ["held_out"]},
        {"held_out_count": 3},
    ],
)
def test_add_keeps_what_is_not_a_held_out_marker(
    mem: FeedbackMemory, value: dict[str, Any]
) -> None:
    it = mem.add(
        scope="task", scope_key="t", signal="edit", text="", rule=value, source=value, by="a"
    )
    assert (it.rule, it.source) == (value, value)


def _nested(depth: int) -> dict[str, Any]:
    """``{"a": {"a": …}}``, ``depth`` levels."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("field", ["rule", "source"])
def test_add_refuses_a_value_nested_too_deeply_in_one_line(mem: FeedbackMemory, field: str) -> None:
    """A rule nested 5,000 deep was Python's RecursionError from inside ``json.dumps`` (a
    traceback); a cycle is refused as too deep too."""
    deep = _nested(5000)
    ring: dict[str, Any] = {}
    ring["self"] = [ring]
    for value in (deep, ring):
        with pytest.raises(lw.ConfigError) as info:
            mem.add(scope="task", scope_key="t", signal="edit", text="ok", by="a", **{field: value})
        assert info.value.field == field
        assert "nested deeper than 100 levels" in str(info.value)
    ok = _nested(100)
    assert (
        mem.add(scope="task", scope_key="t", signal="edit", text="ok", by="a", rule=ok).rule == ok
    )


def test_a_negative_zero_strength_is_zero(mem: FeedbackMemory, store: SQLiteStore) -> None:
    """``strength=-0.0`` was stored and printed as ``-0.0`` (``-0.00`` in the list)."""
    it = mem.add(scope="task", scope_key="t", signal="edit", text="ok", by="a", strength=-0.0)
    assert str(it.strength) == "0.0"
    [row] = store.memory_query(memory_id=it.memory_id)
    assert str(row["strength"]) == "0.0"
    assert str(MemoryItem.from_dict({**it.to_dict(), "strength": -0.0}).strength) == "0.0"


def test_cli_prints_a_negative_zero_strength_as_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    code, out, err = _cli(
        capsys, db, "add", "x", "--scope", "task", "--key", "t", "--strength", "-0.0", "--json"
    )
    assert code == 0, err
    assert '"strength": 0.0' in out and "-0.0" not in out
    code, out, _ = _cli(capsys, db, "list")
    assert "strength 0.00" in out and "-0.00" not in out


def test_a_models_prompt_never_says_minus_zero_for_a_strength() -> None:
    """``Context.memory`` is a person's or a resumed run's dicts: a strength of -0.0 (a
    PostgreSQL row written before ``add`` made it 0.0) was rendered ``strength -0``."""
    from loopwright.adapters._prompt import _memory_item

    line = _memory_item({"scope": "task", "signal": "edit", "strength": -0.0, "text": "x"})
    assert "strength 0]" in line and "-0" not in line
