"""A worker never claims a run its own runtime is executing, however that execution started
(review48a), on SQLite and PostgreSQL.

A worker passes the store the runs it drives (``claim_runs``' ``exclude``): frozen past their
leases (SIGSTOP, a VM pause) and woken, it would otherwise take them over from itself (the
same owner), fencing the cycle in flight. It passed only the runs it had claimed itself: a run
the same runtime was executing through ``run`` or ``resume`` (an application that starts runs
and works the queue with one runtime) was claimed, its live execution fenced out
(``StaleLeaseError``) mid-cycle, and its actor called a second time. Now the worker passes
every run its runtime drives (``Runtime._driving``).

The wake-up is placed by the claim's ``now`` (an hour on: every lease has lapsed), not by time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from test_status_read_under_lease import TASK, Gated, _loop

import loopwright as lw


def test_a_worker_does_not_take_over_a_run_its_runtime_executes(url: str) -> None:
    async def main() -> None:
        actor = Gated()
        loop = _loop(actor)
        with lw.Runtime(url) as rt:
            rec, _ = rt.create(loop, TASK, task_key="k")
            flight = asyncio.create_task(rt.resume(rec.run_id, loop))
            await actor.waiting.wait()  # cycle 1 in flight, through rt.resume
            claim = rt.store.claim_runs

            def woken(*args: Any, **kw: Any) -> list[tuple[str, int]]:
                return claim(*args, **{**kw, "now": time.time() + 3600})

            rt.store.claim_runs = woken  # type: ignore[method-assign]
            worker = lw.Worker(rt, loops={loop.name: loop})
            stats = await worker.run(once=True)
            assert stats.claimed == 0  # before: 1, the run taken from its own execution
            rt.store.claim_runs = claim  # type: ignore[method-assign]
            actor.gate.set()
            r = await flight  # before: StaleLeaseError, fenced out by its own worker
            assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 2)
            assert actor.cycles == [1, 2]

    asyncio.run(main())
