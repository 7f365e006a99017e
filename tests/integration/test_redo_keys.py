"""The redo of an undone business action gets a key no run was handed before, whichever run asks.

From review (refundkey43): the generation of a redo (``pay:I6~2``) was counted in the run's own
journal while the claim of the action is the store's, so a run (or a fork) paying an invoice
another run had refunded handed the provider the refunded charge's key ("pay:I6"): a provider
that deduplicates by key, as Stripe does, answered with the refunded charge, no money moved,
and loopwright recorded the payment done. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from doc_loop import TASK

import loopwright as lw

PO = lw.Question("Which PO governs?", choices=("PO-1", "PO-2"))
ALLOW = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))


class Provider:
    """A payment provider that deduplicates by idempotency key, as Stripe does: a request
    with a key it has seen gets that charge back, refunded or not, and moves no money."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.charges: dict[str, dict[str, Any]] = {}

    def pay(self, invoice: str, amount: float, key: str) -> dict[str, Any]:
        self.asked.append(key)
        if key not in self.charges:
            self.charges[key] = {"id": f"ch-{len(self.charges) + 1}", "amount": amount}
        return dict(self.charges[key])

    def refund(self, key: str, result: Any, args: dict[str, Any]) -> dict[str, Any]:
        charge = self.charges[key]
        assert charge["id"] == result["id"], "the refund names another charge"
        charge["refunded"] = True
        return {"refunded": charge["id"]}

    def collected(self) -> float:
        return sum(c["amount"] for c in self.charges.values() if not c.get("refunded"))


class Crash(BaseException):
    """Stands in for the process dying."""


def paying(
    provider: Provider,
    *,
    idempotent: bool = False,
    staged: bool = False,
    approvals: lw.ApprovalPolicy = ALLOW,
    **declared: Any,
) -> lw.Loop:
    """A loop paying invoice I6 (5.0) in its first cycle (``staged``: its second, after an
    edit), then asking a question, so that the run parks with the payment done. ``declared``:
    more of the effect's declaration."""
    pay = lw.effect(
        "spend",
        name="pay",
        key=lambda a: a["invoice"],
        compensate=provider.refund,
        requires_success=False,
        idempotent=idempotent,
        **declared,
    )(provider.pay)
    pays = lw.Proposal(
        edits=(lw.Edit("doc", "b", 2),), effects=(pay.call(invoice="I6", amount=5.0),)
    )
    asked: list[int] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        asked.append(ctx.cycle)
        if staged and ctx.artifacts["doc"]["a"] != 1:
            return lw.Proposal.edit("doc", {"a": 1})
        if ctx.artifacts["doc"]["b"] != 2:
            return pays
        return lw.Proposal(question=PO)

    return lw.Loop(
        name="redo",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=False, score=0.5)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
        effects=[pay],
        approvals=approvals,
    )


def pay_then_refund(rt: lw.Runtime, provider: Provider) -> lw.RunResult:
    """A run pays I6 and parks; cancelled, it refunds its payment."""
    loop = paying(provider)
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    rt.cancel(r.run_id, by="ops", loop=loop)
    assert rt.resume_sync(r.run_id, loop).status == "cancelled"
    return r


def redo_then_refund(rt: lw.Runtime, provider: Provider) -> None:
    """A run pays I6 in its second cycle, is rolled back (its refund) and pays again in the
    run (its own "~2"), then is cancelled (the refund of ~2)."""
    loop = paying(provider, staged=True)
    a = rt.run_sync(loop, TASK)
    assert a.status == "awaiting_approval" and provider.asked == ["pay:I6"]
    rt.rollback(a.run_id, 1, by="ops", loop=loop)
    assert rt.resume_sync(a.run_id, loop).status == "awaiting_approval"
    assert provider.asked == ["pay:I6", "pay:I6~2"] and provider.collected() == 5.0
    rt.cancel(a.run_id, by="ops", loop=loop)
    assert rt.resume_sync(a.run_id, loop).status == "cancelled"
    assert provider.collected() == 0


def dying(url: str, phase: str) -> lw.Runtime:
    """A runtime whose process "dies" (``Crash``) the first time a cycle reaches ``phase``."""

    def die(at: str) -> None:
        if at == phase:
            raise Crash

    rt = lw.Runtime(url)
    rt._on_phase = die
    return rt


def crash_b(url: str, loop: lw.Loop, phase: str) -> lw.Runtime:
    """Run B of ``loop`` (task key "B") dies at ``phase`` of its first effect; its runtime is
    returned open (the caller closes it)."""
    crashed = dying(url, phase)
    with pytest.raises(Crash):
        crashed.run_sync(loop, TASK, task_key="B")
    return crashed


def as_before_the_generation(rt: lw.Runtime, url: str) -> int:
    """Put the store back as the release before the store-wide generation left it: the column
    and what the journal recorded of it gone, the schema version before its step (returned;
    the latest when this release has no such step)."""
    from loopwright.store._pg_schema import PG_MIGRATIONS
    from loopwright.store._schema import SQLITE_MIGRATIONS

    pg = url.startswith("postgres")
    steps = PG_MIGRATIONS if pg else SQLITE_MIGRATIONS
    before = next(
        (i for i, s in enumerate(steps) if any("effect_keys ADD COLUMN" in t for t in s)),
        len(steps),
    )
    strip = (
        "(data::jsonb - 'call_key' - 'generation')::json"
        if pg
        else "json_remove(data, '$.call_key', '$.generation')"
    )
    with rt.store._tx() as conn:  # type: ignore[attr-defined]
        if before < len(steps):
            conn.execute("ALTER TABLE effect_keys DROP COLUMN generation")
        conn.execute(f"UPDATE journal SET data = {strip} WHERE kind = 'effect'")
        conn.execute(f"UPDATE loopwright_meta SET value = '{before}' WHERE key = 'schema_version'")
    return len(steps)


class Hung(Provider):
    """A provider whose charges, once ``hang`` is set, hang until ``gate`` opens."""

    def __init__(self) -> None:
        super().__init__()
        self.hang, self.gate = False, threading.Event()
        self.hung: list[str] = []  # the keys of the charges that hung

    def pay(self, invoice: str, amount: float, key: str) -> dict[str, Any]:
        if self.hang:
            self.hung.append(key)
            self.gate.wait()  # until the test ends: only the engine's timeout ends the call
        return super().pay(invoice, amount, key)


def test_a_redo_still_running_past_its_timeout_names_the_key_it_was_handed(url: str) -> None:
    # Its cause named the run's journal key ("pay:I6", the run's own first try), not the key
    # the hung call was handed ("pay:I6~2"), by which a person asks the provider.
    provider = Hung()
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
        provider.hang = True
        loop = paying(provider, timeout_s=0.05, reconcile=lambda key: None)
        try:
            b = rt.run_sync(loop, TASK, task_key="B")
        finally:
            provider.gate.set()
    assert provider.hung == ["pay:I6~2"]  # (not run again)
    assert (b.status, b.stop_reason) == ("escalated", "escalated")
    assert b.packet is not None
    assert "pay (pay:I6~2) timed out and its call is still running" in b.packet["cause"]


def test_a_redos_refund_request_names_the_key_it_was_handed(url: str) -> None:
    # The request a person approves named the run's journal key ("pay:I6"), not the key of
    # the charge the refund undoes ("pay:I6~2"), by which the person checks the provider.
    provider = Provider()
    refunds = lw.ApprovalPolicy(
        (
            lw.PolicyRule(kind="spend", effect="pay.compensate", action="require", name="r"),
            lw.PolicyRule(kind="spend", effect="pay", action="allow"),
        )
    )
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
        loop = paying(provider, approvals=refunds)
        b = rt.run_sync(loop, TASK, task_key="B")
        assert b.status == "awaiting_approval"
        rt.cancel(b.run_id, by="ops", loop=loop)
        [req] = [
            a
            for a in rt.store.approvals(run_id=b.run_id)
            if a.kind == "compensation" and a.status == "pending"
        ]
    assert provider.asked == ["pay:I6", "pay:I6~2"]
    assert req.what.endswith("key pay:I6~2)"), req.what


def test_another_run_redoing_a_refunded_payment_pays_under_a_fresh_key(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
        assert (provider.asked, provider.collected()) == (["pay:I6"], 0)
        b = rt.run_sync(paying(provider), TASK)  # run B pays the invoice again
        assert provider.asked == ["pay:I6", "pay:I6~2"]
        assert provider.collected() == 5.0  # money moved: not the refunded charge handed back
        [entry] = rt.store.journal(b.run_id, kind="effect")
        assert (entry.status, entry.data["call_key"]) == ("done", "pay:I6~2")
        assert entry.data["result"]["id"] == "ch-2"
        [started] = [e.data for e in rt.store.events(b.run_id) if e.kind == "effect_started"]
        assert (started["key"], started["call_key"]) == ("pay:I6", "pay:I6~2")
        # B refunds its own charge (its key), and a third run pays under a third key
        rt.cancel(b.run_id, by="ops", loop=paying(provider))
        assert rt.resume_sync(b.run_id, paying(provider)).status == "cancelled"
        assert provider.collected() == 0 and provider.charges["pay:I6~2"]["refunded"]
        rt.run_sync(paying(provider), TASK)
        assert provider.asked == ["pay:I6", "pay:I6~2", "pay:I6~3"]
        assert provider.collected() == 5.0
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and (claim.status, claim.generation) == ("done", 3)


def test_a_redo_after_a_runs_own_redo_was_refunded_takes_the_higher_generation(
    url: str,
) -> None:
    # Run A pays, is rolled back (refund) and pays again in the run (its own "~2"), then is
    # cancelled (refund of ~2). Run B must not start again at "~2", nor at the first key.
    provider = Provider()
    with lw.Runtime(url) as rt:
        redo_then_refund(rt, provider)
        rt.run_sync(paying(provider), TASK)
        assert provider.asked == ["pay:I6", "pay:I6~2", "pay:I6~3"]
        assert provider.collected() == 5.0


def test_a_crash_between_the_call_and_its_result_resumes_with_the_same_key(url: str) -> None:
    # Run B's redo of the refunded payment is charged under its fresh key, then the process
    # dies before the result is recorded. The resume (an idempotent effect: run again) hands
    # the provider the key it journaled with the intent: the charge is made once.
    provider = Provider()
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
    crash_b(url, paying(provider, idempotent=True), "before_effect_result").close()
    assert provider.asked == ["pay:I6", "pay:I6~2"] and provider.collected() == 5.0
    with lw.Runtime(url) as rt:
        run = rt.store.get_run("B")
        [intent] = rt.store.journal(run.run_id, kind="effect")
        assert (intent.status, intent.data["call_key"]) == ("intent", "pay:I6~2")
        out = rt.resume_sync(run.run_id, paying(provider, idempotent=True))
        assert out.status == "awaiting_approval"
        assert provider.asked == ["pay:I6", "pay:I6~2", "pay:I6~2"]  # the same key again
        assert len(provider.charges) == 2 and provider.collected() == 5.0  # charged once
        [entry] = rt.store.journal(run.run_id, kind="effect")
        assert entry.status == "done" and entry.data["result"]["id"] == "ch-2"


def test_a_redo_left_in_doubt_names_the_key_the_provider_knows(url: str) -> None:
    # Not idempotent, no reconcile hook: after the crash a person checks with the provider,
    # by the key the redo was handed, not the refunded charge's
    provider = Provider()
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
    crash_b(url, paying(provider), "before_effect_result").close()
    with lw.Runtime(url) as rt:
        run = rt.store.get_run("B")
        out = rt.resume_sync(run.run_id, paying(provider))
        assert out.status == "escalated" and out.packet is not None
        assert "pay (pay:I6~2) started before a crash" in out.packet["cause"]
    assert provider.asked == ["pay:I6", "pay:I6~2"]  # not run again


def test_a_claim_read_before_another_run_took_the_action_asks_for_the_next_key(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The claim a run reads before its intent may be stale by the intent's write (another run
    # took the refunded action, and refunded it, between the two): the write refuses the
    # generation it was asked for, writes nothing, and the run asks for the next one.
    from loopwright.store import EffectClaim

    provider = Provider()
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
        pay_then_refund(rt, provider)
        assert provider.asked == ["pay:I6", "pay:I6~2"]
        stale = EffectClaim("someone", "compensated", 1)  # as read before the second run
        monkeypatch.setattr(rt.store, "effect_claim", lambda kind, key: stale)
        c = rt.run_sync(paying(provider), TASK)
        assert c.status == "awaiting_approval"
        assert provider.asked == ["pay:I6", "pay:I6~2", "pay:I6~3"]
        assert provider.collected() == 5.0


def test_a_declined_payment_is_tried_again_under_the_next_key(url: str) -> None:
    # A refusal never happened, and a provider keeps its answer by key (Stripe declines the
    # same key again for a day): another run tries again under the next generation's key
    provider = Provider()
    declined: list[str] = []

    def decline(invoice: str, amount: float, key: str) -> dict[str, Any]:
        declined.append(key)
        raise lw.RefusedError("card declined")

    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
        bad = paying(provider)
        bad.effects[0].fn = decline
        rt.run_sync(bad, TASK)
        assert declined == ["pay:I6~2"]
        rt.run_sync(paying(provider), TASK)
        assert provider.asked == ["pay:I6", "pay:I6~3"] and provider.collected() == 5.0


def test_a_business_key_ending_as_a_redo_is_refused(url: str) -> None:
    # "I6~2" would be the provider key of invoice I6's second payment
    provider = Provider()
    pay = lw.effect("spend", name="pay", key=lambda a: a["invoice"])(provider.pay)
    loop = lw.Loop(
        name="tilde",
        actor=lambda ctx: lw.Proposal(effects=(pay.call(invoice="I6~2", amount=5.0),)),
        verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
        effects=[pay],
        approvals=ALLOW,
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK)
    assert r.status == "escalated" and provider.asked == []
    assert r.packet is not None
    assert "'pay:I6~2'" in r.packet["cause"] and "ends in '~' and a number" in r.packet["cause"]
    assert r.packet["cause"].startswith("an effect's key cannot be used:")


def test_an_upgraded_store_hands_out_no_generation_its_runs_had(url: str) -> None:
    # A store written before the generation was the store's: run A paid, was rolled back
    # (refund), paid again as "~2" in the run, and was cancelled (refund of ~2). Opened by
    # this release, the claim's generation is what A's journal handed out, so run B pays
    # under "~3" (a generation counted from 1 would hand the provider A's refunded "~2").
    provider = Provider()
    with lw.Runtime(url) as rt:
        redo_then_refund(rt, provider)
        latest = as_before_the_generation(rt, url)
    with lw.Runtime(url) as rt:  # opening it migrates
        assert rt.store.schema_version == latest  # type: ignore[attr-defined]
        rt.run_sync(paying(provider), TASK)
    assert provider.asked == ["pay:I6", "pay:I6~2", "pay:I6~3"]
    assert provider.collected() == 5.0


def test_an_intent_an_earlier_release_journaled_is_settled_under_its_own_key(url: str) -> None:
    # Run B crashed after journaling its intent, under a release that counted generations in
    # the run: its attempt was handed its journal key ("pay:I6"). The upgrade sets the claim's
    # generation from A's journal ("~2"), but B's resume must ask about, and if need be make,
    # the very attempt it journaled: the key that intent was handed, not a new one.
    provider = Provider()
    asked: list[str] = []

    def check(key: str) -> dict[str, Any] | None:
        asked.append(key)
        return None  # not made: run it (under the same key)

    def reconciled(p: Provider) -> lw.Loop:
        loop = paying(p)
        loop.effects[0].reconcile_fn = check
        return loop

    with lw.Runtime(url) as rt:
        redo_then_refund(rt, provider)
    crashed = crash_b(url, reconciled(provider), "after_effect_intent")
    as_before_the_generation(crashed, url)
    crashed.close()
    assert provider.asked == ["pay:I6", "pay:I6~2"]  # B's attempt never reached the call
    with lw.Runtime(url) as rt:  # migrates: the claim's generation is A's "~2"
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and (claim.status, claim.generation) == ("claimed", 2)
        run = rt.store.get_run("B")
        assert rt.resume_sync(run.run_id, reconciled(provider)).status == "awaiting_approval"
    assert asked == ["pay:I6"]  # the key B's intent was handed
    assert provider.asked == ["pay:I6", "pay:I6~2", "pay:I6"]


def test_a_store_from_before_claims_frees_and_counts_what_its_runs_refunded(url: str) -> None:
    # From review (review43): a store written before keys were claimed store-wide kept no
    # "action" in its journal entries. Run A paid I6, was rolled back (refund) and paid it
    # again ("~2"), all under that release. After the upgrade A is cancelled and refunds ~2:
    # the refund found no "action" to free, so the claim stayed A's "done" and run B was
    # handed A's refunded result (nothing paid); and the generation backfill read only
    # entries with an "action", so a freed claim would have handed B A's refunded "~2".
    from test_effect_keys import as_before_claims

    provider = Provider()
    loop = paying(provider, staged=True)
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK)
        rt.rollback(a.run_id, 1, by="ops", loop=loop)
        assert rt.resume_sync(a.run_id, loop).status == "awaiting_approval"
        assert provider.asked == ["pay:I6", "pay:I6~2"] and provider.collected() == 5.0
        as_before_claims(rt, url)
    with lw.Runtime(url) as rt:  # opening it migrates
        rt.cancel(a.run_id, by="ops", loop=loop)
        assert rt.resume_sync(a.run_id, loop).status == "cancelled"
        assert provider.collected() == 0
        b = rt.run_sync(paying(provider), TASK)
        assert b.status == "awaiting_approval"
    assert provider.asked == ["pay:I6", "pay:I6~2", "pay:I6~3"]
    assert provider.collected() == 5.0


def test_a_store_from_before_claims_counts_an_action_it_left_refunded(url: str) -> None:
    # The same release's run A paid I6 and was cancelled (refunded): its entries claimed
    # nothing (a refund frees the key), so the upgrade left no claim to count the generation
    # on, and run B paid under A's refunded key: the provider answered with the refund.
    from test_effect_keys import as_before_claims

    provider = Provider()
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
        as_before_claims(rt, url)
    with lw.Runtime(url) as rt:
        rt.run_sync(paying(provider), TASK)
    assert provider.asked == ["pay:I6", "pay:I6~2"]
    assert provider.collected() == 5.0


@pytest.mark.parametrize("phase", ["before_effect_result", "after_effect_result"])
def test_a_payment_whose_refund_was_interrupted_is_not_handed_to_another_run(
    url: str, phase: str
) -> None:
    # Run A's refund reached the provider and the process died: before its result was
    # recorded, or after it, before the payment was marked undone (two writes). Run B, asking
    # for the invoice before A is resumed, read the claim "done" and recorded A's charge as
    # its payment: the refunded ch-1, no money moved, the invoice reported paid.
    provider = Provider()
    with lw.Runtime(url) as rt:
        a = rt.run_sync(paying(provider), TASK)
        rt.cancel(a.run_id, by="ops", loop=paying(provider))
    crashed = dying(url, phase)
    with pytest.raises(Crash):
        crashed.resume_sync(a.run_id, paying(provider))
    crashed.close()
    assert provider.charges["pay:I6"]["refunded"]
    with lw.Runtime(url) as rt:
        b = rt.run_sync(paying(provider), TASK)
        [entry] = rt.store.journal(b.run_id, kind="effect")
        assert entry.status == "in_doubt" and "result" not in entry.data
        assert b.status == "escalated" and b.packet is not None
        assert f"pay (pay:I6) is being undone by run {a.run_id}" in b.packet["cause"]
        assert provider.asked == ["pay:I6"]  # not run again while the undoing is unsettled
        assert rt.resume_sync(a.run_id, paying(provider)).status == "cancelled"
        if phase == "after_effect_result":  # A's refund settles: a third run pays again
            rt.run_sync(paying(provider), TASK)
            assert provider.asked == ["pay:I6", "pay:I6~2"] and provider.collected() == 5.0


def test_a_refund_that_fails_leaves_the_payment_to_be_reused(url: str) -> None:
    # The refund is declined: the payment stands, and another run asking for the invoice
    # reuses it (the claim, marked "undoing" while the refund ran, is "done" again)
    provider = Provider()

    def decline(key: str, result: Any, args: dict[str, Any]) -> Any:
        raise lw.RefusedError("refund declined")

    def declining() -> lw.Loop:
        loop = paying(provider)
        loop.effects[0].compensate_fn = decline
        return loop

    with lw.Runtime(url) as rt:
        a = rt.run_sync(declining(), TASK)
        rt.cancel(a.run_id, by="ops", loop=declining())
        rt.resume_sync(a.run_id, declining())
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "done"
        b = rt.run_sync(paying(provider), TASK)
        [entry] = rt.store.journal(b.run_id, kind="effect")
        assert entry.status == "done" and entry.data["result"]["id"] == "ch-1"
        assert entry.data["from_run"] == a.run_id and provider.asked == ["pay:I6"]


def test_a_key_held_by_a_run_that_took_it_after_the_claim_was_read_names_its_key(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run B took the refunded payment under "pay:I6~2" and died before its result: its claim
    # is in flight. Run C read the claim before B took it (none, here: placed by the stub), so
    # it would hand out "pay:I6"; its intent finds the key held by B. The entry, its event and
    # the cause named "pay:I6", a key B was never handed: they name B's "pay:I6~2", the one a
    # person checks with the provider.
    provider = Provider()
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
    crash_b(url, paying(provider), "before_effect_result").close()
    with lw.Runtime(url) as rt:
        b = rt.store.get_run("B")
        monkeypatch.setattr(rt.store, "effect_claim", lambda kind, key: None)
        c = rt.run_sync(paying(provider), TASK, task_key="C")
        [entry] = rt.store.journal(c.run_id, kind="effect")
        assert (entry.status, entry.data["call_key"]) == ("in_doubt", "pay:I6~2")
        assert f"pay (pay:I6~2) is held by run {b.run_id}" in entry.data["cause"]
        [doubt] = [e.data for e in rt.store.events(c.run_id) if e.kind == "effect_in_doubt"]
        assert (doubt["key"], doubt["call_key"]) == ("pay:I6", "pay:I6~2")
        assert "pay (pay:I6~2)" in doubt["cause"]
    assert provider.asked == ["pay:I6", "pay:I6~2"]  # not run here


def test_a_result_reused_from_a_run_that_took_the_key_after_the_read_names_its_key(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As above, B's payment under "pay:I6~2" done: C reuses B's result, and records the key
    # that result was made under, not the "pay:I6" it read before B took the action.
    provider = Provider()
    with lw.Runtime(url) as rt:
        pay_then_refund(rt, provider)
        b = rt.run_sync(paying(provider), TASK, task_key="B")
        monkeypatch.setattr(rt.store, "effect_claim", lambda kind, key: None)
        c = rt.run_sync(paying(provider), TASK, task_key="C")
        [entry] = rt.store.journal(c.run_id, kind="effect")
        assert (entry.status, entry.data["from_run"]) == ("done", b.run_id)
        assert entry.data["call_key"] == "pay:I6~2" and entry.data["result"]["id"] == "ch-2"
        [reused] = [e.data for e in rt.store.events(c.run_id) if e.kind == "effect_reused"]
        assert reused["call_key"] == "pay:I6~2"
    assert provider.asked == ["pay:I6", "pay:I6~2"]
