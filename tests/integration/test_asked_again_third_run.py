"""A reuse asked again while a third run holds the action's key says what approving does then:
it runs nothing here (SQLite and PostgreSQL).

B was approved as reusing A's payment of I6; A was refunded, so B is asked again (newuser47).
Meanwhile C took I6 again and its attempt is in doubt (a transient failure of a payment with no
reconcile hook). B's request said "approving now runs it again"; approved, B ran nothing: the
key is C's, so B's payment was in doubt and the run stopped for a person. The request now names
C and says that approving runs nothing here (C's result reused if done by then, else a person
checks).
"""

from __future__ import annotations

from typing import Any

from test_approval_card_done_already import _loop
from test_approval_card_reuse_gone import TASK, _b_told_reuse_then_refunded, _pending

import loopwright as lw
from loopwright import _gates


def _failing_payer(paid: list[str]) -> lw.Loop:
    """``_loop``'s payer (same effect, key and kind), whose payment fails transiently having
    maybe acted: in doubt, its claim held."""
    base = _loop(paid)

    @lw.effect("spend", name="pay", key=lambda a: f"pay:{a['invoice']}")
    def pay(invoice: str, amount: float, memo: str = "") -> dict[str, Any]:
        paid.append(f"?{invoice}")
        raise ConnectionError("the provider hung up")

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"status": "paid"}).edits,
            effects=(pay.call(invoice="I6", amount=10.0),),
        )

    return lw.Loop(
        name="payer",
        actor=actor,
        verifiers=base.verifiers,
        contract=base.contract,
        effects=[pay],
        approvals=base.approvals,
    )


def test_a_reuse_asked_again_while_a_third_run_holds_the_key_says_it_runs_nothing(
    url: str,
) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        b = _b_told_reuse_then_refunded(rt, loop, paid)
        other = _failing_payer(paid)
        c = rt.run_sync(other, TASK, task_key="C").run_id
        rt.approve(c, by="ann")
        rt.resume_sync(c, other)
        claim = rt.store.effect_claim("spend", "pay:pay:I6")
        assert claim is not None and (claim.run_id, claim.status) == (c, "in_doubt")
        rt.approve(b, by="dan")
        rt.resume_sync(b, loop)
        [again] = _pending(rt, b)
        assert "undone since" in again.why, again.why
        # before: "... so approving now runs it again"
        assert "runs it again" not in again.why, again.why
        assert f"run {c[:12]} has taken it again" in again.why, again.why
        assert "(its attempt is in doubt)" in again.why
        assert "approving does not run it here" in again.why
        # and so it is: approved, nothing is paid; the key is C's, a person checks
        before = list(paid)
        rt.approve(b, by="dan", approval_id=again.approval_id)
        done = rt.resume_sync(b, loop)
        assert paid == before
        assert done.status == "escalated", done.status
        assert f"held by run {c}" in str(done.packet), done.packet


def test_the_text_follows_the_claim() -> None:
    """Each state of the key's claim, the words of the request asked again."""

    class Claims:
        def __init__(self, claim: lw.store.EffectClaim | None) -> None:
            self.claim = claim

        def effect_claim(self, kind: str, key: str) -> lw.store.EffectClaim | None:
            return self.claim

    loop = _loop([])
    [eff] = loop.effects
    call = eff.call(invoice="I6", amount=10.0)

    def said(run: str, status: str | None) -> str:
        claim = None if status is None else lw.store.EffectClaim(run, status, 2)
        return _gates.asked_again(Claims(claim), "B" * 16, 1, eff, call)  # type: ignore[arg-type]

    assert said("A", None).endswith("approving now runs it again")  # the key is free
    assert said("A" * 16, "compensated").endswith("approving now runs it again")
    assert said("A" * 16, "failed").endswith("approving now runs it again")
    assert "until then the run stops for a person" in said("A" * 16, "undoing")
    for status, words in (("claimed", "under way"), ("in_doubt", "in doubt")):
        text = said("C" * 16, status)
        assert "runs it again" not in text, text
        assert f"run {'C' * 12} has taken it again under its key since (its attempt is " in text
        assert f"(its attempt is {words})" in text
