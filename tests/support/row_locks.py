"""PostgreSQL: another session holding one run's row locked (a person in psql, the dashboard),
and run A driving its cycles beside run B in one event loop while B's write waits on that
lock (pgloop54, fork54): the tests that check a run's writes off the event loop hold no other
run. Each wait is bounded by a patience only a stall reaches (never a measurement)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import loopwright as lw

PATIENCE = 60.0  # a bound only a stall reaches (never a measurement)


class RowHolder:
    """Another session (a person in psql, the dashboard) holding one run's row locked until
    ``free`` is set, or the patience runs out (then ``held_to_the_end`` says so)."""

    def __init__(self, base: str, schema: str) -> None:
        self.base, self.schema = base, schema
        self.locked, self.free = threading.Event(), threading.Event()
        self.gone = threading.Event()  # the lock let go
        self.held_to_the_end: list[bool] = []
        self.pid = 0

    def hold(self, run_id: str) -> None:
        import psycopg
        from psycopg import sql

        conn = psycopg.connect(self.base)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))
        self.pid = conn.info.backend_pid

        def keep() -> None:
            self.held_to_the_end.append(not self.free.wait(PATIENCE))  # (a stall guard)
            conn.rollback()
            conn.close()
            self.gone.set()

        threading.Thread(target=keep, daemon=True).start()
        self.locked.set()

    def holding(self) -> bool:
        return self.locked.is_set() and not self.gone.is_set()

    def someone_waits(self) -> bool:
        """Whether a session waits on the lock held (the run's own write, blocked)."""
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as c:
            [(n,)] = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (self.pid,),
            ).fetchall()
        return bool(n)


def never(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=False, score=0.0)  # never accepted: runs to its cycle cap


def capped_loop(name: str, actor: Any, cycles: int) -> lw.Loop:
    """A loop never accepted: it runs ``cycles`` cycles."""
    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=[never],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


async def until(cond: Any, *also: threading.Event) -> bool:
    """Polls ``cond()`` on the event loop (a stall of the loop stops it too) until it holds,
    one of ``also`` is set, or the patience runs out; whether it held."""
    for _ in range(int(PATIENCE * 50)):
        if cond():
            return True
        if any(e.is_set() for e in also):
            return False
        await asyncio.sleep(0.02)
    return False


class BesideHeld:
    """Run A (its task's ``first``) beside run B in one event loop, B's row held by ``holder``:
    at its cycle 2, A waits until ``b_waits()`` (B's write seen waiting on its row) or the lock
    goes, noting which (``waited``), then notes each cycle it makes while the row is still held
    (``cycles_while_held``). The lock goes (``holder.free``) once A has ended."""

    def __init__(self, holder: RowHolder, b_waits: Callable[[], bool]) -> None:
        self.holder, self.b_waits = holder, b_waits
        self.at_2 = threading.Event()
        self.waited: list[bool] = []
        self.cycles_while_held: list[int] = []

    async def actor(self, ctx: lw.Context) -> lw.Proposal:
        if ctx.task.get("first") and ctx.cycle == 2:
            self.at_2.set()
            # A goes on only once B's write waits on B's row (seen from the server)
            self.waited.append(await until(self.b_waits, self.holder.gone))
        if ctx.task.get("first") and ctx.cycle > 2 and self.holder.holding():
            self.cycles_while_held.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def drive(
        self,
        rt: lw.Runtime,
        loop: lw.Loop,
        a: str,
        b: str,
        *,
        before_b: Callable[[], None] | None = None,
        after_b: Callable[[asyncio.Task[lw.RunResult]], Awaitable[None]] | None = None,
    ) -> asyncio.Task[lw.RunResult]:
        """Resumes A; once A is at its cycle 2, ``before_b()`` and B's resume, then
        ``after_b(B's task)``; B's task once both have ended (A's error raised)."""

        async def main() -> asyncio.Task[lw.RunResult]:
            run_a = asyncio.create_task(rt.resume(a, loop))
            run_a.add_done_callback(lambda _t: self.holder.free.set())
            assert await until(self.at_2.is_set)
            if before_b is not None:
                before_b()
            run_b = asyncio.create_task(rt.resume(b, loop))
            if after_b is not None:
                await after_b(run_b)
            await asyncio.wait([run_a, run_b])
            run_a.result()
            return run_b

        return asyncio.run(main())
