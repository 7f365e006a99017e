"""Doubts about paying once and refunding once (money44), SQLite and PostgreSQL.

- A cycle's write-ahead an earlier release stored without its effects' keys: the resume asks
  the key function again, and one that raises now escalated nowhere, it escaped as a traceback.
- A run's own refund left in doubt (the provider timed out, or the process died after the
  call): the payment stays journaled ``done``. Reopened by a rollback past the payment, the run
  asked for the invoice again and was told it was paid (the money perhaps back with the
  payer, the work accepted on it), where a person must check.
- A provider that keeps a failed answer by key, as Stripe does (a declined card is declined
  again for a day under the same key): after the outside world refused, the next run was
  handed the same key and could never pay. A refusal is a finished attempt: its retry gets
  the next generation's key; a failure that may have acted keeps its key (a rollback's redo
  of one handed out a fresh key, and a provider that had charged charged again).
- A refund that failed in a way that may have come after it refunded (a bug in its code after
  the provider's call) put the claim back to ``done``: another run reused the refunded payment
  as paid, and a rollback retired the failure and refunded a second time. Only a refusal
  leaves the payment standing; anything else is in doubt.
- Another run's result reused: the claim read in the intent's transaction, the reuse written
  in the next; a refund started in between had the refunded payment counted paid.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from doc_loop import TASK
from test_redo_keys import ALLOW, PO, Crash, Provider, dying, paying

import loopwright as lw


def test_a_key_function_that_raises_on_resuming_an_old_write_ahead_escalates(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = Provider()
    real = lw.Runtime._commit

    def keyless(self: Any, ex: Any, *args: Any, **kw: Any) -> bool:
        # the write-ahead as a release before the keys were stored wrote it
        if ex.state.pending and "keys" in ex.state.pending:
            ex.state.pending = {k: v for k, v in ex.state.pending.items() if k != "keys"}
        return real(self, ex, *args, **kw)

    with monkeypatch.context() as m:
        m.setattr(lw.Runtime, "_commit", keyless)
        crashed = dying(url, "before_effect_intent")
        with pytest.raises(Crash):
            crashed.run_sync(paying(provider), TASK, task_key="A")
        crashed.close()

    def broken(args: Any) -> str:
        raise KeyError("invoice")

    loop = paying(provider)
    loop.effects[0].key_fn = broken  # a deploy between the crash and the resume
    with lw.Runtime(url) as rt:
        run = rt.store.get_run("A")
        out = rt.resume_sync(run.run_id, loop)
        assert (out.status, out.stop_reason) == ("escalated", "escalated")
        assert out.packet is not None
        cause = out.packet["cause"]
        assert "the key function of effect pay raised KeyError" in cause, cause
        assert "write-ahead" in cause
        assert rt.store.journal(run.run_id, kind="effect") == []
    assert provider.asked == []  # nothing was paid


def _twice(provider: Provider, refund: Any) -> lw.Loop:
    """Pays invoice I6 in cycle 1 (edit a) and asks for it again in cycle 2 (edit b), then
    asks a question (the run parks)."""
    pay = lw.effect(
        "spend",
        name="pay",
        key=lambda a: a["invoice"],
        compensate=refund,
        requires_success=False,
    )(provider.pay)

    def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        if doc["a"] != 1:
            return lw.Proposal(
                edits=(lw.Edit("doc", "a", 1),), effects=(pay.call(invoice="I6", amount=5.0),)
            )
        if doc["b"] != 2:
            return lw.Proposal(
                edits=(lw.Edit("doc", "b", 2),), effects=(pay.call(invoice="I6", amount=5.0),)
            )
        return lw.Proposal(question=PO)

    return lw.Loop(
        name="twice",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=False, score=0.5)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
        effects=[pay],
        approvals=ALLOW,
    )


@pytest.mark.parametrize("how", ["timed_out", "died_after_the_call"])
def test_a_payment_whose_own_refund_is_in_doubt_is_not_counted_paid(url: str, how: str) -> None:
    provider = Provider()
    refunds: list[str] = []

    def refund(key: str, result: Any, args: dict[str, Any]) -> Any:
        refunds.append(key)
        out = provider.refund(key, result, args)  # the provider refunded...
        if how == "timed_out":
            raise lw.TransientError("read timed out")  # ...and the answer was lost
        return out

    loop = _twice(provider, refund)
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK)
        assert a.status == "awaiting_approval" and provider.asked == ["pay:I6"]
        rt.cancel(a.run_id, by="ops", loop=loop)
    if how == "died_after_the_call":
        crashed = dying(url, "before_effect_result")
        with pytest.raises(Crash):
            crashed.resume_sync(a.run_id, loop)
        crashed.close()
    with lw.Runtime(url) as rt:
        assert rt.resume_sync(a.run_id, loop).status == "cancelled"
        [note] = [
            n
            for n in rt.store.journal(a.run_id, kind="effect")
            if n.key.startswith("effect:pay.compensate")
        ]
        assert note.status == "in_doubt"
        assert provider.collected() == 0 and refunds == ["pay:I6"]
        # a person reopens the run after its payment (cycle 1): cycle 2 asks for I6 again
        rt.rollback(a.run_id, 1, by="ops", loop=loop)
        b = rt.resume_sync(a.run_id, loop)
        assert (b.status, b.stop_reason) == ("escalated", "escalated"), b.status
        assert b.packet is not None
        assert "pay (pay:I6) was done by this run in cycle 1, and its undoing" in b.packet["cause"]
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "undoing"
        [paid] = [e for e in rt.store.journal(a.run_id, kind="effect") if e.key == "effect:pay:I6"]
        assert paid.status == "done"  # left for a person
    assert provider.asked == ["pay:I6"] and refunds == ["pay:I6"]  # not paid, nor refunded, again


class Keeping(Provider):
    """A provider that keeps its answer by key, failures too (as Stripe does): while
    ``declining``, a new key's charge is declined, and that key stays declined."""

    def __init__(self) -> None:
        super().__init__()
        self.declining = False
        self.declined: set[str] = set()

    def pay(self, invoice: str, amount: float, key: str) -> dict[str, Any]:
        if key in self.declined or (self.declining and key not in self.charges):
            self.asked.append(key)
            self.declined.add(key)
            raise Declined("card declined")
        return super().pay(invoice, amount, key)


class Declined(lw.RefusedError):
    """A declined card, as the effect says it: ``RefusedError`` (its HTTP answer, 402)."""

    status_code = 402


class Answered(Exception):
    """An HTTP client's error: the status alone, not said to be a refusal by the effect."""

    status_code = 402


def _raising(provider: Provider, error: type[Exception]) -> Any:
    """``provider.pay`` whose answer is lost: the charge is made, then ``error`` is raised."""

    def pay(invoice: str, amount: float, key: str) -> dict[str, Any]:
        provider.pay(invoice, amount, key)
        raise error("answer lost")

    return pay


@pytest.mark.parametrize("redo", ["another run", "rollback to the start", "rollback to cycle 1"])
def test_a_declined_payment_is_redone_under_the_next_key(url: str, redo: str) -> None:
    # A refusal is a finished attempt, and the provider keeps its answer by key: whoever does
    # the payment again (another run, or the run itself reopened before it, at its start or
    # after an edit) is handed the next generation's key, never the declined one. (Two tests
    # proved it by one route each; the journal's checks and the rollback to the start come
    # from test_review_regressions' run-scoped-key test, here with a business key's claim.)
    provider = Keeping()
    provider.declining = True
    staged = redo == "rollback to cycle 1"
    first = paying(provider, staged=staged)
    with lw.Runtime(url) as rt:
        a = rt.run_sync(first, TASK)
        assert (a.status, a.cycles) == ("escalated", int(staged))
        assert provider.asked == ["pay:I6"]
        provider.declining = False  # the payer fixed the card
        if redo == "another run":
            b = rt.run_sync(paying(provider), TASK)
            assert b.run_id != a.run_id
        else:
            rt.rollback(a.run_id, int(staged), by="ops", loop=first)
            b = rt.resume_sync(a.run_id, paying(provider, staged=staged))
        assert b.status == "awaiting_approval", b.packet
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None
        assert (claim.run_id, claim.status, claim.generation) == (b.run_id, "done", 2)
        [paid] = [e for e in rt.store.journal(b.run_id, kind="effect") if e.status == "done"]
        assert (paid.data["call_key"], paid.data["result"]["id"]) == ("pay:I6~2", "ch-1")
        # the refusal stays as it was in the run that was refused; a reopened run retired it
        [refused] = [
            e for e in rt.store.journal(a.run_id, kind="effect") if e.key == "effect:pay:I6"
        ]
        assert refused.status == ("failed" if redo == "another run" else "retired")
    assert provider.asked == ["pay:I6", "pay:I6~2"]  # not the declined key again
    assert provider.collected() == 5.0


class LedgerRefused(Exception):
    """The HTTP error of a later request of the effect: the ledger's 422, after the charge."""

    status_code = 422


@pytest.mark.parametrize("error", [KeyError, LedgerRefused, Answered, lw.PermanentError])
def test_another_run_retries_a_payment_whose_failure_may_have_acted_under_its_key(
    url: str, error: type[Exception]
) -> None:
    # The charge was made and the effect failed after it: a bug in its code (KeyError), or a
    # later request of it answered 4xx (a ledger's 422, review44: a 4xx was taken for a
    # refusal, the next run handed "pay:I6~2", and the invoice paid twice). Neither is known
    # to come before the action: the next run's key is the same, and the provider answers
    # with the charge it made. Nor is the effect's own "do not retry" (PermanentError), which
    # stop 44 took for a refusal: only RefusedError says nothing was done.
    provider = Provider()
    buggy = paying(provider)
    buggy.effects[0].fn = _raising(provider, error)
    with lw.Runtime(url) as rt:
        assert rt.run_sync(buggy, TASK).status == "escalated"
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and (claim.status, claim.generation) == ("failed", 1)
        assert rt.run_sync(paying(provider), TASK).status == "awaiting_approval"
    assert provider.asked == ["pay:I6", "pay:I6"] and len(provider.charges) == 1


def test_a_rollback_redoes_a_failure_that_may_have_acted_under_its_key(url: str) -> None:
    # An idempotent payment whose every answer was lost (the provider charged, then the read
    # timed out) gave up; the rollback's redo was handed "pay:I6~2" and charged a second time
    provider = Provider()
    lost = paying(
        provider,
        staged=True,
        idempotent=True,
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.001, max_backoff_s=0.001),
    )
    lost.effects[0].fn = _raising(provider, lw.TransientError)
    with lw.Runtime(url) as rt:
        a = rt.run_sync(lost, TASK)
        assert a.status == "escalated" and provider.asked == ["pay:I6", "pay:I6"]
        rt.rollback(a.run_id, 1, by="ops", loop=lost)
        b = rt.resume_sync(a.run_id, paying(provider, staged=True, idempotent=True))
    assert b.status == "awaiting_approval", b.packet
    assert provider.asked == ["pay:I6", "pay:I6", "pay:I6"]  # the same key: charged once
    assert len(provider.charges) == 1 and provider.collected() == 5.0


def test_a_refund_that_may_have_acted_before_failing_is_in_doubt(url: str) -> None:
    provider = Provider()
    refunds: list[str] = []

    def refund(key: str, result: Any, args: dict[str, Any]) -> Any:
        refunds.append(key)
        out = provider.refund(key, result, args)
        return out["no such field"]  # a bug after the provider refunded

    def buggy() -> lw.Loop:
        loop = paying(provider)
        loop.effects[0].compensate_fn = refund
        return loop

    with lw.Runtime(url) as rt:
        a = rt.run_sync(buggy(), TASK)
        rt.cancel(a.run_id, by="ops", loop=buggy())
        assert rt.resume_sync(a.run_id, buggy()).status == "cancelled"
        [note] = (rt.store.get_run(a.run_id).packet or {})["compensations"]
        assert note["status"] == "in_doubt" and "may be undone" in note["cause"], note
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "undoing"
        b = rt.run_sync(paying(provider), TASK, task_key="B")  # not handed the refunded charge
        assert b.status == "escalated" and b.packet is not None
        assert "is being undone by run" in b.packet["cause"]
        # rolled back to before the payment, its refund is offered again: not run again
        rt.rollback(a.run_id, 0, by="ops", loop=buggy())
        assert rt.resume_sync(a.run_id, buggy()).status == "escalated"
    assert refunds == ["pay:I6"] and provider.asked == ["pay:I6"]


def test_runs_racing_for_a_declined_invoice_pay_it_once_under_the_next_key(url: str) -> None:
    # Four runs (each its own runtime and connection) ask at once for the invoice a run was
    # refused: exactly one is handed the next key and pays; the others reuse its result or
    # go to a person while it is in flight
    provider = Keeping()
    provider.declining = True
    lock = threading.Lock()
    with lw.Runtime(url) as rt:
        assert rt.run_sync(paying(provider), TASK).status == "escalated"
    provider.declining = False
    real_pay = provider.pay

    def pay(invoice: str, amount: float, key: str) -> dict[str, Any]:
        with lock:
            return real_pay(invoice, amount, key)

    barrier = threading.Barrier(4)
    results: list[Any] = [None] * 4

    def one(i: int) -> None:
        loop = paying(provider)
        loop.effects[0].fn = pay
        with lw.Runtime(url) as rt:
            barrier.wait()
            results[i] = rt.run_sync(loop, TASK, task_key=f"race-{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in results)
    assert provider.asked == ["pay:I6", "pay:I6~2"] and provider.collected() == 5.0
    assert {r.status for r in results} <= {"awaiting_approval", "escalated"}


def test_a_result_whose_undoing_starts_while_it_is_reused_is_not_reused(url: str) -> None:
    # Run B's intent finds the invoice paid by A (the claim "done", same arguments) in one
    # transaction and writes its reuse in the next; A's refund started in between (its claim
    # "undoing"). B recorded A's charge as its payment: a refunded payment counted paid.
    provider = Provider()
    with lw.Runtime(url) as rt:
        a = rt.run_sync(paying(provider), TASK)
        real = rt.store.journal_put

        def undone_meanwhile(run_id: str, token: int, **kw: Any) -> Any:
            if kw.get("status") == "done" and kw["data"].get("from_run") == a.run_id:
                # as A's ``_mark_undo`` does when its refund starts (A holds the claim)
                a_token = rt.store.acquire_lease(a.run_id, "ops", 60.0)
                real(
                    a.run_id,
                    a_token,
                    key="undo:pay:I6",
                    kind="undo",
                    cycle=1,
                    status="undoing",
                    data={"name": "pay"},
                    claim=("spend", "pay:I6", ""),
                )
            return real(run_id, token, **kw)

        rt.store.journal_put = undone_meanwhile  # type: ignore[method-assign]
        b = rt.run_sync(paying(provider), TASK, task_key="B")
        [entry] = rt.store.journal(b.run_id, kind="effect")
    assert entry.status == "in_doubt" and "result" not in entry.data
    assert b.status == "escalated" and b.packet is not None
    assert f"pay (pay:I6) is being undone by run {a.run_id}" in b.packet["cause"]
    assert provider.asked == ["pay:I6"]
