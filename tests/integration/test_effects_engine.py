"""Effects through the engine over a real SQLite store: policy, journal, failures, in-doubt
recovery after a simulated crash, and classified retries of actors and verifiers."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields

import loopwright as lw
from loopwright._owners import PROCESS_SPACE

FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02)
ONCE = lw.RetryPolicy(attempts=1)
FIX_ALL = lw.Proposal.edit("doc", TARGET)
LOOK = lw.Proposal(note="look")
# spend under 100 runs freely, above needs a person; a custom kind is allowed by default
POLICY = lw.ApprovalPolicy(
    (
        lw.PolicyRule(kind="spend", action="require", above=100, name="big-spend"),
        lw.PolicyRule(kind="spend", action="allow", name="small-spend"),
    )
)

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


def with_effects(base: lw.Proposal, *calls: lw.EffectCall) -> lw.Proposal:
    return lw.Proposal(edits=base.edits, note=base.note, effects=calls)


def make_loop(
    actor: Callable[..., Any],
    effects: Sequence[lw.Effect] = (),
    *,
    approvals: lw.ApprovalPolicy = POLICY,
    verifiers: Sequence[Any] = (fields,),
    retry: lw.RetryPolicy = FAST,
    max_cycles: int = 4,
) -> lw.Loop:
    return lw.Loop(
        name="fx",
        actor=actor,
        verifiers=list(verifiers),
        contract=lw.Contract(budget=lw.Budget(max_cycles=max_cycles)),
        effects=list(effects),
        approvals=approvals,
        retry=retry,
    )


class Payments:
    """A fake payment provider: records every execution, can be told to fail."""

    def __init__(self) -> None:
        self.executed: list[dict[str, Any]] = []
        self.failures: list[BaseException] = []  # raised (in order) before succeeding

    def pay(self, invoice: str, amount: float, key: str) -> dict[str, Any]:
        self.executed.append({"invoice": invoice, "amount": amount, "key": key})
        if self.failures:
            raise self.failures.pop(0)
        return {"paid": invoice, "amount": amount, "ref": f"tx-{len(self.executed)}"}

    def effect(self, kind: str = "spend", **options: Any) -> lw.Effect:
        return lw.effect(kind, name="pay", **options)(self.pay)


def kinds(rt: lw.Runtime, run_id: str) -> list[str]:
    return [e.kind for e in rt.store.events(run_id)]


def events(rt: lw.Runtime, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(run_id) if e.kind == kind]


def records(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [c.record for c in rt.store.checkpoints(run_id) if c.record and "proposal" in c.record]


def journal(rt: lw.Runtime, run_id: str) -> dict[str, lw.store.JournalEntry]:
    return {e.key: e for e in rt.store.journal(run_id, kind="effect")}


def escalated(r: lw.RunResult) -> dict[str, Any]:
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None
    assert r.packet["cause"]
    return r.packet


# --- 1. effects under the policy ---------------------------------------------------------------
def test_allowed_spend_runs_once_on_success_and_is_recorded(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=40.0)))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    assert (r.status, r.cycles) == ("accepted", 1)
    assert len(bank.executed) == 1
    assert bank.executed[0]["key"].startswith("pay:")
    rec = records(rt, r.run_id)[-1]
    assert rec["decision"] == "accepted"
    [outcome] = rec["effects"]
    assert outcome["status"] == "done"
    assert outcome["result"] == {"paid": "A-1", "amount": 40.0, "ref": "tx-1"}
    assert next(n for n in r.state.notes if n["kind"] == "effect")["result"]["ref"] == "tx-1"
    [entry] = journal(rt, r.run_id).values()
    assert (entry.status, entry.attempts, entry.data["result"]["ref"]) == ("done", 1, "tx-1")
    assert kinds(rt, r.run_id).count("effect_done") == 1
    # an ended run is never driven again
    rt.resume_sync(r.run_id, make_loop(actor, [pay]))
    assert len(bank.executed) == 1


def test_effect_result_reaches_the_next_context(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect(requires_success=False)
    actor = Script(with_effects(LOOK, pay.call(invoice="A-1", amount=5.0)), FIX_ALL)
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    assert r.accepted
    assert len(bank.executed) == 1
    notes = [n for n in actor.contexts[1].notes if n.get("kind") == "effect"]
    assert len(notes) == 1
    assert notes[0]["effect"] == "pay"
    assert notes[0]["cycle"] == 1
    assert notes[0]["result"]["ref"] == "tx-1"
    assert notes[0]["reused"] is False


def test_unaccepted_cycle_holds_requires_success_effects_only(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()  # requires_success=True (the default)
    logged: list[str] = []
    log = lw.effect("audit_log", name="log", requires_success=False)(
        lambda msg: logged.append(msg) or msg
    )
    actor = Script(
        with_effects(LOOK, pay.call(invoice="A-1", amount=5.0), log.call(msg="cycle 1")),
        FIX_ALL,
    )
    r = rt.run_sync(make_loop(actor, [pay, log]), TASK)
    assert r.accepted
    assert bank.executed == []
    assert logged == ["cycle 1"]
    held = events(rt, r.run_id, "effects_held")
    assert held == [{"effects": ["pay"], "why": "cycle not accepted"}]
    first = records(rt, r.run_id)[0]
    assert first["decision"] == "revise"
    assert [(o["name"], o["status"]) for o in first["effects"]] == [("log", "done")]


def test_business_key_in_two_cycles_executes_once(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect(key=lambda a: a["invoice"], requires_success=False)
    actor = Script(
        with_effects(LOOK, pay.call(invoice="A-1", amount=5.0)),
        with_effects(lw.Proposal.edit("doc", {"a": 1}), pay.call(invoice="A-1", amount=5.0)),
        FIX_ALL,
    )
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    assert r.accepted
    assert len(bank.executed) == 1
    assert bank.executed[0]["key"] == "pay:A-1"
    recs = records(rt, r.run_id)
    assert recs[0]["effects"][0]["reused"] is False
    second = recs[1]["effects"][0]
    assert (second["status"], second["reused"], second["key"]) == ("done", True, "pay:A-1")
    assert second["result"] == recs[0]["effects"][0]["result"]
    assert events(rt, r.run_id, "effect_reused") == [{"effect": "pay", "key": "pay:A-1"}]


def test_unknown_effect_escalates_with_a_clear_cause(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    actor = Script(with_effects(FIX_ALL, lw.EffectCall("refund_all", {})))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    p = escalated(r)
    assert "does not declare" in p["cause"]
    assert "refund_all" in p["cause"]
    assert "pay" in p["cause"]  # what is declared
    assert p["unverified_candidate"]["effects"][0]["name"] == "refund_all"
    assert bank.executed == []
    assert r.state.values()["doc"] == {"a": 0, "b": 0, "c": 0}


def test_a_hand_built_call_its_effect_cannot_take_escalates_before_any_approval(
    rt: lw.Runtime,
) -> None:
    """Outside probe probe47b: ``Effect.call`` refuses arguments the effect cannot take, but an
    ``EffectCall`` the actor builds itself was not checked: the call was parked for approval
    and, once a person approved it, failed as it ran (``pay() missing ... 'amount'``). The
    cycle refuses it as it refuses an undeclared effect, naming the effect and the argument."""
    bank = Payments()
    pay = bank.effect()
    actor = Script(with_effects(FIX_ALL, lw.EffectCall("pay", {"invoice": "A-1"})))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    p = escalated(r)
    assert "cannot run with their arguments" in p["cause"]
    assert "missing a required argument: 'amount'" in p["cause"]
    assert events(rt, r.run_id, "approval_requested") == []
    assert bank.executed == []
    assert r.state.values()["doc"] == {"a": 0, "b": 0, "c": 0}


def test_policy_deny_escalates_naming_the_effect(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    policy = lw.ApprovalPolicy(
        (lw.PolicyRule(kind="spend", action="deny", above=1000, name="too-much"), *POLICY.rules)
    )
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5000.0)))
    r = rt.run_sync(make_loop(actor, [pay], approvals=policy), TASK)
    p = escalated(r)
    assert "pay(" in p["cause"]
    assert "denied" in p["cause"]
    assert "too-much" in p["cause"]
    assert p["evidence"]["rule"] == "too-much"
    assert p["evidence"]["effect"]["name"] == "pay"
    assert bank.executed == []
    assert journal(rt, r.run_id) == {}


def park_for_payment(
    rt: lw.Runtime, bank: Payments, pay: lw.Effect, amount: float = 500.0, **policy_kw: Any
) -> tuple[lw.RunResult, lw.Loop]:
    policy = POLICY
    if policy_kw:
        policy = lw.ApprovalPolicy(
            (lw.PolicyRule(kind="spend", action="require", name="big-spend", **policy_kw),)
        )
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=amount)))
    loop = make_loop(actor, [pay], approvals=policy)
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    assert r.stop_reason is None
    assert bank.executed == []
    return r, loop


def test_require_parks_then_approval_executes_exactly_once(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    r, loop = park_for_payment(rt, bank, pay)
    req = rt.pending_approval(r.run_id)
    assert req.kind == "effect"
    assert req.rule == "big-spend"
    assert "pay(invoice='A-1', amount=500.0)" in req.what
    assert req.evidence["effects"] == [
        {"name": "pay", "args": {"invoice": "A-1", "amount": 500.0}, "key": None}
    ]
    assert "above 100" in req.why
    # resuming before a decision changes nothing
    again = rt.resume_sync(r.run_id, loop)
    assert again.status == "awaiting_approval"
    assert bank.executed == []
    assert "still_waiting" in kinds(rt, r.run_id)
    rt.approve(r.run_id, by="fin")
    done = rt.resume_sync(r.run_id, loop)
    assert done.accepted
    assert len(bank.executed) == 1
    assert rt.resume_sync(r.run_id, loop).accepted
    assert len(bank.executed) == 1
    notes = done.state.notes
    assert any(n["kind"] == "approval" and n["by"] == "fin" for n in notes)
    assert any(n["kind"] == "effect" and n["result"]["ref"] == "tx-1" for n in notes)


def test_require_then_deny_escalates_without_executing(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    r, loop = park_for_payment(rt, bank, pay)
    rt.deny(r.run_id, by="fin", note="not this month")
    out = rt.resume_sync(r.run_id, loop)
    p = escalated(out)
    assert "denied by fin" in p["cause"]
    assert "not this month" in p["cause"]
    assert bank.executed == []
    assert journal(rt, r.run_id) == {}
    with pytest.raises(lw.ApprovalError, match="already denied"):
        rt.approve(r.run_id, by="someone-else")


def test_expired_request_escalates_on_resume(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    r, loop = park_for_payment(rt, bank, pay, expires_after_s=0.01)
    req = rt.pending_approval(r.run_id)
    assert req.expires_at is not None
    assert req.expires_at <= time.time() + 0.01
    time.sleep(0.03)
    out = rt.resume_sync(r.run_id, loop)
    p = escalated(out)
    assert "expired" in p["cause"]
    assert bank.executed == []
    assert rt.store.approvals(run_id=r.run_id)[0].status == "expired"


def test_approval_after_expiry_does_not_execute(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    r, loop = park_for_payment(rt, bank, pay, expires_after_s=0.01)
    time.sleep(0.03)
    with contextlib.suppress(lw.ApprovalError):  # refusing the late approval is a fix too
        rt.approve(r.run_id, by="late")
    out = rt.resume_sync(r.run_id, loop)
    assert out.status == "escalated"
    assert bank.executed == []


# --- 2. effect failures ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "exc", [lw.PermanentError("card declined"), ValueError("bad iban")], ids=["permanent", "value"]
)
def test_failing_effect_escalates_naming_it(rt: lw.Runtime, exc: Exception) -> None:
    bank = Payments()
    bank.failures = [exc]
    pay = bank.effect(retry=FAST)
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    p = escalated(r)
    assert len(bank.executed) == 1
    assert "pay" in p["cause"]
    assert "a permanent error" in p["cause"]
    assert str(exc) in p["cause"]
    assert p["evidence"]["effect"]["name"] == "pay"
    assert p["evidence"]["effect"]["status"] == "failed"
    [entry] = journal(rt, r.run_id).values()
    assert (entry.status, entry.attempts) == ("failed", 1)
    assert entry.data["class"] == "permanent"
    # the escalated run keeps its unapplied candidate for the person, nothing applied
    assert p["unverified_candidate"]["edits"]
    assert r.state.values()["doc"] == {"a": 0, "b": 0, "c": 0}


def test_transient_idempotent_effect_is_retried_to_success(rt: lw.Runtime) -> None:
    bank = Payments()
    bank.failures = [lw.TransientError("503"), lw.TransientError("503")]
    pay = bank.effect(idempotent=True, retry=lw.RetryPolicy(attempts=3, backoff_s=0.01))
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    assert r.accepted
    assert len(bank.executed) == 3
    assert len({e["key"] for e in bank.executed}) == 1  # the same idempotency key every time
    [entry] = journal(rt, r.run_id).values()
    assert (entry.status, entry.attempts) == ("done", 3)
    assert entry.data["result"]["ref"] == "tx-3"
    assert kinds(rt, r.run_id).count("effect_retry") == 2
    assert records(rt, r.run_id)[-1]["effects"][0]["attempts"] == 3


def test_transient_idempotent_effect_gives_up_at_the_bound(rt: lw.Runtime) -> None:
    bank = Payments()
    bank.failures = [lw.TransientError("503")] * 5
    pay = bank.effect(idempotent=True, retry=lw.RetryPolicy(attempts=2, backoff_s=0.01))
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    p = escalated(r)
    assert len(bank.executed) == 2
    assert "2 attempt(s) spent" in p["cause"]
    [entry] = journal(rt, r.run_id).values()
    assert (entry.status, entry.attempts) == ("failed", 2)


def test_transient_non_idempotent_effect_is_in_doubt_after_one_execution(
    rt: lw.Runtime,
) -> None:
    bank = Payments()
    bank.failures = [lw.TransientError("timeout"), lw.TransientError("timeout")]
    pay = bank.effect(retry=lw.RetryPolicy(attempts=3, backoff_s=0.01))
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    loop = make_loop(actor, [pay])
    r = rt.run_sync(loop, TASK)
    p = escalated(r)
    assert len(bank.executed) == 1
    assert "may have acted" in p["cause"]
    assert "not idempotent" in p["cause"]
    assert p["evidence"]["effect"]["status"] == "in_doubt"
    [entry] = journal(rt, r.run_id).values()
    assert entry.status == "in_doubt"
    assert "effect_in_doubt" in kinds(rt, r.run_id)
    rt.resume_sync(r.run_id, loop)
    assert len(bank.executed) == 1


def test_reconcile_not_done_allows_a_retry(rt: lw.Runtime) -> None:
    bank = Payments()
    bank.failures = [lw.TransientError("timeout"), lw.TransientError("timeout")]
    asked: list[str] = []
    pay = bank.effect(retry=lw.RetryPolicy(attempts=3, backoff_s=0.01))

    @pay.reconciler
    def _(key: str) -> None:
        asked.append(key)  # "not done": returns None

    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    assert r.accepted
    assert len(bank.executed) == 3
    assert asked == [bank.executed[0]["key"]] * 2  # asked after each failure
    [entry] = journal(rt, r.run_id).values()
    assert (entry.status, entry.attempts) == ("done", 3)
    # each "not done" is on the journal's next event (outside51a: the trace showed a second
    # effect_started with nothing saying the hook was asked)
    evs = [e for e in rt.store.events(r.run_id) if e.kind.startswith("effect_")]
    seq = [(e.kind, e.data.get("hook_not_done", False)) for e in evs]
    assert seq == [("effect_started", False), ("effect_retry", True)] * 2 + [
        ("effect_started", False),
        ("effect_done", False),
    ]


def test_reconcile_done_after_a_raise_records_the_reconciled_result(rt: lw.Runtime) -> None:
    bank = Payments()
    bank.failures = [lw.TransientError("connection reset after commit")]
    pay = bank.effect(
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.01),
        reconcile=lambda key: {"found": key, "ref": "tx-remote"},
    )
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    assert r.accepted
    assert len(bank.executed) == 1
    [entry] = journal(rt, r.run_id).values()
    assert entry.status == "done"
    assert entry.data["reconciled"] is True
    assert entry.data["result"] == {"found": bank.executed[0]["key"], "ref": "tx-remote"}
    out = records(rt, r.run_id)[-1]["effects"][0]
    assert (out["reconciled"], out["result"]["ref"]) == (True, "tx-remote")
    assert "effect_reconciled" in kinds(rt, r.run_id)


def test_a_reconciler_reporting_the_cost_charges_the_settled_attempt(rt: lw.Runtime) -> None:
    """The action happened but its reply was lost: a reconcile hook that knows the cost
    returns ``EffectResult(value, usage=…)``; the value is recorded as the result (not its
    repr) and the cost is charged to the cycle, as a finished attempt's is."""
    bank = Payments()
    bank.failures = [lw.TransientError("connection reset after commit")]
    pay = bank.effect(
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.01),
        reconcile=lambda key: lw.EffectResult({"ref": "tx-remote"}, usage=lw.Usage(0.5, 100)),
    )
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    assert r.accepted and len(bank.executed) == 1
    [entry] = journal(rt, r.run_id).values()
    assert entry.data["result"] == {"ref": "tx-remote"} and entry.data["usage"]["cost_usd"] == 0.5
    out = records(rt, r.run_id)[-1]["effects"][0]
    assert out["reconciled"] and out["usage"]["tokens"] == 100
    assert r.spent.cost_usd == pytest.approx(0.5) and r.spent.tokens == 100


def test_reconcile_hook_raising_leaves_the_effect_in_doubt(rt: lw.Runtime) -> None:
    bank = Payments()
    bank.failures = [lw.TransientError("timeout")]

    def broken(key: str) -> Any:
        raise RuntimeError("provider API down")

    pay = bank.effect(idempotent=True, retry=FAST, reconcile=broken)
    actor = Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    r = rt.run_sync(make_loop(actor, [pay]), TASK)
    p = escalated(r)
    assert len(bank.executed) == 1
    assert "in doubt" in p["cause"]
    assert "provider API down" in p["cause"]
    [entry] = journal(rt, r.run_id).values()
    assert entry.status == "in_doubt"


def test_effect_that_acts_then_raises_is_never_run_again(rt: lw.Runtime) -> None:
    ledger: list[str] = []

    def transfer(invoice: str) -> str:
        ledger.append(invoice)  # the money moved...
        raise ValueError("...but the response could not be parsed")

    eff = lw.effect("custom_transfer", retry=FAST)(transfer)
    actor = Script(with_effects(FIX_ALL, eff.call(invoice="A-1")))
    loop = make_loop(actor, [eff])
    r = rt.run_sync(loop, TASK)
    p = escalated(r)
    assert ledger == ["A-1"]
    assert "transfer" in p["cause"]
    for _ in range(2):
        again = rt.resume_sync(r.run_id, loop)
        assert again.status == "escalated"
    assert ledger == ["A-1"]
    # in doubt, not failed: it takes no key, and a failed one's claim is free for the next run
    # asking for the action (effects53)
    assert [e.status for e in journal(rt, r.run_id).values()] == ["in_doubt"]


def test_effect_timeout_is_transient_and_in_doubt(rt: lw.Runtime) -> None:
    gate = threading.Event()
    calls: list[int] = []

    def slow(n: int) -> int:
        calls.append(n)
        gate.wait()  # until the test ends: only the engine's timeout ends the call
        return n

    eff = lw.effect("custom", timeout_s=0.05, retry=FAST)(slow)
    try:
        r = rt.run_sync(make_loop(Script(with_effects(FIX_ALL, eff.call(n=1))), [eff]), TASK)
    finally:
        gate.set()
    p = escalated(r)
    assert calls == [1]
    assert "may have acted" in p["cause"]


def test_an_effect_timed_out_names_the_timeout_and_its_limit_in_the_cause(
    rt: lw.Runtime,
) -> None:
    # Before: "notify failed with a transient error and may have acted": an operator could
    # not tell a timeout from a connection error without reading the journal's JSON.
    gate = threading.Event()

    def slow(n: int) -> int:
        gate.wait()  # until the test ends: only the engine's timeout ends the call
        return n

    eff = lw.effect("custom", timeout_s=0.05, retry=FAST)(slow)
    try:
        r = rt.run_sync(make_loop(Script(with_effects(FIX_ALL, eff.call(n=1))), [eff]), TASK)
    finally:
        gate.set()
    cause = escalated(r)["cause"]
    assert "no result after" in cause and "its timeout_s of 0.05 s" in cause, cause


def test_an_effect_past_its_lease_deadline_says_to_raise_the_lease(store_path: Path) -> None:
    # No timeout_s: the deadline is the lease TTL less its margin (a worker's --lease-ttl),
    # which an operator must raise for a longer call; the cause says so.
    gate = threading.Event()

    def slow(n: int) -> int:
        gate.wait()
        return n

    eff = lw.effect("custom", retry=FAST)(slow)
    try:
        with lw.Runtime(store_path, lease_ttl_s=1.0) as rt:
            loop = make_loop(Script(with_effects(FIX_ALL, eff.call(n=1))), [eff])
            r = rt.run_sync(loop, TASK)
    finally:
        gate.set()
    cause = escalated(r)["cause"]
    assert "no result after" in cause and "raise --lease-ttl" in cause, cause


def test_a_timed_out_call_still_running_is_not_run_again_whatever_the_hook_says(
    rt: lw.Runtime,
) -> None:
    # The first call hangs past its timeout until a second one starts: retried on the hook's
    # "not done" (asked while the first still ran), both went on to pay.
    second, finished = threading.Event(), threading.Event()
    entered: list[str] = []
    paid: list[str] = []

    def send(to: str, *, key: str) -> dict[str, str]:
        entered.append(key)
        if len(entered) > 1:
            second.set()
        if second.wait(timeout=120):  # (a bound for the test's sake: it is set below)
            paid.append(key)
        finished.set()
        return {"sent": key}

    eff = lw.effect("custom", key=lambda a: a["to"], timeout_s=0.05, retry=FAST)(send)

    @eff.reconciler
    def _sent(key: str) -> dict[str, str] | None:
        return {"sent": key} if key in paid else None

    try:
        r = rt.run_sync(make_loop(Script(with_effects(FIX_ALL, eff.call(to="bob"))), [eff]), TASK)
    finally:
        second.set()  # the hung call ends (and acts) now
    assert finished.wait(timeout=120)
    p = escalated(r)
    assert len(entered) == 1, "run again while the first call was still running"
    assert "still running" in p["cause"]
    [entry] = journal(rt, r.run_id).values()
    assert entry.status == "in_doubt"
    assert paid == ["send:bob"]


# --- 3. a crash between intent and result, simulated --------------------------------------------
def inject(rt: lw.Runtime, run_id: str, ikey: str, status: str, **data: Any) -> None:
    """Write a journal entry as a crashed executor would have left it, under its own lease."""
    token = rt.store.acquire_lease(run_id, "crashed-executor", 60)
    try:
        rt.store.journal_put(
            run_id,
            token,
            key=f"effect:{ikey}",
            kind="effect",
            cycle=1,
            status=status,
            data={"name": "pay", "kind": "spend", "args": {"invoice": "A-1", "amount": 500.0}}
            | {"first_at": time.time()}
            | data,
            attempts=1,
        )
    finally:
        rt.store.release_lease(run_id, token)


def crashed_run(
    rt: lw.Runtime, bank: Payments, pay: lw.Effect, status: str = "intent", **data: Any
) -> tuple[lw.RunResult, lw.Loop, str]:
    """A run parked before its payment, with a journal entry for that payment injected."""
    r, loop = park_for_payment(rt, bank, pay)
    ikey = pay.key_for(r.run_id, 1, pay.call(invoice="A-1", amount=500.0))
    inject(rt, r.run_id, ikey, status, **data)
    rt.approve(r.run_id, by="fin")
    return r, loop, ikey


def test_intent_without_result_non_idempotent_escalates_in_doubt(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    r, loop, ikey = crashed_run(rt, bank, pay)
    out = rt.resume_sync(r.run_id, loop)
    p = escalated(out)
    assert bank.executed == []
    assert "started before a crash" in p["cause"]
    assert ikey in p["cause"]
    assert journal(rt, r.run_id)[f"effect:{ikey}"].status == "in_doubt"


def _gone_holder() -> str:
    """An executor of this host known not to be running the call: this process's owner name,
    whose attempt is not among the calls executing here (``_effect_holders.holder``)."""
    return f"{socket.gethostname()}:{os.getpid()}:crashed:{PROCESS_SPACE}"


def test_intent_without_result_idempotent_runs_again(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect(idempotent=True)
    # Its holder is known gone: no grace period to wait out (that wait: the next test and
    # test_frozen_holder), so the test waits for nothing.
    r, loop, ikey = crashed_run(rt, bank, pay, holder=_gone_holder())
    out = rt.resume_sync(r.run_id, loop)
    assert out.accepted
    assert len(bank.executed) == 1
    assert bank.executed[0]["key"] == ikey
    entry = journal(rt, r.run_id)[f"effect:{ikey}"]
    assert (entry.status, entry.attempts) == ("done", 2)
    assert not [e for e in rt.store.events(r.run_id) if e.kind == "effect_grace"]


def test_intent_reconciled_as_done_is_not_executed(rt: lw.Runtime) -> None:
    bank = Payments()
    seen: list[str] = []

    def found(key: str) -> dict[str, Any]:
        seen.append(key)
        return {"ref": "tx-before-crash"}

    pay = bank.effect(reconcile=found)
    r, loop, ikey = crashed_run(rt, bank, pay)
    out = rt.resume_sync(r.run_id, loop)
    assert out.accepted
    assert bank.executed == []
    assert seen == [ikey]
    entry = journal(rt, r.run_id)[f"effect:{ikey}"]
    assert entry.status == "done"
    assert entry.data["result"] == {"ref": "tx-before-crash"}
    assert any(n.get("result") == {"ref": "tx-before-crash"} for n in out.state.notes)


def test_intent_reconciled_as_not_done_runs_once(store_path: Path) -> None:
    # An intent of an unknown holder without a deadline: before the call runs again, the
    # attempt is given the lease's TTL from its entry's time to finish elsewhere. A short TTL
    # keeps that wait short; the outcome does not depend on how long it is.
    with lw.Runtime(store_path, lease_ttl_s=2.0) as rt:
        bank = Payments()
        pay = bank.effect(reconcile=lambda key: None)
        r, loop, ikey = crashed_run(rt, bank, pay)
        written = journal(rt, r.run_id)[f"effect:{ikey}"].updated_at
        out = rt.resume_sync(r.run_id, loop)
        assert out.accepted
        assert len(bank.executed) == 1
        assert journal(rt, r.run_id)[f"effect:{ikey}"].status == "done"
        [grace] = [e for e in rt.store.events(r.run_id) if e.kind == "effect_grace"]
        assert grace.data["until"] == pytest.approx(written + 2.0)
        assert grace.data["holder_alive"] is False
        # the hook's "not done" is on the event of the attempt it let start
        [started] = [e for e in rt.store.events(r.run_id) if e.kind == "effect_started"]
        assert started.data["hook_not_done"] is True


def test_done_entry_from_before_a_crash_is_reused(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    r, loop, _ = crashed_run(rt, bank, pay, status="done", result={"ref": "tx-old"})
    out = rt.resume_sync(r.run_id, loop)
    assert out.accepted
    assert bank.executed == []
    eff = records(rt, r.run_id)[-1]["effects"][0]
    assert (eff["reused"], eff["result"]) == (True, {"ref": "tx-old"})


# --- 4. classified retries of actors and verifiers -----------------------------------------------
class Flaky:
    """Raises the given exceptions on the first calls, then delegates."""

    def __init__(self, fn: Callable[..., Any], *errors: BaseException) -> None:
        self.fn = fn
        self.errors = list(errors)
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.fn(*args)


class Http429(Exception):
    status_code = 429


class Http400(Exception):
    status_code = 400


def test_flaky_actor_is_retried_and_the_run_accepted(rt: lw.Runtime) -> None:
    actor = Flaky(lambda ctx: FIX_ALL, lw.TransientError("overloaded"), lw.TransientError("again"))
    r = rt.run_sync(make_loop(actor), TASK)
    assert (r.status, r.cycles) == ("accepted", 1)
    assert actor.calls == 3
    retries = events(rt, r.run_id, "retry")
    assert [e["attempt"] for e in retries] == [1, 2]
    assert all(e["scope"] == "actor" and e["class"] == "transient" for e in retries)
    [entry] = rt.store.journal(r.run_id, kind="retry")
    assert (entry.key, entry.attempts) == ("retry:actor:1", 2)


def test_http_429_is_retried(rt: lw.Runtime) -> None:
    actor = Flaky(lambda ctx: FIX_ALL, Http429("slow down"))
    r = rt.run_sync(make_loop(actor), TASK)
    assert r.accepted
    assert actor.calls == 2


def test_http_400_is_not_retried(rt: lw.Runtime) -> None:
    actor = Flaky(lambda ctx: FIX_ALL, Http400("bad request"))
    r = rt.run_sync(make_loop(actor), TASK)
    escalated(r)
    assert actor.calls == 1


def test_permission_error_escalates_for_a_person(rt: lw.Runtime) -> None:
    actor = Flaky(lambda ctx: FIX_ALL, PermissionError("API key revoked"))
    r = rt.run_sync(make_loop(actor), TASK)
    p = escalated(r)
    assert actor.calls == 1
    assert "a person must resolve" in p["cause"]
    assert "API key revoked" in p["cause"]
    assert events(rt, r.run_id, "gave_up")[0]["class"] == "needs_human"


def test_value_error_actor_is_not_retried(rt: lw.Runtime) -> None:
    actor = Flaky(lambda ctx: FIX_ALL, ValueError("bad prompt"))
    r = rt.run_sync(make_loop(actor), TASK)
    p = escalated(r)
    assert actor.calls == 1
    assert p["error"]["type"] == "ValueError"
    assert "retry" not in kinds(rt, r.run_id)


def test_transient_actor_gives_up_at_the_bound(rt: lw.Runtime) -> None:
    actor = Flaky(lambda ctx: FIX_ALL, *[lw.TransientError("503")] * 5)
    r = rt.run_sync(make_loop(actor), TASK)
    p = escalated(r)
    assert actor.calls == 3
    assert "3 time(s)" in p["cause"]


def test_verifier_uses_its_own_retry_policy(rt: lw.Runtime) -> None:
    check = Flaky(fields, lw.TransientError("sandbox busy"), lw.TransientError("busy"))
    loop = make_loop(
        Script(FIX_ALL),
        verifiers=[lw.Check(fn=check, name="fields", retry=FAST)],
        retry=ONCE,  # the loop's own policy would give up at the first failure
    )
    r = rt.run_sync(loop, TASK)
    assert r.accepted
    assert check.calls == 3
    assert {e["scope"] for e in events(rt, r.run_id, "retry")} == {"verifier:fields"}


def test_verifier_policy_of_one_attempt_overrides_the_loop(rt: lw.Runtime) -> None:
    check = Flaky(fields, lw.TransientError("sandbox busy"))
    loop = make_loop(
        Script(FIX_ALL), verifiers=[lw.Check(fn=check, name="fields", retry=ONCE)], retry=FAST
    )
    r = rt.run_sync(loop, TASK)
    p = escalated(r)
    assert check.calls == 1
    assert "verifier fields" in p["cause"]


def test_verifier_without_a_policy_uses_the_loops(rt: lw.Runtime) -> None:
    check = Flaky(fields, lw.TransientError("busy"))
    r = rt.run_sync(make_loop(Script(FIX_ALL), verifiers=[lw.Check(fn=check, name="f")]), TASK)
    assert r.accepted
    assert check.calls == 2


def test_an_approval_is_not_reused_for_a_second_execution(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect(requires_success=False)
    same = with_effects(lw.Proposal.edit("doc", {"a": 1}), pay.call(invoice="A-1", amount=500.0))
    loop = make_loop(Script(same), [pay])  # the actor repeats itself every cycle
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    rt.approve(r.run_id, by="fin")
    rt.resume_sync(r.run_id, loop)
    assert len(bank.executed) == 1


def test_resuming_with_the_wrong_loop_leaves_the_run_resumable(rt: lw.Runtime) -> None:
    bank = Payments()
    pay = bank.effect()
    r, loop = park_for_payment(rt, bank, pay)
    rt.approve(r.run_id, by="fin")
    with pytest.raises(lw.ConfigError, match="loop that started it"):
        rt.resume_sync(r.run_id, make_loop(Script(FIX_ALL), []))
    assert rt.store.get_run(r.run_id).status != "failed"
    assert rt.resume_sync(r.run_id, loop).accepted
    assert len(bank.executed) == 1


# --- effect costs (invariant 7) ---------------------------------------------------------------
def test_an_effect_reports_its_cost_and_it_counts_once(rt: lw.Runtime) -> None:
    calls: list[str] = []

    @lw.effect("wire", key=lambda a: a["invoice"], requires_success=False)
    def wire(invoice: str) -> lw.EffectResult:
        calls.append(invoice)
        return lw.EffectResult({"sent": invoice}, lw.Usage(cost_usd=0.25, tokens=7))

    # cycle 1 wires A (not accepted); cycle 2 asks for A again (reused) and is accepted
    actor = Script(
        with_effects(LOOK, wire.call(invoice="A")), with_effects(FIX_ALL, wire.call(invoice="A"))
    )
    r = rt.run_sync(make_loop(actor, [wire]), TASK)
    assert (r.status, calls) == ("accepted", ["A"])
    assert r.spent.cost_usd == pytest.approx(0.25)
    assert r.spent.tokens == 7
    (entry,) = rt.store.journal(r.run_id, kind="effect")
    assert entry.data["usage"]["cost_usd"] == 0.25
    assert entry.data["result"] == {"sent": "A"}
    records = [c.record for c in rt.store.checkpoints(r.run_id) if c.record and "usage" in c.record]
    assert [rec["usage"]["cost_usd"] for rec in records] == [pytest.approx(0.25), 0.0]


# --- show --json -------------------------------------------------------------------------------
def _shown_cycles(store: Path, run_id: str, capsys: pytest.CaptureFixture[str]) -> list[Any]:
    from loopwright.cli import main

    assert main(["show", run_id, "--store", str(store), "--json"]) == 0
    return list(json.loads(capsys.readouterr().out)["cycles"])


def test_show_json_lists_a_cycle_with_effects_once(
    rt: lw.Runtime, store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bank = Payments()
    pay = bank.effect()
    r = rt.run_sync(
        make_loop(Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=40.0))), [pay]), TASK
    )
    assert (r.status, r.cycles) == ("accepted", 1)
    # Cycle 1 wrote its effects' write-ahead record, then its concluding one: shown once.
    cycles = _shown_cycles(store_path, r.run_id, capsys)
    assert [(c["cycle"], c["decision"]) for c in cycles] == [(1, "accepted")]
    assert [o["key"] for o in cycles[0]["effects"]] == [bank.executed[0]["key"]]


def test_show_json_keeps_the_write_ahead_of_a_cycle_stopped_in_its_effects(
    rt: lw.Runtime, store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bank = Payments()
    bank.failures.append(lw.PermanentError("card declined"))
    pay = bank.effect()
    r = rt.run_sync(
        make_loop(Script(with_effects(FIX_ALL, pay.call(invoice="A-1", amount=40.0))), [pay]), TASK
    )
    escalated(r)
    # All there is of cycle 1: the record written before its effects ran.
    cycles = _shown_cycles(store_path, r.run_id, capsys)
    assert [(c["cycle"], c["decision"]) for c in cycles] == [(1, "effects")]
