"""A person's edit reopens a cancelled run whose refund waits for a person: the run is parked
on that refund, not left for workers to claim, on SQLite and PostgreSQL (attack47).

A paid I6 and parked; F, a fork of A, inherited the payment; A was cancelled, and its refund
waits for a person (F relies on the payment). Someone then edited A. Before, the edit reopened
A as ``pending``: every worker's poll claimed it, found the refund still undecided, wrote a
``still_waiting`` event and handed it back, for as long as nobody decided (a claim and an event
a poll, per worker). Now the edit parks it (``awaiting_approval``) as a rollback that offers
refunds does, and a run found still waiting while claimable is parked by the engine.
"""

from __future__ import annotations

from typing import Any

from doc_loop import TASK
from test_redo_keys import ALLOW, Provider, paying
from test_reused_refunds import compensation_requests

import loopwright as lw


def _cancelled_under_a_fork(
    rt: lw.Runtime, provider: Provider, approvals: lw.ApprovalPolicy | None = None
) -> tuple[lw.Loop, str]:
    loop = paying(provider) if approvals is None else paying(provider, approvals=approvals)
    a = rt.run_sync(loop, TASK, task_key="A").run_id
    rt.fork(a, 1, loop=loop, task_key="F")
    rt.cancel(a, by="ops", loop=loop)
    assert rt.resume_sync(a, loop).status == "cancelled"
    assert len(compensation_requests(rt, a)) == 1 and provider.collected() == 5.0
    return loop, a


def _claimable(rt: lw.Runtime, run_id: str) -> bool:
    taken = rt.store.claim_runs("probe:1:x:y", 30, limit=10)
    for rid, token in taken:
        rt.store.release_lease(rid, token)
    return run_id in [rid for rid, _t in taken]


def _waits(rt: lw.Runtime, run_id: str) -> int:
    return [e.kind for e in rt.store.events(run_id)].count("still_waiting")


def test_an_edit_of_a_run_whose_refund_waits_parks_it(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a = _cancelled_under_a_fork(rt, provider)
        got = rt.edit(a, "doc/c", 7, by="ed")
        assert got.status == "awaiting_approval"  # before: pending
        assert not _claimable(rt, a)  # before: claimed by every worker's poll
        waits = _waits(rt, a)
        assert rt.resume_sync(a, loop).status == "awaiting_approval"
        assert _waits(rt, a) == waits + 1 and provider.collected() == 5.0
        # decided, it goes on: the refund runs, then the edit is judged first
        [req] = compensation_requests(rt, a)
        rt.approve(a, by="fin", approval_id=req.approval_id)
        assert _claimable(rt, a)
        r = rt.resume_sync(a, loop)
        assert provider.collected() == 0
        checked = [c.record for c in rt.store.checkpoints(a) if c.record]
        assert any(rec.get("check_only") for rec in checked)
        assert r.state.values()["doc"]["c"] == 7


def test_a_run_found_waiting_while_claimable_is_parked(url: str, monkeypatch: Any) -> None:
    # A store left so by the release before (an edit reopened the run as pending): the first
    # claim finds the refund undecided and parks the run; no later poll claims it.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a = _cancelled_under_a_fork(rt, provider)
        real = rt.store.approvals
        monkeypatch.setattr(rt.store, "approvals", lambda **kw: [])  # (as the edit was)
        assert rt.edit(a, "doc/c", 7, by="ed").status == "pending"
        monkeypatch.setattr(rt.store, "approvals", real)
        assert _claimable(rt, a)
        waits = _waits(rt, a)
        assert rt.resume_sync(a, loop).status == "awaiting_approval"
        assert not _claimable(rt, a)
        assert _waits(rt, a) == waits + 1


def test_an_edit_of_a_run_whose_refund_request_expired_leaves_it_claimable(
    url: str, monkeypatch: Any
) -> None:
    # The refund's request expired undecided (its rule's expires_after_s passed on the store's
    # clock): nobody can decide it any more (deciding says it expired, "the run escalates
    # when it resumes"), so a run parked on it waited for a person's resume. The edit leaves
    # the run claimable, as the engine does (``run_compensations`` settles an expired request
    # as expired); before, the edit parked it on the expired request and no worker took it.
    provider = Provider()
    refund_rule = lw.PolicyRule(
        kind="spend", effect="pay.compensate", action="require", expires_after_s=3600
    )
    with lw.Runtime(url) as rt:
        loop = paying(provider, approvals=lw.ApprovalPolicy((refund_rule, *ALLOW.rules)))
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.fork(a, 1, loop=loop, task_key="F")
        rt.cancel(a, by="ops", loop=loop)
        assert rt.resume_sync(a, loop).status == "cancelled"
        [req] = compensation_requests(rt, a)
        assert req.expires_at is not None
        later = req.expires_at + 60.0  # the store's clock, past the request's expiry
        monkeypatch.setattr(rt.store, "clock", lambda: later)
        got = rt.edit(a, "doc/c", 7, by="ed")
        assert got.status == "pending"  # before: awaiting_approval on the expired request
        assert _claimable(rt, a)  # before: no worker claimed it
        r = rt.resume_sync(a, loop)
        assert rt.store.approval(req.approval_id).status == "expired"
        assert provider.collected() == 5.0  # the refund expired undecided: not run
        assert r.state.values()["doc"]["c"] == 7
