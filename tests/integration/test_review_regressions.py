"""Regressions for bugs a review found in the engine, each once reproduced by a script: effect
cost kept when a run stops mid-effects, rollback giving failed actors and effects a fresh
start, the time budget bounding retries, cancel surfacing in-doubt effects and stopping a
cycle's effects, rollback reopening a cancelled run, held-out verifiers isolated from the
proposal, no effects after a crossed budget, and refunds judged by the payment's rule."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields

import loopwright as lw

FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02)
FIX_ALL = lw.Proposal.edit("doc", TARGET)
ALLOW_SPEND = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))

Step = lw.Proposal | Callable[[lw.Context], lw.Proposal]


class Script:
    """An actor playing one step per cycle (the last step repeats), recording its contexts."""

    def __init__(self, *steps: Step) -> None:
        self.steps = steps
        self.contexts: list[lw.Context] = []

    def __call__(self, ctx: lw.Context) -> lw.Proposal:
        self.contexts.append(ctx)
        step = self.steps[min(len(self.contexts), len(self.steps)) - 1]
        return step(ctx) if callable(step) else step


class Crash(BaseException):
    """A simulated process death: not an Exception, so nothing in the engine handles it."""


def make_loop(
    actor: Callable[..., Any],
    effects: Sequence[lw.Effect] = (),
    *,
    approvals: lw.ApprovalPolicy = ALLOW_SPEND,
    verifiers: Sequence[Any] = (fields,),
    retry: lw.RetryPolicy = FAST,
    budget: lw.Budget | None = None,
    actor_timeout_s: float | None = None,
) -> lw.Loop:
    return lw.Loop(
        name="fx",
        actor=actor,
        verifiers=list(verifiers),
        contract=lw.Contract(budget=budget or lw.Budget(max_cycles=4)),
        effects=list(effects),
        approvals=approvals,
        retry=retry,
        actor_timeout_s=actor_timeout_s,
    )


def journal(rt: lw.Runtime, run_id: str) -> dict[str, lw.store.JournalEntry]:
    return {e.key: e for e in rt.store.journal(run_id, kind="effect")}


def effect_notes(state: lw.TaskState) -> list[dict[str, Any]]:
    return [n for n in state.notes if n.get("kind") == "effect"]


def evidence(r: lw.RunResult) -> dict[str, Any]:
    assert r.packet is not None
    ev = r.packet["evidence"]
    assert isinstance(ev, dict)
    return ev


# --- t1: the cost of an effect that ran is kept when the run stops mid-effects ---------------
def _charges(second: Callable[[], Any]) -> tuple[lw.Effect, lw.Effect, list[str]]:
    calls: list[str] = []

    @lw.effect("charge", name="a")
    def a(x: int) -> lw.EffectResult:
        calls.append("a")
        return lw.EffectResult({"ok": 1}, lw.Usage(cost_usd=5.0))

    @lw.effect("charge", name="b")
    def b(x: int) -> Any:
        calls.append("b")
        return second()

    return a, b, calls


def test_budget_crossed_by_an_effect_stops_before_the_next_and_keeps_its_cost(
    rt: lw.Runtime,
) -> None:
    a, b, calls = _charges(lambda: {"ok": 2})
    actor = Script(lw.Proposal(edits=FIX_ALL.edits, effects=(a.call(x=1), b.call(x=1))))
    loop = make_loop(actor, [a, b], budget=lw.Budget(max_cycles=4, max_cost_usd=3.0))
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.stop_reason) == ("stopped", "budget_cost")
    assert calls == ["a"]  # b never ran once the budget was crossed
    assert r.spent.cost_usd == pytest.approx(5.0)
    [note] = effect_notes(r.state)
    assert (note["effect"], note["status"], note["result"]) == ("a", "done", {"ok": 1})
    ev = evidence(r)
    assert [d["name"] for d in ev["effects_done"]] == ["a"]
    assert ev["effects_done"][0]["usage"]["cost_usd"] == pytest.approx(5.0)
    assert "b" in r.packet["cause"] and "not run" in r.packet["cause"]
    entries = journal(rt, r.run_id)
    assert [e.data["name"] for e in entries.values()] == ["a"]
    assert rt.result(r.run_id).spent.cost_usd == pytest.approx(5.0)  # persisted too


def test_permanent_failure_after_a_costly_effect_keeps_its_cost_and_note(rt: lw.Runtime) -> None:
    def fail() -> Any:
        raise lw.PermanentError("nope")

    a, b, calls = _charges(fail)
    actor = Script(lw.Proposal(edits=FIX_ALL.edits, effects=(a.call(x=1), b.call(x=1))))
    r = rt.run_sync(make_loop(actor, [a, b]), TASK)
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert calls == ["a", "b"]
    assert r.spent.cost_usd == pytest.approx(5.0)
    [note] = effect_notes(r.state)  # the done effect only, not the failed one
    assert (note["effect"], note["status"]) == ("a", "done")
    ev = evidence(r)
    assert [d["name"] for d in ev["effects_done"]] == ["a"]
    # b takes no key: a failure that may have acted is in doubt (effects53)
    assert (ev["effect"]["name"], ev["effect"]["status"]) == ("b", "in_doubt")
    statuses = {e.data["name"]: e.status for e in journal(rt, r.run_id).values()}
    assert statuses == {"a": "done", "b": "in_doubt"}


# --- t2 / t2b: a rollback gives the redone cycle a fresh start -------------------------------
def test_rollback_after_the_actor_gave_up_calls_the_actor_again(rt: lw.Runtime) -> None:
    mode = {"broken": True}
    calls: list[int] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        if ctx.cycle == 1:
            return lw.Proposal.edit("doc", {"a": 1})
        if mode["broken"]:
            raise lw.PermanentError("bad prompt")
        return FIX_ALL

    loop = make_loop(actor)
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.cycles) == ("escalated", 1)
    assert calls == [1, 2]
    rec = rt.rollback(r.run_id, 1, by="alice", loop=loop)
    assert rec.status == "pending"
    mode["broken"] = False
    r2 = rt.resume_sync(r.run_id, loop)
    assert calls == [1, 2, 2]  # the actor was called again for cycle 2
    assert (r2.status, r2.cycles) == ("accepted", 2)


def test_rollback_after_transient_retries_ran_out_gives_a_fresh_retry_budget(
    rt: lw.Runtime,
) -> None:
    failures = {"left": 3}  # FAST allows 3 attempts: the first run gives up
    calls: list[int] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        if ctx.cycle == 1:
            return lw.Proposal.edit("doc", {"a": 1})
        if failures["left"]:
            failures["left"] -= 1
            raise lw.TransientError("503")
        return FIX_ALL

    loop = make_loop(actor)
    r = rt.run_sync(loop, TASK)
    assert r.status == "escalated"
    assert calls == [1, 2, 2, 2]
    rt.rollback(r.run_id, 1, by="alice", loop=loop)
    failures["left"] = 2  # two more failures, then success: needs a fresh budget of 3
    r2 = rt.resume_sync(r.run_id, loop)
    assert calls == [1, 2, 2, 2, 2, 2, 2]
    assert r2.accepted


def test_rollback_after_a_failed_effect_runs_it_again_under_a_new_generation(
    rt: lw.Runtime,
) -> None:
    # A run-scoped key (no key function: no store claim, the run's journal alone counts the
    # generations): a refusal retired by the rollback is redone under the next key, the one
    # handed to the outside world included (a provider keeps a refusal's answer by key).
    state = {"broken": True, "calls": 0}
    handed: list[str] = []

    def pay_fn(invoice: str, amount: float, key: str) -> dict[str, Any]:
        state["calls"] += 1
        handed.append(key)
        if state["broken"]:
            raise lw.RefusedError("422 bad account")
        return {"ok": 1}

    pay = lw.effect("spend", name="pay")(pay_fn)
    actor = Script(lw.Proposal(edits=FIX_ALL.edits, effects=(pay.call(invoice="A", amount=1.0),)))
    loop = make_loop(actor, [pay])
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.cycles, state["calls"]) == ("escalated", 0, 1)
    [failed_key] = journal(rt, r.run_id)
    assert journal(rt, r.run_id)[failed_key].status == "failed"

    rt.rollback(r.run_id, 0, by="al", loop=loop)
    state["broken"] = False
    r2 = rt.resume_sync(r.run_id, loop)
    assert state["calls"] == 2  # the effect was called again
    assert (r2.status, r2.cycles) == ("accepted", 1)
    entries = journal(rt, r.run_id)
    assert entries[failed_key].status == "retired"
    assert entries[f"{failed_key}~2"].status == "done"
    assert entries[f"{failed_key}~2"].data["result"] == {"ok": 1}
    key = failed_key.removeprefix("effect:")
    assert handed == [key, f"{key}~2"]  # not the refused key again


# --- t3: the time budget bounds the actor's retries, whatever its own timeout ----------------
@pytest.mark.parametrize(
    ("mode", "actor_timeout_s"),
    [
        ("transient_then_hang", None),  # the budget is the only bound on the call
        ("hang", 0.6),  # a timeout shorter than the budget: timeouts are retried
        ("slow_transient", 5.0),  # a timeout longer than the budget
    ],
)
def test_time_budget_bounds_actor_retries(
    rt: lw.Runtime, mode: str, actor_timeout_s: float | None
) -> None:
    release = threading.Event()  # lets an abandoned actor thread finish at teardown
    starts: list[float] = []
    returned: list[str] = []  # hung calls that came back (only once released)

    def actor(ctx: lw.Context) -> lw.Proposal:
        starts.append(time.monotonic())
        if mode == "transient_then_hang" and len(starts) == 1:
            time.sleep(0.8)
            raise lw.TransientError("503")
        if mode == "slow_transient":
            time.sleep(0.3)
            raise lw.TransientError("503")
        release.wait(60)  # far past the budget: only an engine that waited would see it return
        returned.append(mode)
        return FIX_ALL

    loop = make_loop(
        actor,
        retry=lw.RetryPolicy(attempts=20, backoff_s=0.01, max_backoff_s=0.02),
        budget=lw.Budget(max_seconds=1.0),
        actor_timeout_s=actor_timeout_s,
    )
    try:
        r = rt.run_sync(loop, TASK)
        assert not returned  # the run ended without waiting for the hung call
        n = len(starts)
        time.sleep(0.1)
        assert len(starts) == n  # nothing calls the actor once the run has ended
    finally:
        release.set()
    assert (r.status, r.stop_reason) == ("stopped", "budget_time")
    assert starts, "the actor was never called"
    # Never called after the deadline: each call takes at least its sleep or timeout (0.8,
    # 0.6, 0.3 s), so a 1 s budget leaves room for 2, 2, 4 starts, however loaded the machine.
    assert len(starts) <= {"transient_then_hang": 2, "hang": 2, "slow_transient": 4}[mode]


# --- t4: cancelling after a crash mid-effect surfaces the effect as in doubt -----------------
def test_cancel_after_crash_between_intent_and_result_reports_it_in_doubt(
    store_path: Path,
) -> None:
    paid: list[str] = []

    def pay_fn(invoice: str, amount: float, key: str) -> dict[str, Any]:
        paid.append(key)
        return {"ok": True}

    pay = lw.effect("spend", name="pay", compensate=lambda k, r, a: {"refunded": k})(pay_fn)
    actor = Script(lw.Proposal(edits=FIX_ALL.edits, effects=(pay.call(invoice="A", amount=5.0),)))
    loop = make_loop(actor, [pay])

    def hook(phase: str) -> None:
        if phase == "after_effect_intent":
            raise Crash

    crashed = lw.Runtime(str(store_path), lease_ttl_s=0.2)
    crashed._on_phase = hook
    with pytest.raises(Crash):
        crashed.run_sync(loop, TASK)
    [run] = crashed.store.list_runs()
    time.sleep(0.3)  # the dead process's lease expires

    rt = lw.Runtime(str(store_path))
    try:
        rec = rt.cancel(run.run_id, by="bob", loop=loop)
        assert rec.status == "cancelled"
        r = rt.result(run.run_id)
        [(key, entry)] = journal(rt, run.run_id).items()
        assert entry.status == "in_doubt"
        [doubt] = evidence(r)["effects_in_doubt"]
        assert doubt["key"] == key.removeprefix("effect:")
        assert doubt["effect"] == "pay"
        assert doubt["args"] == {"invoice": "A", "amount": 5.0}
        assert paid == []  # the crash came before the call: it is in doubt, not done
    finally:
        rt.close()


# --- t5: a cancel requested while the cycle is verified stops its effects --------------------
def test_cancel_requested_during_verification_prevents_the_effects(
    rt: lw.Runtime, store_path: Path
) -> None:
    paid: list[str] = []
    seen: list[lw.RunRecord] = []
    run_ids: list[str] = []

    def pay_fn(invoice: str, amount: float, key: str) -> dict[str, Any]:
        paid.append(key)
        return {"ok": True}

    pay = lw.effect("spend", name="pay")(pay_fn)

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        other = lw.Runtime(str(store_path))
        try:
            seen.append(other.cancel(run_ids[0], by="bob"))  # executing here: only requested
        finally:
            other.close()
        return fields(state, proposal)

    actor = Script(lw.Proposal(edits=FIX_ALL.edits, effects=(pay.call(invoice="A", amount=5.0),)))
    loop = make_loop(actor, [pay], verifiers=(verifier,))
    rec, _ = rt.create(loop, TASK)
    run_ids.append(rec.run_id)
    r = rt.resume_sync(rec.run_id, loop)
    [req] = seen
    assert (req.status, req.cancel_requested) == ("running", True)
    assert (r.status, r.stop_reason) == ("cancelled", "cancelled")
    assert paid == []
    assert journal(rt, r.run_id) == {}


# --- t7: a cancelled run that is rolled back resumes for real --------------------------------
def test_rolled_back_cancelled_run_resumes_and_calls_the_actor(rt: lw.Runtime) -> None:
    calls: list[int] = []
    mode = {"ask": True}

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        if ctx.cycle == 1:
            return lw.Proposal.edit("doc", {"a": 1})
        return lw.Proposal(question=lw.Question("which?")) if mode["ask"] else FIX_ALL

    loop = make_loop(actor)
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    assert rt.cancel(r.run_id, by="bob", loop=loop).status == "cancelled"
    rec = rt.rollback(r.run_id, 1, by="alice", loop=loop)
    assert (rec.status, rec.cancel_requested) == ("pending", False)
    mode["ask"] = False
    n = len(calls)
    r2 = rt.resume_sync(r.run_id, loop)
    assert calls[n:] == [2]
    assert (r2.status, r2.cycles) == ("accepted", 2)


# --- t8: a held-out verifier cannot leak into the actor's next context -----------------------
def test_heldout_verifier_mutating_the_proposal_does_not_reach_the_next_context(
    rt: lw.Runtime,
) -> None:
    ran: list[bool] = []

    def heldout(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        ran.append(True)
        proposal.edits[0].value["hint"] = "expected total is 42"  # held-out knowledge
        return lw.Verdict(passed=False, score=0.0)

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.1)

    actor = Script(lw.Proposal.edit("doc", {"a": {"v": 1}}), lw.Proposal(note="look"))
    loop = make_loop(
        actor,
        verifiers=(lw.Check(fn=heldout, held_out=True), visible),
        budget=lw.Budget(max_cycles=2),
    )
    rt.run_sync(loop, {"goal": "g", "artifacts": {"doc": {"a": {"v": 0}}}})
    assert ran
    assert len(actor.contexts) == 2
    assert actor.contexts[1].artifacts == {"doc": {"a": {"v": 1}}}


# --- t11: no effects once the verifiers crossed the budget -----------------------------------
def test_effects_do_not_start_once_the_verifiers_crossed_the_budget(rt: lw.Runtime) -> None:
    ran: list[str] = []

    def notify(to: str) -> lw.EffectResult:
        ran.append(to)
        return lw.EffectResult({"sent": to}, lw.Usage(cost_usd=5.0))

    eff = lw.effect("notify", name="notify", requires_success=False)(notify)

    def costly(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.2, usage=lw.Usage(cost_usd=2.0))

    actor = Script(
        lw.Proposal(edits=(lw.Edit("doc", "a", 1),), effects=(eff.call(to="x"), eff.call(to="y")))
    )
    loop = make_loop(
        actor, [eff], verifiers=(costly,), budget=lw.Budget(max_cost_usd=1.0, max_cycles=5)
    )
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.stop_reason) == ("stopped", "budget_cost")
    assert ran == []
    assert r.spent.cost_usd == pytest.approx(2.0)
    assert journal(rt, r.run_id) == {}
    assert len(actor.contexts) == 1


# --- t13: a refund is governed by the rule that governed the payment -------------------------
def _paid_then_rolled_back(
    rt: lw.Runtime, rules: tuple[lw.PolicyRule, ...]
) -> tuple[lw.Loop, str, list[str]]:
    refunds: list[str] = []

    def refund(key: str, result: Any, args: Any) -> dict[str, Any]:
        refunds.append(key)
        return {"refunded": key}

    pay = lw.effect("spend", name="pay", compensate=refund)(lambda invoice, amount: {"ok": 1})
    actor = Script(lw.Proposal(edits=FIX_ALL.edits, effects=(pay.call(invoice="A", amount=500.0),)))
    loop = make_loop(actor, [pay], approvals=lw.ApprovalPolicy(rules))
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    assert [a.rule for a in rt.store.approvals(run_id=r.run_id)] == ["big-pay"]
    rt.approve(r.run_id, by="x")
    assert rt.resume_sync(r.run_id, loop).status == "accepted"
    return loop, r.run_id, refunds


BIG_PAY = lw.PolicyRule(kind="spend", effect="pay", above=100, action="require", name="big-pay")
OTHER_SPEND = lw.PolicyRule(kind="spend", action="allow", name="other-spend")


def test_refund_needs_the_approval_its_payment_needed(rt: lw.Runtime) -> None:
    loop, run_id, refunds = _paid_then_rolled_back(rt, (BIG_PAY, OTHER_SPEND))
    rec = rt.rollback(run_id, 0, by="al", loop=loop)
    assert rec.status == "awaiting_approval"
    offers = rt.result(run_id).state.pending["offers"]
    assert [(o["effect"], o["action"], o["rule"]) for o in offers] == [
        ("pay", "require", "big-pay")
    ]
    comp = [a for a in rt.store.approvals(run_id=run_id) if a.kind == "compensation"]
    assert [(a.rule, a.status) for a in comp] == [("big-pay", "pending")]
    assert refunds == []  # nothing refunded before a person approves


def test_rule_naming_the_compensation_overrides_the_payments_rule(rt: lw.Runtime) -> None:
    refund_ok = lw.PolicyRule(kind="spend", effect="pay.compensate", action="allow", name="refund")
    loop, run_id, refunds = _paid_then_rolled_back(rt, (BIG_PAY, refund_ok, OTHER_SPEND))
    rec = rt.rollback(run_id, 0, by="al", loop=loop)
    assert rec.status != "awaiting_approval"
    offers = rt.result(run_id).state.pending["offers"]
    assert [(o["effect"], o["action"], o["rule"]) for o in offers] == [("pay", "allow", "refund")]
    assert not [a for a in rt.store.approvals(run_id=run_id) if a.kind == "compensation"]
    rt.resume_sync(run_id, loop)
    assert len(refunds) == 1  # the refund ran without a person
