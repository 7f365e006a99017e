"""PostgreSQL: many of a person's operations awaited off the event loop, each waiting on its
run's row held locked by another session (a person in psql, the dashboard), take at most
half the store's connections and half the store threads (``_person_gate``; async55b); a run
whose row is free goes on committing its cycles beside them. Before, each took a store thread
and a pooled connection for its wait: ten of them took every connection of the default pool
(32 every store thread), and the free run's next commit waited for one until the pool gave up.

Run A drives its cycles; at its cycle 2 another session takes the rows of twelve created runs
and a ``cancel_async`` of each starts; A goes on once as many of their writes as may hold a
connection are seen waiting (from the server), and counts the cycles it commits while the
rows are still held. The rows go once A has ended; every cancel then ends. Each wait is
bounded by a patience only a stall reaches (never a measurement).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from support.row_locks import RowHolder, capped_loop, until

import loopwright as lw

pytestmark = pytest.mark.postgres

TASK = {"artifacts": {"doc": {"a": 0}}}
MANY = 12  # above the default pool's ten connections


def _waiting(base: str, pids: list[int]) -> int:
    """How many sessions wait on a lock one of ``pids`` holds."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as c:
        [(n,)] = c.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pg_blocking_pids(pid) && %s::int[]",
            (pids,),
        ).fetchall()
    return int(n)


def test_many_operations_waiting_on_row_locks_leave_a_free_run_its_commits(
    pg_schema: tuple[str, str], pg_url: str
) -> None:
    base, schema = pg_schema
    holders = [RowHolder(base, schema) for _ in range(MANY)]
    free = threading.Event()
    for h in holders:
        h.free = free  # (one release for all)
    at_2 = threading.Event()
    seen: list[int] = []  # how many writes waited on the rows when A went on
    cycles_while_held: list[int] = []

    def pids() -> list[int]:
        return [h.pid for h in holders]

    def held() -> bool:
        return all(h.holding() for h in holders)

    async def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.task.get("first") and ctx.cycle == 2:
            at_2.set()
            # as many writes waiting as may hold a connection: half the pool's ten
            await until(lambda: held() and _waiting(base, pids()) >= 5, holders[0].gone)
            seen.append(_waiting(base, pids()))
        if ctx.task.get("first") and ctx.cycle > 2 and held():
            cycles_while_held.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    loop = capped_loop("many", actor, 5)
    try:
        with lw.Runtime(pg_url) as rt:
            bs = [rt.create(loop, TASK, task_key=f"b{i}")[0].run_id for i in range(MANY)]
            a = rt.create(loop, {**TASK, "first": True}, task_key="a")[0].run_id

            async def main() -> tuple[Any, list[Any]]:
                run_a = asyncio.create_task(rt.resume(a, loop))
                run_a.add_done_callback(lambda _t: free.set())
                assert await until(at_2.is_set)
                for h, b in zip(holders, bs, strict=True):
                    h.hold(b)
                cancels = [asyncio.ensure_future(rt.cancel_async(b, by="ops")) for b in bs]
                got = await asyncio.gather(run_a, return_exceptions=True)
                done = await asyncio.gather(*cancels, return_exceptions=True)
                return got[0], done

            got_a, cancelled = asyncio.run(main())
            assert isinstance(got_a, lw.RunResult), got_a
            assert seen == [5]  # half the connections held waiting, the rest at the gate
            assert cycles_while_held == [3, 4, 5]  # A committed its cycles beside them
            assert got_a.cycles == 5
            assert all(h.held_to_the_end == [False] for h in holders)
            assert [getattr(c, "run_id", c) for c in cancelled] == bs  # every cancel ended
            assert {rt.store.get_run(b).status for b in bs} == {"cancelled"}
            assert not rt._driving
    finally:
        free.set()
