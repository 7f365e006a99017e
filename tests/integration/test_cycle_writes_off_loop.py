"""PostgreSQL: a run's writes of a cycle, made while another session holds its row locked,
leave the process's other runs going (review53a).

evloop53 moved a PostgreSQL run's writes off the event loop (cycle commits, the effect
journal, the lease), so that a run whose row another session holds locked (``SELECT … FOR
UPDATE`` in psql, a cancel, the dashboard) waits alone. Two writes fenced on the run's row
stayed on the loop: the reflection's mark (once every cycle a reflector writes about) and a
billed call's journal entry (once every call that reports its cost: a model call's tokens).
Each waited there, and every run of the process with it, until the lock went.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import loopwright as lw

PATIENCE = 60.0  # a bound only a hang reaches (never a measurement)


@pytest.mark.postgres
def test_a_reflection_mark_waiting_on_its_row_lock_holds_no_other_run(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    import psycopg
    from psycopg import sql

    base, schema = pg_schema
    locked, free = threading.Event(), threading.Event()
    held_to_the_end: list[bool] = []  # whether the lock holder gave up waiting for B

    def hold(run_id: str) -> None:
        """Another session takes ``run_id``'s row, and keeps it until B has ended."""
        conn = psycopg.connect(base)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))

        def keep() -> None:
            held_to_the_end.append(not free.wait(PATIENCE))  # (a hang guard)
            conn.rollback()
            conn.close()

        threading.Thread(target=keep, daemon=True).start()
        locked.set()

    async def actor(ctx: lw.Context) -> lw.Proposal:
        if not ctx.task.get("lock") and ctx.cycle == 2:
            # B's second cycle starts once A's row is held (a hang guard bounds the wait)
            for _ in range(int(PATIENCE * 100)):
                if locked.is_set():
                    break
                await asyncio.sleep(0.01)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.0)  # never accepted: every cycle reflected on

    def reflector(ctx: lw.Context, verdicts: Any) -> str:
        if ctx.task.get("lock") and not locked.is_set():
            hold(ctx.run_id)  # A's mark, written next, waits on its row
        return f"cycle {ctx.cycle}: try another value"

    loop = lw.Loop(
        name="rm",
        actor=actor,
        verifiers=[check],
        reflector=reflector,
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    try:
        with lw.Runtime(pg_url) as rt:
            a, b = _a_locked_beside_b(rt, loop, free)
            assert locked.is_set()
            assert held_to_the_end == [False]  # B ended while A's row was held
            assert [rt.store.get_run(r).cycle for r in (a, b)] == [3, 3]
    finally:
        free.set()


@pytest.mark.postgres
def test_a_billed_call_journaled_while_its_row_is_locked_holds_no_other_run(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    """An actor that reports what it cost (a model call's tokens) has its bill journaled
    before its cycle commits, fenced on the run's row: once a cycle, on the event loop, it
    waited there with the row locked, and every run of the process with it."""
    import psycopg
    from psycopg import sql

    base, schema = pg_schema
    locked, free = threading.Event(), threading.Event()
    held_to_the_end: list[bool] = []

    def hold(run_id: str) -> None:
        conn = psycopg.connect(base)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))

        def keep() -> None:
            held_to_the_end.append(not free.wait(PATIENCE))  # (a hang guard)
            conn.rollback()
            conn.close()

        threading.Thread(target=keep, daemon=True).start()
        locked.set()

    async def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.task.get("lock") and ctx.cycle == 2 and not locked.is_set():
            hold(ctx.run_id)  # A's bill, journaled next, waits on its row
        elif not ctx.task.get("lock") and ctx.cycle == 2:
            for _ in range(int(PATIENCE * 100)):  # (a hang guard bounds the wait)
                if locked.is_set():
                    break
                await asyncio.sleep(0.01)
        return lw.Proposal.edit("doc", {"a": ctx.cycle}, usage=lw.Usage(tokens=10))

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.0)

    loop = lw.Loop(
        name="bill",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    try:
        with lw.Runtime(pg_url) as rt:
            a, b = _a_locked_beside_b(rt, loop, free)
            assert locked.is_set()
            assert held_to_the_end == [False]  # B ended while A's row was held
            assert [rt.store.get_run(r).tokens for r in (a, b)] == [30, 30]
    finally:
        free.set()


def _a_locked_beside_b(rt: lw.Runtime, loop: lw.Loop, free: threading.Event) -> tuple[str, str]:
    """Runs A (its task marked to have its row locked) and B side by side in one event loop;
    ``free`` is set once B has ended, which lets A's lock go. Their run ids."""
    task = {"artifacts": {"doc": {"a": 0}}}
    a = rt.create(loop, {**task, "lock": True}, task_key="a")[0].run_id
    b = rt.create(loop, task, task_key="b")[0].run_id

    async def main() -> None:
        run_a = asyncio.create_task(rt.resume(a, loop))
        run_b = asyncio.create_task(rt.resume(b, loop))
        run_b.add_done_callback(lambda _t: free.set())
        await asyncio.wait([run_a, run_b])
        run_b.result()
        run_a.result()

    asyncio.run(main())
    return a, b
