"""Questions for a person, decisions racing, rollback and cancel with compensations, and the
overwrite-accepted policy, over a real SQLite store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields

import loopwright as lw

FIX_ALL = lw.Proposal.edit("doc", TARGET)
PO = lw.Question("Which PO governs?", choices=("PO-1", "PO-2"))


class Script:
    """An actor playing one step per cycle (the last step repeats), recording its contexts."""

    def __init__(self, *steps: lw.Proposal | Callable[[lw.Context], lw.Proposal]) -> None:
        self.steps = steps
        self.contexts: list[lw.Context] = []

    def __call__(self, ctx: lw.Context) -> lw.Proposal:
        self.contexts.append(ctx)
        step = self.steps[min(len(self.contexts), len(self.steps)) - 1]
        return step(ctx) if callable(step) else step


def make_loop(
    actor: Callable[..., Any],
    *,
    effects: Sequence[lw.Effect] = (),
    approvals: lw.ApprovalPolicy | None = None,
    risk: tuple[lw.RiskRule, ...] = (),
    verifiers: Sequence[Any] = (fields,),
    max_cycles: int = 5,
) -> lw.Loop:
    return lw.Loop(
        name="qr",
        actor=actor,
        verifiers=list(verifiers),
        contract=lw.Contract(budget=lw.Budget(max_cycles=max_cycles), risk=risk),
        effects=list(effects),
        approvals=approvals or lw.ApprovalPolicy(),
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.01),
    )


def events(rt: lw.Runtime, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(run_id) if e.kind == kind]


# --- 5. questions --------------------------------------------------------------------------------
def ask_po(rt: lw.Runtime) -> tuple[lw.RunResult, lw.Loop, Script]:
    # the question's proposal also carries an edit: nothing of it may be applied
    actor = Script(
        lw.Proposal(edits=(lw.Edit("doc", "a", 99),), question=PO, note="two POs match"),
        FIX_ALL,
    )
    loop = make_loop(actor)
    r = rt.run_sync(loop, TASK)
    return r, loop, actor


def test_actor_question_parks_the_run(rt: lw.Runtime) -> None:
    r, loop, actor = ask_po(rt)
    assert (r.status, r.stop_reason, r.cycles) == ("awaiting_approval", None, 0)
    req = rt.pending_approval(r.run_id)
    assert req.kind == "question"
    assert req.what == "Which PO governs?"
    assert req.evidence["question"] == {
        "text": "Which PO governs?",
        "choices": ["PO-1", "PO-2"],
        "type": "text",
    }
    assert req.why == "two POs match"
    assert [e["kind"] for e in events(rt, r.run_id, "approval_requested")] == ["question"]
    assert r.state.values()["doc"]["a"] == 0
    # resuming without an answer keeps it parked and asks the actor nothing
    assert rt.resume_sync(r.run_id, loop).status == "awaiting_approval"
    assert len(actor.contexts) == 1


def test_approving_a_question_is_refused(rt: lw.Runtime) -> None:
    r, _, _ = ask_po(rt)
    with pytest.raises(lw.ApprovalError, match="answer it"):
        rt.approve(r.run_id, by="ann")
    assert rt.pending_approval(r.run_id).status == "pending"


def test_bad_answer_is_refused_and_the_question_stays_pending(rt: lw.Runtime) -> None:
    r, _, _ = ask_po(rt)
    with pytest.raises(lw.ConfigError, match=r"PO-1") as err:
        rt.answer(r.run_id, "PO-3", by="ann")
    assert err.value.field == "answer"
    with pytest.raises(lw.ConfigError):
        rt.answer(r.run_id, "  ", by="ann")
    with pytest.raises(lw.ConfigError) as who:
        rt.answer(r.run_id, "PO-1", by=" ")
    assert who.value.field == "by"
    req = rt.pending_approval(r.run_id)
    assert (req.status, req.decided_by) == ("pending", None)
    assert not events(rt, r.run_id, "approval_decided")


def test_answering_a_yes_no_approval_is_refused(rt: lw.Runtime) -> None:
    risky = lw.RiskRule(name="touch-b", touches=("doc/b",))
    r = rt.run_sync(make_loop(Script(FIX_ALL), risk=(risky,)), TASK)
    assert r.status == "awaiting_approval"
    with pytest.raises(lw.ApprovalError, match="not a question"):
        rt.answer(r.run_id, "yes", by="ann")


def assert_answer_reached_the_actor(rt: lw.Runtime, r: lw.RunResult, actor: Script) -> None:
    ctx = actor.contexts[1]
    assert ctx.cycle == 2
    [note] = [n for n in ctx.notes if n.get("kind") == "answer"]
    assert note["answer"] == "PO-2"
    assert note["by"] == "ann"
    assert note["question"] == "Which PO governs?"
    assert note["decision"] == "answered"
    # nothing of the question's cycle was applied: cycle 2 started from the original doc
    assert ctx.artifacts["doc"] == {"a": 0, "b": 0, "c": 0}
    cks = rt.store.checkpoints(r.run_id)
    asked = [c.record for c in cks if c.record and c.record.get("decision") == "asked"]
    assert len(asked) == 1
    assert asked[0]["cycle"] == 1


def test_answered_question_reaches_the_next_context(rt: lw.Runtime) -> None:
    r, loop, actor = ask_po(rt)
    decided = rt.answer(r.run_id, " PO-2 ", by="ann")
    assert (decided.status, decided.answer, decided.decided_by) == ("answered", "PO-2", "ann")
    [ev] = events(rt, r.run_id, "approval_decided")
    assert (ev["status"], ev["answer"]) == ("answered", "PO-2")
    out = rt.resume_sync(r.run_id, loop)
    assert out.accepted
    assert out.cycles == 2
    assert_answer_reached_the_actor(rt, out, actor)
    part = out.state.part("doc/a")
    assert part is not None
    assert [v.value for v in part.versions] == [0, 1]  # 99 was never written


def test_answering_twice_is_refused(rt: lw.Runtime) -> None:
    r, _, _ = ask_po(rt)
    rt.answer(r.run_id, "PO-1", by="ann")
    with pytest.raises(lw.ApprovalError, match="already answered by ann"):
        rt.answer(r.run_id, "PO-2", by="bob")
    with pytest.raises(lw.ApprovalError, match="already answered"):
        rt.approve(r.run_id, by="bob")
    [req] = rt.store.approvals(run_id=r.run_id)
    assert (req.answer, req.decided_by) == ("PO-1", "ann")


def test_declining_a_question_escalates(rt: lw.Runtime) -> None:
    r, loop, actor = ask_po(rt)
    rt.deny(r.run_id, by="ann", note="ask the buyer")
    out = rt.resume_sync(r.run_id, loop)
    assert out.status == "escalated"
    assert out.packet is not None
    assert "question denied by ann" in out.packet["cause"]
    assert len(actor.contexts) == 1


PO_RULE = lw.RiskRule(name="po-choice", touches=("doc/b",), ask="Which PO governs line b?")


def test_risk_rule_with_ask_parks_with_a_question(rt: lw.Runtime) -> None:
    r = rt.run_sync(make_loop(Script(FIX_ALL), risk=(PO_RULE,)), TASK)
    assert r.status == "awaiting_approval"
    req = rt.pending_approval(r.run_id)
    assert (req.kind, req.rule, req.what) == ("question", "po-choice", "Which PO governs line b?")
    assert req.evidence["question"]["text"] == "Which PO governs line b?"
    assert req.diff is not None
    assert "doc/b" in req.diff
    with pytest.raises(lw.ApprovalError, match="answer it"):
        rt.approve(r.run_id, by="ann")


def test_risk_rule_answer_applies_the_proposal(rt: lw.Runtime) -> None:
    actor = Script(FIX_ALL)
    loop = make_loop(actor, risk=(PO_RULE,))
    r = rt.run_sync(loop, TASK)
    assert r.state.values()["doc"] == {"a": 0, "b": 0, "c": 0}
    rt.answer(r.run_id, "PO-7", by="ann")
    out = rt.resume_sync(r.run_id, loop)
    assert (out.status, out.cycles) == ("accepted", 1)
    assert out.state.values()["doc"] == TARGET
    assert len(actor.contexts) == 1  # the parked proposal was applied, not asked again
    [note] = [n for n in out.state.notes if n.get("kind") == "answer"]
    assert (note["answer"], note["by"], note["rule"]) == ("PO-7", "ann", "po-choice")


def test_question_combined_with_an_effect_names_the_effect(rt: lw.Runtime) -> None:
    def pay_fn(amount: float) -> float:
        return amount

    pay = lw.effect("spend", name="pay")(pay_fn)
    actor = Script(lw.Proposal(edits=FIX_ALL.edits, effects=(pay.call(amount=500.0),)))
    r = rt.run_sync(make_loop(actor, effects=[pay], risk=(PO_RULE,)), TASK)
    assert r.status == "awaiting_approval"
    pending = rt.store.approvals(run_id=r.run_id, status="pending")
    assert any(a.kind == "question" for a in pending)
    # whoever decides must see the payment it lets through, not only the question
    assert any("pay(" in a.what for a in pending)


def test_two_approvers_racing_exactly_one_wins(store_path: Path) -> None:
    with lw.Runtime(str(store_path)) as rt:
        r = rt.run_sync(
            make_loop(Script(FIX_ALL), risk=(lw.RiskRule(name="b", touches=("doc/b",)),)), TASK
        )
    assert r.status == "awaiting_approval"
    barrier = threading.Barrier(2)
    wins: list[str] = []
    losses: list[BaseException] = []

    def approver(name: str) -> None:
        with lw.Runtime(str(store_path)) as mine:
            barrier.wait()
            try:
                mine.approve(r.run_id, by=name)
                wins.append(name)
            except lw.ApprovalError as exc:
                losses.append(exc)

    threads = [threading.Thread(target=approver, args=(n,)) for n in ("ann", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)  # a bound for a hang's sake: a loaded machine is slow, not wrong
    assert not any(t.is_alive() for t in threads), "an approval hung"
    assert len(wins) == 1
    assert len(losses) == 1
    assert "already approved" in str(losses[0]) or "concurrently" in str(losses[0])
    with lw.Runtime(str(store_path)) as rt:
        [req] = rt.store.approvals(run_id=r.run_id)
        assert (req.status, req.decided_by) == ("approved", wins[0])
        assert len(events(rt, r.run_id, "approval_decided")) == 1


# --- 6. rollback, cancel and compensations -------------------------------------------------------
class Bank:
    def __init__(self) -> None:
        self.paid: list[dict[str, Any]] = []
        self.refunds: list[tuple[str, Any, dict[str, Any]]] = []

    def pay(self, invoice: str, amount: float) -> dict[str, Any]:
        self.paid.append({"invoice": invoice, "amount": amount})
        return {"tx": f"tx-{len(self.paid)}"}

    def refund(self, key: str, result: Any, args: dict[str, Any]) -> dict[str, Any]:
        self.refunds.append((key, result, args))
        return {"refund": result["tx"]}

    def effect(self, **kw: Any) -> lw.Effect:
        return lw.effect(
            "spend", name="pay", key=lambda a: a["invoice"], compensate=self.refund, **kw
        )(self.pay)


# the payment itself is allowed; its compensation needs a person (a rule naming it)
PAY_ONLY = lw.ApprovalPolicy(
    (
        lw.PolicyRule(kind="spend", effect="pay.compensate", action="require", name="refunds"),
        lw.PolicyRule(kind="spend", effect="pay", action="allow"),
    )
)


def staged_actor(pay: lw.Effect, *extra: lw.EffectCall) -> Script:
    """Cycle 1 fixes a; from cycle 2 on fixes b and c and pays invoice A-1."""

    def step(ctx: lw.Context) -> lw.Proposal:
        if ctx.artifacts["doc"]["a"] != 1:
            return lw.Proposal.edit("doc", {"a": 1})
        return lw.Proposal(
            edits=(lw.Edit("doc", "b", 2), lw.Edit("doc", "c", 3)),
            effects=(pay.call(invoice="A-1", amount=40.0), *extra),
        )

    return Script(step)


def test_rollback_restores_artifacts_and_compensates_once(rt: lw.Runtime) -> None:
    bank = Bank()
    pay = bank.effect()
    loop = make_loop(staged_actor(pay), effects=[pay], approvals=PAY_ONLY)
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.cycles) == ("accepted", 2)
    assert len(bank.paid) == 1

    rec = rt.rollback(r.run_id, 1, by="ops", loop=loop)
    assert rec.status == "awaiting_approval"
    assert rec.stop_reason is None
    state = rt.result(r.run_id).state
    assert state.values()["doc"] == {"a": 1, "b": 0, "c": 0}
    [req] = [a for a in rt.store.approvals(run_id=r.run_id) if a.status == "pending"]
    assert req.kind == "compensation"
    assert "pay:A-1" in req.what
    assert "ops rolled the run back to cycle 1" in req.why
    [ev] = events(rt, r.run_id, "rolled_back")
    assert (ev["to_cycle"], ev["by"], ev["offers"], ev["irreversible"]) == (1, "ops", 1, [])
    assert bank.refunds == []

    rt.approve(r.run_id, by="fin", approval_id=req.approval_id)
    out = rt.resume_sync(r.run_id, loop)
    assert len(bank.refunds) == 1
    key, result, args = bank.refunds[0]
    assert (key, result, args) == ("pay:A-1", {"tx": "tx-1"}, {"invoice": "A-1", "amount": 40.0})
    # the run went on: the actor paid again, as the key's next generation
    assert out.accepted
    assert out.cycles == 3
    assert len(bank.paid) == 2
    j = {e.key: e.status for e in rt.store.journal(r.run_id, kind="effect")}
    assert j["effect:pay:A-1"] == "compensated"
    assert j["effect:pay:A-1~2"] == "done"
    assert j["effect:pay.compensate:pay:A-1"] == "done"
    notes = [n for n in out.state.notes if n.get("kind") == "compensation"]
    assert [(n["key"], n["status"]) for n in notes] == [("pay:A-1", "done")]
    assert any(n.get("kind") == "rollback" and n["by"] == "ops" for n in out.state.notes)
    rt.resume_sync(r.run_id, loop)
    assert len(bank.refunds) == 1


def test_an_undone_payment_frees_its_business_key_for_another_run(rt: lw.Runtime) -> None:
    # From an outside probe (helper-37): the store-wide claim stayed "done" after the refund,
    # so another run asking to pay the invoice got the refunded payment's result, and nothing
    # was paid.
    bank = Bank()
    pay = bank.effect(requires_success=False)
    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))
    first = make_loop(
        Script(
            lw.Proposal(
                edits=(lw.Edit("doc", "a", 1),), effects=(pay.call(invoice="A-1", amount=40.0),)
            ),
            lw.Proposal(question=PO),
        ),
        effects=[pay],
        approvals=allow,
    )
    r = rt.run_sync(first, TASK)
    assert r.status == "awaiting_approval" and len(bank.paid) == 1
    rt.cancel(r.run_id, by="ops", loop=first)
    assert rt.resume_sync(r.run_id, first).status == "cancelled"
    assert len(bank.refunds) == 1  # undone
    second = make_loop(
        Script(lw.Proposal(effects=(pay.call(invoice="A-1", amount=40.0),)), FIX_ALL),
        effects=[pay],
        approvals=allow,
    )
    other = rt.run_sync(second, TASK)
    assert other.accepted
    assert len(bank.paid) == 2  # paid again, by the other run: the first one was refunded
    [done] = [e for e in rt.store.journal(other.run_id, kind="effect") if e.status == "done"]
    assert "from_run" not in done.data


def test_each_run_refunds_its_own_payment(rt: lw.Runtime) -> None:
    # From review (helper-41): a compensation's key was claimed store-wide, so a second run's
    # refund of the same invoice reused the first run's refund, and refunded nothing
    bank = Bank()
    pay = bank.effect(requires_success=False)
    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))

    def paying() -> lw.Loop:
        return make_loop(
            Script(
                lw.Proposal(
                    edits=(lw.Edit("doc", "a", 1),),
                    effects=(pay.call(invoice="A-1", amount=40.0),),
                ),
                lw.Proposal(question=PO),
            ),
            effects=[pay],
            approvals=allow,
        )

    for n in (1, 2):
        loop = paying()
        r = rt.run_sync(loop, TASK)
        assert r.status == "awaiting_approval" and len(bank.paid) == n
        rt.cancel(r.run_id, by="ops", loop=loop)
        assert rt.resume_sync(r.run_id, loop).status == "cancelled"
        assert len(bank.refunds) == n  # this run's payment, refunded by this run
    assert [tx for _k, tx, _a in bank.refunds] == [{"tx": "tx-1"}, {"tx": "tx-2"}]


def test_a_fork_undoes_what_it_did_and_names_the_run_that_did_the_rest(rt: lw.Runtime) -> None:
    # From review (helper-41): a fork of a fork named its parent as the payment's owner
    bank = Bank()
    pay = bank.effect(requires_success=False)
    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))

    def step(ctx: lw.Context) -> lw.Proposal:
        invoice = f"A-{len(bank.paid) + 1}"
        return lw.Proposal(
            edits=(lw.Edit("doc", "a", 1),), effects=(pay.call(invoice=invoice, amount=40.0),)
        )

    origin = rt.run_sync(
        make_loop(Script(step, step, lw.Proposal(question=PO)), effects=[pay], approvals=allow),
        TASK,
    )
    loop = make_loop(Script(step, lw.Proposal(question=PO)), effects=[pay], approvals=allow)
    fork = rt.fork(origin.run_id, 1)
    assert rt.resume_sync(fork.run_id, loop).status == "awaiting_approval"  # pays A-3
    rt.cancel(fork.run_id, by="ops", loop=loop)
    out = rt.resume_sync(fork.run_id, loop)
    assert [k for k, _r, _a in bank.refunds] == ["pay:A-3"]  # its own, not the origin's A-1
    mine = f"pay (pay:A-1): done by run {origin.run_id}, not by this run"
    assert out.packet is not None
    assert [c["effect"] for c in out.packet["compensations"]] == ["pay", mine]
    again = rt.fork(fork.run_id, 1)  # a fork of the fork: the origin did A-1, still
    rt.cancel(again.run_id, by="ops", loop=loop)
    last = rt.resume_sync(again.run_id, loop)
    assert last.packet is not None
    assert [c["effect"] for c in last.packet["compensations"]] == [mine]


def _paying_a1() -> tuple[Bank, lw.Effect, lw.ApprovalPolicy, lw.Proposal]:
    """A bank, its payment (run whatever the verdict), a policy allowing it, and a proposal
    paying invoice A-1."""
    bank = Bank()
    pay = bank.effect(requires_success=False)
    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))
    paying = lw.Proposal(
        edits=(lw.Edit("doc", "a", 1),), effects=(pay.call(invoice="A-1", amount=40.0),)
    )
    return bank, pay, allow, paying


def test_a_run_that_reused_a_payment_pays_itself_once_the_payer_refunded_it(
    rt: lw.Runtime,
) -> None:
    # Run B reused run A's payment of A-1 (cycle 1). A is cancelled and refunds it. When B asks
    # for A-1 again (cycle 3), its reused copy no longer stands: B pays. While A's payment
    # stood, asking again reused it.
    bank, pay, allow, paying = _paying_a1()
    a_loop = make_loop(Script(paying, lw.Proposal(question=PO)), effects=[pay], approvals=allow)
    a = rt.run_sync(a_loop, TASK)
    b_loop = make_loop(
        Script(paying, lw.Proposal(question=PO), paying, paying, lw.Proposal(question=PO), paying),
        effects=[pay],
        approvals=allow,
        max_cycles=8,
    )
    b = rt.run_sync(b_loop, TASK)
    assert (a.status, b.status, len(bank.paid)) == ("awaiting_approval",) * 2 + (1,)
    rt.answer(b.run_id, "PO-1", by="ann")
    b = rt.resume_sync(b.run_id, b_loop)  # cycles 3 and 4 ask for A-1 again: A's stands
    assert b.status == "awaiting_approval" and len(bank.paid) == 1
    rt.cancel(a.run_id, by="ops", loop=a_loop)
    # B stands on A's payment: its refund waits for a person, naming B (allowed, it ran)
    [req] = rt.store.approvals(run_id=a.run_id, status="pending")
    assert req.kind == "compensation" and b.run_id in req.what
    rt.approve(a.run_id, by="fin", approval_id=req.approval_id)
    assert rt.resume_sync(a.run_id, a_loop).status == "cancelled"
    assert len(bank.refunds) == 1  # A's payment, undone
    rt.answer(b.run_id, "PO-2", by="ann")
    b = rt.resume_sync(b.run_id, b_loop)  # cycle 6 asks again: the key is free, B pays
    assert len(bank.paid) == 2
    [entry] = [e for e in rt.store.journal(b.run_id, kind="effect") if e.key == "effect:pay:A-1"]
    assert entry.status == "done" and "from_run" not in entry.data


def test_a_fork_that_inherited_a_payment_pays_itself_once_its_origin_refunded_it(
    rt: lw.Runtime,
) -> None:
    # From an outside probe (helper probe42a): a fork's inherited entry was never asked of the
    # store again, so once its origin refunded the payment, the fork asking for the invoice
    # (a person approving it, even) was told "done" and nothing was paid. As for a reused
    # result: the inherited one is reused while the origin's payment stands, paid here once
    # the origin undid it.
    bank, pay, allow, paying = _paying_a1()
    # (six cycles, which the fork keeps: its second question, in cycle 5, has a cycle after it
    # to read the answer; a question no cycle could read is not put to a person)
    a_loop = make_loop(
        Script(paying, lw.Proposal(question=PO)), effects=[pay], approvals=allow, max_cycles=6
    )
    a = rt.run_sync(a_loop, TASK)
    assert a.status == "awaiting_approval" and len(bank.paid) == 1
    f_loop = make_loop(
        Script(paying, lw.Proposal(question=PO), paying, lw.Proposal(question=PO)),
        effects=[pay],
        approvals=allow,
        max_cycles=6,
    )
    fork = rt.fork(a.run_id, 1)
    [inherited] = rt.store.journal(fork.run_id, kind="effect")
    assert inherited.data["inherited_from"] == a.run_id
    f = rt.resume_sync(fork.run_id, f_loop)  # cycle 2 asks for A-1 again: A's stands
    assert f.status == "awaiting_approval" and len(bank.paid) == 1
    rt.cancel(a.run_id, by="ops", loop=a_loop)
    # the fork asked and reused A's payment: its refund waits for a person, naming the fork
    [req] = rt.store.approvals(run_id=a.run_id, status="pending")
    assert req.kind == "compensation" and fork.run_id in req.what
    rt.approve(a.run_id, by="fin", approval_id=req.approval_id)
    assert rt.resume_sync(a.run_id, a_loop).status == "cancelled"
    assert len(bank.refunds) == 1  # A's payment, undone
    rt.answer(fork.run_id, "PO-1", by="ann")
    f = rt.resume_sync(fork.run_id, f_loop)  # cycle 4 asks again: the key is free, F pays
    assert f.status == "awaiting_approval" and len(bank.paid) == 2
    [entry] = rt.store.journal(fork.run_id, kind="effect")
    assert entry.status == "done"
    assert "from_run" not in entry.data and "inherited_from" not in entry.data
    # ...and it is the fork's own now: cancelling the fork offers its refund
    rt.cancel(fork.run_id, by="ops", loop=f_loop)
    assert rt.resume_sync(fork.run_id, f_loop).status == "cancelled"
    # each refund names its own charge: the fork paid under the redo's key (the store's next
    # generation), not the key of its origin's refunded charge
    assert [k for k, _r, _a in bank.refunds] == ["pay:A-1", "pay:A-1~2"]


def test_a_fork_refunds_its_own_payment_beside_its_origins_inherited_refund(
    rt: lw.Runtime,
) -> None:
    # From an outside probe (probe42a): a fork inherits its origin's done entries up to the
    # fork point, the origin's refund of A-1 among them (its payment, undone, is not). The
    # fork then paid A-1 itself; cancelled, it took that inherited refund for its own
    # payment's: nothing was offered, and a refund run would have been reported done unrun.
    bank, pay, allow, paying = _paying_a1()
    a_loop = make_loop(Script(paying, lw.Proposal(question=PO)), effects=[pay], approvals=allow)
    a = rt.run_sync(a_loop, TASK)
    rt.cancel(a.run_id, by="ops", loop=a_loop)
    assert rt.resume_sync(a.run_id, a_loop).status == "cancelled"
    assert (len(bank.paid), len(bank.refunds)) == (1, 1)
    fork = rt.fork(a.run_id, 1)
    names = [e.data.get("name") for e in rt.store.journal(fork.run_id, kind="effect")]
    assert names == ["pay.compensate"]  # the origin's refund, inherited
    f_loop = make_loop(Script(paying, lw.Proposal(question=PO)), effects=[pay], approvals=allow)
    assert rt.resume_sync(fork.run_id, f_loop).status == "awaiting_approval"
    assert len(bank.paid) == 2  # the fork's own payment (the origin's was refunded)
    rt.cancel(fork.run_id, by="ops", loop=f_loop)
    out = rt.resume_sync(fork.run_id, f_loop)
    assert out.status == "cancelled"
    assert [r for _k, r, _a in bank.refunds] == [{"tx": "tx-1"}, {"tx": "tx-2"}]
    assert out.packet is not None
    assert [(c["effect"], c["status"]) for c in out.packet["compensations"]] == [("pay", "done")]


def test_a_payment_undone_and_done_again_is_not_done_a_third_time(rt: lw.Runtime) -> None:
    # The next generation of an undone key ("pay:A-1~2") claims the action again, so another
    # run asking for the invoice gets that payment's result
    bank = Bank()
    pay = bank.effect()
    loop = make_loop(staged_actor(pay), effects=[pay], approvals=PAY_ONLY)
    r = rt.run_sync(loop, TASK)
    rt.rollback(r.run_id, 1, by="ops", loop=loop)
    [req] = [a for a in rt.store.approvals(run_id=r.run_id) if a.status == "pending"]
    rt.approve(r.run_id, by="fin", approval_id=req.approval_id)
    assert rt.resume_sync(r.run_id, loop).accepted
    assert (len(bank.paid), len(bank.refunds)) == (2, 1)
    other = rt.run_sync(make_loop(staged_actor(pay), effects=[pay], approvals=PAY_ONLY), TASK)
    assert other.accepted
    assert len(bank.paid) == 2  # the invoice stands paid once: reused, not paid a third time
    [reused] = [e for e in rt.store.journal(other.run_id, kind="effect") if e.status == "done"]
    assert reused.data["from_run"] == r.run_id


def test_a_rollback_never_undoes_what_another_run_did(rt: lw.Runtime) -> None:
    # From review (helper-40): run B reused run A's payment of A-1; rolling B back offered to
    # refund it, which refunded A's payment, and B's redo then reused the refunded result
    bank = Bank()
    pay = bank.effect()
    first = rt.run_sync(make_loop(staged_actor(pay), effects=[pay], approvals=PAY_ONLY), TASK)
    assert first.accepted and len(bank.paid) == 1
    loop = make_loop(staged_actor(pay), effects=[pay], approvals=PAY_ONLY)
    b = rt.run_sync(loop, TASK)
    [reused] = [e for e in rt.store.journal(b.run_id, kind="effect") if e.status == "done"]
    assert reused.data["from_run"] == first.run_id and len(bank.paid) == 1
    rec = rt.rollback(b.run_id, 1, by="ops", loop=loop)
    assert [a for a in rt.store.approvals(run_id=b.run_id) if a.status == "pending"] == []
    [ev] = events(rt, b.run_id, "rolled_back")
    assert ev["offers"] == 0
    assert ev["irreversible"] == [f"pay (pay:A-1): done by run {first.run_id}, not by this run"]
    assert rec.status != "awaiting_approval"
    out = rt.resume_sync(b.run_id, loop)
    assert out.accepted
    assert (len(bank.paid), bank.refunds) == (1, [])  # A's payment stands, once


def test_rollback_to_a_missing_cycle_names_the_cycles(rt: lw.Runtime) -> None:
    bank = Bank()
    pay = bank.effect()
    loop = make_loop(staged_actor(pay), effects=[pay], approvals=PAY_ONLY)
    r = rt.run_sync(loop, TASK)
    for bad in (7, -1):
        with pytest.raises(lw.ConfigError, match=r"0\.\.2") as err:
            rt.rollback(r.run_id, bad, by="ops", loop=loop)
        assert err.value.field == "to_cycle"
        assert str(bad) in str(err.value)
    with pytest.raises(lw.ConfigError) as who:
        rt.rollback(r.run_id, 1, by="", loop=loop)
    assert who.value.field == "by"
    assert rt.store.get_run(r.run_id).status == "accepted"  # nothing changed


def test_rollback_lists_an_effect_without_compensation_as_irreversible(rt: lw.Runtime) -> None:
    bank = Bank()
    pay = bank.effect()
    sent: list[str] = []

    def send(to: str) -> None:
        sent.append(to)

    mail = lw.effect("notify", name="mail", key=lambda a: a["to"])(send)
    loop = make_loop(
        staged_actor(pay, mail.call(to="buyer")), effects=[pay, mail], approvals=PAY_ONLY
    )
    r = rt.run_sync(loop, TASK)
    assert r.accepted
    assert sent == ["buyer"]
    rt.rollback(r.run_id, 1, by="ops", loop=loop)
    [ev] = events(rt, r.run_id, "rolled_back")
    assert ev["offers"] == 1
    assert ev["irreversible"] == ["mail (mail:buyer)"]


def test_rollback_without_the_loop_offers_nothing(rt: lw.Runtime) -> None:
    bank = Bank()
    pay = bank.effect()
    loop = make_loop(staged_actor(pay), effects=[pay], approvals=PAY_ONLY)
    r = rt.run_sync(loop, TASK)
    rec = rt.rollback(r.run_id, 1, by="ops")
    assert rec.status == "pending"
    [ev] = events(rt, r.run_id, "rolled_back")
    assert ev["offers"] == 0
    assert rt.store.approvals(run_id=r.run_id) == []
    rt.resume_sync(r.run_id, loop)
    assert bank.refunds == []


def test_rollback_can_be_undone_by_rolling_forward(rt: lw.Runtime) -> None:
    actor = Script(lw.Proposal.edit("doc", {"a": 1}), lw.Proposal.edit("doc", {"b": 2}))
    loop = make_loop(actor, max_cycles=2)
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.cycles) == ("stopped", 2)
    assert r.state.values()["doc"] == {"a": 1, "b": 2, "c": 0}
    rt.rollback(r.run_id, 1, by="ops")
    assert rt.result(r.run_id).state.values()["doc"] == {"a": 1, "b": 0, "c": 0}
    rt.rollback(r.run_id, 2, by="ops")
    assert rt.result(r.run_id).state.values()["doc"] == {"a": 1, "b": 2, "c": 0}


def paid_then_parked(rt: lw.Runtime, bank: Bank) -> tuple[lw.RunResult, lw.Loop]:
    """Cycle 1 pays (whatever the verdict); cycle 2 asks a question and parks."""
    pay = bank.effect(requires_success=False)
    actor = Script(
        lw.Proposal(
            edits=(lw.Edit("doc", "a", 1),), effects=(pay.call(invoice="A-1", amount=9.0),)
        ),
        lw.Proposal(question=PO),
    )
    loop = make_loop(actor, effects=[pay], approvals=PAY_ONLY)
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    assert len(bank.paid) == 1
    return r, loop


def test_cancel_with_loop_offers_compensations_and_stays_cancelled(rt: lw.Runtime) -> None:
    bank = Bank()
    r, loop = paid_then_parked(rt, bank)
    question = rt.pending_approval(r.run_id)
    rec = rt.cancel(r.run_id, by="ops", loop=loop)
    assert rec.status == "cancelled"
    assert rec.stop_reason == "cancelled"
    approvals = {a.kind: a for a in rt.store.approvals(run_id=r.run_id)}
    assert approvals["question"].status == "cancelled"
    assert approvals["question"].approval_id == question.approval_id
    comp = approvals["compensation"]
    assert comp.status == "pending"
    assert "pay:A-1" in comp.what
    assert "cancelled" in comp.why
    assert bank.refunds == []
    # before the decision, resuming runs nothing
    assert rt.resume_sync(r.run_id, loop).status == "cancelled"
    assert bank.refunds == []

    rt.approve(r.run_id, by="fin")
    out = rt.resume_sync(r.run_id, loop)
    assert (out.status, out.stop_reason) == ("cancelled", "cancelled")
    assert len(bank.refunds) == 1
    assert bank.refunds[0][0] == "pay:A-1"
    assert len(bank.paid) == 1
    assert events(rt, r.run_id, "compensations")[0]["results"][0]["status"] == "done"
    rt.resume_sync(r.run_id, loop)
    assert len(bank.refunds) == 1
    assert rt.store.get_run(r.run_id).status == "cancelled"


def test_cancel_denied_compensation_is_not_run(rt: lw.Runtime) -> None:
    bank = Bank()
    r, loop = paid_then_parked(rt, bank)
    rt.cancel(r.run_id, by="ops", loop=loop)
    rt.deny(r.run_id, by="fin")
    out = rt.resume_sync(r.run_id, loop)
    assert out.status == "cancelled"
    assert bank.refunds == []
    [note] = events(rt, r.run_id, "compensations")[0]["results"]
    assert (note["status"], note["why"]) == ("not_run", "request denied")


def test_cancel_without_loop_records_that_nothing_was_offered(rt: lw.Runtime) -> None:
    bank = Bank()
    r, loop = paid_then_parked(rt, bank)
    rec = rt.cancel(r.run_id, by="ops")
    assert rec.status == "cancelled"
    assert events(rt, r.run_id, "compensations_not_offered") == [
        {"why": "no loop was given, so the effects' compensations are unknown"}
    ]
    assert [a.kind for a in rt.store.approvals(run_id=r.run_id) if a.status == "pending"] == []
    rt.resume_sync(r.run_id, loop)
    assert bank.refunds == []


def test_cancel_of_a_run_without_effects_records_no_offer_event(rt: lw.Runtime) -> None:
    r, _, _ = ask_po(rt)
    rt.cancel(r.run_id, by="ops")
    assert events(rt, r.run_id, "compensations_not_offered") == []
    assert rt.store.get_run(r.run_id).status == "cancelled"


# --- overwriting accepted parts -----------------------------------------------------------------
def nonzero(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    vals = state.artifacts["doc"].values()
    found = tuple(lw.Finding(f"{k} is zero", "doc", k, "value") for k, v in vals.items() if v == 0)
    return lw.Verdict(passed=not found, score=1 - len(found) / len(vals), findings=found)


def overwrite_loop(rule: lw.PolicyRule | None) -> tuple[lw.Loop, Script]:
    actor = Script(
        lw.Proposal.edit("doc", {"a": 1}), lw.Proposal.edit("doc", {"a": 5, "b": 2, "c": 3})
    )
    policy = lw.ApprovalPolicy((rule,) if rule else ())
    return make_loop(actor, approvals=policy, verifiers=[nonzero], max_cycles=3), actor


def test_overwrite_accepted_require_parks_with_a_diff_and_approval_applies(rt: lw.Runtime) -> None:
    loop, _ = overwrite_loop(lw.PolicyRule(kind="overwrite_accepted", action="require"))
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.cycles) == ("awaiting_approval", 1)
    a = r.state.part("doc/a")
    assert a is not None
    assert (a.value, a.status) == (1, "accepted")
    req = rt.pending_approval(r.run_id)
    assert req.kind == "overwrite_accepted"
    assert "doc/a" in req.what
    assert req.diff is not None
    assert "- doc/a: 1" in req.diff
    assert "+ doc/a: 5" in req.diff
    rt.approve(r.run_id, by="editor")
    out = rt.resume_sync(r.run_id, loop)
    assert out.accepted
    assert out.state.values()["doc"] == {"a": 5, "b": 2, "c": 3}


def test_overwrite_accepted_deny_escalates(rt: lw.Runtime) -> None:
    loop, _ = overwrite_loop(lw.PolicyRule(kind="overwrite_accepted", action="deny"))
    r = rt.run_sync(loop, TASK)
    assert r.status == "escalated"
    assert r.packet is not None
    assert "overwriting accepted doc/a is denied" in r.packet["cause"]
    assert r.state.values()["doc"] == {"a": 1, "b": 0, "c": 0}


def test_overwrite_accepted_allow_applies(rt: lw.Runtime) -> None:
    loop, _ = overwrite_loop(lw.PolicyRule(kind="overwrite_accepted", action="allow"))
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.cycles) == ("accepted", 2)
    assert r.state.values()["doc"]["a"] == 5


def test_overwrite_accepted_without_a_rule_is_refused(rt: lw.Runtime) -> None:
    loop, actor = overwrite_loop(None)
    r = rt.run_sync(loop, TASK)
    assert r.status == "stopped"
    assert r.state.values()["doc"] == {"a": 1, "b": 0, "c": 0}
    assert events(rt, r.run_id, "proposal_refused")[0]["parts"] == ["doc/a"]
    assert any(f.dimension == "protected" and f.part == "a" for f in actor.contexts[-1].findings)
    assert rt.store.approvals(run_id=r.run_id) == []


def test_cancel_runs_a_compensation_the_policy_allows_without_asking(rt: lw.Runtime) -> None:
    held: list[str] = []
    released: list[str] = []

    def release(key: str, result: Any, args: dict[str, Any]) -> None:
        released.append(key)

    hold = lw.effect("reservation", name="hold", compensate=release, requires_success=False)(
        lambda room: held.append(room) or {"room": room}
    )
    actor = Script(
        lw.Proposal(edits=(lw.Edit("doc", "a", 1),), effects=(hold.call(room="r1"),)),
        lw.Proposal(question=PO),
    )
    loop = make_loop(actor, effects=[hold])
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    rec = rt.cancel(r.run_id, by="ops", loop=loop)
    assert rec.status == "cancelled"
    assert [a for a in rt.store.approvals(run_id=r.run_id) if a.status == "pending"] == []
    assert released == []  # offered now, run at the next resume
    out = rt.resume_sync(r.run_id, loop)
    assert out.status == "cancelled"
    assert held == ["r1"]
    assert len(released) == 1
    assert released[0].startswith("hold:")
    rt.resume_sync(r.run_id, loop)
    assert len(released) == 1


def test_a_fork_of_a_cycle_a_rollback_abandoned_is_refused_once_versions_are_rewritten(
    rt: lw.Runtime,
) -> None:
    # From an outside probe (helper-54) and a review (helper-55): a rollback writes its version
    # numbers again as the run goes on, so the abandoned cycle 2 read the redo's values; fork
    # --at-cycle 2 started from, and rollback 2 restored, a state cycle 2 never had.
    n = [0]
    down = {3, 4}  # the cycles whose model is down, once each: the run escalates before them

    def writer(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle in down:
            down.discard(ctx.cycle)
            raise ValueError("the model is down")  # permanent: the run escalates
        n[0] += 1
        return lw.Proposal.edit("doc", {"a": 100 + n[0]})  # never right: every cycle a version

    loop = make_loop(writer, max_cycles=8)
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.cycles) == ("escalated", 2)
    rt.rollback(r.run_id, 1, by="ops")
    rt.rollback(r.run_id, 2, by="ops")  # rolled forward: cycle 2's versions as they were
    down.discard(3)
    r = rt.resume_sync(r.run_id, loop)  # goes on from cycle 2 with new version numbers
    assert (r.status, r.cycles) == ("escalated", 3)
    assert rt.result(rt.fork(r.run_id, 2).run_id).state.values()["doc"]["a"] == 102
    rt.rollback(r.run_id, 1, by="ops")
    again = rt.resume_sync(r.run_id, loop)  # the run goes on: doc/a's version 2 written again
    assert again.cycles > 4
    with pytest.raises(lw.ConfigError, match="abandoned by a rollback"):
        rt.fork(r.run_id, 2)
    with pytest.raises(lw.ConfigError, match="abandoned by a rollback"):
        rt.rollback(r.run_id, 2, by="ops")
    assert rt.result(rt.fork(r.run_id, 1).run_id).state.values()["doc"]["a"] == 101
    last = again.cycles  # a cycle after the rollback forks as it is
    assert rt.result(rt.fork(r.run_id, last).run_id).state.values() == again.state.values()


@pytest.mark.parametrize("what", ["rollback", "cancel", "fork-loop", "fork-contract"])
def test_a_loop_or_contract_of_the_wrong_type_is_a_config_error(rt: lw.Runtime, what: str) -> None:
    # From an outside probe (probe42a): fork(loop="x") and fork(contract="x") raised
    # AttributeError; rollback(loop="x") and cancel(loop=5) were taken, and failed (or not)
    # only when a done effect's compensation was looked up in it.
    bank, pay, allow, paying = _paying_a1()
    loop = make_loop(Script(paying, lw.Proposal(question=PO)), effects=[pay], approvals=allow)
    r = rt.run_sync(loop, TASK)
    before = (rt.store.get_run(r.run_id), rt.store.latest_checkpoint(r.run_id).seq)
    with pytest.raises(lw.ConfigError) as err:
        if what == "rollback":
            rt.rollback(r.run_id, 1, by="ops", loop="loop.toml")  # type: ignore[arg-type]
        elif what == "cancel":
            rt.cancel(r.run_id, by="ops", loop=5)  # type: ignore[arg-type]
        elif what == "fork-loop":
            rt.fork(r.run_id, 1, loop="loop.toml")  # type: ignore[arg-type]
        else:
            rt.fork(r.run_id, 1, contract="contract.toml")  # type: ignore[arg-type]
    assert err.value.field == ("contract" if what == "fork-contract" else "loop")
    run = rt.store.get_run(r.run_id)
    assert (run.status, rt.store.latest_checkpoint(r.run_id).seq) == (
        before[0].status,
        before[1],
    )
    assert bank.refunds == []


def test_a_refund_request_expires_as_its_rule_says(
    rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From an outside probe (probe42a): a compensation's request was raised without its rule's
    # expires_after_s, so it waited for ever. Past it, the refund is not run and the request
    # is marked expired. (The store's clock, which expiry is on, is moved: no waiting.)
    bank, pay, _allow, paying = _paying_a1()
    rules = lw.ApprovalPolicy(
        (
            lw.PolicyRule(
                kind="spend",
                effect="pay.compensate",
                action="require",
                expires_after_s=60,
                name="refunds",
            ),
            lw.PolicyRule(kind="spend", effect="pay", action="allow"),
        )
    )
    loop = make_loop(Script(paying, lw.Proposal(question=PO)), effects=[pay], approvals=rules)
    r = rt.run_sync(loop, TASK)
    rt.cancel(r.run_id, by="ops", loop=loop)
    [req] = [a for a in rt.store.approvals(run_id=r.run_id) if a.status == "pending"]
    assert req.kind == "compensation" and req.expires_at is not None
    assert rt.resume_sync(r.run_id, loop).status == "cancelled"  # within its time: it waits
    assert rt.store.approval(req.approval_id).status == "pending"  # type: ignore[union-attr]
    later = req.expires_at + 1
    monkeypatch.setattr(rt.store, "clock", lambda: later)
    out = rt.resume_sync(r.run_id, loop)
    assert rt.store.approval(req.approval_id).status == "expired"  # type: ignore[union-attr]
    assert bank.refunds == []
    assert out.packet is not None
    assert [(c["status"], c["why"]) for c in out.packet["compensations"]] == [
        ("not_run", "request expired")
    ]


def test_a_cancel_during_an_effect_starts_no_further_effect(rt: lw.Runtime) -> None:
    # From an outside probe (probe42a): a person cancelled while the first of a cycle's two
    # effects ran; the second ran anyway and the run ended accepted, as if never cancelled
    # ("a run executing elsewhere stops at its next commit, before any further effect").
    # Placed: the first effect itself asks for the cancel, as another process would.
    ran: list[str] = []
    run: dict[str, str] = {}

    def first(n: int) -> str:
        ran.append("first")
        rt.store.request_cancel(run["id"])
        return "ok"

    def second(n: int) -> str:
        ran.append("second")
        return "ok"

    one = lw.effect("notify", name="first", compensate=lambda k, r, a: "undone")(first)
    two = lw.effect("notify", name="second")(second)

    def both(ctx: lw.Context) -> lw.Proposal:
        run["id"] = ctx.run_id
        return lw.Proposal(edits=FIX_ALL.edits, effects=(one.call(n=1), two.call(n=2)))

    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="notify", action="allow"),))
    loop = make_loop(both, effects=[one, two], approvals=allow)
    out = rt.run_sync(loop, TASK)
    assert (out.status, out.stop_reason) == ("cancelled", "cancelled")
    assert ran == ["first"]
    assert out.packet is not None
    assert "second" in out.packet["cause"] and "not run" in out.packet["cause"]
    # the effect that ran is offered for reversal, as any cancel offers what the run did
    done = rt.resume_sync(out.run_id, loop)
    assert done.packet is not None
    assert [(c["effect"], c["status"]) for c in done.packet["compensations"]] == [("first", "done")]
    assert ran == ["first"]


def test_an_edit_while_a_rollbacks_refund_waits_is_judged_naming_its_part(
    rt: lw.Runtime,
) -> None:
    """A person edits a rolled-back run while its refund waits for approval: once the refund
    ran, the next cycle judges the edit (no actor call), and its ``judged_again`` names the
    part edited, as for an edit of an idle run (it named none)."""
    bank = Bank()
    pay = bank.effect()
    actor = staged_actor(pay)
    loop = make_loop(actor, effects=[pay], approvals=PAY_ONLY)
    r = rt.run_sync(loop, TASK)
    rt.rollback(r.run_id, 1, by="ops", loop=loop)
    rt.edit(r.run_id, "doc/b", 2, by="ana")
    [req] = [a for a in rt.store.approvals(run_id=r.run_id) if a.status == "pending"]
    rt.approve(r.run_id, by="fin", approval_id=req.approval_id)
    asked = len(actor.contexts)
    rt.resume_sync(r.run_id, loop)
    assert len(bank.refunds) == 1
    [judged] = events(rt, r.run_id, "judged_again")
    assert judged == {"why": "edited", "check_only": True, "parts": ["doc/b"]}
    [check] = [e.cycle for e in rt.store.events(r.run_id) if e.kind == "cycle_started"
               and e.data.get("check_only")]  # fmt: skip
    assert check not in [c.cycle for c in actor.contexts[asked:]]  # no actor call in it
