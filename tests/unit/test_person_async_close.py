"""A runtime closed while a person's operation awaited off the event loop is under way in its
store thread (async55b): ``close`` (and the end of ``with``, ``async with``) waits for it to
end, whole, before the store is closed; one not started yet (waiting for a place:
``_person_gate``) is refused, nothing of it done. Each operation is held at a fixed point (a
store read in its thread) until the test lets it go; nothing is timed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from support.row_locks import capped_loop, until

import loopwright as lw

LOOP = capped_loop("closing", lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}), 2)
TASK = {"artifacts": {"doc": {"a": 0}}}


class Held:
    """The store's ``latest_checkpoint`` held in a store thread (an edit reads it before its
    writes) until ``go`` is set; ``entered`` once one is held."""

    def __init__(self, rt: lw.Runtime) -> None:
        self.entered, self.go = threading.Event(), threading.Event()
        latest = rt.store.latest_checkpoint

        def slow(rid: str) -> Any:
            if threading.current_thread() is not threading.main_thread():
                self.entered.set()
                assert self.go.wait(60)
            return latest(rid)

        rt.store.latest_checkpoint = slow  # type: ignore[method-assign]


def _closing(rt: lw.Runtime, closed: threading.Event) -> bool:
    ops = rt.__dict__.get("_person_ops_")  # (before async55b: none; close did not wait)
    return closed.is_set() or (ops is not None and ops.closing)


def _edited(path: Path, run_id: str) -> tuple[int, list[str]]:
    with lw.Runtime(path) as rt:
        events = [e.kind for e in rt.store.events(run_id)].count("edited")
        audit = [a.outcome for a in rt.store.audit(target=f"run {run_id}") if a.action == "edit"]
        return events, audit


def test_close_waits_for_an_operation_under_way_in_its_thread(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    rt = lw.Runtime(path)
    run_id = rt.create(LOOP, TASK, task_key="e")[0].run_id
    held = Held(rt)
    closed = threading.Event()

    def close() -> None:
        rt.close()
        closed.set()

    async def main() -> Any:
        editing = asyncio.ensure_future(rt.edit_async(run_id, "doc/a", 7, by="ops", note="n"))
        assert await until(held.entered.is_set)
        closer = threading.Thread(target=close)
        closer.start()
        assert await until(lambda: _closing(rt, closed))
        waited = not closed.is_set()  # (close waits while the edit is held in its thread)
        held.go.set()
        try:
            return waited, await editing
        finally:
            closer.join(60)

    waited, edited = asyncio.run(main())
    assert waited and closed.is_set()
    assert edited.run_id == run_id and edited.status != "running"
    assert rt.store.closed  # (closed once the edit had ended)
    assert _edited(path, run_id) == (1, ["allowed"])  # its event and audit record, whole


def test_async_with_waits_on_the_event_loop_for_an_operation_under_way(tmp_path: Path) -> None:
    """The end of ``async with`` waits without blocking its event loop: a task of that loop
    lets the held edit go once the close has begun."""
    path = tmp_path / "s.db"
    with lw.Runtime(path) as rt0:
        run_id = rt0.create(LOOP, TASK, task_key="e")[0].run_id
    out: list[Any] = []

    async def main() -> None:
        async with lw.Runtime(path) as rt:
            held = Held(rt)
            editing = asyncio.ensure_future(rt.edit_async(run_id, "doc/a", 7, by="ops"))
            assert await until(held.entered.is_set)

            async def let_go() -> None:
                assert await until(lambda: _closing(rt, threading.Event()) or editing.done())
                held.go.set()

            freer = asyncio.ensure_future(let_go())
        out.append(rt.store.closed)
        await freer
        out.append(await editing)

    asyncio.run(main())
    assert out[0] and out[1].run_id == run_id and out[1].status != "running"
    assert _edited(path, run_id) == (1, ["allowed"])


def test_an_operation_not_started_when_close_begins_is_refused_nothing_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One place for a person's operation: the second waits for it on the event loop, no
    thread held; closed meanwhile, it is refused once the place is free, and did nothing."""
    from loopwright import _person_gate

    monkeypatch.setattr(_person_gate, "_THREADS_GATE", _person_gate.Gate(1))
    path = tmp_path / "s.db"
    rt = lw.Runtime(path)
    first = rt.create(LOOP, TASK, task_key="a")[0].run_id
    second = rt.create(LOOP, TASK, task_key="b")[0].run_id
    held = Held(rt)
    closed = threading.Event()

    async def main() -> tuple[Any, BaseException | None]:
        one = asyncio.ensure_future(rt.edit_async(first, "doc/a", 7, by="ops"))
        assert await until(held.entered.is_set)
        two = asyncio.ensure_future(rt.edit_async(second, "doc/a", 8, by="ops"))
        assert await until(lambda: len(_person_gate._THREADS_GATE._waiting) == 1)
        closer = threading.Thread(target=lambda: (rt.close(), closed.set()))
        closer.start()
        assert await until(lambda: _closing(rt, closed))
        held.go.set()
        try:
            await asyncio.wait([one, two])
            return one.result(), two.exception()
        finally:
            closer.join(60)

    edited, refused = asyncio.run(main())
    assert edited.run_id == first and closed.is_set()
    assert isinstance(refused, lw.StoreError) and "edit_async was not started" in str(refused)
    assert "nothing of it was done" in str(refused)
    assert _edited(path, first) == (1, ["allowed"])
    assert _edited(path, second) == (0, [])  # (not a write of it, not an audit record)
    assert _person_gate._THREADS_GATE.held == 0  # (its place given back)
