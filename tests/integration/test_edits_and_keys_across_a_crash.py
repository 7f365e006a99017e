"""From an outside probe (helper-37): what a person does, and what a deploy changes, between a
crash or a park and the resume must not undo the guarantees. A run that died during its
effects refuses an edit until it is resumed (the resume applies the cycle's stored proposal);
an effect's key is fixed by the cycle's write-ahead, so a changed key function cannot run an
in-doubt payment again; an edit made beside a waiting request is judged before the decided
cycle concludes (its stored verdicts judged a state that is gone)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.crash import Crash

import loopwright as lw

KeyFn = Callable[[dict[str, Any]], str] | None
BY_INVOICE: KeyFn = lambda a: a["inv"]  # noqa: E731
BY_INVOICE_AND_AMOUNT: KeyFn = lambda a: f"{a['inv']}/{a['amount']}"  # noqa: E731


def _pay_loop(key: KeyFn, paid: list[str], *, crash: bool, reconcile: bool = False) -> lw.Loop:
    """One cycle edits doc/a and pays invoice INV-7; ``crash``: the process dies in the payment,
    after the outside world took it and before its result is journaled."""
    dying = [crash]

    @lw.effect(
        "spend",
        key=key,
        reconcile=(lambda k: {"paid": "INV-7"} if paid else None) if reconcile else None,
    )
    def pay(inv: str, amount: int) -> dict[str, str]:
        paid.append(inv)
        if dying[0]:
            dying[0] = False
            raise Crash("died after paying")
        return {"paid": inv}

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.artifacts["doc"]["a"] == "draft":
            return lw.Proposal(
                edits=(lw.Edit("doc", "a", "done"),), effects=(pay.call(inv="INV-7", amount=120),)
            )
        return lw.Proposal(note="nothing to do")

    return lw.Loop(
        name="pay",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=s.values()["doc"]["a"] != "draft"))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=(pay,),
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )


TASK = {"artifacts": {"doc": {"a": "draft", "b": "B"}}}


def _crash_in_payment(db: Path, key: KeyFn, paid: list[str], **kw: Any) -> str:
    with lw.Runtime(db) as rt, pytest.raises(Crash):
        rt.run_sync(_pay_loop(key, paid, crash=True, **kw), TASK, task_key="K")
    with lw.Runtime(db) as rt:
        return rt.store.get_run("K").run_id


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (BY_INVOICE, BY_INVOICE),
        (BY_INVOICE, BY_INVOICE_AND_AMOUNT),  # a deploy changed the business key
        (BY_INVOICE, None),  # ...or dropped it (the run-scoped default key)
        (None, BY_INVOICE),  # ...or added one
    ],
)
def test_a_changed_key_function_does_not_run_an_in_doubt_payment_again(
    tmp_path: Path, before: KeyFn, after: KeyFn
) -> None:
    paid: list[str] = []
    run_id = _crash_in_payment(tmp_path / "s.db", before, paid)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.resume_sync(run_id, _pay_loop(after, paid, crash=False))
        journal = {e.key: e.status for e in rt.store.journal(run_id)}
    assert paid == ["INV-7"]  # once, whatever the key function says now
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None and "its outcome was not recorded" in r.packet["cause"]
    [(key, status)] = [(k, v) for k, v in journal.items() if k.startswith("effect:")]
    assert status == "in_doubt"  # the intent journaled before the crash is the one settled
    if before is BY_INVOICE:
        assert key == "effect:pay:INV-7"


def test_a_run_that_died_during_its_effects_refuses_an_edit_until_resumed(
    tmp_path: Path,
) -> None:
    paid: list[str] = []
    run_id = _crash_in_payment(tmp_path / "s.db", BY_INVOICE, paid, reconcile=True)
    loop = _pay_loop(BY_INVOICE, paid, crash=False, reconcile=True)
    with lw.Runtime(tmp_path / "s.db") as rt:
        with pytest.raises(lw.ConflictError, match="stopped during the effects of cycle 1"):
            rt.edit(run_id, "doc/a", "HUMAN", by="alice")
        r = rt.resume_sync(run_id, loop)
        assert (r.status, r.state.values()["doc"]["a"]) == ("accepted", "done")
        rt.edit(run_id, "doc/a", "HUMAN", by="alice")  # now the person's version is the last
        state = rt.store.latest_checkpoint(run_id).task_state()
    assert paid == ["INV-7"]
    part = state.part("doc/a")
    assert part is not None and (part.value, part.status) == ("HUMAN", "accepted")


TARGET = {"a": "A", "b": "B"}


def _parked_loop(judged: list[dict[str, Any]]) -> lw.Loop:
    """The actor fixes doc/a, which a risk rule asks a person about; the visible check wants
    both parts right, the held-out one doc/b."""

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        have = state.values()["doc"]
        judged.append(dict(have))
        bad = tuple(
            lw.Finding(f"{k} is {have[k]!r}", "doc", k, "content")
            for k, v in TARGET.items()
            if have[k] != v
        )
        return lw.Verdict(passed=not bad, score=1 - len(bad) / 2, findings=bad)

    return lw.Loop(
        name="stale",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": "A"}),
        verifiers=[
            lw.Check(fn=check, name="both"),
            lw.Check(
                fn=lambda s, p: lw.Verdict(passed=s.values()["doc"]["b"] == "B"),
                name="b",
                held_out=True,
            ),
        ],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            risk=(lw.RiskRule(name="touch_a", touches=("doc/a",)),),
        ),
    )


def _edited_while_waiting(
    tmp_path: Path, judged: list[dict[str, Any]], b: str, edited: str
) -> tuple[lw.RunResult, list[str], int]:
    """A run parked on the risk rule, doc/b edited beside its request, the request approved
    and the run resumed: its result, its events' kinds and how many requests it made."""
    loop = _parked_loop(judged)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "x", "b": b}}}, task_key="T")
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/b", edited, by="alice")
        rt.approve(r.run_id, by="bob")
        r = rt.resume_sync(r.run_id, loop)
        kinds = [e.kind for e in rt.store.events(r.run_id)]
        return r, kinds, len(rt.store.approvals(run_id=r.run_id))


def test_an_edit_beside_a_waiting_request_that_breaks_a_check_is_not_accepted(
    tmp_path: Path,
) -> None:
    judged: list[dict[str, Any]] = []
    r, kinds, _ = _edited_while_waiting(tmp_path, judged, "B", "WRONG")
    # before: accepted on the verdicts of the state before the edit, held_out_passed True
    assert judged[-1] == {"a": "A", "b": "WRONG"}  # the approved proposal on the edited state
    assert r.stop_reason != "success" and r.held_out_passed is False
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None and "a person's edit is not overwritten" in r.packet["cause"]
    assert "judged_again" in kinds


def test_an_edit_beside_a_waiting_request_is_judged_and_the_approval_is_not_asked_again(
    tmp_path: Path,
) -> None:
    judged: list[dict[str, Any]] = []
    r, _, requests = _edited_while_waiting(tmp_path, judged, "wrong", "B")  # the person fixes b
    assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 1)
    assert r.held_out_passed is True and judged[-1] == TARGET
    assert requests == 1  # the risk rule's need was approved: not asked a second time


def _asking_loop(paid: list[float], *, ask: str | None) -> lw.Loop:
    """A risk rule on doc/a (a question when ``ask``), and a payment that needs a person and
    runs only in an accepted cycle: it becomes due when an edit beside the request makes the
    cycle pass."""

    @lw.effect("spend", name="pay")
    def pay(amount: float) -> dict[str, bool]:
        paid.append(amount)
        return {"ok": True}

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        have = state.values()["doc"]
        bad = tuple(
            lw.Finding(f"{k} wrong", "doc", k, "content") for k, v in TARGET.items() if have[k] != v
        )
        return lw.Verdict(passed=not bad, score=1 - len(bad) / 2, findings=bad)

    return lw.Loop(
        name="asking",
        actor=lambda ctx: lw.Proposal(
            edits=(lw.Edit("doc", "a", "A"),), effects=(pay.call(amount=10.0),)
        ),
        verifiers=[check],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            risk=(lw.RiskRule(name="touch_a", touches=("doc/a",), ask=ask),),
        ),
        effects=[pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="require", name="spend"),)),
    )


def test_an_answered_question_is_not_asked_again_when_the_cycle_is_judged_again(
    tmp_path: Path,
) -> None:
    # From review (helper-40): the answered question's need was filtered out, but the question
    # itself was still derived from the rule, so the run asked it again
    paid: list[float] = []
    loop = _asking_loop(paid, ask="Which PO governs?")
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "x", "b": "wrong"}}}, task_key="T")
        rt.edit(r.run_id, "doc/b", "B", by="alice")
        rt.answer(r.run_id, "PO-1", by="bob")
        r = rt.resume_sync(r.run_id, loop)
        assert r.status == "awaiting_approval"  # the payment, now due, needs a person
        [new] = rt.store.approvals(run_id=r.run_id, status="pending")
        assert (new.kind, [x["kind"] for x in new.evidence["needs"]]) == ("effect", ["effect"])
        rt.approve(r.run_id, by="bob")
        r = rt.resume_sync(r.run_id, loop)
    assert (r.status, paid) == ("accepted", [10.0])


def test_what_people_approved_holds_across_two_edits_and_two_requests(tmp_path: Path) -> None:
    # From review (helper-40): only the latest request's needs counted as approved, so after a
    # second edit the first request's risk rule was asked again
    paid: list[float] = []
    loop = _asking_loop(paid, ask=None)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(
            loop, {"artifacts": {"doc": {"a": "x", "b": "wrong", "c": 0}}}, task_key="T"
        )
        rt.edit(r.run_id, "doc/b", "B", by="alice")
        rt.approve(r.run_id, by="bob")  # the risk rule
        r = rt.resume_sync(r.run_id, loop)  # judged again: passes, the payment is due
        rt.edit(r.run_id, "doc/c", 1, by="alice")
        rt.approve(r.run_id, by="bob")  # the payment
        r = rt.resume_sync(r.run_id, loop)
        kinds = sorted(a.kind for a in rt.store.approvals(run_id=r.run_id))
    assert (r.status, paid) == ("accepted", [10.0])
    assert kinds == ["effect", "risk"]  # two requests, none asked twice


@pytest.mark.parametrize(
    "args",
    [{"amount": 10.0, "items": ("x", "y")}, {"amount": 10.0, "meta": {1: "a"}}],
)
def test_an_approved_payment_is_not_asked_again_whatever_its_arguments_look_like_stored(
    tmp_path: Path, args: dict[str, Any]
) -> None:
    # From review (helper-41): a need was known by its description, which differs once the
    # proposal is read back from the store (a list for a tuple, "1" for the key 1)
    paid: list[dict[str, Any]] = []

    @lw.effect("spend", name="pay")
    def pay(**kw: Any) -> dict[str, bool]:
        paid.append(kw)
        return {"ok": True}

    loop = lw.Loop(
        name="args",
        actor=lambda ctx: lw.Proposal(
            edits=(lw.Edit("doc", "a", "A"),), effects=(pay.call(**args),)
        ),
        verifiers=[lambda s, p: lw.Verdict(passed=s.values()["doc"]["a"] == "A")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=[pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="require", name="spend"),)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "x", "c": 0}}}, task_key="T")
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/c", 1, by="alice")
        rt.approve(r.run_id, by="bob")
        r = rt.resume_sync(r.run_id, loop)
        requests = rt.store.approvals(run_id=r.run_id)
    assert (r.status, len(requests), len(paid)) == ("accepted", 1, 1)


def test_earned_authority_is_recorded_once_when_a_cycle_is_judged_again(tmp_path: Path) -> None:
    # From review (helper-41): judged again, the payment was granted on earned authority again
    # (one approval row, but a second audit record of the engine approving it)
    paid: list[float] = []
    earned = lw.ApprovalPolicy(
        (lw.PolicyRule(kind="spend", action="require", name="spend"),),
        earned=(lw.EarnedAuthority(kind="spend", after=1, up_to=100),),
    )
    plain = _asking_loop(paid, ask=None)
    no_risk = dataclasses.replace(plain, contract=lw.Contract(budget=lw.Budget(max_cycles=3)))
    with lw.Runtime(tmp_path / "s.db") as rt:
        first = dataclasses.replace(no_risk, approvals=earned)
        r0 = rt.run_sync(first, {"artifacts": {"doc": {"a": "x", "b": "B"}}}, task_key="T0")
        rt.approve(r0.run_id, by="bob")  # the one clean approval authority is earned after
        assert rt.resume_sync(r0.run_id, first).accepted
        loop = dataclasses.replace(plain, approvals=earned)
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "x", "b": "B", "c": 0}}}, task_key="T")
        assert r.status == "awaiting_approval"  # the risk rule; the payment was earned
        rt.edit(r.run_id, "doc/c", 1, by="alice")
        rt.approve(r.run_id, by="bob")
        r = rt.resume_sync(r.run_id, loop)
        engine = [a for a in rt.store.audit() if a.actor == "policy:earned"]
    assert r.accepted and paid == [10.0, 10.0]
    assert len(engine) == 1


def test_a_request_stored_before_needs_carried_their_call_still_counts_as_approved(
    tmp_path: Path,
) -> None:
    # From review (helper-42): a run parked across the upgrade has requests whose effect needs
    # name no call; judged again, the payment was asked about a second time
    paid: list[float] = []
    loop = _asking_loop(paid, ask=None)
    loop = dataclasses.replace(loop, contract=lw.Contract(budget=lw.Budget(max_cycles=3)))
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "x", "b": "B", "c": 0}}}, task_key="T")
        [req] = rt.store.approvals(run_id=r.run_id)
        assert [n["kind"] for n in req.evidence["needs"]] == ["effect"]
    # the request as the release before stored it
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        evidence = dict(req.evidence)
        evidence["needs"] = [{k: v for k, v in n.items() if k != "call"} for n in evidence["needs"]]
        conn.execute(
            "UPDATE approvals SET evidence=? WHERE approval_id=?",
            (json.dumps(evidence), req.approval_id),
        )
    with lw.Runtime(db) as rt:
        rt.edit(r.run_id, "doc/c", 1, by="alice")
        rt.approve(r.run_id, by="bob")
        r = rt.resume_sync(r.run_id, loop)
        requests = rt.store.approvals(run_id=r.run_id)
    assert (r.status, len(requests), paid) == ("accepted", 1, [10.0])


def test_earned_authority_rerun_after_a_crash_between_grant_and_audit_is_audited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From review (helper-42): the audit was skipped whenever the approval existed, so a crash
    # between the two writes left an engine approval with no audit record
    import loopwright._parking as parking

    paid: list[float] = []
    earned = lw.ApprovalPolicy(
        (lw.PolicyRule(kind="spend", action="require", name="spend"),),
        earned=(lw.EarnedAuthority(kind="spend", after=1, up_to=100),),
    )
    plain = _asking_loop(paid, ask=None)
    loop = dataclasses.replace(
        plain, contract=lw.Contract(budget=lw.Budget(max_cycles=3)), approvals=earned
    )
    task = {"artifacts": {"doc": {"a": "x", "b": "B"}}}
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        r0 = rt.run_sync(loop, task, task_key="T0")
        rt.approve(r0.run_id, by="bob")  # the clean approval authority is earned after
        assert rt.resume_sync(r0.run_id, loop).accepted
    real = parking.audit

    def dies(*args: Any, **kw: Any) -> None:
        monkeypatch.setattr(parking, "audit", real)
        raise Crash("died between the grant and its audit record")

    monkeypatch.setattr(parking, "audit", dies)
    with lw.Runtime(db) as rt, pytest.raises(Crash):
        rt.run_sync(loop, task, task_key="T")
    with lw.Runtime(db) as rt:
        r = rt.resume_sync(rt.store.get_run("T").run_id, loop)
        engine = [a for a in rt.store.audit() if a.actor == "policy:earned"]
    assert r.accepted and paid == [10.0, 10.0]
    assert len(engine) == 1
