"""A card promising a reuse whose origin is refunded (newuser47), with crashes (kill48): run B
parked told "already done: its result is reused"; run A's payment is refunded; B approved as
it stood must be asked again, never pay under the next key, whatever dies where: A's refund
killed after the provider refunded (before its result is journaled), B's resumed cycle killed
before or after it parks again (its commit), B resumed twice. Each is then approved knowing
and pays once. In process, a crash raised at a deterministic point (``support.crash``): nothing
after it is written. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support.crash import Crash, phase_hook

import loopwright as lw

TASK = {"artifacts": {"inv": {"status": "open", "memo": ""}}}  # memo: a part to edit


def _loop(paid: list[str], die_in_refund: list[bool], *, hook: bool = True) -> lw.Loop:
    """``test_approval_card_done_already._loop``, its refund dying once (``die_in_refund``)
    after it acted, and reconciled (the provider says whether it refunded) with ``hook``."""

    def refund(key: str, result: Any, args: dict[str, Any]) -> None:
        paid.append("-" + args["invoice"])
        if die_in_refund and die_in_refund[0]:
            die_in_refund[0] = False
            raise Crash("refunded, not journaled")

    def refunded(key: str) -> dict[str, bool] | None:  # the provider's word on the refund
        return {"refunded": True} if "-I6" in paid else None

    @lw.effect(
        "spend",
        name="pay",
        key=lambda a: f"pay:{a['invoice']}",
        compensate=refund,
        compensate_reconcile=refunded if hook else None,
    )
    def pay(invoice: str, amount: float) -> dict[str, Any]:
        paid.append(invoice)
        return {"paid": invoice}

    return lw.Loop(
        name="payer",
        actor=lambda ctx: lw.Proposal(
            edits=lw.Proposal.edit("inv", {"status": "paid"}).edits,
            effects=(pay.call(invoice="I6", amount=10.0),),
        ),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="ok")],
        contract=lw.Contract.from_dict({"budget": {"max_cycles": 2}}),
        effects=[pay],
        approvals=lw.ApprovalPolicy(rules=[lw.PolicyRule(kind="spend", action="require")]),
    )


def _until_done(url: str, step: Callable[[lw.Runtime], Any], crash: tuple[str, int] | None) -> int:
    """``step`` on a fresh runtime, crashed at ``crash`` first, then done to its return (a
    crash of the refund itself is raised by the loop's refund, once). Returns the crashes."""
    crashes = 0
    for point in (crash, None, None):
        with lw.Runtime(url) as rt:
            rt._on_phase = phase_hook(point)
            try:
                step(rt)
            except Crash:
                crashes += 1
                continue
        return crashes
    raise AssertionError("the step never returned")


def _pending(rt: lw.Runtime, run_id: str) -> list[lw.Approval]:
    return rt.store.approvals(run_id=run_id, status="pending")


POINTS = [None, ("before_checkpoint", 1), ("after_checkpoint", 1), ("before_actor", 1)]


@pytest.mark.parametrize("die_in_refund", [False, True])
@pytest.mark.parametrize("b_crash", POINTS)
def test_a_reuse_refunded_since_is_asked_again_whatever_dies(
    url: str, die_in_refund: bool, b_crash: tuple[str, int] | None
) -> None:
    paid: list[str] = []
    dying = [die_in_refund]
    loop = _loop(paid, dying)
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.approve(a, by="ann")
        assert rt.resume_sync(a, loop).accepted and paid == ["I6"]
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        [told] = _pending(rt, b)
        assert "its result is reused" in told.what
        rt.rollback(a, to_cycle=0, by="ops", loop=loop)
        [refund] = _pending(rt, a)
        rt.approve(a, by="fin", approval_id=refund.approval_id)
    # A's refund (killed after the provider refunded, when asked), then B approved as it stood
    assert _until_done(url, lambda rt: rt.resume_sync(a, loop), None) == int(die_in_refund)
    assert paid == ["I6", "-I6"]  # refunded once: the kill's refund reconciled, not redone
    with lw.Runtime(url) as rt:
        rt.approve(b, by="dan")
    crashed = _until_done(url, lambda rt: rt.resume_sync(b, loop), b_crash)
    assert crashed == (b_crash is not None and b_crash[0] != "before_actor")
    with lw.Runtime(url) as rt:  # resumed once more: still waiting, asked once
        rt.resume_sync(b, loop)
        assert paid == ["I6", "-I6"]  # nothing paid under the next key
        assert rt.store.get_run(b).status == "awaiting_approval"
        [again] = _pending(rt, b)
        assert again.approval_id != told.approval_id
        assert "reused" not in again.what and "undone since" in again.why
        rt.approve(b, by="dan")
        assert rt.resume_sync(b, loop).accepted
        assert paid == ["I6", "-I6", "I6"]  # approved knowing: paid once


@pytest.mark.parametrize("edited", [False, True])
def test_a_reuse_whose_refund_is_in_doubt_is_not_said_to_run_when_approved(
    url: str, edited: bool
) -> None:
    """A's refund killed after the provider refunded, with no hook to ask whether it did: the
    claim stays being undone. B, approved on its card promising the reuse, is asked again;
    before, its request said "undone since (refunded or compensated), so approving now runs it
    again", and approving it ran nothing (the run escalated, the undoing in doubt)."""
    paid: list[str] = []
    loop = _loop(paid, [True], hook=False)
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.approve(a, by="ann")
        assert rt.resume_sync(a, loop).accepted
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        rt.rollback(a, to_cycle=0, by="ops", loop=loop)
        [refund] = _pending(rt, a)
        rt.approve(a, by="fin", approval_id=refund.approval_id)
    assert _until_done(url, lambda rt: rt.resume_sync(a, loop), None) == 1
    assert paid == ["I6", "-I6"]
    with lw.Runtime(url) as rt:
        if edited:  # judged again on resume (the other path to the same check)
            rt.edit(b, "inv/memo", "checked", by="eve")
        rt.approve(b, by="dan")
        rt.resume_sync(b, loop)
        [again] = _pending(rt, b)
        assert "runs it again only once the undoing has ended" in again.why, again.why
        assert "so approving now runs it again" not in again.why
        rt.approve(b, by="dan")
        end = rt.resume_sync(b, loop)
        assert end.status == "escalated" and paid == ["I6", "-I6"]  # as the card says now
