"""Who may approve the refund of a payment other runs reused: never whoever asked for it.

From outside (money46): under an ``allow`` rule, a refund that other runs' reuse forced to
wait for a person was asked of anyone (no rule, so no separation of duties): the operator who
cancelled the paying run approved its refund alone, leaving the runs that reused it on a
payment that no longer stood. Now such a request always separates duties (whoever started,
edited, rolled back or cancelled the refunding run, or a run it was forked from, may not
approve it), and keeps what its rule said of who decides (role, approvers, the field its
limits read). SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from doc_loop import TASK
from test_redo_keys import ALLOW, Provider, paying
from test_reused_refunds import a_and_b, compensation_requests, told

import loopwright as lw


def test_the_canceller_may_not_approve_a_refund_others_reused(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, b = a_and_b(rt, provider)
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        assert req.evidence["who"]["separate"] is True
        with pytest.raises(lw.NotPermittedError, match="separation of duties"):
            rt.approve(a, by="ops", approval_id=req.approval_id)
        with pytest.raises(lw.NotPermittedError):
            rt.approve(a, by=" OPS ", approval_id=req.approval_id)  # the same person
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 5.0
        rt.approve(a, by="fin", approval_id=req.approval_id)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0 and len(told(rt, b)) == 1


def test_nor_whoever_rolled_it_back_or_started_it(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider, staged=True)
        a = rt.run_sync(loop, TASK, task_key="A", by="rita").run_id
        rt.run_sync(loop, TASK, task_key="B")
        rt.rollback(a, 1, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        for who in ("ops", "rita"):
            with pytest.raises(lw.NotPermittedError, match="separation of duties"):
                rt.approve(a, by=who, approval_id=req.approval_id)
        rt.approve(a, by="fin", approval_id=req.approval_id)


def test_a_refund_asked_again_for_a_reuser_separates_duties_too(url: str) -> None:
    # The cancel offered the refund under the allow rule (nobody had reused the payment);
    # B reused it before A resumed, so the refund was asked of a person: not the canceller.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.cancel(a, by="ops", loop=loop)
        assert compensation_requests(rt, a) == []
        rt.run_sync(loop, TASK, task_key="B")
        assert rt.resume_sync(a, loop).status == "cancelled"
        [req] = compensation_requests(rt, a)
        assert req.evidence["who"] == {
            "role": None,
            "approvers": 1,
            "separate": True,
            "field": "amount",
        }
        with pytest.raises(lw.NotPermittedError, match="separation of duties"):
            rt.approve(a, by="ops", approval_id=req.approval_id)
        rt.approve(a, by="fin", approval_id=req.approval_id)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0


def test_the_refund_rules_role_and_field_are_kept(url: str) -> None:
    # The refund's rule asks for the finance role and reads its limits from ``total`` (no
    # separation of duties of its own): with reusers it keeps both, and separates duties.
    provider = Provider()
    rule = lw.PolicyRule(
        kind="spend",
        effect="pay.compensate",
        action="require",
        role="finance",
        field="total",
    )
    with lw.Runtime(url) as rt:
        loop = paying(provider, approvals=lw.ApprovalPolicy((rule, *ALLOW.rules)))
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.run_sync(loop, TASK, task_key="B")
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        assert req.evidence["who"] == {
            "role": "finance",
            "approvers": 1,
            "separate": True,
            "field": "total",
        }


def test_an_allowed_refund_nobody_reused_asks_no_one(url: str) -> None:
    # (unchanged) the rule's allow stands when no run relies on the payment
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.cancel(a, by="ops", loop=loop)
        assert compensation_requests(rt, a) == []
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0
