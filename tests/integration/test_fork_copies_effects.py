"""A fork's inherited effects are copied by the store, row to row
(``create_run(copy_effects=...)``), not decoded into Python and written back: a late fork of a
long run decoded every done effect up to its cycle (19,998 at cycle 19,998 of 20,000, 38.6
MB). The rows a fork gets are those the older path (``inherited=``) wrote — key, kind, cycle,
status, attempts, data with ``inherited_from`` in place (its keys in the same order) — on
SQLite and PostgreSQL, and a store whose ``create_run`` predates ``copy_effects`` still gets
them as ``inherited``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from test_rollback_journal_reads import _Counted, _paying_loop

import loopwright as lw
from loopwright.store import JournalEntry, Store, _sql, _sql_core, open_store
from loopwright.store.sqlite import SQLiteStore

# (key, kind, cycle, status, data) of the origin's journal: what a fork at cycle 5 inherits
# is the done effects of cycles up to 5, nothing else.
_NESTED = {
    "args": {"invoice": "I-1", "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 0.5}]},
    "result": {"paid": True, "ids": [1, 2, 3], "note": None, "deep": {"x": {"y": [[], {}]}}},
}
_ENTRIES: list[tuple[str, str, int, str, dict[str, Any]]] = [
    ("effect:pay:1", "effect", 1, "done", _NESTED),
    ("effect:pay:2", "effect", 2, "done", {"result": 'café ☕ 😀 \u2028 "q" \\ \n\t'}),
    ("effect:pay:3", "effect", 3, "done", {"result": {"big": 12345678901234567890123}}),
    ("effect:pay:4", "effect", 4, "done", {"z": 1, "result": 1.5e300, "a": -0.25}),
    ("effect:empty", "effect", 1, "done", {}),
    # inherited already (its origin's own origin): kept, in place
    ("effect:old", "effect", 2, "done", {"inherited_from": "first", "result": 1}),
    # an inherited_from the older path replaced (falsy), in place
    ("effect:f0", "effect", 3, "done", {"a": 1, "inherited_from": "", "b": 2}),
    ("effect:f1", "effect", 3, "done", {"inherited_from": None, "result": "x"}),
    ("effect:f2", "effect", 3, "done", {"inherited_from": 0}),
    ("effect:f3", "effect", 3, "done", {"inherited_from": False, "q": [1]}),
    ("effect:f4", "effect", 3, "done", {"inherited_from": [], "q": {}}),
    ("effect:f5", "effect", 3, "done", {"inherited_from": {}}),
    # truthy, not text: kept as it is
    ("effect:t1", "effect", 3, "done", {"inherited_from": 7}),
    ("effect:t2", "effect", 3, "done", {"inherited_from": True}),
    ("effect:t3", "effect", 3, "done", {"inherited_from": ["r"]}),
    ("effect:t4", "effect", 3, "done", {"inherited_from": {"run": "r"}}),
    ("effect:last", "effect", 5, "done", {"result": "at the fork's cycle"}),
    # not inherited: after the cycle, not done, not an effect
    ("effect:later", "effect", 6, "done", {"result": "after"}),
    ("effect:comp", "effect", 2, "compensated", {"result": 1, "compensation": "refunded"}),
    ("effect:ret", "effect", 2, "retired", {"result": 1}),
    ("effect:fail", "effect", 3, "failed", {"error": "no"}),
    ("effect:doubt", "effect", 3, "in_doubt", {}),
    ("effect:intent", "effect", 4, "intent", {"args": {}}),
    ("compensation:pay:1", "compensation", 2, "done", {"result": "refunded"}),
    ("retry:act", "retry", 3, "done", {"attempt": 1}),
]
AT = 5


def _create(store: Store, key: str, **kw: Any) -> str:
    run_id = uuid.uuid4().hex[:16]
    store.create_run(
        run_id=run_id,
        task_key=key,
        loop_name="l",
        project="p",
        spec_ref=None,
        loop_version=None,
        contract={},
        task={},
        initial_state={"cycle": kw.pop("cycle", 0)},
        **kw,
    )
    return run_id


def _fork(store: Store, origin: str, key: str, copy: bool) -> str:
    if copy:
        return _create(store, key, forked_from=(origin, AT), cycle=AT, copy_effects=(origin, AT))
    inherited = store.journal_where(origin, kind="effect", statuses=("done",), upto_cycle=AT)
    return _create(store, key, forked_from=(origin, AT), cycle=AT, inherited=inherited)


def _rows(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    """The fork's journal rows, the data in its keys' order (as text)."""
    return sorted(
        (e.key, e.kind, e.cycle, e.status, e.attempts, json.dumps(e.data, ensure_ascii=False))
        for e in store.journal(run_id)
    )


def _raw(store: Store, run_id: str) -> list[tuple[str, str]] | None:
    """SQLite's stored text of the fork's data (PostgreSQL's ``json`` text of a replaced
    falsy ``inherited_from`` is spaced otherwise: compared as data above)."""
    if not isinstance(store, _sql.SQLStore) or store._MARK != "?":
        return None
    return sorted(
        (str(k), str(d))
        for k, d in store._all("SELECT key, data FROM journal WHERE run_id=?", [run_id])
    )


def test_the_store_copies_what_the_older_path_wrote(url: str) -> None:
    store = open_store(url)
    try:
        origin = _create(store, "origin")
        token = store.acquire_lease(origin, "me", 60)
        for key, kind, cycle, status, data in _ENTRIES:
            store.journal_put(
                origin, token, key=key, kind=kind, cycle=cycle, status=status, data=data,
                attempts=cycle % 3,
            )  # fmt: skip
        old, new = _fork(store, origin, "old", False), _fork(store, origin, "new", True)
        got = _rows(store, new)
        assert got == _rows(store, old)
        assert _raw(store, new) == _raw(store, old)
        kept = {k for k, kind, c, s, _d in _ENTRIES if kind == "effect" and s == "done" and c <= AT}
        assert {r[0] for r in got} == kept
        by_key = {e.key: e.data for e in store.journal(new)}
        assert by_key["effect:old"]["inherited_from"] == "first"
        assert by_key["effect:pay:1"] == {**_NESTED, "inherited_from": origin}
        assert list(by_key["effect:f0"]) == ["a", "inherited_from", "b"]
        assert by_key["effect:t3"]["inherited_from"] == ["r"]
        # a fork of a fork: the entries name the run that did them, not the fork between
        old2, new2 = _fork(store, new, "old2", False), _fork(store, new, "new2", True)
        assert _rows(store, new2) == _rows(store, old2)
        assert _raw(store, new2) == _raw(store, old2)
        named = {json.dumps(e.data["inherited_from"]) for e in store.journal(new2)}
        assert named >= {json.dumps(origin), '"first"'}
        assert json.dumps(new) not in named
        store.release_lease(origin, token)
    finally:
        store.close()


def test_a_fork_through_the_runtime_writes_the_rows_of_the_older_path(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_paying_loop(12), {"artifacts": {"doc": {}}}, task_key="w")
        first = rt.fork(r.run_id, 8, task_key="first")
        done = rt.resume_sync(first.run_id, _paying_loop(12))
        assert done.cycles == 12
        forks = {(o, n): rt.fork(o, n, task_key=f"new-{o}-{n}").run_id
                 for o in (r.run_id, first.run_id) for n in (0, 4, 8, 10, 12)
                 if o == r.run_id or n >= 8}  # fmt: skip
        real = rt.store.create_run

        def older(**kw: Any) -> Any:  # a store's create_run written before copy_effects
            if "copy_effects" in kw:
                raise TypeError("create_run() got an unexpected keyword argument 'copy_effects'")
            return real(**kw)

        monkeypatch.setattr(rt.store, "create_run", older)
        for (o, n), new in forks.items():
            old = rt.fork(o, n, task_key=f"old-{o}-{n}").run_id
            assert _rows(rt.store, new) == _rows(rt.store, old), (o, n)
            assert len(_rows(rt.store, new)) == n
            # the rejected digests too (copy_rejected), every proposal of this loop rejected
            rejected = sorted(rt.store.rejected_rows(new))
            assert rejected == sorted(rt.store.rejected_rows(old)), (o, n)
            assert sorted(c for _d, c in rejected) == list(range(1, n + 1)), (o, n)
        monkeypatch.undo()
        # the fork of the fork names the first run for the effects it did up to cycle 8
        named = {
            e.cycle: e.data["inherited_from"] for e in rt.store.journal(forks[first.run_id, 12])
        }
        assert named == {c: r.run_id if c <= 8 else first.run_id for c in range(1, 13)}
        # and a fork does not do again what it inherited
        again = rt.resume_sync(forks[r.run_id, 10], _paying_loop(12))
        assert again.cycles == 12
        own = [e for e in rt.store.journal(forks[r.run_id, 10]) if "inherited_from" not in e.data]
        assert sorted(e.cycle for e in own) == [11, 12]


def test_a_late_fork_decodes_no_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Journal entries decoded by a fork at the last cycle of runs of 50 and 500 cycles of
    one effect each: 50 and 500 before (every done effect it inherits), none now; and the
    rejected digests read into Python to be written back (every proposal rejected): 50 and
    500 before, none now (``copy_rejected``)."""
    decoded: dict[int, int] = {}
    rejections: dict[int, int] = {}
    real = _sql.SQLStore.rejected_rows
    read: list[int] = []

    def counted(self: Any, *args: Any, **kwargs: Any) -> list[tuple[str, int]]:
        rows = real(self, *args, **kwargs)
        read.append(len(rows))
        return rows

    for cycles in (50, 500):
        with lw.Runtime(f"sqlite:///{tmp_path / f'l{cycles}.db'}?durability=process") as rt:
            r = rt.run_sync(_paying_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            read.clear()
            with monkeypatch.context() as m:
                m.setattr(_sql_core, "JournalEntry", _Counted)
                m.setattr(_sql.SQLStore, "rejected_rows", counted)
                _Counted.made[0] = 0
                new = rt.fork(r.run_id, cycles)
                decoded[cycles] = _Counted.made[0]
                rejections[cycles] = sum(read)
            got = rt.store.journal(new.run_id, kind="effect")
            assert len(got) == cycles
            assert all(e.status == "done" and e.data["inherited_from"] == r.run_id for e in got)
            origin = sorted(rt.store.rejected_rows(r.run_id))
            assert len(origin) == cycles
            assert sorted(rt.store.rejected_rows(new.run_id)) == origin
    assert decoded == {50: 0, 500: 0}, decoded
    assert rejections == {50: 0, 500: 0}, rejections


def test_a_store_older_in_both_forks_alike(tmp_path: Path) -> None:
    """A store of one's own whose ``create_run`` predates ``copy_effects`` and whose
    ``journal_where`` predates ``upto_cycle``: the fork reads the done effects and cuts the
    cycles itself, and gives them as ``inherited``."""

    class OwnStore(SQLiteStore):
        def create_run(self, **kw: Any) -> Any:  # type: ignore[override]
            if "copy_effects" in kw:
                raise TypeError("create_run() got an unexpected keyword argument 'copy_effects'")
            return super().create_run(**kw)

        def journal_where(  # type: ignore[override]
            self,
            run_id: str,
            *,
            kind: str | None = None,
            after_cycle: int | None = None,
            statuses: Collection[str] | None = None,
            keys: Collection[str] | None = None,
            limit: int | None = None,
        ) -> list[JournalEntry]:
            return super().journal_where(
                run_id, kind=kind, after_cycle=after_cycle, statuses=statuses, keys=keys,
                limit=limit,
            )  # fmt: skip

    store = OwnStore(tmp_path / "own.db")
    try:
        rt = lw.Runtime(store)
        r = rt.run_sync(_paying_loop(8), {"artifacts": {"doc": {}}}, task_key="w")
        new = rt.fork(r.run_id, 3)
        got = store.journal(new.run_id, kind="effect")
        assert [e.key for e in got] == [f"effect:pay:I-{n}" for n in (1, 2, 3)]
        assert all(e.status == "done" and e.data["inherited_from"] == r.run_id for e in got)
    finally:
        store.close()
