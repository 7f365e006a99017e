"""PostgreSQL: a run's writes outside its cycles, made while another session holds its row
locked, leave the process's other runs going (pgloop54).

Stop 53 moved a PostgreSQL run's cycle writes off the event loop (commits, the effect journal,
renewals, the release). Writes fenced on the run's row stayed there: the lease taken as a run
starts or resumes (``Runtime.run``, ``run_many``, ``resume``), the ``drained`` event a
draining runtime writes at a run's cycle boundary, and a cancelled run's compensation journal
writes (its claim and its entry marked compensated). Each waited on the event loop, with no
lock timeout, until the lock went, and every other run of the process with it. Progress is counted
in the other run's checkpoints while the lock is held; each wait is bounded by a patience that
only a stall reaches (never a measurement).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from support.row_locks import PATIENCE, BesideHeld, RowHolder, capped_loop, never, until

import loopwright as lw

pytestmark = pytest.mark.postgres


def _side_by_side(
    rt: lw.Runtime, a: tuple[str, lw.Loop], b: tuple[str, lw.Loop], free: threading.Event
) -> None:
    """Resumes runs A and B side by side in one event loop; ``free`` is set once B has
    ended (which lets the lock on A's row go)."""

    async def main() -> None:
        run_a = asyncio.create_task(rt.resume(*a))
        run_b = asyncio.create_task(rt.resume(*b))
        run_b.add_done_callback(lambda _t: free.set())
        await asyncio.wait([run_a, run_b])
        run_a.result()
        run_b.result()

    asyncio.run(main())


def test_a_lease_take_waiting_on_its_row_lock_holds_no_other_run(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    """B is resumed (its lease taken) while another session holds B's row: A, running beside
    it in the same event loop, commits its next checkpoints meanwhile."""
    holder = RowHolder(*pg_schema)
    beside = BesideHeld(holder, holder.someone_waits)  # B's lease take waits on its row
    loop = capped_loop("take", beside.actor, 5)
    task = {"artifacts": {"doc": {"a": 0}}}
    try:
        with lw.Runtime(pg_url) as rt:
            a = rt.create(loop, {**task, "first": True}, task_key="a")[0].run_id
            b = rt.create(loop, task, task_key="b")[0].run_id
            beside.drive(rt, loop, a, b, before_b=lambda: holder.hold(b)).result()
            assert beside.waited == [True]  # B's take waited on its row...
            assert beside.cycles_while_held == [3, 4, 5]  # ...while A drove three more cycles
            assert holder.held_to_the_end == [False]  # A ended with B's row still held
            assert [rt.store.get_run(r).cycle for r in (a, b)] == [5, 5]
    finally:
        holder.free.set()


def test_a_drained_event_waiting_on_its_row_lock_holds_no_other_run(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    """The runtime drains as A's cycle 2 is durable and another session takes A's row: A's
    ``drained`` event waits on it; B, beside it in its first cycle, drives that cycle to its
    end and drains."""
    holder = RowHolder(*pg_schema)
    ids: dict[str, str] = {}
    b_while_held: list[int] = []  # B's checkpoints made while A's row is held
    b_started = threading.Event()
    rt: lw.Runtime

    def progress(rec: lw.RunRecord) -> None:
        if rec.run_id == ids.get("a") and rec.cycle == 2 and not holder.locked.is_set():
            holder.hold(rec.run_id)  # A's drained event, written next, waits on its row
            rt.drain()
        elif rec.run_id == ids.get("b") and holder.holding():
            b_while_held.append(rec.cycle)

    async def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.run_id == ids["b"]:
            # B's first cycle ends once A's row is held and the runtime drains, A's second
            # once B's first has started (each wait bounded: a stall guard)
            b_started.set()
            await until(holder.locked.is_set)
        elif ctx.cycle == 2:
            await until(b_started.is_set)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    loop = capped_loop("drain", actor, 5)
    task = {"artifacts": {"doc": {"a": 0}}}
    try:
        with lw.Runtime(pg_url, on_progress=progress) as rt:
            ids["a"] = rt.create(loop, task, task_key="a")[0].run_id
            ids["b"] = rt.create(loop, task, task_key="b")[0].run_id
            _side_by_side(rt, (ids["a"], loop), (ids["b"], loop), holder.free)
            assert holder.locked.is_set()
            assert b_while_held == [1]  # B's cycle made durable with A's row held...
            assert holder.held_to_the_end == [False]  # ...and B drained before it went
            for r, cycle in ((ids["a"], 2), (ids["b"], 1)):
                assert rt.store.get_run(r).cycle == cycle
                assert [e.kind for e in rt.store.events(r)].count("drained") == 1
    finally:
        holder.free.set()


def test_a_compensation_journaled_while_its_row_is_locked_holds_no_other_run(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    """A cancelled run undoes its payment as it resumes, beside B; another session takes A's
    row as the refund's result is journaled: A's next journal writes (the payment's claim and
    entry marked compensated) wait on it, and B drives its cycles meanwhile."""
    holder = RowHolder(*pg_schema)
    refunded: list[str] = []
    b_while_held: list[int] = []
    ids: dict[str, str] = {}

    def refund(key: str, result: Any, args: dict[str, Any]) -> None:
        refunded.append(key)

    pay = lw.effect(
        "spend",
        name="pay",
        key=lambda a: a["invoice"],
        compensate=refund,
        requires_success=False,
    )(lambda invoice: {"paid": invoice})

    def phase(name: str) -> None:
        if name == "after_effect_result" and refunded and not holder.locked.is_set():
            holder.hold(ids["a"])  # A's compensation's journal writes, next, wait on its row

    def progress(rec: lw.RunRecord) -> None:
        if rec.run_id == ids.get("b") and holder.holding():
            b_while_held.append(rec.cycle)

    def payer(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            return lw.Proposal(edits=(lw.Edit("doc", "a", 1),), effects=(pay.call(invoice="i1"),))
        return lw.Proposal(question=lw.Question("Which PO governs?", choices=("PO-1", "PO-2")))

    async def other(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            await until(holder.locked.is_set)  # (bounded: a stall guard)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))
    paying = lw.Loop(
        name="pay",
        actor=payer,
        verifiers=[never],
        effects=(pay,),
        approvals=allow,
        contract=lw.Contract(budget=lw.Budget(max_cycles=4)),
    )
    loop = capped_loop("other", other, 4)
    task = {"artifacts": {"doc": {"a": 0}}}
    try:
        with lw.Runtime(pg_url, on_progress=progress) as rt:
            r = rt.run_sync(paying, task, task_key="a")
            assert r.status == "awaiting_approval"
            assert rt.cancel(r.run_id, by="ops", loop=paying).status == "cancelled"
            ids["a"] = r.run_id
            ids["b"] = rt.create(loop, task, task_key="b")[0].run_id
            rt._on_phase = phase
            _side_by_side(rt, (ids["a"], paying), (ids["b"], loop), holder.free)
            assert len(refunded) == 1
            assert b_while_held[-2:] == [3, 4]  # B's last cycles made durable with A's row held
            assert holder.held_to_the_end == [False]  # ...and B ended before it went
            assert rt.store.get_run(ids["a"]).status == "cancelled"
            paid = [e for e in rt.store.journal(ids["a"], kind="effect") if "i1" in e.key]
            assert sorted(e.status for e in paid) == ["compensated", "done"]  # (and its refund)
    finally:
        holder.free.set()


def test_a_resume_cancelled_while_its_lease_is_taken_in_a_thread_hands_it_back(
    pg_url: str,
) -> None:
    """The take, in a store thread, is not stopped by a cancellation of its caller: a take
    that ends after it is handed back, not left to keep the run from every executor for its
    TTL (an hour here)."""
    started, go = threading.Event(), threading.Event()

    loop = capped_loop("cancelled", lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}), 2)
    with lw.Runtime(pg_url, lease_ttl_s=3600) as rt:
        run = rt.create(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="c")[0].run_id
        take = rt.store.acquire_lease

        def slow_take(run_id: str, owner: str, ttl_s: float) -> int:
            token = take(run_id, owner, ttl_s)  # taken; its caller is cancelled before it returns
            started.set()
            go.wait(PATIENCE)  # (a stall guard)
            return token

        rt.store.acquire_lease = slow_take  # type: ignore[method-assign]

        async def main() -> None:
            resuming = asyncio.create_task(rt.resume(run, loop))
            assert await until(started.is_set)
            resuming.cancel()
            go.set()
            with pytest.raises(asyncio.CancelledError):
                await resuming
            # (handed back from a store thread: waited for, bounded)
            assert await until(lambda: rt.store.get_run(run).lease_owner is None)

        try:
            asyncio.run(main())
        finally:
            go.set()
        assert rt.store.get_run(run).cycle == 0  # never driven
        assert rt.resume_sync(run, loop).cycles == 2  # (resumable as ever)
