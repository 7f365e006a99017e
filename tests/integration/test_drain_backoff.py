"""A graceful shutdown (``Worker.stop`` / SIGTERM: ``Runtime.drain``) while a run waits out a
retry's backoff: the worker does not wait for the backoff (it may be minutes, longer than any
stop timeout) but leaves the cycle as a crash there would, its failed attempt journaled, the
lease handed back and a ``drained`` event said; the next worker goes on from there."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._worker import Worker, WorkerStats

HOUR = lw.RetryPolicy(attempts=3, backoff_s=3600, max_backoff_s=3600, jitter=False)


def _loop(calls: list[str], where: str) -> lw.Loop:
    def flaky() -> dict[str, Any]:
        calls.append("effect")
        raise lw.TransientError("upstream 503")

    eff = lw.effect("custom", name="flaky", idempotent=True, retry=HOUR)(flaky)

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append("actor")
        if where == "actor":
            raise lw.TransientError("model 503")
        return lw.Proposal(edits=(lw.Edit("doc", "a", 1),), effects=(eff.call(),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.artifacts["doc"].values().get("a") == 1)

    return lw.Loop(
        name="drain",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=[eff],
        retry=HOUR,
    )


@pytest.mark.parametrize("where", ["actor", "effect"])
def test_a_drain_does_not_wait_out_a_retrys_backoff(tmp_path: Path, where: str) -> None:
    calls: list[str] = []
    loop = _loop(calls, where)
    with lw.Runtime(str(tmp_path / "s.db"), lease_ttl_s=600) as rt:
        rec, _ = rt.create(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="t")
        worker = Worker(rt, loops={"drain": loop}, poll_s=0.01)
        rt._on_phase = lambda phase: worker.stop() if phase == f"backoff:{where}" else None

        async def drive() -> WorkerStats:
            # (the bound only ends a failing test: the backoff is an hour)
            return await asyncio.wait_for(worker.run(), timeout=120)

        stats = asyncio.run(drive())
        assert (stats.claimed, dict(stats.ended), stats.errors) == (1, {"running": 1}, 0)
        assert calls == (["actor"] if where == "actor" else ["actor", "effect"])
        run = rt.store.get_run(rec.run_id)
        assert (run.status, run.lease_owner) == ("running", None)  # handed back, resumable
        drained = [e.data for e in rt.store.events(rec.run_id) if e.kind == "drained"]
        what = "actor" if where == "actor" else "effect flaky"
        # (the lease it drained under: a drain is no crash of it, ``crashes_at``)
        assert drained == [{"in_backoff_of": what, "lease": run.fencing_token}]
        kind = "retry" if where == "actor" else "effect"
        [entry] = rt.store.journal(rec.run_id, kind=kind)
        assert (entry.status, entry.attempts) == ("waiting", 1)  # the next waits out the rest
        # another worker claims it at once (nothing leased), the cycle to redo
        assert [r for r, _ in rt.store.claim_runs("next", 60, limit=5)] == [rec.run_id]


def test_a_short_backoff_is_waited_out_and_the_cycle_in_flight_finishes(tmp_path: Path) -> None:
    # A drain promises the cycle in flight finishes: a backoff of a second or less is waited
    # out (cutting it left a cycle to redo for a millisecond's wait; the live-trace tests saw
    # their drained session end a cycle early)
    calls: list[str] = []
    quick = lw.RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.001, jitter=False)

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append("actor")
        if len(calls) == 1:
            raise lw.TransientError("model 503")
        return lw.Proposal(edits=(lw.Edit("doc", "a", 1),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.artifacts["doc"].values().get("a") == 1)

    loop = lw.Loop(
        name="drain",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        retry=quick,
    )
    with lw.Runtime(str(tmp_path / "s.db"), lease_ttl_s=600) as rt:
        rt._on_phase = lambda phase: rt.drain() if phase == "backoff:actor" else None
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="t")
        assert (r.status, r.cycles, calls) == ("accepted", 1, ["actor", "actor"])
        assert not [e for e in rt.store.events(r.run_id) if e.kind == "drained"]
