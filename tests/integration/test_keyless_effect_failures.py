"""An effect whose own code raised after it acted, and that takes no ``key`` (so no provider
deduplicates an attempt made again), is not idempotent and has no reconcile hook: in doubt,
never done a second time by another run asking for the same action (effects53). A failure
that may have acted keeps its key for the next attempt, which protects only an effect that
hands that key to a provider; this one was recorded ``failed``, its claim freed, and the next
run asking for the invoice charged it again. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from doc_loop import TASK, fields

import loopwright as lw

ALLOW = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))


def _paying(charges: list[str], fail: type[Exception] | None) -> lw.Loop:
    """Fixes the doc and pays invoice I6 (business key ``I6``) in the accepted cycle; the
    payment charges (a line in ``charges``), then raises ``fail`` when one is given."""

    @lw.effect("spend", name="pay", key=lambda a: a["invoice"])
    def pay(invoice: str, amount: float) -> dict[str, Any]:  # takes no key
        charges.append(invoice)
        if fail is not None:
            raise fail("the ledger write after the charge failed")
        return {"charged": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        fix = tuple(lw.Edit("doc", k, v) for k, v in (("a", 1), ("b", 2), ("c", 3)))
        return lw.Proposal(edits=fix, effects=(pay.call(invoice="I6", amount=5.0),))

    return lw.Loop(
        name="keyless",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=[pay],
        approvals=ALLOW,
    )


@pytest.mark.parametrize("fail", [ValueError, KeyError, lw.PermanentError, PermissionError])
def test_a_keyless_effect_that_failed_after_acting_is_not_done_again(
    url: str, fail: type[Exception]
) -> None:
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying(charges, fail), TASK, task_key="A")
        assert a.status == "escalated" and a.packet is not None
        assert "may have acted" in a.packet["cause"], a.packet["cause"]
        [entry] = rt.store.journal(a.run_id, kind="effect")
        assert entry.status == "in_doubt"
        # another run asks for the same invoice: it is told, nothing is charged again
        b = rt.run_sync(_paying(charges, None), TASK, task_key="B")
        assert b.status == "escalated" and b.packet is not None
        assert "I6" in b.packet["cause"]
        # a rollback of A past the payment does not retry it either
        rt.rollback(a.run_id, 0, by="ops", loop=_paying(charges, None))
        again = rt.resume_sync(a.run_id, _paying(charges, None))
        assert again.status == "escalated"
    assert charges == ["I6"]


def test_a_refusal_of_a_keyless_effect_is_tried_again(url: str) -> None:
    # the outside world refused, having done nothing: the next run pays
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        assert rt.run_sync(_paying(charges, lw.RefusedError), TASK, task_key="A").status == (
            "escalated"
        )
        assert rt.run_sync(_paying(charges, None), TASK, task_key="B").status == "accepted"
    assert charges == ["I6", "I6"]
