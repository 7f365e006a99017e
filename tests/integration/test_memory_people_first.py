"""What people said ranks above what the loop told itself: a reflection never pushes a
person's feedback (correction, accept/reject, edit, export, confirmed repeated) out of a
context, however well its words match the query; reflections fill only the slots left.

From an outside probe: a task correction and a reflector repeating the findings; ranked by
strength × relevance over the same five slots, reflections came above the correction from
cycle 2 and had pushed it out from cycle 6 (five reflections)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import loopwright as lw


@pytest.fixture
def rt(url: str) -> Iterator[lw.Runtime]:
    """A runtime on each store (SQLite, and PostgreSQL with ``LOOPWRIGHT_TEST_PG``)."""
    runtime = lw.Runtime(url)
    try:
        yield runtime
    finally:
        runtime.close()


CORRECTION = "Never write a value above 8: the auditor said so"


def counter_loop(shown: list[list[str]]) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        shown.append([m["signal"] + ":" + m["text"] for m in ctx.memory])
        return lw.Proposal.edit("doc", {"n": ctx.artifacts["doc"]["n"] + 1})

    def low(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        n = state.artifacts["doc"].values()["n"]
        bad = () if n >= 8 else (lw.Finding("the counter n is too low", "doc", "n", "v"),)
        return lw.Verdict(passed=not bad, score=n / 8, findings=bad)

    def reflector(ctx: lw.Context, verdicts: Any) -> str:
        # each note new (so each is kept), each repeating the findings word for word
        return f"attempt {ctx.cycle}: the counter n is too low, raise the counter"

    return lw.Loop(
        name="people-first",
        actor=actor,
        verifiers=[lw.Check(fn=low)],
        project="pj",
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=9)),
        reflector=reflector,
    )


@pytest.mark.parametrize("together", [False, True])
def test_many_reflections_never_push_a_correction_out_of_the_context(
    rt: lw.Runtime, together: bool
) -> None:
    """Alone, and read together with another run's recall (``GroupRecall``)."""
    keys = ["r1", "r2"] if together else ["r1"]
    for key in keys:
        rt.memory.add(scope="task", scope_key=key, signal="correction", text=CORRECTION, by="ann")
    shown: dict[str, list[list[str]]] = {key: [] for key in keys}

    async def go() -> list[lw.RunResult]:
        return list(
            await asyncio.gather(
                *(
                    rt.run(
                        counter_loop(shown[key]),
                        {"goal": "raise the counter", "artifacts": {"doc": {"n": 0}}},
                        task_key=key,
                    )
                    for key in keys
                )
            )
        )

    results = asyncio.run(go())
    assert [r.cycles for r in results] == [8] * len(keys)
    for key in keys:
        contexts = shown[key]
        assert len(contexts) == 8
        # from cycle 6 on the task holds five reflections or more, each matching the query
        # (the goal and the finding) better than the correction does
        assert sum(s.startswith("reflection:") for s in contexts[-1]) == 4
        for cycle, memory in enumerate(contexts, start=1):
            assert memory[0] == "correction:" + CORRECTION, (key, cycle, memory)
            assert all(s.startswith("reflection:") for s in memory[1:]), (key, cycle, memory)


def test_reflections_only_fill_the_slots_peoples_feedback_leaves(rt: lw.Runtime) -> None:
    query = "the counter n is too low"
    for i in range(6):  # the best matches of the store, and newer than everything else
        rt.memory.add(
            scope="task",
            scope_key="t",
            signal="reflection",
            text=f"note {i}: the counter n is too low, raise the counter",
            by="reflector",
        )
    for scope, key, signal, text, strength in [
        ("task", "t", "edit", "an editor moved the title", None),
        ("project", "p", "export", "the exported page kept its palette", None),
        ("task", "t", "correction", "keep the counter below nine", None),
        ("task", "t", "accept", "panel two was accepted", 0.05),  # weaker than a reflection
    ]:
        rt.memory.add(
            scope=scope, scope_key=key, signal=signal, text=text, by="ann", strength=strength
        )
    got = rt.memory.retrieve(task_key="t", project="p", query=query)
    # people's feedback first, among itself by strength × relevance (the correction shares
    # "counter" with the query; the others none: by strength), then the best reflection
    assert [it.signal for it in got] == ["correction", "export", "edit", "accept", "reflection"]
    assert "raise the counter" in got[-1].text
    # more people's feedback than slots: no reflection is shown at all
    for i in range(7):
        rt.memory.add(scope="task", scope_key="t", signal="edit", text=f"edit number {i}", by="ann")
    got = rt.memory.retrieve(task_key="t", project="p", query=query, limit=7)
    assert "reflection" not in [it.signal for it in got]
    assert got[0].signal == "correction"


def test_a_store_from_before_keeps_people_first_once_migrated(tmp_path: Any) -> None:
    """SQLite's v16 rebuilds the search index with a reflection's tag apart: the items an
    older store holds are each found on their own side."""
    import sqlite3

    from loopwright.store._schema import MEMORY_REFLECTIONS_SQL, SQLITE_MIGRATIONS, memory_tag

    # the step that set reflections apart (not the last one: later steps came after it)
    before = next(i for i, m in enumerate(SQLITE_MIGRATIONS) if MEMORY_REFLECTIONS_SQL in m)
    row = (
        "INSERT INTO memory(memory_id, scope, scope_key, signal, strength, text, rule, source, "
        "\"by\", status, created_at, updated_at) VALUES('{id}', 'task', 't', '{signal}', "
        "{strength}, '{text}', NULL, '{{}}', 'ann', 'active', {at}, {at})"
    )
    db = sqlite3.connect(tmp_path / "old.db")
    for statement in [
        "CREATE TABLE loopwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        *(s for m in SQLITE_MIGRATIONS[:before] for s in m),
        f"INSERT INTO loopwright_meta(key, value) VALUES('schema_version', '{before}')",
        row.format(id="fix", signal="correction", strength=1.0, text="keep it short", at=1.0),
        *(
            row.format(
                id=f"r{i}", signal="reflection", strength=0.3, text=f"the counter {i}", at=2.0 + i
            )
            for i in range(6)
        ),
    ]:
        db.execute(statement)
    db.commit()
    db.close()
    with lw.Runtime(str(tmp_path / "old.db")) as rt:
        got = rt.memory.retrieve(task_key="t", project="", query="the counter is low")
        assert [it.memory_id for it in got] == ["fix", "r5", "r4", "r3", "r2"]
        fts = rt.store._db  # type: ignore[attr-defined]
        tagged = "SELECT count(*) FROM memory_fts(?)"
        assert fts.execute(tagged, (f'tag : "{memory_tag("task", "t", True)}"',)).fetchone() == (6,)
        assert fts.execute(tagged, (f'tag : "{memory_tag("task", "t")}"',)).fetchone() == (1,)


def test_a_batch_of_recalls_answers_each_side_as_alone(rt: lw.Runtime) -> None:
    """``GroupRecall``'s one store call: which scopes hold people's feedback and which hold
    reflections is asked once for all, and each side gets what it gets alone."""
    from loopwright._recall import recall_searches

    for key in ("k0", "k1"):
        rt.memory.add(scope="task", scope_key=key, signal="edit", text=f"{key} title", by="ann")
    rt.memory.add(
        scope="task", scope_key="k1", signal="reflection", text="k1 title", by="reflector"
    )
    rt.memory.add(
        scope="task", scope_key="k2", signal="reflection", text="k2 title", by="reflector"
    )
    searches = [s for i in range(4) for s in recall_searches([("task", f"k{i}")], "title")]
    batch = rt.store.memory_search(searches)
    assert batch == [rt.store.memory_search([s])[0] for s in searches]
    found = [[(r["scope_key"], r["signal"]) for r in rows] for rows in batch]
    assert found == [
        [("k0", "edit")],
        [],
        [("k1", "edit")],
        [("k1", "reflection")],
        [],
        [("k2", "reflection")],
        [],
        [],
    ]
