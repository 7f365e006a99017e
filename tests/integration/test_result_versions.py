"""A run's result reads its older versions when they are wanted (invariant 8 at the API's
edge) once they come to more than ``RESULT_HELD_BYTES``: the run ends holding each part's
current and accepted versions only, and ``result.state.part(ref).versions`` still lists every
version — through the store while it is open, through its database opened again (read-only)
once it is closed. A smaller run's result holds them all and outlives its store. Both stores.
The lazy path is forced here by setting the bound to 0 (the values are small)."""

from __future__ import annotations

import copy
import pickle
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright import StoreError, _result


@pytest.fixture
def lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_result, "RESULT_HELD_BYTES", 0)


TASK = {"goal": "a long loop", "artifacts": {"doc": {"body": "", "title": "t"}}}
CYCLES = 40


def _loop_of(
    edit: Callable[[int], dict[str, Any]], cycles: int = CYCLES, done: str | None = None
) -> lw.Loop:
    """A loop whose actor edits ``doc`` with ``edit(cycle)``; its check flags the body every
    cycle, or passes once the body is ``done``."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", edit(ctx.cycle))

    def verify(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        if done is not None and state.values()["doc"]["body"] == done:
            return lw.Verdict(passed=True, score=1.0)
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still open", "doc", "body"),)
        )

    return lw.Loop(
        name="result-versions",
        actor=actor,
        verifiers=[lw.Check(fn=verify, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _loop() -> lw.Loop:
    return _loop_of(lambda c: {"body": f"draft {c}"})


def _held(part: lw.Part) -> int:
    return len(part._known)  # the versions in memory now


def test_a_result_holds_few_versions_and_reads_the_rest_open_or_closed(
    url: str, lazy: None
) -> None:
    rt = lw.Runtime(url)
    try:
        result = rt.run_sync(_loop(), TASK, task_key="k")
        body = result.state.part("doc/body")
        assert body is not None and body.count == CYCLES + 1
        assert _held(body) <= 3  # not every version: the run's end reads none of them
        expected = [(v.n, v.value, v.status) for v in rt.store.versions(result.run_id, "doc/body")]
        assert len(expected) == CYCLES + 1
    finally:
        rt.close()
    assert rt.store.closed
    # Read after the store is closed: the database is opened again for it.
    assert [(v.n, v.value, v.status) for v in body.versions] == expected
    assert body.version(2).value == "draft 1"
    title = result.state.part("doc/title")
    assert title is not None and [v.value for v in title.versions] == ["t"]


def test_reading_after_the_file_is_gone_is_a_clear_error_and_makes_no_new_file(
    tmp_path: Path, lazy: None
) -> None:
    path = tmp_path / "gone.db"
    with lw.Runtime(f"sqlite:///{path}") as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
    for f in tmp_path.glob("gone.db*"):
        f.unlink()
    body = result.state.part("doc/body")
    assert body is not None
    with pytest.raises(StoreError, match="no longer exists"):
        body.versions  # noqa: B018
    assert not path.exists()
    # what the run ended holding is still there
    assert body.value == f"draft {CYCLES}"


def test_a_relative_store_path_reads_after_the_working_folder_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lazy: None
) -> None:
    monkeypatch.chdir(tmp_path)
    with lw.Runtime("sqlite:///runs.db") as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    body = result.state.part("doc/body")
    assert body is not None and len(body.versions) == CYCLES + 1
    assert list(elsewhere.iterdir()) == []  # nothing opened or made here
    copied = copy.deepcopy(result)  # copies share the reader
    assert [v.value for v in copied.state.part("doc/body").versions] == [  # type: ignore[union-attr]
        v.value for v in body.versions
    ]


def test_reading_a_closed_store_takes_no_lock_and_migrates_nothing(
    tmp_path: Path, lazy: None
) -> None:
    path = tmp_path / "s.db"
    with lw.Runtime(f"sqlite:///{path}") as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process writing: a read does not wait for it
    try:
        body = result.state.part("doc/body")
        assert body is not None and len(body.versions) == CYCLES + 1
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def _until(tag: str, done: str) -> lw.Loop:
    return _loop_of(lambda c: {"body": f"{tag} {c}"}, 12, done)


def test_a_result_read_before_a_rollback_refuses_the_rewritten_versions(
    tmp_path: Path, lazy: None
) -> None:
    with lw.Runtime(f"sqlite:///{tmp_path / 's.db'}") as rt:
        first = rt.run_sync(_until("A", "A 5"), TASK, task_key="k")
        assert first.cycles == 5
        rt.rollback(first.run_id, 2, by="alice")
        # the run goes on from cycle 2's parts: its next versions take numbers 3, 4, …
        rt.resume_sync(first.run_id, _until("B", "never"))
        body = first.state.part("doc/body")
        assert body is not None
        with pytest.raises(StoreError, match="written again after this result was read"):
            body.versions  # noqa: B018
        again = rt.result(first.run_id).state.part("doc/body")
        assert again is not None and len(again.versions) == again.count


@pytest.mark.postgres
def test_a_dropped_postgres_schema_is_an_error_not_a_new_store(pg_url: str, lazy: None) -> None:
    import psycopg

    with lw.Runtime(pg_url) as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
    schema = pg_url.rsplit("schema=", 1)[1]
    base = pg_url.split("?", maxsplit=1)[0]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    body = result.state.part("doc/body")
    assert body is not None
    with pytest.raises(StoreError, match="no longer holds the store"):
        body.versions  # noqa: B018
    with psycopg.connect(base, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname=%s", (schema,)).fetchone()
    assert found is None  # the read made no schema


def test_a_small_runs_result_holds_every_version_and_outlives_its_store(tmp_path: Path) -> None:
    path = tmp_path / "small.db"
    with lw.Runtime(f"sqlite:///{path}") as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
    for f in tmp_path.glob("small.db*"):
        f.unlink()
    body = result.state.part("doc/body")
    assert body is not None and _held(body) == CYCLES + 1  # read when the run returned
    assert [v.value for v in body.versions][-2:] == [f"draft {CYCLES - 1}", f"draft {CYCLES}"]


def test_a_run_of_large_values_ends_holding_only_what_it_needs(tmp_path: Path) -> None:
    big = "x" * (_result.RESULT_HELD_BYTES // 8)  # 12 cycles of it: over the bound

    loop = _loop_of(lambda c: {"body": f"{c} {big}"}, 12)
    with lw.Runtime(f"sqlite:///{tmp_path / 'big.db'}") as rt:
        result = rt.run_sync(loop, TASK, task_key="k")
    body = result.state.part("doc/body")
    assert body is not None and body.count == 13
    assert _held(body) <= 3
    assert [v.value.split(" ")[0] for v in body.versions[1:]] == [str(c) for c in range(1, 13)]


def test_a_small_runs_result_can_be_pickled(tmp_path: Path) -> None:
    with lw.Runtime(f"sqlite:///{tmp_path / 'p.db'}") as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
    back = pickle.loads(pickle.dumps(result))
    assert back.to_dict() == result.to_dict()
    body = back.state.part("doc/body")
    assert body is not None and len(body.versions) == CYCLES + 1


def _writes(values: list[str]) -> lw.Loop:
    """A loop whose actor writes ``values`` in turn, one a cycle."""
    return _loop_of(lambda c: {"body": values[c - 1]}, len(values))


def test_large_older_values_count_though_the_last_is_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_result, "RESULT_HELD_BYTES", 100_000)
    values = [f"{i} " + "x" * 30_000 for i in range(5)] + [""]  # 150 KB before a last ""
    with lw.Runtime(f"sqlite:///{tmp_path / 's.db'}") as rt:
        result = rt.run_sync(_writes(values), TASK, task_key="k")
        body = result.state.part("doc/body")
        assert body is not None and body.count == 7
        assert _held(body) <= 3  # not all: what they cost is over the bound
        assert [v.value for v in body.versions][1:] == values


def test_many_small_versions_count_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loopwright.store._base import VERSION_COST

    monkeypatch.setattr(_result, "RESULT_HELD_BYTES", 30 * VERSION_COST)
    with lw.Runtime(f"sqlite:///{tmp_path / 's.db'}") as rt:
        result = rt.run_sync(_writes([str(i) for i in range(40)]), TASK, task_key="k")
    body = result.state.part("doc/body")
    assert body is not None and _held(body) <= 3
    assert [v.value for v in body.versions][1:] == [str(i) for i in range(40)]


def test_a_small_result_is_read_in_one_read_not_one_per_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = {"artifacts": {"doc": {f"p{i}": "" for i in range(30)}}}

    loop = _loop_of(lambda c: {f"p{i}": f"{c}" for i in range(30)}, 3)
    with lw.Runtime(f"sqlite:///{tmp_path / 's.db'}") as rt:
        run = rt.run_sync(loop, task, task_key="k")
        per_part: list[str] = []
        real = type(rt.store).versions

        def counted(store: Any, run_id: str, ref: str) -> Any:
            per_part.append(ref)
            return real(store, run_id, ref)

        monkeypatch.setattr(type(rt.store), "versions", counted)
        result = rt.result(run.run_id)
    assert per_part == []
    parts = [p for _ref, p in result.state.iter_parts()]
    assert len(parts) == 30 and all(p.loader is None and _held(p) == p.count for p in parts)


def test_a_closed_store_is_opened_again_once_for_all_the_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lazy: None
) -> None:
    from loopwright.store.sqlite import SQLiteStore

    with lw.Runtime(f"sqlite:///{tmp_path / 's.db'}") as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
    opened: list[int] = []
    real = SQLiteStore.reopen

    def counted(store: SQLiteStore) -> SQLiteStore | None:
        opened.append(1)
        return real(store)

    monkeypatch.setattr(SQLiteStore, "reopen", counted)
    for ref in ("doc/body", "doc/title"):
        part = result.state.part(ref)
        assert part is not None and len(part.versions) == part.count
    assert opened == [1]


def _asked(cycles: int) -> lw.Loop:
    """Every cycle's proposal touches doc/body, which a risk rule sends to a person."""
    return lw.Loop(
        name="asked",
        actor=lambda ctx: lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="c")],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=cycles),
            risk=(lw.RiskRule(name="touch", touches=("doc/body",)),),
        ),
    )


def test_a_waiting_runs_result_reads_no_older_versions(tmp_path: Path) -> None:
    # A run that waits for a person every cycle returns a result at every wait: reading its
    # every version there made each wait cost more than the last (invariant 8).
    loop = _asked(100)
    with lw.Runtime(f"sqlite:///{tmp_path / 'w.db'}") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        for _ in range(12):
            rt.approve(r.run_id, by="bob")
            r = rt.resume_sync(r.run_id, loop)
        assert r.status == "awaiting_approval"
        reads: list[Any] = []
        within = rt.store.versions_within

        def spy(*a: Any) -> Any:
            reads.append(a)
            return within(*a)

        rt.store.versions_within = spy  # type: ignore[method-assign]
        rt.approve(r.run_id, by="bob")
        r = rt.resume_sync(r.run_id, loop)
        assert r.status == "awaiting_approval" and reads == []
        body = r.state.part("doc/body")
        assert body is not None and body.count == 14 and _held(body) <= 3
        # still every version when asked, through the store
        assert [v.value for v in body.versions] == ["", *(f"draft {c}" for c in range(1, 14))]
        back = pickle.loads(pickle.dumps(r))  # a lazy result crosses processes (Ray)
    body = back.state.part("doc/body")
    assert body is not None and [v.value for v in body.versions][-1] == "draft 13"
    assert len(body.versions) == 14


def test_a_large_runs_result_pickles_with_every_version(tmp_path: Path, lazy: None) -> None:
    # Over the bound the result reads older versions when wanted; pickled, it reads them then
    # (a store's connection cannot cross processes), and the copy needs no store.
    db = tmp_path / "big.db"
    with lw.Runtime(f"sqlite:///{db}") as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
        body = result.state.part("doc/body")
        assert body is not None and _held(body) <= 3
        data = pickle.dumps(result)
    db.unlink()  # the copy reads nothing from the store
    back = pickle.loads(data)
    body = back.state.part("doc/body")
    assert body is not None and len(body.versions) == CYCLES + 1
    assert body.versions[CYCLES].value == f"draft {CYCLES}"
    assert pickle.loads(pickle.dumps(back)).to_dict() == back.to_dict()
