"""What a refund's request and ``show`` say of the runs that reused a payment."""

from __future__ import annotations

from typing import Any

from loopwright import _reversal
from loopwright.cli._show_notes import reuse_refunds
from loopwright.store import EffectReuse, Event


def offer(**over: Any) -> dict[str, Any]:
    base = {
        "key": "pay:I6",
        "effect": "pay",
        "kind": "spend",
        "args": {"invoice": "I6"},
        "result": {"id": "ch-1"},
        "call_key": "pay:I6",
        "cycle": 2,
        "action": "allow",
        "rule": "r",
        "why": "",
        "approval_id": None,
    }
    return base | over


def test_an_allowed_refund_told_no_one() -> None:
    # an allow offer was decided by no one: a run it names is not one a person was told of
    assert _reversal.told_runs(offer(reused_by=[{"run_id": "B", "status": "accepted"}])) == []
    assert _reversal.told_runs(offer(action="require", reused_by=[{"run_id": "B"}])) == ["B"]


def test_a_reparked_offer_names_the_runs_and_their_status() -> None:
    o = offer()
    req = _reversal.repark(
        o, [EffectReuse("B", "accepted")], 4, "ops cancelled it", {}, now=1_000.0
    )
    assert o["action"] == "require" and o["approval_id"] == req.approval_id
    assert req.kind == "compensation" and "B (accepted)" in req.what
    assert req.evidence["reused_by"] == [{"run_id": "B", "status": "accepted"}]
    assert req.why.startswith("ops cancelled it; reused by run(s) B (accepted)")


def test_show_says_which_reused_payments_were_refunded() -> None:
    said = {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": "A"}
    text = reuse_refunds([Event(1, "B", 3, "effect_reuse_refunded", 0.0, said)])
    assert text is not None and "pay:I6 (spend): refunded by run A" in text
    assert reuse_refunds([]) is None


def test_show_says_a_refund_started_and_not_settled_may_be_done() -> None:
    said = {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": "A"}
    started = Event(1, "B", 3, "effect_reuse_refunding", 0.0, said)
    text = reuse_refunds([started])
    assert text is not None and "refund started (may be done) by run A" in text
    both = reuse_refunds([started, Event(2, "B", 3, "effect_reuse_refunded", 0.0, said)])
    assert both is not None and "started" not in both and "refunded by run A" in both


def test_show_says_nothing_of_a_refund_refused_since_it_started() -> None:
    said = {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": "A"}
    started = Event(1, "B", 3, "effect_reuse_refunding", 0.0, said)
    refused = Event(2, "B", 3, "effect_reuse_refund_refused", 0.0, said)
    assert reuse_refunds([started, refused]) is None  # the payment stands
    again = reuse_refunds([started, refused, Event(3, "B", 3, "effect_reuse_refunding", 0.0, said)])
    assert again is not None and "refund started (may be done) by run A" in again
