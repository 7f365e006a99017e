"""A recall's two sides (people's feedback, then the loop's reflections) asked of the store in
one ``Store.memory_recall``: the same rows as the two searches asked apart, one statement when
the scopes hold no memory (on SQLite, once it found none: ``PRAGMA data_version``, not the
probe), and a write to memory since — another process's, another connection's, this store's
own — seen at the next cycle."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._recall import recall, recall_searches
from loopwright.store import Store


@pytest.fixture
def on(url: str) -> Iterator[lw.Runtime]:
    """A runtime on each store (SQLite, and PostgreSQL with ``LOOPWRIGHT_TEST_PG``)."""
    with lw.Runtime(url) as runtime:
        yield runtime


def statements(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements the store's reads run from now on (both stores read through ``_conn``)."""
    seen: list[str] = []
    real = store._conn

    class Counted:
        def __init__(self, conn: Any) -> None:
            self.conn = conn

        def execute(self, query: str, args: Any = ()) -> Any:
            seen.append(query)
            return self.conn.execute(query, args)

    @contextlib.contextmanager
    def counting() -> Iterator[Counted]:
        with real() as conn:
            yield Counted(conn)

    monkeypatch.setattr(store, "_conn", counting)
    return seen


def test_a_recall_of_scopes_without_memory_is_one_statement(
    on: lw.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most loops keep no memory: a cycle's recall then costs one indexed probe, however many
    sides it has (before: one probe for people's feedback, a second for reflections)."""
    # memory elsewhere: another task's and another project's, both sides
    for signal in ("correction", "reflection"):
        on.memory.add(scope="task", scope_key="other", signal=signal, text="a note", by="ann")
        on.memory.add(scope="project", scope_key="q", signal=signal, text="a note", by="ann")
    seen = statements(on.store, monkeypatch)
    scopes = [("task", "k"), ("project", "p"), ("global", None)]
    sqlite = on.store.url.startswith("sqlite")
    assert recall(on.store, scopes, "raise the counter") == []
    # the probe (SQLite: after the database's change counter, read first)
    assert len(seen) == 1 + sqlite and "FROM memory" in seen[-1], seen
    for _ in range(3):  # nothing written since: SQLite reads its counter, not the probe
        seen.clear()
        assert recall(on.store, scopes, "raise the counter") == []
        assert len(seen) == 1, seen
        assert seen[0] == "PRAGMA data_version" if sqlite else "FROM memory" in seen[0]
    # several runs' recalls (GroupRecall): one probe for all their scopes
    seen.clear()
    assert on.store.memory_recall(_recalls()) == [([], [])] * 5
    assert len(seen) == 1, seen


def _recalls() -> list[tuple[Any, Any, int]]:
    return [(*recall_searches([("task", f"k{i}"), ("project", "p")], "title"), 2) for i in range(5)]


def test_a_recall_reads_each_side_as_its_search_alone(on: lw.Runtime) -> None:
    """Alone and batched (``GroupRecall``): people's rows as their search's; the reflections'
    as theirs where people's feedback left slots free, else not read (None)."""
    add = on.memory.add
    add(scope="task", scope_key="k1", signal="edit", text="k1 title", by="ann")  # short
    add(scope="task", scope_key="k2", signal="reflection", text="k2 title", by="reflector")
    add(scope="task", scope_key="k3", signal="edit", text="k3 title", by="ann")
    add(scope="task", scope_key="k3", signal="reflection", text="k3 title", by="reflector")
    for n in range(3):  # k4: people's feedback fills both slots
        add(scope="task", scope_key="k4", signal="correction", text=f"title {n}", by="ann")
        add(scope="task", scope_key="k4", signal="reflection", text=f"a title {n}", by="ann")
    recalls = _recalls()
    expected = []
    for people, loop, slots in recalls:
        mine = on.store.memory_search([people])[0]
        expected.append((mine, on.store.memory_search([loop])[0] if len(mine) < slots else None))
    alone = [on.store.memory_recall([r])[0] for r in recalls]
    assert alone == expected
    assert on.store.memory_recall(recalls) == expected
    # the protocol's default (two memory_search calls) answers the same
    assert Store.memory_recall(on.store, recalls) == expected
    # searches holding lists (not hashable), and two sides reading other scopes
    listed = [
        (replace(people, scopes=list(people.scopes)), replace(loop, scopes=list(loop.scopes)), n)
        for people, loop, n in recalls
    ]
    assert [on.store.memory_recall([r])[0] for r in listed] == expected
    crossed = (recalls[1][0], recalls[2][1], 2)  # k1's people's feedback, k2's reflections
    assert on.store.memory_recall([crossed]) == [(expected[1][0], expected[2][1])]
    sides = [
        ([r["signal"] for r in mine], theirs and [r["signal"] for r in theirs])
        for mine, theirs in expected
    ]
    assert sides == [
        ([], []),
        (["edit"], []),
        ([], ["reflection"]),
        (["edit"], ["reflection"]),
        (["correction"] * 3, None),
    ]


_WRITER = """
import sys
import loopwright as lw
with lw.Runtime(sys.argv[1]) as rt:
    rt.memory.add(scope="task", scope_key=sys.argv[2], signal="reflection",
                  text="the counter is too low, raise the counter", by="reflector")
    rt.memory.add(scope="task", scope_key=sys.argv[2], signal="correction",
                  text="never go past eight", by="ann")
"""


def test_a_correction_another_process_writes_is_recalled_at_the_next_cycle(
    on: lw.Runtime, url: str
) -> None:
    """The store answered "no memory" for the task; another process then writes a person's
    correction (and a reflection) for it: the run's next cycle shows both, the correction
    first. Nothing of an empty answer is kept from one recall to the next."""
    shown: list[list[str]] = []
    env = {**os.environ, "PYTHONPATH": str(Path(lw.__file__).parents[1])}

    def actor(ctx: lw.Context) -> lw.Proposal:
        shown.append([m["signal"] for m in ctx.memory])
        if ctx.cycle == 1:
            subprocess.run([sys.executable, "-c", _WRITER, url, "xk"], check=True, env=env)
        return lw.Proposal.edit("doc", {"n": ctx.artifacts["doc"]["n"] + 1})

    def low(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        n = state.artifacts["doc"].values()["n"]
        bad = () if n >= 3 else (lw.Finding("the counter is too low", "doc", "n", "v"),)
        return lw.Verdict(passed=not bad, score=n / 3, findings=bad)

    loop = lw.Loop(
        name="other-writer",
        actor=actor,
        verifiers=[lw.Check(fn=low)],
        project="pj",
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=5)),
    )
    result = on.run_sync(
        loop, {"goal": "raise the counter", "artifacts": {"doc": {"n": 0}}}, task_key="xk"
    )
    assert result.cycles == 3
    assert shown == [[], ["correction", "reflection"], ["correction", "reflection"]]


def _showing(shown: list[list[str]], write: Any, cycles: int = 3) -> lw.Loop:
    """A loop whose actor notes the signals its context recalls, calling ``write`` at its
    first cycle (after that cycle's recall, which found no memory)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        shown.append([m["signal"] for m in ctx.memory])
        if ctx.cycle == 1:
            write()
        return lw.Proposal.edit("doc", {"n": ctx.cycle})

    def never(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.0, findings=(lw.Finding("no", "doc", "n", "v"),))

    return lw.Loop(
        name="writer",
        actor=actor,
        verifiers=[lw.Check(fn=never)],
        project="pj",
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


_TASK = {"goal": "raise the counter", "artifacts": {"doc": {"n": 0}}}


def test_a_correction_added_mid_run_through_the_same_store_is_recalled_next(
    on: lw.Runtime,
) -> None:
    """An empty answer known to the store is not kept past its own write to memory."""
    shown: list[list[str]] = []

    def write() -> None:
        on.memory.add(scope="task", scope_key="wk", signal="correction", text="x", by="ann")

    assert on.run_sync(_showing(shown, write), _TASK, task_key="wk").cycles == 3
    assert shown == [[], ["correction"], ["correction"]]


def test_a_candidate_confirmed_mid_run_is_recalled_next(on: lw.Runtime) -> None:
    """A status change (a global candidate a person confirms) is a write to memory too: the
    next cycle recalls the item its scopes held, inactive, at the empty answer."""
    item = on.memory.add(scope="global", signal="correction", text="keep it short", by="ann")
    assert item.status == "candidate"
    shown: list[list[str]] = []

    def write() -> None:
        on.memory.confirm(item.memory_id, by="bob")

    assert on.run_sync(_showing(shown, write), _TASK, task_key="ck").cycles == 3
    assert shown == [[], ["correction"], ["correction"]]


def test_a_correction_another_connection_writes_is_recalled_next(on: lw.Runtime, url: str) -> None:
    """Another store on the same database in this process (its own connection): the
    database tells this store's next recall that something was written."""
    shown: list[list[str]] = []

    def write() -> None:
        with lw.Runtime(url) as other:
            other.memory.add(scope="task", scope_key="ok", signal="edit", text="y", by="ann")

    assert on.run_sync(_showing(shown, write), _TASK, task_key="ok").cycles == 3
    assert shown == [[], ["edit"], ["edit"]]


def test_searches_asked_again_are_answered_for_their_scopes_now(on: lw.Runtime) -> None:
    """The store knows the last recall's searches by identity (their probes built once): a
    search whose scopes are a list that changed since is not taken for the one it was."""
    on.memory.add(scope="task", scope_key="full", signal="correction", text="a title", by="ann")
    people, loop = recall_searches([("task", "empty")], "title")
    assert on.store.memory_recall([(people, loop, 2)]) == [([], [])]
    assert on.store.memory_recall([(people, loop, 2)]) == [([], [])]  # the same objects
    scopes = [("task", "empty")]
    listed = (replace(people, scopes=scopes), replace(loop, scopes=scopes), 2)
    assert on.store.memory_recall([listed]) == [([], [])]
    scopes[0] = ("task", "full")  # changed in place
    [(rows, _)] = on.store.memory_recall([listed])
    assert [r["signal"] for r in rows] == ["correction"]
    full = recall_searches([("task", "full")], "title")
    assert [r["signal"] for r in on.store.memory_recall([(*full, 2)])[0][0]] == ["correction"]
    assert on.store.memory_recall([(people, loop, 2)]) == [([], [])]
