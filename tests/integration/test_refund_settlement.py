"""A compensation a crash interrupted is settled as the effect declares.

From an outside SIGKILL harness (refund43b): a refund killed between its journal intent and
its result always ended in doubt for a person, even when the provider deduplicates refunds
or can be asked whether one happened: the compensation was built with neither, and had no
reconcile of its own. A kill before the provider was even called left the run ``cancelled``,
the refund in doubt and the charge live. ``compensate_idempotent=True`` runs it again under
its key; ``compensate_reconcile=fn`` asks (done: compensated; not done: run once; the hook
failing: in doubt, as before). SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from doc_loop import TASK
from test_redo_keys import Crash, Provider, dying, paying

import loopwright as lw


class Refunds(Provider):
    """The provider, counting the refund requests that reach it; a refund asked again under
    its key is answered as the first (it deduplicates)."""

    def __init__(self) -> None:
        super().__init__()
        self.refunds: list[str] = []

    def refund(self, key: str, result: Any, args: dict[str, Any]) -> dict[str, Any]:
        self.refunds.append(key)
        return super().refund(key, result, args)

    def refunded(self, key: str) -> dict[str, Any] | None:
        charge = self.charges.get(key)
        return {"refunded": charge["id"]} if charge and charge.get("refunded") else None


def settled(provider: Refunds, **how: Any) -> lw.Loop:
    """The paying loop, its compensation settled as ``how`` says (the effect's attributes)."""
    loop = paying(provider)
    for name, value in how.items():
        setattr(loop.effects[0], name, value)
    return loop


def refund_dies(url: str, loop: lw.Loop, phase: str) -> str:
    """Run A pays I6 and parks; cancelled, its resume (the refund) dies at ``phase``."""
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK)
        rt.cancel(a.run_id, by="ops", loop=loop)
    crashed = dying(url, phase)
    with pytest.raises(Crash):
        crashed.resume_sync(a.run_id, loop)
    crashed.close()
    return a.run_id


def refunded_once(rt: lw.Runtime, run_id: str, provider: Refunds) -> None:
    """The run's payment is compensated, its claim freed, the charge refunded by one request."""
    assert provider.refunds == ["pay:I6"] and provider.collected() == 0
    [orig] = [e for e in rt.store.journal(run_id, kind="effect") if e.key == "effect:pay:I6"]
    assert orig.status == "compensated"
    claim = rt.store.effect_claim("spend", "pay:I6")
    assert claim is not None and claim.status == "compensated"
    packet = rt.store.get_run(run_id).packet or {}
    [note] = packet["compensations"]
    assert note["status"] == "done"


@pytest.mark.parametrize("how", ["idempotent", "reconcile"])
def test_a_refund_killed_before_the_provider_call_is_made_on_resume(url: str, how: str) -> None:
    # Before: the run ended cancelled, its refund in doubt, the charge live (5.0 collected)
    provider = Refunds()
    asked: list[str] = []

    def check(key: str) -> dict[str, Any] | None:
        asked.append(key)
        return provider.refunded(key)

    if how == "idempotent":
        loop = settled(provider, compensate_idempotent=True)
    else:
        loop = settled(provider, compensate_reconcile_fn=check)
    a = refund_dies(url, loop, "after_effect_intent")
    assert provider.refunds == [] and provider.collected() == 5.0
    with lw.Runtime(url) as rt:
        assert rt.resume_sync(a, loop).status == "cancelled"
        refunded_once(rt, a, provider)
        assert rt.resume_sync(a, loop).status == "cancelled"  # settled: not run again
    assert provider.refunds == ["pay:I6"]
    assert asked == (["pay:I6"] if how == "reconcile" else [])


def test_a_refund_killed_after_the_provider_refunded_is_settled_by_its_hook(url: str) -> None:
    # The provider refunded, the process died before the result: the hook says it happened,
    # so it is not sent again, the payment is compensated and another run pays under "~2".
    provider = Refunds()
    loop = settled(provider, compensate_reconcile_fn=provider.refunded)
    a = refund_dies(url, loop, "before_effect_result")
    assert provider.refunds == ["pay:I6"]
    with lw.Runtime(url) as rt:
        assert rt.resume_sync(a, loop).status == "cancelled"
        refunded_once(rt, a, provider)
        [comp] = [e for e in rt.store.journal(a, kind="effect") if e.key != "effect:pay:I6"]
        assert comp.status == "done" and comp.data["reconciled"] is True
        assert comp.data["result"] == {"refunded": "ch-1"}
        b = rt.run_sync(paying(provider), TASK, task_key="B")
        assert b.status == "awaiting_approval"
    assert provider.asked == ["pay:I6", "pay:I6~2"] and provider.collected() == 5.0
    assert provider.refunds == ["pay:I6"]


def test_a_refund_whose_hook_fails_stays_in_doubt(url: str) -> None:
    # The hook cannot tell: the refund is neither sent again nor taken as done (as before)
    provider = Refunds()

    def down(key: str) -> Any:
        raise ConnectionError("provider unreachable")

    loop = settled(provider, compensate_reconcile_fn=down, compensate_idempotent=True)
    a = refund_dies(url, loop, "before_effect_result")
    with lw.Runtime(url) as rt:
        assert rt.resume_sync(a, loop).status == "cancelled"
        packet = rt.store.get_run(a).packet or {}
        [note] = packet["compensations"]
        assert note["status"] == "in_doubt"
        assert "the reconcile hook raised ConnectionError" in note["cause"]
        assert "Undo by hand" in packet["recommended_action"]
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "undoing"
    assert provider.refunds == ["pay:I6"]  # not sent again


def test_a_refund_without_either_stays_in_doubt(url: str) -> None:
    # Without a declaration a refund killed before the call is still a person's to check
    provider = Refunds()
    a = refund_dies(url, settled(provider), "after_effect_intent")
    with lw.Runtime(url) as rt:
        assert rt.resume_sync(a, settled(provider)).status == "cancelled"
        [note] = (rt.store.get_run(a).packet or {})["compensations"]
        assert note["status"] == "in_doubt"
    assert provider.refunds == []
