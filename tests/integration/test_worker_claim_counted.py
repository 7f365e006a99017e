"""A run a worker has claimed counts as executed by its runtime from the claim (lifecycle55):
a person's operation through that runtime between the claim and the drive's start (the drive a
task not run yet) found the run undriven and took its lease again, the same owner, so the
worker's resume was fenced out (``lost``) before its first cycle. Now it is refused as while
the run is driven (an edit: ``ConflictError``; a cancel: asked, the run stopping itself). The
operation is made at that fixed point (the worker's ``_drive_run`` entered); nothing is timed.
Both stores: a person's async operation reads and writes in a store thread on PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import loopwright as lw
from loopwright._worker import Worker

TASK = {"artifacts": {"doc": {"done": False}}}


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    done = bool(state.artifacts["doc"].values().get("done"))
    return lw.Verdict(passed=done, score=1.0 if done else 0.0)


LOOP = lw.Loop(
    name="claimed",
    actor=lambda ctx: lw.Proposal.edit("doc", {"done": True}),
    verifiers=[lw.Check(fn=_check)],
    contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
)


def _between_claim_and_drive(url: str, op: str) -> tuple[Any, Any, lw.RunRecord]:
    """A worker's one run, ``op`` asked of its runtime between its claim and its drive: what
    the operation answered, the worker's counts, the run as it ends."""
    with lw.Runtime(url) as rt:
        run_id = rt.create(LOOP, TASK, task_key="k")[0].run_id
        w = Worker(rt, loops={"claimed": LOOP}, concurrency=1, poll_s=0.01)
        drive = w._drive_run
        answered: list[Any] = []

        async def held(rid: str, token: int) -> None:
            if not answered:  # (at the first claim only: one fenced out is claimed again)
                try:
                    if op == "edit":
                        answered.append(await rt.edit_async(rid, "doc/done", True, by="ops"))
                    else:
                        answered.append(rt.cancel(rid, by="ops"))
                except lw.LoopwrightError as exc:
                    answered.append(exc)
            await drive(rid, token)

        w._drive_run = held  # type: ignore[method-assign]
        stats = asyncio.run(w.run(once=True))
        return answered[0], stats, rt.store.get_run(run_id)


def test_an_edit_between_a_workers_claim_and_its_drive_is_refused(url: str) -> None:
    answered, stats, rec = _between_claim_and_drive(url, "edit")
    assert isinstance(answered, lw.ConflictError), answered
    assert stats.lost == 0 and stats.ended.get("accepted") == 1
    assert rec.status == "accepted" and rec.fencing_token == 1  # (one lease: the worker's)


def test_a_cancel_between_a_workers_claim_and_its_drive_is_asked(url: str) -> None:
    answered, stats, rec = _between_claim_and_drive(url, "cancel")
    assert not isinstance(answered, Exception)
    assert stats.lost == 0 and rec.status == "cancelled"
    assert rec.fencing_token == 1  # (the worker's execution stopped it at its boundary)


def test_a_worker_of_a_drained_runtime_claims_nothing(url: str) -> None:
    # A runtime drained (``rt.drain()``, or ``close`` begun: it drains first) winds its runs
    # down at their next boundary; its worker kept claiming, each run claimed drained at once
    # and handed back, claimed again: a claim loop until the runtime closed. It stops claiming.
    with lw.Runtime(url) as rt:
        run_id = rt.create(LOOP, TASK, task_key="k")[0].run_id
        rt.drain()
        w = Worker(rt, loops={"claimed": LOOP}, concurrency=1, poll_s=0.01)
        stats = asyncio.run(w.run(max_runs=5))
        assert stats.claimed == 0
        assert rt.store.get_run(run_id).status == "pending"
