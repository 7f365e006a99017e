"""People, roles and earned authority (docs/permissions.md), on SQLite and PostgreSQL.

Who may decide is enforced on names by the engine (every interface goes through it); tokens
are the interfaces' business and are tested in tests/e2e/test_cli_people.py and the browser
tests. Every attempt, allowed or refused, must reach the audit log.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._authority import EARNED_BY, hash_token, why_not_approve
from loopwright._earned import authority_status

PAID: list[str] = []


def pay(invoice: str, amount: float, key: str) -> dict[str, Any]:
    PAID.append(invoice)
    return {"paid": invoice, "amount": amount}


def refund(key: str, result: Any, args: Any) -> dict[str, Any]:
    PAID.append(f"refund:{args['invoice']}")
    return {"refunded": key}


PAY = lw.effect("spend", name="pay", key=lambda a: a["invoice"], compensate=refund)(pay)
EARNED = lw.EarnedAuthority(kind="spend", after=5, up_to=1000)


def make_loop(
    rules: tuple[lw.PolicyRule, ...], earned: tuple[lw.EarnedAuthority, ...] = ()
) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        inv = ctx.artifacts["inv"]
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"checked": True}).edits,
            effects=(PAY.call(invoice=inv["invoice"], amount=inv["amount"]),),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        # a cycle that pays passes (each of the actor's does); a person's edit, judged on its
        # own, pays nothing: the loop goes on to pay for it
        ok = bool(proposal.effects)
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.0)

    return lw.Loop(
        name="payer",
        version="v1",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[PAY],
        approvals=lw.ApprovalPolicy(rules, earned),
    )


FOUR_EYES = (
    lw.PolicyRule(
        kind="spend", above=20000, action="require", approvers=2, role="finance", name="large"
    ),
    lw.PolicyRule(kind="spend", action="require"),
)


def task(invoice: str, amount: float) -> dict[str, Any]:
    return {"artifacts": {"inv": {"invoice": invoice, "amount": amount, "checked": False}}}


def people(rt: lw.Runtime) -> None:
    add = rt.store.add_user
    now = time.time()
    add("root", roles=["admin"], limits={}, by="test", now=now)
    add("vic", roles=["viewer"], limits={}, by="root", now=now)
    add("ana", roles=["approver", "finance"], limits={"spend": 10000.0}, by="root", now=now)
    add("ben", roles=["approver", "finance"], limits={}, by="root", now=now)
    add("cat", roles=["approver", "finance"], limits={}, by="root", now=now)
    add("rita", roles=["approver", "finance", "operator"], limits={}, by="root", now=now)
    add("otto", roles=["approver"], limits={}, by="root", now=now)


def audit_lines(rt: lw.Runtime) -> list[tuple[str, str, str]]:
    return [(a.actor, a.action, a.outcome) for a in rt.store.audit()]


def test_who_edited_a_run_may_not_approve_its_requests(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Separation of duties covers an editor as it covers the starter, and is decided from
    the audit log of the run's operations, not from the run's events (a long run's decision,
    or an inbox listing its requests, would read them all)."""
    with lw.Runtime(url) as rt:
        people(rt)
        rt.store.add_user(
            "eve", roles=["approver", "finance", "operator"], limits={}, by="root", now=1.0
        )
        big = rt.run_sync(make_loop(FOUR_EYES), task("INV-3", 50000), task_key="e", by="rita")
        rt.edit(big.run_id, "inv/invoice", "INV-3b", by="eve", note="the invoice's real number")
        read: list[str] = []
        events = rt.store.events
        monkeypatch.setattr(
            rt.store, "events", lambda *a, **kw: read.append("x") or events(*a, **kw)
        )
        req = rt.pending_approval(big.run_id)
        run = rt.store.get_run(big.run_id)
        assert "separation of duties" in str(why_not_approve(rt.store, req, run, "eve"))
        with pytest.raises(
            lw.NotPermittedError, match="eve started, edited, rolled back or cancelled run"
        ):
            rt.approve(big.run_id, by="eve")
        assert rt.approve(big.run_id, by="ben").status == "pending"
        assert read == []
        # the audit log is filtered by action in the database (the run's approvals, one a
        # cycle in a long run, are not read to find its editors)
        target = f"run {big.run_id}"
        rt.store.audit_put(
            actor="ops", action="cancel", target=target, outcome="refused", origin="test",
            detail={}, now=2.0,
        )  # fmt: skip
        edits = rt.store.audit(target=target, action="edit")
        assert [(a.actor, a.action) for a in edits] == [("eve", "edit")]
        assert {a.action for a in rt.store.audit(target=target)} == {"edit", "cancel"}


def test_viewers_and_limited_approvers_are_refused_and_every_attempt_is_audited(url: str) -> None:
    with lw.Runtime(url) as rt:
        people(rt)
        small = rt.run_sync(make_loop(FOUR_EYES), task("INV-1", 500), task_key="small", by="rita")
        assert small.status == "awaiting_approval"
        with pytest.raises(lw.NotPermittedError, match=r"vic \(viewer\) may not approve"):
            rt.approve(small.run_id, by="vic")
        with pytest.raises(lw.NotPermittedError, match="is not a user"):
            rt.approve(small.run_id, by="mallory")
        done = rt.approve(small.run_id, by="ana", note="fine")
        assert done.status == "approved" and done.decided_by == "ana"

        big = rt.run_sync(make_loop(FOUR_EYES), task("INV-2", 50000), task_key="big", by="rita")
        req = rt.pending_approval(big.run_id)
        assert req.evidence["who"]["approvers"] == 2 and req.evidence["who"]["role"] == "finance"
        with pytest.raises(lw.NotPermittedError, match="up to 10,000; this request is for 50,000"):
            rt.approve(big.run_id, by="ana")
        with pytest.raises(lw.NotPermittedError, match="needs the finance role"):
            rt.approve(big.run_id, by="otto")
        with pytest.raises(lw.NotPermittedError, match="separation of duties"):
            rt.approve(big.run_id, by="rita")  # she started it
        first = rt.approve(big.run_id, by="ben")
        assert first.status == "pending"  # one of two
        with pytest.raises(lw.ConflictError, match="already approved"):
            rt.approve(big.run_id, by="ben")
        second = rt.approve(big.run_id, by="cat")
        assert second.status == "approved" and second.decided_by == "ben, cat"
        assert rt.resume_sync(big.run_id, make_loop(FOUR_EYES)).accepted

        lines = audit_lines(rt)
        refused = [line for line in lines if line[2] == "refused"]
        assert ("vic", "approve", "refused") in refused
        assert ("mallory", "approve", "refused") in refused
        assert {("ana", "approve", "refused"), ("otto", "approve", "refused")} <= set(refused)
        assert ("rita", "approve", "refused") in refused
        allowed = [line for line in lines if line[2] == "allowed" and line[1] == "approve"]
        assert [a[0] for a in allowed] == ["ana", "ben", "cat"]
        # the audit log cannot be rewritten, not even by a rollback
        count = len(lines)
        rt.rollback(big.run_id, 0, by="rita", loop=make_loop(FOUR_EYES))
        after = audit_lines(rt)
        assert after[:count] == lines and after[-1] == ("rita", "rollback", "allowed")


def test_operators_only_and_revoked_users_are_refused_at_once(url: str) -> None:
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(make_loop(FOUR_EYES), task("INV-3", 10), task_key="t", by="rita")
        with pytest.raises(lw.NotPermittedError, match="needs the operator role"):
            rt.cancel(r.run_id, by="ana")
        with pytest.raises(lw.NotPermittedError, match="say who"):
            rt.cancel(r.run_id)
        rt.store.set_token("ben", hash_token("ben-token"), now=time.time())
        assert rt.store.user_by_token(hash_token("ben-token")).name == "ben"  # type: ignore[union-attr]
        rt.store.revoke_user("ben", now=time.time())
        assert rt.store.user_by_token(hash_token("ben-token")) is None
        with pytest.raises(lw.NotPermittedError, match="revoked"):
            rt.approve(r.run_id, by="ben")
        rt.cancel(r.run_id, by="rita")
        assert rt.store.get_run(r.run_id).status == "cancelled"


def test_a_revoked_approvers_vote_no_longer_counts(url: str) -> None:
    # From an outside probe (probe42a): ben approved a four-eyes request, was revoked (a
    # compromised account, say), and cat's approval then decided it "by ben, cat".
    with lw.Runtime(url) as rt:
        people(rt)
        loop = make_loop(FOUR_EYES)
        big = rt.run_sync(loop, task("INV-6", 50000), task_key="big", by="rita")
        req = rt.approve(big.run_id, by="ben")
        assert req.status == "pending"
        done = rt.run_sync(loop, task("INV-7", 50000), task_key="done", by="rita")
        rt.approve(done.run_id, by="ben")
        decided = rt.approve(done.run_id, by="cat")
        assert decided.status == "approved"
        rt.store.revoke_user("ben", now=time.time())
        assert rt.store.votes(req.approval_id) == []
        assert rt.approve(big.run_id, by="cat").status == "pending"  # one of two, still
        rt.store.add_user("dan", roles=["approver", "finance"], limits={}, by="root", now=1.0)
        final = rt.approve(big.run_id, by="dan")
        assert final.status == "approved" and final.decided_by == "cat, dan"
        # a decided request keeps its votes, and ben's vote is in the audit log
        assert [v.by for v in rt.store.votes(decided.approval_id)] == ["ben", "cat"]
        assert ("ben", "approve", "allowed") in audit_lines(rt)


def test_one_persons_answer_does_not_approve_a_four_eyes_payment(url: str) -> None:
    # From an outside probe (probe42a): a risk rule's question covering a payment whose rule
    # needs two approvers was answered by one person, and the 50,000 payment ran. The answer
    # now reaches the run; the payment is asked of two people next, verdicts not asked again.
    checks: list[int] = []

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        checks.append(1)
        return lw.Verdict(passed=True, score=1.0)

    risk = lw.RiskRule(name="which_po", touches=("inv/checked",), ask="Which PO governs?")
    base = make_loop(FOUR_EYES)
    loop = dataclasses.replace(
        base, verifiers=[check], contract=lw.Contract(budget=lw.Budget(max_cycles=2), risk=(risk,))
    )
    PAID.clear()
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, task("Q-1", 50000), task_key="q", by="rita")
        req = rt.pending_approval(r.run_id)
        assert req.kind == "question"
        assert rt.answer(r.run_id, "PO-1", by="ben").status == "answered"
        again = rt.resume_sync(r.run_id, loop)
        assert again.status == "awaiting_approval" and PAID == []
        pay = rt.pending_approval(r.run_id)
        assert pay.kind == "effect" and pay.evidence["who"]["approvers"] == 2
        assert rt.approve(r.run_id, by="ben").status == "pending"
        assert rt.approve(r.run_id, by="cat").status == "approved"
        done = rt.resume_sync(r.run_id, loop)
        assert done.accepted and PAID == ["Q-1"]
        assert len(checks) == 1  # judged once
        [answer] = [n for n in done.state.notes if n.get("kind") == "answer"]
        assert answer["answer"] == "PO-1" and answer["by"] == "ben"
        # the question said what its answer would not approve alone
        assert "then 2 people approve: spend: pay(" in req.what
        assert "answering also approves" not in req.what


def overwriting(rule: lw.PolicyRule) -> lw.Loop:
    """A loop that writes "the loop's" over part doc/a, under ``rule``; its check passes only
    the loop's value (a person's edit, judged first, does not end the run)."""

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        ok = state.values()["doc"]["a"] == "the loop's"
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.5)

    return lw.Loop(
        name="ow",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": "the loop's"}),
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        approvals=lw.ApprovalPolicy((rule,)),
    )


def test_an_overwrite_of_accepted_work_is_decided_by_whom_its_rule_names(url: str) -> None:
    # From an outside probe (probe42a): an overwrite_accepted rule's role, approvers and
    # separation were left out of its request, so otto (no finance role) alone approved the
    # loop writing over rita's accepted edit, where the rule asked two finance approvers.
    rule = lw.PolicyRule(
        kind="overwrite_accepted", action="require", approvers=2, role="finance", name="ow"
    )
    loop = overwriting(rule)
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "a0"}}}, task_key="w", by="root")
        assert r.accepted
        rt.edit(r.run_id, "doc/a", "rita's", by="rita")
        r = rt.resume_sync(r.run_id, loop)
        req = rt.pending_approval(r.run_id)
        assert req.kind == "overwrite_accepted"
        assert req.evidence["who"]["approvers"] == 2 and req.evidence["who"]["role"] == "finance"
        with pytest.raises(lw.NotPermittedError, match="needs the finance role"):
            rt.approve(r.run_id, by="otto")
        with pytest.raises(lw.NotPermittedError, match="separation of duties"):
            rt.approve(r.run_id, by="rita")  # she edited it
        assert rt.approve(r.run_id, by="ben").status == "pending"
        assert rt.approve(r.run_id, by="cat").status == "approved"
        assert rt.resume_sync(r.run_id, loop).state.values()["doc"]["a"] == "the loop's"


def test_an_overwrite_request_names_whose_version_it_replaces(url: str) -> None:
    # effects53b: the request said "overwrite accepted doc/a (cycle 3: edit of doc/a)", and
    # the approver was not told the version about to go was rita's own edit.
    loop = overwriting(lw.PolicyRule(kind="overwrite_accepted", action="require"))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "a0"}}}, task_key="w")
        rt.edit(r.run_id, "doc/a", "rita's", by="rita")
        r = rt.resume_sync(r.run_id, loop)
        req = rt.pending_approval(r.run_id)
        assert req.kind == "overwrite_accepted"
        assert "overwrite rita's accepted doc/a (v3, a person's edit)" in req.what, req.what


def test_a_payment_approved_before_a_deny_rule_was_added_is_not_run(url: str) -> None:
    # From an outside probe (probe42a): the policy changed while the request waited (a rule
    # now denies such payments); resuming the approved cycle paid anyway.
    waiting = make_loop((lw.PolicyRule(kind="spend", action="require"),))
    deny = lw.PolicyRule(kind="spend", above=1000, action="deny", name="no-large")
    denying = make_loop((deny, *waiting.approvals.rules))
    PAID.clear()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(waiting, task("D-1", 5000), task_key="d")
        rt.approve(r.run_id, by="ana")
        out = rt.resume_sync(r.run_id, denying)
        assert (out.status, PAID) == ("escalated", [])
        assert out.packet is not None and "no-large" in out.packet["cause"]
        small = rt.run_sync(waiting, task("D-2", 50), task_key="s")
        rt.approve(small.run_id, by="ana")
        assert rt.resume_sync(small.run_id, denying).accepted  # not denied: it runs
        assert PAID == ["D-2"]


def test_an_open_store_cannot_satisfy_a_role_rule_and_says_why(url: str) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(FOUR_EYES), task("INV-4", 30000), task_key="t", by="sam")
        with pytest.raises(lw.NotPermittedError, match="no users: add them"):
            rt.approve(r.run_id, by="anyone")
        # a denial by name still works in an open store, and is audited
        rt.deny(r.run_id, by="anyone", note="not now")
        assert ("anyone", "deny", "allowed") in audit_lines(rt)


def test_authority_is_earned_by_five_clean_approvals_and_revoked_by_a_compensation(
    url: str,
) -> None:
    loop = make_loop((lw.PolicyRule(kind="spend", action="require"),), (EARNED,))
    PAID.clear()  # (module-wide: another test, or this one on the other store, paid before)
    with lw.Runtime(url) as rt:
        for i in range(5):
            r = rt.run_sync(loop, task(f"E-{i}", 100 + i), task_key=f"k{i}", by="sam")
            assert r.status == "awaiting_approval"
            rt.approve(r.run_id, by="ana")
            assert rt.resume_sync(r.run_id, loop).accepted
        [standing] = authority_status(rt.store, "payer", "v1", [EARNED])
        assert standing.earned and len(standing.clean) == 5

        sixth = rt.run_sync(loop, task("E-5", 900), task_key="k5", by="sam")
        assert sixth.accepted  # no person asked
        [auto] = rt.store.approvals(run_id=sixth.run_id)
        assert auto.status == "approved" and auto.decided_by == EARNED_BY
        ev = auto.evidence["earned"]
        assert ev["clean_approvals"] == 5 and len(ev["approvals"]) == 5
        assert ev["grant"] == {"kind": "spend", "after": 5, "up_to": 1000, "field": "amount"}
        assert any(e.kind == "approved_by_earned_authority" for e in rt.store.events(sixth.run_id))
        # above the limit still waits for a person
        big = rt.run_sync(loop, task("E-big", 5000), task_key="big", by="sam")
        assert big.status == "awaiting_approval"
        rt.cancel(big.run_id, by="sam")

        # one compensation revokes it: cancel the sixth's payment and run its refund
        rt.rollback(sixth.run_id, 0, by="sam", loop=loop)
        offer = rt.pending_approval(sixth.run_id)
        assert offer.kind == "compensation"
        rt.approve(sixth.run_id, by="ana")
        rt.resume_sync(sixth.run_id, loop)
        # five paid with a person's approval, the sixth on earned authority and refunded
        assert list(PAID) == [*(f"E-{i}" for i in range(6)), "refund:E-5"]
        [standing] = authority_status(rt.store, "payer", "v1", [EARNED])
        assert not standing.earned and standing.clean == []
        assert standing.revoked_by == "a spend action was compensated"

        seventh = rt.run_sync(loop, task("E-7", 50), task_key="k7", by="sam")
        assert seventh.status == "awaiting_approval"  # waits for a person again, and says why
        req = rt.pending_approval(seventh.run_id)
        assert req.decided_by is None
        assert "0 of 5 clean approvals since it was revoked (a spend action was compensated)" in (
            req.why
        )


def wirer(earned: tuple[lw.EarnedAuthority, ...] = ()) -> lw.Loop:
    """A loop wiring each task's invoice its amount as ``total``, with ``amount`` a line count
    (3), under a rule that reads ``total``; the wire is undone by ``unwire``."""

    def wire(invoice: str, total: float, amount: int) -> dict[str, Any]:
        return {"wired": invoice}

    def unwire(key: str, result: Any, args: Any) -> dict[str, Any]:
        return {"unwired": key}

    eff = lw.effect("spend", name="wire", key=lambda a: a["invoice"], compensate=unwire)(wire)
    rule = lw.PolicyRule(kind="spend", action="require", field="total", name="by-total")

    def actor(ctx: lw.Context) -> lw.Proposal:
        inv = ctx.artifacts["inv"]
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"checked": True}).edits,
            effects=(eff.call(invoice=inv["invoice"], total=inv["amount"], amount=3),),
        )

    return lw.Loop(
        name="wirer",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[eff],
        approvals=lw.ApprovalPolicy((rule,), earned),
    )


def test_a_refunds_limit_reads_the_field_its_rule_reads(url: str) -> None:
    # From an outside probe (probe42a): a compensation's request was checked against an
    # approver's limit by its "amount" argument whatever field the rule reads, so ana
    # (spend up to 10,000) could approve the refund of a 50,000 payment whose "amount" was a
    # line count.
    loop = wirer()
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, task("W-1", 50000.0), task_key="w", by="rita")
        with pytest.raises(lw.NotPermittedError, match="up to 10,000; this request is for 50,000"):
            rt.approve(r.run_id, by="ana")
        rt.approve(r.run_id, by="ben")
        assert rt.resume_sync(r.run_id, loop).accepted
        rt.rollback(r.run_id, 0, by="rita", loop=loop)
        assert rt.pending_approval(r.run_id).kind == "compensation"
        with pytest.raises(lw.NotPermittedError, match="up to 10,000; this request is for 50,000"):
            rt.approve(r.run_id, by="ana")
        assert rt.approve(r.run_id, by="ben").status == "approved"


def paid_once(rt: lw.Runtime, loop: lw.Loop, invoice: str) -> lw.RunResult:
    """A run of ``loop`` paying ``invoice`` (100), approved by ana and accepted."""
    r = rt.run_sync(loop, task(invoice, 100), task_key=invoice)
    rt.approve(r.run_id, by="ana")
    done = rt.resume_sync(r.run_id, loop)
    assert done.accepted
    return done


def test_a_person_cannot_decide_under_loopwrights_own_names(url: str) -> None:
    # From an outside probe (probe42a): a denial by "loopwright" (a service account's OS user,
    # --by's default) was taken for the system's and left earned authority standing; a person
    # could approve as "policy:earned". Both names are refused for a person's decision.
    grant = lw.EarnedAuthority(kind="spend", after=1, up_to=1000)
    loop = make_loop((lw.PolicyRule(kind="spend", action="require"),), (grant,))
    with lw.Runtime(url) as rt:
        paid_once(rt, loop, "S-1")
        assert authority_status(rt.store, "payer", "v1", [grant])[0].earned
        big = rt.run_sync(loop, task("S-2", 5000), task_key="s2")
        for name in ("loopwright", " Loopwright ", EARNED_BY):
            with pytest.raises(lw.ConfigError, match="records its own decisions"):
                rt.deny(big.run_id, by=name, note="fraud")
            with pytest.raises(lw.ConfigError, match="records its own decisions"):
                rt.approve(big.run_id, by=name)
        assert rt.pending_approval(big.run_id).status == "pending"
        rt.deny(big.run_id, by="ops", note="fraud")
        [standing] = authority_status(rt.store, "payer", "v1", [grant])
        assert not standing.earned and "ops denied" in str(standing.revoked_by)


def test_a_denial_or_a_failed_held_out_check_revokes_earned_authority(url: str) -> None:
    rules = (lw.PolicyRule(kind="spend", action="require"),)
    loop = make_loop(rules, (lw.EarnedAuthority(kind="spend", after=1, up_to=1000),))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, task("D-1", 10), task_key="d1")
        rt.approve(r.run_id, by="ana")
        rt.resume_sync(r.run_id, loop)
        assert rt.run_sync(loop, task("D-2", 10), task_key="d2").accepted  # earned
        r = rt.run_sync(loop, task("D-3", 2000), task_key="d3")  # above the limit
        rt.deny(r.run_id, by="ben", note="no")
        [standing] = authority_status(rt.store, "payer", "v1", loop.approvals.earned)
        assert not standing.earned and standing.revoked_by.startswith("ben denied")  # type: ignore[union-attr]
        assert rt.run_sync(loop, task("D-4", 10), task_key="d4").status == "awaiting_approval"

        def fails(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
            return lw.Verdict(passed=False, score=0.0)

        audited = make_loop(rules, loop.approvals.earned)
        audited = lw.Loop(
            name=audited.name,
            version=audited.version,
            actor=audited.actor,
            verifiers=[*audited.verifiers, lw.Check(fn=fails, held_out=True, name="audit")],
            contract=audited.contract,
            effects=audited.effects,
            approvals=audited.approvals,
        )
        rt.approve("d4", by="ana")
        assert rt.resume_sync("d4", loop).accepted  # a clean approval after the denial...
        res = rt.run_sync(audited, task("D-5", 10), task_key="d5")
        assert res.accepted  # ...earns it again; this run's own held-out audit then fails
        assert rt.store.get_run(res.run_id).held_out_passed is False
        [standing] = authority_status(rt.store, "payer", "v1", loop.approvals.earned)
        assert standing.revoked_by == "an accepted run failed its held-out checks"


def test_a_cycle_judged_again_after_an_edit_charges_its_failed_attempts_once(
    tmp_path: Path,
) -> None:
    # From a review (helper-51): a verifier's failed attempt (a malformed reply's $1) was
    # charged when its retry succeeded and again when the parked cycle was judged again after
    # a person's edit; the judged-again call also started with the spent attempts counted.
    from loopwright._usage import Usage

    calls = [0]

    class Malformed(ConnectionError):
        pass

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        calls[0] += 1
        if calls[0] == 1:
            bad = Malformed("bad reply")
            bad.usage = Usage(cost_usd=1.0, tokens=1000)  # type: ignore[attr-defined]
            raise bad
        have = state.values()["doc"]
        found = tuple(
            lw.Finding(f"{k} is {have[k]!r}", "doc", k, "content")
            for k, v in {"a": "A", "b": "B"}.items()
            if have[k] != v
        )
        return lw.Verdict(passed=not found, score=1 - len(found) / 2, findings=found)

    loop = lw.Loop(
        name="judged-again",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": "A"}),
        verifiers=[lw.Check(fn=check, name="both")],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            risk=(lw.RiskRule(name="touch_a", touches=("doc/a",)),),
        ),
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.0, jitter=False),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "x", "b": "wrong"}}}, task_key="T")
        assert r.status == "awaiting_approval" and r.spent.cost_usd == 1.0
        rt.edit(r.run_id, "doc/b", "B", by="alice")
        rt.approve(r.run_id, by="bob")
        r = rt.resume_sync(r.run_id, loop)
    assert r.status == "accepted" and calls[0] == 3  # judged again: one more call
    assert (r.spent.cost_usd, r.spent.tokens) == (1.0, 1000)


@pytest.mark.parametrize(
    ("who", "crash"), [("verifier", ("before_checkpoint", 2)), ("actor", ("after_actor", 1))]
)
def test_failed_attempts_are_charged_when_the_cycle_is_redone_after_a_crash(
    tmp_path: Path, who: str, crash: tuple[str, int]
) -> None:
    # From a review (helper-53): the call succeeded after a $1 failed attempt, the process
    # died before the cycle's commit, and the resume's status commit made the settled entry
    # look charged: the $1 was never charged (invariant 7).
    from support.crash import Crash, phase_hook

    from loopwright._usage import Usage

    calls = [0]

    class Malformed(ConnectionError):
        pass

    def flaky() -> None:
        calls[0] += 1
        if calls[0] == 1:
            bad = Malformed("bad reply")
            bad.usage = Usage(cost_usd=1.0, tokens=1000)  # type: ignore[attr-defined]
            raise bad

    def actor(ctx: lw.Context) -> lw.Proposal:
        if who == "actor":
            flaky()
        return lw.Proposal.edit("doc", {"a": "A"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        if who == "verifier":
            flaky()
        return lw.Verdict(passed=True, score=1.0)

    loop = lw.Loop(
        name="redone",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="v")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.0, jitter=False),
    )
    task = {"artifacts": {"doc": {"a": "x"}}}
    with lw.Runtime(tmp_path / "s.db") as rt:
        rt._on_phase = phase_hook(crash)
        with pytest.raises(Crash):
            rt.run_sync(loop, task, task_key="k")
        [rec] = rt.store.list_runs()
        assert rec.cost_usd == 0.0  # the cycle's commit never happened
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.resume_sync(rec.run_id, loop)
    assert r.status == "accepted"
    assert (r.spent.cost_usd, r.spent.tokens) == (1.0, 1000)  # charged once, not lost


def test_a_fork_refused_for_its_cycle_number_is_not_audited_as_allowed(url: str) -> None:
    """`fork(run, at_cycle="2")` was audited "fork allowed" by the operator, then refused
    for its argument: the audit log said a fork was made that never was."""
    with lw.Runtime(url) as rt:
        people(rt)
        run = rt.run_sync(make_loop(FOUR_EYES), task("INV-9", 5), task_key="f", by="rita")
        before = audit_lines(rt)
        for bad in ("2", -1, True, 1.5):
            with pytest.raises(lw.ConfigError, match="cycle number"):
                rt.fork(run.run_id, bad, by="rita")  # type: ignore[arg-type]
        assert audit_lines(rt) == before
        rt.fork(run.run_id, 0, by="rita")
        assert audit_lines(rt)[len(before) :] == [("rita", "fork", "allowed")]
