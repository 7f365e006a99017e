"""A worker whose own leases lapsed while it was frozen (SIGSTOP, a VM pause) does not take its
runs over from itself when it wakes: that would fence the cycle in flight (counted ``lost``)
and do it again, a second actor call for one cycle.

The lapse is written into the store from inside the actor's call, and the call returns only
once the worker has claimed after it, so the order is fixed whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright._worker import Worker, WorkerStats

TASK = {"id": "t", "artifacts": {"doc": {"done": False}}}


def _frozen_past_its_lease(
    tmp_path: Path, *, exclude_known: bool
) -> tuple[WorkerStats, list[int], bool, int]:
    """Drive one run whose lease lapses inside its first actor call; what the worker counted,
    the actor's calls, whether a claim ran meanwhile, and the run's last fencing token."""
    db = tmp_path / "s.db"
    lapsed = threading.Event()
    claimed_after = threading.Event()
    calls: list[int] = []

    async def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        if len(calls) == 1:  # the worker "froze" here: its lease has run out
            with contextlib.closing(sqlite3.connect(db)) as c, c:
                c.execute("UPDATE runs SET lease_expires_at = 0")
            lapsed.set()
            for _ in range(6000):  # a safety net only: the worker's next claim ends it
                if claimed_after.is_set():
                    break
                await asyncio.sleep(0.01)
        return lw.Proposal(edits=(lw.Edit("doc", "done", True),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        done = bool(state.artifacts["doc"].values().get("done"))
        return lw.Verdict(passed=done, score=1.0 if done else 0.0)

    loop = lw.Loop(
        name="own",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    with lw.Runtime(str(db), lease_ttl_s=600) as rt:
        rec, _ = rt.create(loop, TASK, task_key="k")
        claim = rt.store.claim_runs

        def claims(*args: Any, **kwargs: Any) -> list[tuple[str, int]]:
            after = lapsed.is_set()
            got = claim(*args, **kwargs)
            if after:
                claimed_after.set()
            return got

        def older_claims(
            owner: str, ttl_s: float, *, limit: int = 1, now: float | None = None
        ) -> list[tuple[str, int]]:  # a store written before claim_runs took exclude
            return claims(owner, ttl_s, limit=limit, now=now)

        rt.store.claim_runs = claims if exclude_known else older_claims  # type: ignore[method-assign]
        w = Worker(rt, loops={"own": loop}, concurrency=2, poll_s=0.01)
        stats = asyncio.run(w.run(once=True))
        return stats, calls, claimed_after.is_set(), rt.store.get_run(rec.run_id).fencing_token


def test_a_worker_does_not_claim_the_runs_it_drives(tmp_path: Path) -> None:
    stats, calls, claimed, token = _frozen_past_its_lease(tmp_path, exclude_known=True)
    assert claimed  # a claim ran while the run's lease had lapsed
    assert stats.claimed == 1 and stats.lost == 0
    assert stats.ended["accepted"] == 1
    assert calls == [1]  # one actor call for the one cycle
    assert token == 1


def test_a_store_whose_claim_takes_no_exclude_still_serves_the_worker(tmp_path: Path) -> None:
    stats, calls, claimed, token = _frozen_past_its_lease(tmp_path, exclude_known=False)
    assert claimed
    # claimed as before: the worker takes its own run over, fencing the first call
    assert stats.claimed == 2 and stats.lost == 1
    assert stats.ended["accepted"] == 1
    assert calls == [1, 1] and token == 2
