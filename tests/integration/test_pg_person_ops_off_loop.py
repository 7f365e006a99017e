"""PostgreSQL: a person's operation awaited from the event loop that drives runs
(``Runtime.cancel_async``, ``edit_async``, ``rollback_async``, ``settle_effect_async``;
async55) waits on its run's row, held locked by another session (a person in psql, the
dashboard), while the process's other runs go on. The synchronous forms, the only ones before,
waited for the lock on the event loop itself: every run of the process stalled until it went.

Run A drives its cycles; at its cycle 2 another session takes B's row and the operation on B
starts; A goes on once the operation's write is seen waiting on B's row (from the server),
and counts the cycles it commits while the row is still held. The lock goes once A has ended.
Each wait is bounded by a patience only a stall reaches (never a measurement).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from support.row_locks import BesideHeld, RowHolder, capped_loop, until

import loopwright as lw

pytestmark = pytest.mark.postgres

Op = Callable[[lw.Runtime, str], Coroutine[Any, Any, Any]]
TASK = {"artifacts": {"doc": {"a": 0}}}


def _cancel(rt: lw.Runtime, b: str) -> Coroutine[Any, Any, Any]:
    return rt.cancel_async(b, by="ops")


def _edit(rt: lw.Runtime, b: str) -> Coroutine[Any, Any, Any]:
    return rt.edit_async(b, "doc/a", 9, by="ops", note="nine")


def _rollback(rt: lw.Runtime, b: str) -> Coroutine[Any, Any, Any]:
    return rt.rollback_async(b, 1, by="ops")


def _settle(rt: lw.Runtime, b: str) -> Coroutine[Any, Any, Any]:
    return rt.settle_effect_async(b, "pay", done=True, by="ops")


def _beside(rt: lw.Runtime, loop: lw.Loop, beside: BesideHeld, a: str, b: str, op: Op) -> Any:
    """A driven; at its cycle 2, B's row taken elsewhere and ``op`` on B started: its task
    once both have ended (A's error raised)."""
    holder = beside.holder

    async def main() -> asyncio.Task[Any]:
        run_a = asyncio.create_task(rt.resume(a, loop))
        run_a.add_done_callback(lambda _t: holder.free.set())
        assert await until(beside.at_2.is_set)
        holder.hold(b)
        operation = asyncio.ensure_future(op(rt, b))
        await asyncio.wait([run_a, operation])
        run_a.result()
        return operation

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("op", "ended"),
    [(_cancel, False), (_edit, True), (_rollback, True), (_settle, True)],
    ids=["cancel", "edit", "rollback", "settle_effect"],
)
def test_a_persons_operation_waiting_on_its_row_lock_holds_no_other_run(
    pg_schema: tuple[str, str], pg_url: str, op: Op, ended: bool
) -> None:
    holder = RowHolder(*pg_schema)
    beside = BesideHeld(holder, holder.someone_waits)  # the operation's write waits on B's row
    loop = capped_loop("person", beside.actor, 5)
    try:
        with lw.Runtime(pg_url) as rt:
            b = rt.create(loop, TASK, task_key="b")[0].run_id
            if ended:
                assert rt.resume_sync(b, loop).status == "stopped"
            a = rt.create(loop, {**TASK, "first": True}, task_key="a")[0].run_id
            operation = _beside(rt, loop, beside, a, b, op)
            assert beside.waited == [True]  # the operation's write waited on B's row...
            assert beside.cycles_while_held == [3, 4, 5]  # ...while A drove three more cycles
            assert holder.held_to_the_end == [False]
            got = rt.store.get_run(b)
            assert not rt._driving and got.lease_owner is None
            if op is _settle:  # (B has no effect in doubt: refused, once the lock went)
                with pytest.raises(lw.ConfigError, match="in doubt"):
                    operation.result()
                return
            done = operation.result()
            assert done.run_id == b
            if op is _cancel:
                assert got.status == "cancelled"
            elif op is _edit:
                assert got.status != "stopped"  # reopened by the edit
                assert [e.kind for e in rt.store.events(b)].count("edited") == 1
            else:
                assert got.status != "stopped"  # reopened at cycle 1
                assert "rolled_back" in [e.kind for e in rt.store.events(b)]
    finally:
        holder.free.set()
