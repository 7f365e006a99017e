"""A compensation left in doubt is settled by a person (settle54). A refund cut short with no
hook to ask and no deduplicating provider was in doubt for good: the claim of the payment it
undoes stayed ``undoing`` (every other run asking for the invoice escalated), the packet said
"Undo by hand", and ``loopwright settle`` refused it ("in doubt: none"). Settled done, the
payment is recorded undone and its claim freed (the next request pays again); not done, the
payment stands and its claim with it (the next request reuses it). SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from doc_loop import TASK
from support.dashboard import dashboard
from test_refund_settlement import Refunds, refund_dies, settled

import loopwright as lw
from loopwright.cli import main


def _refund_in_doubt(url: str, provider: Refunds) -> str:
    a = refund_dies(url, settled(provider), "after_effect_intent")
    with lw.Runtime(url) as rt:
        assert rt.resume_sync(a, settled(provider)).status == "cancelled"
        advice = (rt.store.get_run(a).packet or {})["recommended_action"]
        # the escalation names the exact command
        assert f"`loopwright settle {a[:12]} pay.compensate:pay:I6 --done`" in advice, advice
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "undoing"
    return a


def test_a_refund_settled_done_frees_the_payment(url: str) -> None:
    provider = Refunds()
    a = _refund_in_doubt(url, provider)
    with lw.Runtime(url) as rt:
        got = rt.settle_effect(
            a, "pay.compensate", done=True, by="ops", result={"refunded": "ch-1"}
        )
        assert got.status == "done" and got.data["settled"]["by"] == "ops"
        [orig] = rt.store.journal(a, key="effect:pay:I6")
        assert orig.status == "compensated"
        assert orig.data["compensation"] == {"refunded": "ch-1"}
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "compensated"
        [rec] = [r for r in rt.store.audit() if r.action == "settle_effect"]
        assert (rec.actor, rec.detail["key"]) == ("ops", "pay.compensate:pay:I6")
        # the next request for the invoice pays again: nothing holds it
        asked = len(provider.asked)
        b = rt.run_sync(settled(provider), TASK, task_key="B")
        assert b.status == "awaiting_approval", b.packet  # (paid, it asks its question)
        assert len(provider.asked) == asked + 1
        with pytest.raises(lw.ConfigError, match="is done, not in doubt"):
            rt.settle_effect(a, "pay.compensate:pay:I6", done=False, by="ops")


def test_a_refund_settled_not_done_leaves_the_payment_standing(url: str) -> None:
    provider = Refunds()
    a = _refund_in_doubt(url, provider)
    with lw.Runtime(url) as rt:
        got = rt.settle_effect(a, "pay.compensate:pay:I6", done=False, by="ops")
        assert got.status == "failed" and "settled not done by ops" in got.data["cause"]
        [orig] = rt.store.journal(a, key="effect:pay:I6")
        assert orig.status == "done"
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "done"
        # the next request for the invoice reuses the payment: not charged twice
        asked = len(provider.asked)
        b = rt.run_sync(settled(provider), TASK, task_key="B")
        assert b.status == "awaiting_approval", b.packet  # (paid, it asks its question)
        assert len(provider.asked) == asked
        [reused] = rt.store.journal(b.run_id, key="effect:pay:I6")
        assert reused.data.get("from_run") == a


def test_loopwright_settle_says_what_the_refund_means(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _refund_in_doubt(url, Refunds())
    args = ["settle", a, "pay.compensate:pay:I6", "--not-done", "--by", "ops", "--store", url]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "settled pay.compensate (pay.compensate:pay:I6) as not done" in out
    assert "pay (pay:I6) stands, done: another run asking for it reuses its result" in out
    assert "roll the run back" not in out


def test_the_api_settles_a_refund_in_doubt(url: str) -> None:

    a = _refund_in_doubt(url, Refunds())
    c = dashboard(url, token="server-token-0123456789", identity="ana")  # fmt: skip
    bearer = {"Authorization": "Bearer server-token-0123456789"}
    path = f"/api/runs/{a}/effects/pay.compensate:pay:I6/settle"
    r = c.post(path, json={"done": True, "note": "provider shows the refund"}, headers=bearer)
    assert r.status_code == 200, r.text
    assert "pay (pay:I6) is recorded undone" in r.json()["message"]
    with lw.Runtime(url) as rt:
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "compensated"
