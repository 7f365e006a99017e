"""A person's pause (``Runtime.pause``, ``loopwright pause``): filed against a running run, it
parks at the next cycle boundary (never mid-cycle), with a request of kind ``pause`` that no
worker claims past; approving it (``unpause``) lets the run go on where it stopped, no cycle
repeated or lost, no actor call repeated. SQLite and PostgreSQL (``url``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from doc_loop import TASK
from test_engine_core import fixer, make_loop

import loopwright as lw
from loopwright._metrics import compute_metrics


def _pausing_at(url: str, at_call: int, calls: list[int], **kw: Any) -> Callable[..., Any]:
    """``fixer``, which files a pause from another runtime (a person's process) during its
    ``at_call``-th call: the cycle under way then must finish before the run parks."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        if len(calls) == at_call:
            with lw.Runtime(url) as person:
                person.pause(ctx.run_id, by="ann", note="let me look", **kw)
        return fixer(ctx)

    return actor


def test_a_pause_parks_at_the_boundary_and_unpause_goes_on_where_it_stopped(url: str) -> None:
    calls: list[int] = []
    loop = make_loop(_pausing_at(url, 2, calls))
    with lw.Runtime(url) as rt:
        ref = rt.run_sync(make_loop(), TASK, task_key="reference")
        r = rt.run_sync(loop, TASK, task_key="paused")
        # cycle 2 was under way when the pause came: it was finished, then the run parked
        assert r.status == "awaiting_approval" and r.cycles == 2 and calls == [1, 2]
        pending = rt.store.approvals(run_id=r.run_id, status="pending")
        assert [(a.kind, a.evidence["by"], a.why) for a in pending] == [
            ("pause", "ann", "let me look")
        ]
        kinds = [e.kind for e in rt.store.events(r.run_id)]
        assert "pause_requested" in kinds and kinds.index("pause_requested") < kinds.index("paused")
        # no worker claims it, and a resume leaves it parked (no actor call)
        assert rt.store.claim_runs("w", 30.0, limit=10) == []
        again = rt.resume_sync(r.run_id, loop)
        assert again.status == "awaiting_approval" and calls == [1, 2]
        # a second pause, a deny, an answer: refused, one clear error each
        with pytest.raises(lw.ConflictError, match="paused already"):
            rt.pause(r.run_id, by="bob")
        with pytest.raises(lw.ApprovalError, match="is a person's pause"):
            rt.deny(r.run_id, by="bob")
        lifted = rt.unpause(r.run_id, by="bob", note="fine")
        assert (lifted.kind, lifted.status, lifted.decided_by) == ("pause", "approved", "bob")
        # claimable again: a worker takes it and goes on
        [(claimed, token)] = rt.store.claim_runs(rt.owner, 30.0, limit=10)
        assert claimed == r.run_id
        done = asyncio.run(rt.resume(r.run_id, loop, token=token))
    assert done.status == "accepted" and done.cycles == ref.cycles == 4
    assert calls == [1, 2, 3, 4]  # no cycle repeated or lost, no actor call repeated
    assert done.state.artifacts["doc"].values() == ref.state.artifacts["doc"].values()
    assert (done.spent.cost_usd, done.spent.tokens) == (ref.spent.cost_usd, ref.spent.tokens)
    with lw.Runtime(url) as rt:
        audit = [(a.actor, a.action, a.outcome) for a in rt.store.audit(target=f"run {r.run_id}")]
        assert ("ann", "pause", "allowed") in audit and ("bob", "pause", "refused") in audit
        assert ("bob", "unpause", "allowed") in audit  # the lift, found by the run
        lifted_by = rt.store.audit(target=f"request {lifted.approval_id}")
        assert [(a.actor, a.action, a.outcome) for a in lifted_by] == [("bob", "deny", "refused")]
        # a person's pause is no approval the loop asked for
        m = compute_metrics(rt.store)
        assert m.approvals_per_accepted == 0
        # and an execution that parked on it handed the run over: its resume is no crash's
        assert m.exception_rate == 0 and m.recovery_success_rate is None


def test_a_pause_of_a_run_not_started_applies_at_once_and_cancel_ends_it(url: str) -> None:
    calls: list[int] = []
    with lw.Runtime(url) as rt:
        rid = rt.create(make_loop(_pausing_at(url, 0, calls)), TASK, task_key="k")[0].run_id
        filed = rt.pause(rid, by="ann")
        rec = rt.store.get_run(rid)
        assert rec.status == "awaiting_approval" and filed.kind == "pause"
        assert rt.store.claim_runs("w", 30.0, limit=10) == []  # no worker takes it
        cancelled = rt.cancel(rid, by="ann")
        assert cancelled.status == "cancelled" and calls == []
        # the pause closed with the run: nothing left open on an ended run
        assert rt.store.approvals(run_id=rid, status="pending") == []
        assert rt.store.approval(filed.approval_id).status == "cancelled"  # type: ignore[union-attr]
        with pytest.raises(lw.ConflictError, match="already ended"):
            rt.pause(rid, by="ann")


@pytest.mark.parametrize("grouped", [False, True])
def test_a_pause_filed_during_the_last_cycle_closes_with_the_run(url: str, grouped: bool) -> None:
    """(``grouped``: beside another run, its ending commit is one of a group commit's)"""
    calls: list[int] = []
    loop = make_loop(_pausing_at(url, 4, calls))

    async def both(rt: lw.Runtime) -> lw.RunResult:
        mine, _other = await asyncio.gather(
            rt.run(loop, TASK, task_key="k"), rt.run(make_loop(), TASK, task_key="other")
        )
        return mine

    with lw.Runtime(url) as rt:
        r = asyncio.run(both(rt)) if grouped else rt.run_sync(loop, TASK, task_key="k")
        # the cycle under way finished the work: the run ended, and its pause with it
        assert r.status == "accepted" and calls == [1, 2, 3, 4]
        [closed] = rt.store.approvals(run_id=r.run_id)
        assert (closed.kind, closed.status) == ("pause", "cancelled")
        assert closed.note == "the run ended before it paused"


def test_a_pause_waits_while_parked_on_a_risk_request(url: str) -> None:
    calls: list[int] = []

    def asking(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        p = fixer(ctx)
        return p if ctx.cycle != 2 else lw.Proposal.edit("doc", {"a": 1}, note="risky")

    risk = (lw.RiskRule(name="risky", check=lambda s, p, v: p.note == "risky"),)
    loop = make_loop(asking, risk=risk)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert r.status == "awaiting_approval" and calls == [1, 2]
        [risky] = rt.store.approvals(run_id=r.run_id, status="pending")
        rt.pause(r.run_id, by="ann")
        rt.approve(r.run_id, by="bob", approval_id=risky.approval_id)
        # its risk request is decided, but the pause holds it: not claimed, not continued
        assert rt.store.claim_runs("w", 30.0, limit=10) == []
        assert rt.resume_sync(r.run_id, loop).status == "awaiting_approval" and calls == [1, 2]
        rt.unpause(r.run_id, by="bob")
        done = rt.resume_sync(r.run_id, loop)
    assert done.status == "accepted" and calls == [1, 2, 3, 4]


def test_paused_time_is_not_run_time(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An hour paused (a clock moved by hand while the run waits) does not count against the
    time budget: a run's seconds are counted inside its cycles only (DESIGN §7)."""
    clock = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    calls: list[int] = []
    loop = make_loop(_pausing_at(url, 2, calls), max_cycles=10, max_seconds=60)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert r.status == "awaiting_approval"
        clock[0] += 3600  # paused for an hour
        rt.unpause(r.run_id, by="bob")
        done = rt.resume_sync(r.run_id, loop)
    # (the clock is the test's: frozen inside cycles, so their seconds are 0, and the hour
    # moved while paused would show here whole had it been counted)
    assert done.status == "accepted" and done.spent.seconds == 0


def test_a_pause_reaches_a_run_whose_commits_are_grouped(url: str) -> None:
    """Several runs on one event loop commit in groups: the pause is reported with the
    group's durability, at the next cycle boundary, and parks only the run it names."""
    calls: list[int] = []
    paused = make_loop(_pausing_at(url, 2, calls))

    async def both(rt: lw.Runtime) -> list[lw.RunResult]:
        return list(
            await asyncio.gather(
                rt.run(paused, TASK, task_key="paused"), rt.run(make_loop(), TASK, task_key="other")
            )
        )

    with lw.Runtime(url) as rt:
        assert rt.group_commit
        a, b = asyncio.run(both(rt))
        assert (a.status, a.cycles, calls) == ("awaiting_approval", 2, [1, 2])
        assert (b.status, b.cycles) == ("accepted", 4)
        rt.unpause(a.run_id, by="bob")
        done = rt.resume_sync(a.run_id, paused)
    assert (done.status, done.cycles, calls) == ("accepted", 4, [1, 2, 3, 4])


def test_who_may_pause_and_unpause_is_who_may_cancel(url: str) -> None:
    """In a store with users, pausing and lifting a pause need the operate permission (as a
    cancel does), not an approver's: each refusal is a typed error and an audit record."""
    with lw.Runtime(url) as rt:
        rt.store.add_user("root", roles=["admin"], limits={}, by="root", now=1.0)
        rt.store.add_user("appr", roles=["approver"], limits={}, by="root", now=1.0)
        rt.store.add_user("op", roles=["operator"], limits={}, by="root", now=1.0)
        rid = rt.create(make_loop(), TASK, task_key="k", by="op")[0].run_id
        with pytest.raises(lw.NotPermittedError, match="operator"):
            rt.pause(rid, by="appr")
        assert rt.store.approvals(run_id=rid) == []  # nothing filed
        filed = rt.pause(rid, by="op")
        with pytest.raises(lw.NotPermittedError, match="operator"):
            rt.unpause(rid, by="appr")
        assert rt.store.approval(filed.approval_id).status == "pending"  # type: ignore[union-attr]
        rt.unpause(rid, by="op")
        audit = [(a.actor, a.action, a.outcome) for a in rt.store.audit(target=f"run {rid}")]
    assert ("appr", "pause", "refused") in audit and ("op", "pause", "allowed") in audit
    assert ("appr", "unpause", "refused") in audit
