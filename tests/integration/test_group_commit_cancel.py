"""Runs cancelled while their commits wait in the group committer's queue (review53a).

On PostgreSQL every commit goes through the group committer, batches written in threads, at
most ``IN_FLIGHT`` at once: a run whose commit is queued behind them and that is cancelled
there (Ctrl-C on a worker, a ``wait_for`` around ``resume``) cancels its commit's future. The
last run to end closes the committer, which awaited the queue's last future and so raised that
cancellation out of its own winding down: its heartbeat went on renewing and its lease was
never handed back (held to its TTL, or for ever while the event loop lived).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from test_group_commit import _loop, _tasks

import loopwright as lw

PATIENCE = 120.0  # a bound only a hang reaches (never a measurement)


@pytest.mark.postgres
def test_runs_cancelled_with_commits_queued_hand_back_their_leases(pg_url: str) -> None:
    loop = _loop()
    gate = threading.Event()
    entered: list[int] = []
    try:
        with lw.Runtime(pg_url, group_commit=False) as rt:
            ids = [rt.create(loop, t, task_key=f"q{i}")[0].run_id for i, t in enumerate(_tasks(6))]
            write = rt.store.commit_many

            def gated(items: Any) -> Any:
                entered.append(len(items))
                assert gate.wait(PATIENCE)
                return write(items)

            rt.store.commit_many = gated  # type: ignore[method-assign]

            async def main() -> None:
                runs = [asyncio.create_task(rt.resume(r, loop)) for r in ids]
                for _ in range(int(PATIENCE * 100)):  # (a hang guard, not a measurement)
                    group = rt._group
                    if group is not None and len(entered) >= 4 and len(group._queue) >= 2:
                        break
                    await asyncio.sleep(0.01)
                assert rt._group is not None and len(rt._group._queue) >= 2  # queued behind 4
                for run in runs:
                    run.cancel()
                for _ in range(5):  # (the cancelled runs wind down; the last closes)
                    await asyncio.sleep(0)
                gate.set()
                await asyncio.wait(runs)  # (each run's winding down, to its end)
                assert all(run.cancelled() for run in runs)

            asyncio.run(main())
            held = [r for r in ids if rt.store.get_run(r).lease_owner is not None]
        assert held == []  # every lease handed back
    finally:
        gate.set()
