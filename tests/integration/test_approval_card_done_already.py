"""A person asked to approve an action already done under its business key (another run paid
that invoice; a fork redoes its origin's cycle) is told so on the request: approving runs
nothing again, the recorded result is reused. The card read as a new payment (newuser46)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import loopwright as lw


def _loop(
    paid: list[str],
    invoice: str = "I6",
    amount: float = 10.0,
    memo: str | None = None,
    *,
    refundable: bool = True,
) -> lw.Loop:
    """A loop paying ``invoice`` for ``amount`` (with ``memo`` when given) under the business
    key ``pay:<invoice>``; each payment made is appended to ``paid`` (one list a test: none
    shared between tests), each refund as ``-<invoice>`` (``refundable=False``: no refund, so
    a rollback leaves the payment done)."""

    def refund(key: str, result: Any, args: dict[str, Any]) -> None:
        paid.append("-" + args["invoice"])

    @lw.effect(
        "spend",
        name="pay",
        key=lambda a: f"pay:{a['invoice']}",
        compensate=refund if refundable else None,
    )
    def pay(invoice: str, amount: float, memo: str = "") -> dict[str, Any]:
        paid.append(invoice)
        return {"paid": invoice}

    noted = {} if memo is None else {"memo": memo}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"status": "paid"}).edits,
            effects=(pay.call(invoice=invoice, amount=amount, **noted),),
        )

    return lw.Loop(
        name="payer",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="ok")],
        contract=lw.Contract.from_dict({"budget": {"max_cycles": 2}}),
        effects=[pay],
        approvals=lw.ApprovalPolicy(rules=[lw.PolicyRule(kind="spend", action="require")]),
    )


def _pending_what(rt: lw.Runtime, run_id: str) -> str:
    [req] = rt.store.approvals(run_id=run_id, status="pending")
    return req.what


def test_the_request_of_an_action_done_already_says_so(tmp_path: Path) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        a = rt.run_sync(loop, {"artifacts": {"inv": {"status": "open"}}}, task_key="A")
        assert "already done" not in _pending_what(rt, a.run_id)  # a first payment: as before
        rt.approve(a.run_id, by="ann")
        a = rt.resume_sync(a.run_id, loop)
        assert a.accepted and paid == ["I6"]
        b = rt.run_sync(loop, {"artifacts": {"inv": {"status": "open"}}}, task_key="B")
        what = _pending_what(rt, b.run_id)
        assert f"already done by run {a.run_id[:12]} under its key" in what, what
        assert "its result is reused" in what
        rt.approve(b.run_id, by="ann")
        assert rt.resume_sync(b.run_id, loop).accepted and paid == ["I6"]  # paid once


def test_the_request_of_an_action_done_with_other_arguments_does_not_promise_a_reuse(
    tmp_path: Path,
) -> None:
    # B asks to pay I7 for 20.0 where A paid it for 10.0: approving B reuses nothing (the same
    # key with other arguments is not run, a person checks which is right), and its card said
    # "its result is reused" (review46b).
    task = {"artifacts": {"inv": {"status": "open"}}}
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        paid: list[str] = []
        ten, twenty = _loop(paid, "I7", 10.0), _loop(paid, "I7", 20.0)
        a = rt.run_sync(ten, task, task_key="A")
        rt.approve(a.run_id, by="ann")
        assert rt.resume_sync(a.run_id, ten).accepted
        b = rt.run_sync(twenty, task, task_key="B")
        what = _pending_what(rt, b.run_id)
        assert f"already done by run {a.run_id[:12]} under its key" in what, what
        assert "its result is reused" not in what, what
        assert "other arguments" in what, what
        rt.approve(b.run_id, by="ann")
        rt.resume_sync(b.run_id, twenty)
        [entry] = rt.store.journal(b.run_id, kind="effect")
        assert entry.status == "in_doubt"  # what the card now says: not reused, not run
        assert paid.count("I7") == 1
