"""A runtime closed while a person's synchronous operation (``Runtime.edit``, ``cancel`` ...)
is under way in another thread (inflight56): ``close`` waits for it to end, whole, before the
store is closed, as it waits for the ``*_async`` forms (async55b); one called once ``close``
has begun, or after it, is refused (``StoreError``, nothing of it done), as the ``*_async``
one is. Before, ``close`` closed the store under the first, and the second ran on a closing
(or closed) runtime. Each operation is held at a fixed point (a store read in its thread)
until the test lets it go; nothing is timed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from support.row_locks import capped_loop

import loopwright as lw

LOOP = capped_loop("closing", lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}), 2)
TASK = {"artifacts": {"doc": {"a": 0}}}


class Held:
    """The store's ``latest_checkpoint`` (an edit reads it before its writes) held in a thread
    named ``held`` until ``go`` is set; ``entered`` once one is held."""

    def __init__(self, rt: lw.Runtime) -> None:
        self.entered, self.go = threading.Event(), threading.Event()
        latest = rt.store.latest_checkpoint

        def slow(rid: str) -> Any:
            if threading.current_thread().name == "held":
                self.entered.set()
                assert self.go.wait(60)
            return latest(rid)

        rt.store.latest_checkpoint = slow  # type: ignore[method-assign]


class Outcome(threading.Thread):
    """``fn()`` in a thread of its own (named ``name``), what it returned or raised kept."""

    def __init__(self, fn: Any, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.fn, self.out, self.raised = fn, None, None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.out = self.fn()
        except BaseException as exc:
            self.raised = exc
        finally:
            self.done.set()


def _closing(rt: lw.Runtime) -> bool:
    ops = rt.__dict__.get("_person_ops_")
    return ops is not None and ops.closing


def _wait(cond: Any) -> bool:
    """``cond()`` waited for (another thread makes it hold), on events set at fixed points."""
    seen = threading.Event()
    for _ in range(6000):
        if cond():
            return True
        seen.wait(0.01)
    return False


def _kinds(path: Path, run_id: str) -> tuple[list[str], list[tuple[str, str]]]:
    with lw.Runtime(path) as rt:
        kinds = [e.kind for e in rt.store.events(run_id)]
        audit = [(a.action, a.outcome) for a in rt.store.audit(target=f"run {run_id}")]
        return kinds, audit


def _closed_while_editing(rt: lw.Runtime, run_id: str) -> tuple[Held, Outcome, Outcome]:
    """An edit of ``run_id`` held in a thread, then ``rt.close()`` called in another, once it
    has begun (or ended)."""
    held = Held(rt)
    editing = Outcome(lambda: rt.edit(run_id, "doc/a", 7, by="ops", note="n"), "held")
    editing.start()
    assert held.entered.wait(60)
    closing = Outcome(rt.close, "closer")
    closing.start()
    assert _wait(lambda: _closing(rt) or closing.done.is_set())
    return held, editing, closing


def test_close_waits_for_a_synchronous_operation_under_way_in_another_thread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    rt = lw.Runtime(path)
    run_id = rt.create(LOOP, TASK, task_key="e")[0].run_id
    held, editing, closing = _closed_while_editing(rt, run_id)
    waited = not closing.done.is_set()  # (close waits while the edit is held in its thread)
    held.go.set()
    editing.join(60)
    closing.join(60)
    assert waited and closing.done.is_set() and closing.raised is None
    assert editing.raised is None and editing.out is not None  # (not cut off by the close)
    assert rt.store.closed
    kinds, audit = _kinds(path, run_id)
    assert kinds.count("edited") == 1 and ("edit", "allowed") in audit  # whole


def test_a_synchronous_operation_called_once_close_has_begun_is_refused_nothing_done(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    rt = lw.Runtime(path)
    first = rt.create(LOOP, TASK, task_key="a")[0].run_id
    second = rt.create(LOOP, TASK, task_key="b")[0].run_id
    held, editing, closing = _closed_while_editing(rt, first)
    try:
        with pytest.raises(lw.StoreError) as refused:
            rt.cancel(second, by="ops")  # (here, as the close waits for the edit)
    finally:
        held.go.set()
        editing.join(60)
        closing.join(60)
    said = str(refused.value)
    assert "cancel was not started" in said and "nothing of it was done" in said
    assert rt.owner in said
    assert editing.raised is None
    kinds, audit = _kinds(path, second)
    assert kinds == ["run_created"] and audit == []  # (not a write of it, not an audit record)


@pytest.mark.parametrize("form", ["sync", "async"])
def test_an_operation_on_a_closed_runtime_is_refused_as_closed(tmp_path: Path, form: str) -> None:
    """The runtime closed, its store another's (still open): its owner name is free again,
    and an operation of it is refused, the same words for both forms."""
    store = lw.Runtime(tmp_path / "s.db").store
    rt = lw.Runtime(store)
    run_id = rt.create(LOOP, TASK, task_key="p")[0].run_id
    rt.close()
    assert not store.closed
    with pytest.raises(lw.StoreError) as refused:
        if form == "sync":
            rt.pause(run_id, by="ops")
        else:
            asyncio.run(rt.pause_async(run_id, by="ops"))
    name = "pause" if form == "sync" else "pause_async"
    assert f"{name} was not started" in str(refused.value)
    assert "is closed" in str(refused.value) and "nothing of it was done" in str(refused.value)
    assert [a.action for a in store.audit(target=f"run {run_id}")] == []
    store.close()
