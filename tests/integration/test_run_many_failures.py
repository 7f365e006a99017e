"""``Runtime.run_many`` when one of its runs fails at run time (another process holds it):
the batch's other runs are driven to their end before the error is raised, not left
``running`` with no one driving them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import loopwright as lw


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        done = state.artifacts["doc"].values().get("body") == "draft 3"
        return lw.Verdict(passed=done, score=1.0 if done else 0.5)

    return lw.Loop(
        name="batch",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=5)),
    )


def _task(key: str) -> dict[str, object]:
    return {"task_key": key, "artifacts": {"doc": {"body": "x"}}}


def test_a_run_held_elsewhere_leaves_the_batchs_other_runs_ended(tmp_path: Path) -> None:
    loop = _loop()
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        held, _ = rt.create(loop, _task("held"))
        # a live holder on another host: its lease is not taken over
        rt.store.acquire_lease(held.run_id, "otherhost:4242:cafe", 600)
        tasks = [_task("a"), _task("held"), _task("b")]
        with pytest.raises(lw.ConflictError, match=held.run_id):
            asyncio.run(rt.run_many(loop, tasks))
        by_key = {r.task_key: r for r in rt.store.list_runs()}
        assert (by_key["a"].status, by_key["a"].cycle) == ("accepted", 3)
        assert (by_key["b"].status, by_key["b"].cycle) == ("accepted", 3)
        assert by_key["held"].status == "pending"
        # the same batch again, once the holder is gone, ends the held one and re-runs none
        rt.store.release_lease(held.run_id, rt.store.get_run(held.run_id).fencing_token)
        again = asyncio.run(rt.run_many(loop, tasks))
        assert [(r.task_key, r.status, r.cycles) for r in again] == [
            ("a", "accepted", 3),
            ("held", "accepted", 3),
            ("b", "accepted", 3),
        ]
