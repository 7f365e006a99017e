"""A request that told its approver "already done: its result is reused" is asked again when
the payment it would reuse was refunded before the decision (newuser47).

Run B parked asking for an invoice run A had paid; its card said approving runs nothing again.
A was then rolled back and its refund approved and run. Approved as it stood, B's request paid
the invoice again under the next key generation: the person approved a reuse and money went
out. Now the resumed cycle finds the claim no longer done, and B parks again with a request
that says what approving does now (a payment), the earlier decision not counted for it.
The same holds when B's request was edited beside (judged again). SQLite and PostgreSQL.
"""

from __future__ import annotations

from test_approval_card_done_already import _loop

import loopwright as lw

TASK = {"artifacts": {"inv": {"status": "open", "memo": ""}}}  # memo: a part to edit


def _pending(rt: lw.Runtime, run_id: str) -> list[lw.Approval]:
    return rt.store.approvals(run_id=run_id, status="pending")


def _b_told_reuse_then_refunded(rt: lw.Runtime, loop: lw.Loop, paid: list[str]) -> str:
    """A pays I6; B parks told the payment is reused; A is rolled back and refunded."""
    a = rt.run_sync(loop, TASK, task_key="A")
    rt.approve(a.run_id, by="ann")
    assert rt.resume_sync(a.run_id, loop).accepted and paid == ["I6"]
    b = rt.run_sync(loop, TASK, task_key="B").run_id
    [req] = _pending(rt, b)
    assert "its result is reused" in req.what
    rt.rollback(a.run_id, to_cycle=0, by="ops", loop=loop)
    [refund] = _pending(rt, a.run_id)
    rt.approve(a.run_id, by="fin", approval_id=refund.approval_id)
    rt.resume_sync(a.run_id, loop)  # refunds, then parks asking to pay again
    assert paid == ["I6", "-I6"]
    return b


def _asked_again(rt: lw.Runtime, b: str, first: str, paid: list[str]) -> None:
    # before: B was accepted and paid == ["I6", "-I6", "I6"] (the redo, key pay:I6~2)
    assert paid == ["I6", "-I6"]
    assert rt.store.get_run(b).status == "awaiting_approval"
    [again] = _pending(rt, b)
    assert again.approval_id != first
    assert "already done" not in again.what and "reused" not in again.what
    assert again.what.startswith("spend: pay(invoice='I6', amount=10.0)")
    assert "undone since" in again.why, again.why


def _approved_knowing(rt: lw.Runtime, loop: lw.Loop, b: str, paid: list[str]) -> None:
    """Approved again, as asked now: it pays (the next generation of the key), once."""
    rt.approve(b, by="dan")
    assert rt.resume_sync(b, loop).accepted
    assert paid == ["I6", "-I6", "I6"]


def test_an_approved_reuse_whose_payment_was_refunded_is_asked_again(url: str) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        b = _b_told_reuse_then_refunded(rt, loop, paid)
        [req] = _pending(rt, b)
        rt.approve(b, by="dan")
        rt.resume_sync(b, loop)
        _asked_again(rt, b, req.approval_id, paid)
        _approved_knowing(rt, loop, b, paid)


def test_the_same_when_the_run_was_edited_beside_the_request(url: str) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        b = _b_told_reuse_then_refunded(rt, loop, paid)
        [req] = _pending(rt, b)
        rt.edit(b, "inv/memo", "checked", by="eve")  # judged again on resume
        rt.approve(b, by="dan")
        rt.resume_sync(b, loop)
        _asked_again(rt, b, req.approval_id, paid)
        _approved_knowing(rt, loop, b, paid)
