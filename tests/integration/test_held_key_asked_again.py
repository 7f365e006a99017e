"""A run that asked for an action while another run was executing it escalates (the other's
attempt may be acting now): in doubt about that run's claim, not about an attempt of its own.
That answer was kept for good (effects53): once the other run's payment was done, a rollback
of the first run past it still found "held by run B, whose attempt is claimed" and escalated
again, where asking the claim again reuses the payment (nothing paid twice). The other run is
held inside its payment on an event, not by timing. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

from doc_loop import TASK, fields

import loopwright as lw

ALLOW = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))


def _loop(charges: list[str], started: threading.Event, go: threading.Event) -> lw.Loop:
    """Fixes doc.c, then doc.a, b and pays invoice I6 (business key) in the accepted cycle;
    the first payment signals ``started`` and waits for ``go`` inside its call."""

    @lw.effect("spend", name="pay", key=lambda a: a["invoice"])
    def pay(invoice: str, amount: float, *, key: str) -> dict[str, Any]:
        charges.append(key)
        if not started.is_set():
            started.set()
            assert go.wait(60), "the test never let the payment finish"
        return {"charged": key}

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.artifacts["doc"]["c"] != 3:
            return lw.Proposal(edits=(lw.Edit("doc", "c", 3),))
        fix = (lw.Edit("doc", "a", 1), lw.Edit("doc", "b", 2))
        return lw.Proposal(edits=fix, effects=(pay.call(invoice="I6", amount=5.0),))

    return lw.Loop(
        name="held",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
        effects=[pay],
        approvals=ALLOW,
    )


def test_a_run_that_asked_while_another_paid_reuses_the_payment_after_a_rollback(
    url: str,
) -> None:
    charges: list[str] = []
    started, go = threading.Event(), threading.Event()
    loop = _loop(charges, started, go)
    done: dict[str, lw.RunResult] = {}

    def paying() -> None:
        with lw.Runtime(url) as rt:
            done["B"] = rt.run_sync(loop, TASK, task_key="B")

    b = threading.Thread(target=paying)
    b.start()
    try:
        assert started.wait(60)
        with lw.Runtime(url) as rt:
            a = rt.run_sync(loop, TASK, task_key="A")  # B is inside its payment
            assert a.status == "escalated" and a.packet is not None
            assert "held by run" in a.packet["cause"], a.packet["cause"]
            go.set()
            b.join()
            assert done["B"].status == "accepted"
            rt.rollback(a.run_id, 1, by="ops", loop=loop)
            again = rt.resume_sync(a.run_id, loop)
            assert again.status == "accepted", again.packet
            [entry] = rt.store.journal(a.run_id, kind="effect")
            assert (entry.status, entry.data.get("from_run")) == ("done", done["B"].run_id)
    finally:
        go.set()
        b.join()
    assert charges == ["pay:I6"]
