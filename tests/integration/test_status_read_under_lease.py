"""An operation on a run decides by the run's status as it is under its lease, on SQLite and
PostgreSQL (attack47).

``resume``, ``edit`` and ``cancel`` read the run, then take its lease. Another process may end
the run in between (a worker finishing it, a person cancelling it), releasing its lease just
before this one is taken. Before, each went on from the status it read first: ``resume``
executed an accepted run again (its actor paid for another cycle) and un-cancelled a cancelled
one (run to its end by the actor); ``cancel`` wrote ``cancelled`` over an accepted run; ``edit``
left the ended run ended, its person's edit owed a check no cycle would run. A cancel asked for
between the read and the lease (its own lease attempt lost to this resume) was seen only after
a paid cycle.

The other process is placed at a fixed point: inside the store call this runtime makes between
its read and its lease (no timing).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import time
from collections.abc import Callable
from typing import Any

import pytest

import loopwright as lw


class Actor:
    def __init__(self) -> None:
        self.cycles: list[int] = []

    def __call__(self, ctx: lw.Context) -> lw.Proposal:
        self.cycles.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"a": "good"}, usage=lw.Usage(0.1, 10))


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    ok = state.artifacts["doc"].values()["a"] == "good"
    return lw.Verdict(passed=ok, score=1.0 if ok else 0.0)


def _loop(actor: Actor | Gated) -> lw.Loop:
    return lw.Loop(
        name="under-lease",
        actor=actor,
        verifiers=[lw.Check(fn=_check, name="check")],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=5)),
    )


TASK = {"artifacts": {"doc": {"a": "bad", "b": "x"}}}


def _meanwhile(rt: lw.Runtime, method: str, do: Callable[[], Any]) -> None:
    """``do`` runs (in another thread: its own event loop) on the first call of ``rt.store``'s
    ``method``, before the call itself."""
    real = getattr(rt.store, method)
    fired: list[bool] = []

    def hooked(*args: Any, **kw: Any) -> Any:
        if not fired:
            fired.append(True)
            with cf.ThreadPoolExecutor(1) as pool:
                pool.submit(do).result()
        return real(*args, **kw)

    setattr(rt.store, method, hooked)


def _stopped_events(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(run_id) if e.kind == "stopped"]


def test_resume_of_a_run_finished_meanwhile_runs_no_cycle(url: str) -> None:
    actor = Actor()
    with lw.Runtime(url, owner="worker") as worker, lw.Runtime(url, owner="cli") as rt:
        rec, _ = worker.create(_loop(actor), TASK, task_key="k")
        _meanwhile(rt, "acquire_lease", lambda: worker.resume_sync(rec.run_id, _loop(actor)))
        r = rt.resume_sync(rec.run_id, _loop(actor))
        assert actor.cycles == [1]  # before: [1, 2], the accepted run's actor paid again
        assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 1)
        assert len(_stopped_events(rt, rec.run_id)) == 1
        rt.store.acquire_lease(rec.run_id, "someone", 60)  # the lease was given back


def test_resume_of_a_run_cancelled_meanwhile_stays_cancelled(url: str) -> None:
    actor = Actor()
    with lw.Runtime(url, owner="person") as other, lw.Runtime(url, owner="cli") as rt:
        rec, _ = other.create(_loop(actor), TASK, task_key="k")
        _meanwhile(rt, "acquire_lease", lambda: other.cancel(rec.run_id, by="bob"))
        r = rt.resume_sync(rec.run_id, _loop(actor))
        assert actor.cycles == []  # before: [1], the cancelled run run to acceptance
        assert (r.status, r.stop_reason, r.cycles) == ("cancelled", "cancelled", 0)
        assert rt.store.get_run(rec.run_id).status == "cancelled"


def test_cancel_of_a_run_finished_meanwhile_keeps_its_end(url: str) -> None:
    actor = Actor()
    with lw.Runtime(url, owner="worker") as worker, lw.Runtime(url, owner="cli") as rt:
        rec, _ = worker.create(_loop(actor), TASK, task_key="k")
        _meanwhile(rt, "request_cancel", lambda: worker.resume_sync(rec.run_id, _loop(actor)))
        got = rt.cancel(rec.run_id, by="carol")
        assert (got.status, got.stop_reason) == ("accepted", "success")  # before: cancelled
        assert len(_stopped_events(rt, rec.run_id)) == 1
        assert worker.result(rec.run_id).status == "accepted"


@pytest.mark.parametrize("ending", ["finished", "cancelled"])
def test_edit_of_a_run_ended_meanwhile_reopens_it(url: str, ending: str) -> None:
    actor = Actor()
    with lw.Runtime(url, owner="other") as other, lw.Runtime(url, owner="cli") as rt:
        rec, _ = other.create(_loop(actor), TASK, task_key="k")

        def end() -> Any:
            if ending == "finished":
                return other.resume_sync(rec.run_id, _loop(actor))
            return other.cancel(rec.run_id, by="bob")

        _meanwhile(rt, "acquire_lease", end)
        got = rt.edit(rec.run_id, "doc/b", "y", by="dan")
        # the ended run is reopened, as an edit of an ended run is (before: left ended, the
        # edit's check-only cycle owed and never run)
        assert (got.status, got.stop_reason) == ("pending", None)
        before = list(actor.cycles)
        r = rt.resume_sync(rec.run_id, _loop(actor))
        assert r.status == "accepted" and r.state.values()["doc"]["b"] == "y"
        last = [c.record for c in rt.store.checkpoints(rec.run_id) if c.record][-1]
        if ending == "finished":  # a passes already: the edit's check accepts it, no actor call
            assert last.get("check_only") is True and actor.cycles == before


def test_resume_sees_a_cancel_requested_before_its_lease(url: str) -> None:
    # A person's cancel asked for the stop, then lost the lease to this resume ("it is
    # running elsewhere; it will stop itself"): the run stops before its first cycle. Before,
    # resume went on from the flag it had read first, and the actor was paid for a cycle (its
    # effects run) after the cancel.
    actor = Actor()
    with lw.Runtime(url, owner="person") as other, lw.Runtime(url, owner="cli") as rt:
        rec, _ = other.create(_loop(actor), TASK, task_key="k")
        _meanwhile(rt, "acquire_lease", lambda: other.store.request_cancel(rec.run_id))
        r = rt.resume_sync(rec.run_id, _loop(actor))
        assert actor.cycles == []  # before: [1]
        assert (r.status, r.stop_reason, r.cycles) == ("cancelled", "cancelled", 0)


# --- an operation through the runtime that is executing the run itself ----------------------
class Gated:
    """An actor whose first cycle waits for ``gate`` (the run is in flight while it waits) and
    gets ``a`` half right; the second gets it right."""

    def __init__(self) -> None:
        self.cycles: list[int] = []
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def __call__(self, ctx: lw.Context) -> lw.Proposal:
        self.cycles.append(ctx.cycle)
        if len(self.cycles) == 1:  # (a second call never waits: nothing would open the gate)
            self.waiting.set()
            await self.gate.wait()
        a = "half" if ctx.cycle == 1 else "good"
        return lw.Proposal.edit("doc", {"a": a}, usage=lw.Usage(0.1, 10))


async def _worker_woken(rt: lw.Runtime, loop: lw.Loop) -> lw.WorkerStats:
    """A worker of ``rt`` polling once, its claims made an hour on (every lease lapsed: woken
    from a SIGSTOP or a VM pause), as its runtime executes a run through ``resume``."""
    claim = rt.store.claim_runs

    def woken(*args: Any, **kw: Any) -> list[tuple[str, int]]:
        return claim(*args, **{**kw, "now": time.time() + 3600})

    rt.store.claim_runs = woken  # type: ignore[method-assign]
    try:
        return await lw.Worker(rt, loops={loop.name: loop}).run(once=True)
    finally:
        rt.store.claim_runs = claim  # type: ignore[method-assign]


@pytest.mark.parametrize("op", ["edit", "rollback", "resume", "cancel", "worker"])
def test_an_operation_through_the_executing_runtime_waits_as_for_another(url: str, op: str) -> None:
    # The store lets a lease's owner take it again; an edit, rollback or resume through the
    # runtime executing the run took it from that execution, which was fenced out mid-cycle
    # (StaleLeaseError) and left the run running with no holder. Now each is refused as for
    # another executor, and a cancel is left for the run to honour at its cycle boundary. A
    # worker of the runtime claims it no more than its own runs (review48a: it claimed it, as
    # it excluded only the runs it had claimed itself, and fenced the execution out).
    async def main() -> None:
        actor = Gated()
        loop = _loop(actor)
        with lw.Runtime(url) as rt:
            rec, _ = rt.create(loop, TASK, task_key="k")
            flight = asyncio.create_task(rt.resume(rec.run_id, loop))
            await actor.waiting.wait()  # cycle 1 is in flight
            if op == "edit":
                with pytest.raises(lw.ConflictError, match="executing"):
                    rt.edit(rec.run_id, "doc/b", "y", by="dan")
            elif op == "rollback":
                with pytest.raises(lw.ConflictError, match="executing"):
                    rt.rollback(rec.run_id, 0, by="erin")
            elif op == "resume":
                with pytest.raises(lw.ConflictError, match="executed by this runtime"):
                    await rt.resume(rec.run_id, loop)
            elif op == "worker":
                assert (await _worker_woken(rt, loop)).claimed == 0  # before: 1
            else:
                got = rt.cancel(rec.run_id, by="carol")
                assert got.status == "running" and got.cancel_requested
            actor.gate.set()
            r = await flight  # before: StaleLeaseError (fenced out by its own runtime)
            if op == "cancel":  # stopped at the end of the cycle in flight
                assert (r.status, r.stop_reason, r.cycles) == ("cancelled", "cancelled", 1)
                assert actor.cycles == [1]
            else:
                assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 2)
                assert r.state.values()["doc"]["b"] == "x" and actor.cycles == [1, 2]
            row = rt.store.get_run(rec.run_id)
            assert row.lease_owner is None  # handed back

    asyncio.run(main())
