"""The refund of a payment other runs reused asks a person, naming them, and tells them.

From an outside SIGKILL harness (kill44): run B asked for an invoice run A had paid, reused
A's payment and was accepted; a person then cancelled A, whose refund ran under an ``allow``
rule. B stayed accepted on a payment that no longer stood, and nothing named B to that
person. Now a reuse is recorded on the claim in the transaction that journals it; the refund
of a reused payment waits for a person, its request naming the runs that reused it (and
their status); once it is refunded each of them gets an ``effect_reuse_refunded`` event,
which ``loopwright show`` prints. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from doc_loop import TASK
from test_redo_keys import ALLOW, Crash, Provider, dying, paying

import loopwright as lw
from loopwright import _reversal


def compensation_requests(rt: lw.Runtime, run_id: str) -> list[lw.Approval]:
    return [
        a for a in rt.store.approvals(run_id=run_id, status="pending") if a.kind == "compensation"
    ]


def reusers(rt: lw.Runtime) -> list[tuple[str, str]]:
    """The runs that reused I6's payment (of its claim's current generation), and their status."""
    return [(r.run_id, r.status) for r in rt.store.effect_reuses("spend", "pay:I6")]


def told(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(run_id) if e.kind == "effect_reuse_refunded"]


def a_and_b(rt: lw.Runtime, provider: Provider) -> tuple[lw.Loop, str, str]:
    """A pays I6 and parks; B asks for I6 with the same arguments (reusing A's payment) and
    parks too."""
    loop = paying(provider)
    a = rt.run_sync(loop, TASK, task_key="A")
    b = rt.run_sync(loop, TASK, task_key="B")
    assert (a.status, b.status) == ("awaiting_approval", "awaiting_approval")
    assert provider.asked == ["pay:I6"]  # paid once: B reused it
    return loop, a.run_id, b.run_id


def started(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(run_id) if e.kind == "effect_reuse_refunding"]


def cancelled_payer(rt: lw.Runtime, provider: Provider) -> tuple[lw.Loop, str]:
    """A pays I6 and parks, and is cancelled before any run reused its payment: its refund is
    offered under the allow rule, asking no one."""
    loop = paying(provider)
    a = rt.run_sync(loop, TASK, task_key="A").run_id
    rt.cancel(a, by="ops", loop=loop)
    assert compensation_requests(rt, a) == []
    return loop, a


def cancelled_after_reuse(rt: lw.Runtime, provider: Provider) -> tuple[lw.Loop, str, str, Any]:
    """A pays, B reuses the payment, A is cancelled: its refund's one request (returned)."""
    loop, a, b = a_and_b(rt, provider)
    rt.cancel(a, by="ops", loop=loop)
    [req] = compensation_requests(rt, a)
    return loop, a, b, req


def approved_after_reuse(rt: lw.Runtime, provider: Provider) -> tuple[lw.Loop, str, str]:
    """A pays, B reuses the payment, A is cancelled and its refund approved by a person."""
    loop, a, b, req = cancelled_after_reuse(rt, provider)
    rt.approve(a, by="fin", approval_id=req.approval_id)
    return loop, a, b


def refund_in_doubt_after_reuse(url: str) -> tuple[str, str]:
    """As ``approved_after_reuse``, then A's refund dies after the provider's call (in doubt:
    the claim ``undoing``); A resumed, cancelled. Returns A and B."""
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, b = approved_after_reuse(rt, provider)
    crashed = dying(url, "before_effect_result")
    with pytest.raises(Crash):
        crashed.resume_sync(a, loop)
    crashed.close()
    with lw.Runtime(url) as rt:
        assert provider.collected() == 0  # the provider refunded it
        assert rt.resume_sync(a, loop).status == "cancelled"
    return a, b


def shown(url: str, run_id: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``loopwright show`` prints of the run."""
    from loopwright.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "200")
        assert main(["show", run_id, "--store", url]) == 0
    return capsys.readouterr().out


def test_a_reuse_is_recorded_on_the_claim(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        _, _a, b = a_and_b(rt, provider)
        assert reusers(rt) == [(b, "awaiting_approval")]
        assert rt.store.effect_reuses("spend", "other") == []


def test_the_refund_of_a_reused_payment_waits_for_a_person_naming_the_run(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: the cancel's refund ran under the allow rule; B stayed on a refunded payment
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, b, req = cancelled_after_reuse(rt, provider)
        assert b in req.what and "awaiting_approval" in req.what, req.what
        assert req.evidence["reused_by"] == [{"run_id": b, "status": "awaiting_approval"}]
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 5.0  # not refunded: nobody decided
        assert told(rt, b) == [] and started(rt, b) == []
        rt.approve(a, by="fin", approval_id=req.approval_id)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0
        said = {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": a}
        assert started(rt, b) == [said] and told(rt, b) == [said]
        [note] = (rt.store.get_run(a).packet or {})["compensations"]
        assert note["status"] == "done" and note["reused_by"][0]["run_id"] == b
    out = shown(url, b, capsys)
    assert "reused were refunded since" in out and f"refunded by run {a}" in out


def test_the_refund_of_a_payment_nobody_reused_runs_as_its_rule_says(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a = cancelled_payer(rt, provider)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0
        assert [e.kind for e in rt.store.events(a)].count("compensation_reused") == 0


def test_a_reuse_after_the_refund_was_offered_makes_it_wait(url: str) -> None:
    # The cancel offered the refund under the allow rule (nobody had reused it); B reused
    # the payment before A resumed to refund it.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a = cancelled_payer(rt, provider)
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 5.0
        [req] = compensation_requests(rt, a)
        assert b in req.what
        assert [e.kind for e in rt.store.events(a)].count("compensation_reused") == 1
        rt.approve(a, by="fin", approval_id=req.approval_id)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0 and len(told(rt, b)) == 1


def test_a_refund_allowed_before_a_reuse_is_stopped_by_the_store(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a = cancelled_payer(rt, provider)  # allowed: nobody reused it yet
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        # the refund's read of the reusers made before B's reuse: blind
        monkeypatch.setattr(_reversal, "reused_since", lambda *a, **k: [])
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 5.0  # the store refused the undoing
        [req] = compensation_requests(rt, a)
        assert b in req.what
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "done", 1)
        monkeypatch.undo()
        rt.approve(a, by="fin", approval_id=req.approval_id)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0 and len(told(rt, b)) == 1


def test_a_kill_after_the_reuse_counts_a_run_whose_journal_holds_it(url: str) -> None:
    # B dies between its reuse's journal write and its cycle's checkpoint: the reuse row
    # and its journal entry are one transaction, so the run counted holds the reuse, and
    # its resume reads it from its journal (counted once).
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider)
        a = rt.run_sync(loop, TASK, task_key="A").run_id

    crashed = lw.Runtime(url)

    def die(at: str) -> None:
        if at == "before_checkpoint" and crashed.store.effect_reuses("spend", "pay:I6"):
            raise Crash

    crashed._on_phase = die
    with pytest.raises(Crash):
        crashed.run_sync(loop, TASK, task_key="B")
    crashed.close()
    with lw.Runtime(url) as rt:
        b = rt.store.get_run("B").run_id
        [entry] = rt.store.journal(b, kind="effect")
        assert entry.status == "done" and entry.data["from_run"] == a
        assert [r for r, _st in reusers(rt)] == [b]
        assert rt.resume_sync(b, loop).status == "awaiting_approval"
        assert [r for r, _st in reusers(rt)] == [b]
        assert provider.asked == ["pay:I6"]
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        assert b in req.what


def as_before_reuses(rt: lw.Runtime, url: str, *, drop: bool = True) -> int:
    """Put the store back as the release before reuses were recorded: their table gone (but
    with ``drop=False``: the steps from there run again), the schema version before its step
    (returned: the latest)."""
    from loopwright.store._pg_schema import PG_MIGRATIONS
    from loopwright.store._schema import BACKFILL_REUSES, SQLITE_MIGRATIONS

    steps = PG_MIGRATIONS if url.startswith("postgres") else SQLITE_MIGRATIONS
    before = next(i for i, s in enumerate(steps) if BACKFILL_REUSES in s)
    with rt.store._tx() as conn:  # type: ignore[attr-defined]
        if drop:
            conn.execute("DROP TABLE effect_reuses")
        conn.execute(f"UPDATE loopwright_meta SET value = '{before}' WHERE key = 'schema_version'")
    return len(steps)


def test_an_upgraded_store_records_the_reuses_its_runs_journaled(url: str) -> None:
    # B reused A's payment under the release before; C's invoice was paid and nobody reused
    # it. After the upgrade A's refund names B; C's claim works as before (reused by D, its
    # refund then names D).
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, b = a_and_b(rt, provider)
        latest = as_before_reuses(rt, url)
    with lw.Runtime(url) as rt:
        assert rt.store.schema_version == latest  # type: ignore[attr-defined]
        assert reusers(rt) == [(b, "awaiting_approval")]
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "done", 1)
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        assert b in req.what
        c = rt.run_sync(loop, TASK, task_key="C").run_id  # the claim still done: reused
        assert provider.asked == ["pay:I6"]
        assert [r for r, _st in reusers(rt)] == [b, c]


def test_an_upgrade_records_a_fork_as_a_store_that_recorded_it_does(url: str) -> None:
    # F, a fork of B, inherited B's reuse of A's payment (its journal entry names
    # ``from_run``, with ``inherited_from``). A fork relies on what it inherited as a reuser
    # does (test_fork_reuses.py): a store that recorded it as it forked has B and F, and so
    # has an upgraded one (the first step records B, the next F).
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, _a, b = a_and_b(rt, provider)
        f = rt.fork(b, 1, loop=loop, task_key="F").run_id
        [inherited] = rt.store.journal(f, kind="effect")
        assert inherited.data["from_run"] and inherited.data["inherited_from"] == b
        live = reusers(rt)
        assert [r for r, _st in live] == [b, f]
        as_before_reuses(rt, url)
    with lw.Runtime(url) as rt:
        assert reusers(rt) == live


def test_an_upgrade_records_a_reuse_at_the_generation_it_reused(url: str) -> None:
    # B reused A's first payment; A's rollback refunded it and paid again (the next
    # generation), which C reused. A store that recorded the reuses as they came has C alone
    # on the payment standing. Before: the upgrade recorded B on it too (B's entry names A,
    # whose claim is done), so A's next refund named and told B of a payment it never reused.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider, staged=True)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.run_sync(loop, TASK, task_key="B")
        rt.rollback(a, 1, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        rt.approve(a, by="fin", approval_id=req.approval_id)
        rt.resume_sync(a, loop)
        c = rt.run_sync(loop, TASK, task_key="C").run_id
        assert provider.asked == ["pay:I6", "pay:I6~2"]
        live = reusers(rt)
        assert [r for r, _st in live] == [c]
        as_before_reuses(rt, url)
    with lw.Runtime(url) as rt:
        assert reusers(rt) == live


def test_an_upgrade_records_no_reuse_of_a_payment_since_refunded(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, _b, req = cancelled_after_reuse(rt, provider)
        rt.approve(a, by="fin", approval_id=req.approval_id)
        assert rt.resume_sync(a, loop).status == "cancelled"
        as_before_reuses(rt, url)
    with lw.Runtime(url) as rt:
        assert reusers(rt) == []
        # the next run pays under the next generation's key, as before
        rt.run_sync(loop, TASK, task_key="C")
        assert provider.asked == ["pay:I6", "pay:I6~2"]


def test_an_upgrade_records_and_tells_a_reuse_of_a_payment_whose_refund_started(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # B reused A's payment under the release before; A's refund then started and died after
    # the provider refunded (in doubt: the claim ``undoing``). The upgrade passed B over (it
    # recorded reuses of ``done`` claims only): B was on nothing, told nothing, where a reuse
    # recorded now is told as the refund starts, and a fork in B's place is told by the
    # upgrade. Now B is recorded and told, once: the step run again does not tell it twice.
    a, b = refund_in_doubt_after_reuse(url)
    with lw.Runtime(url) as rt:
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "undoing", 1)
        said = {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": a}
        assert started(rt, b) == [said]  # told live, as the refund started
        latest = as_before_reuses(rt, url)
        with rt.store._tx() as conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM events WHERE kind = 'effect_reuse_refunding'")
    with lw.Runtime(url) as rt:
        assert rt.store.schema_version == latest  # type: ignore[attr-defined]
        assert [r for r, _st in reusers(rt)] == [b]
        assert started(rt, b) == [said]
        as_before_reuses(rt, url, drop=False)
    with lw.Runtime(url) as rt:  # both steps run again: B, recorded already, is not told again
        assert [r for r, _st in reusers(rt)] == [b]
        assert started(rt, b) == [said]
    assert "refund started (may be done)" in shown(url, b, capsys)


def test_the_store_starts_no_undoing_of_a_reuse_no_person_was_told_of(url: str) -> None:
    # ``journal_put``'s ``undoing`` with ``reusers_known``: refused (nothing written) while a
    # run that reused the action is not among them; written once it is.
    provider = Provider()
    with lw.Runtime(url) as rt:
        _, a, b = a_and_b(rt, provider)
        [orig] = rt.store.journal(a, kind="effect")
        token = rt.store.acquire_lease(a, "test", 60.0)

        def undoing(known: list[str]) -> None:
            rt.store.journal_put(
                a,
                token,
                key=f"undo:{orig.key.removeprefix('effect:')}",
                kind="undo",
                cycle=orig.cycle,
                status="undoing",
                data={"name": "pay", "result": orig.data["result"], "reusers_known": known},
                claim=("spend", "pay:I6", ""),
            )

        with pytest.raises(lw.ConflictError) as caught:
            undoing([])
        assert caught.value.runs == [(b, "awaiting_approval")]  # type: ignore[attr-defined]
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "done", 1)
        assert rt.store.journal(a, kind="undo") == []
        undoing([b])
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "undoing", 1)


def test_a_rollback_of_a_reused_payment_parks_for_a_person_naming_the_run(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider, staged=True)  # pays in cycle 2
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        assert provider.asked == ["pay:I6"]
        assert rt.rollback(a, 1, by="ops", loop=loop).status == "awaiting_approval"
        [req] = compensation_requests(rt, a)
        assert b in req.what and provider.collected() == 5.0
        rt.approve(a, by="fin", approval_id=req.approval_id)
        rt.resume_sync(a, loop)  # refunds, then redoes the payment under the next key
        assert provider.asked == ["pay:I6", "pay:I6~2"] and len(told(rt, b)) == 1


def test_a_rolled_back_run_whose_refund_was_reused_since_parks_for_a_person(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider, staged=True)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        assert rt.rollback(a, 1, by="ops", loop=loop).status == "pending"  # allowed
        b = rt.run_sync(loop, TASK, task_key="B").run_id  # reuses A's payment meanwhile
        assert rt.resume_sync(a, loop).status == "awaiting_approval"
        [req] = compensation_requests(rt, a)
        assert b in req.what and provider.asked == ["pay:I6"] and provider.collected() == 5.0
        rt.approve(a, by="fin", approval_id=req.approval_id)
        rt.resume_sync(a, loop)
        assert provider.asked == ["pay:I6", "pay:I6~2"] and len(told(rt, b)) == 1


def test_a_run_is_told_of_a_refund_that_ends_in_doubt(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The approved refund dies after the provider's call, with no hook to ask: in doubt, its
    # claim never ``compensated``; B was told when it started, before the provider was asked.
    a, b = refund_in_doubt_after_reuse(url)
    with lw.Runtime(url) as rt:
        [note] = (rt.store.get_run(a).packet or {})["compensations"]
        assert note["status"] == "in_doubt"
        assert len(started(rt, b)) == 1 and told(rt, b) == []
    assert "refund started (may be done)" in shown(url, b, capsys)


def test_a_refund_asked_again_for_a_new_reuser_keeps_who_may_approve_it(url: str) -> None:
    # The refund's rule keeps the person who cancelled A from approving it (separation of
    # duties). Another approved it naming B; C reused the payment before A resumed, so the
    # refund was asked again naming B and C. Before: that request was asked of anyone (its
    # rule's who left out), and the canceller approved the refund of a payment two runs stand on.
    provider = Provider()
    refund_rule = lw.PolicyRule(
        kind="spend", effect="pay.compensate", action="require", separate=True
    )
    approvals = lw.ApprovalPolicy((refund_rule, *ALLOW.rules))
    with lw.Runtime(url) as rt:
        loop = paying(provider, approvals=approvals)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        rt.cancel(a, by="ops", loop=loop)
        [first] = compensation_requests(rt, a)
        with pytest.raises(lw.NotPermittedError):
            rt.approve(a, by="ops", approval_id=first.approval_id)
        rt.approve(a, by="fin", approval_id=first.approval_id)
        c = rt.run_sync(loop, TASK, task_key="C").run_id  # reuses the payment after the approval
        assert rt.resume_sync(a, loop).status == "cancelled"
        [again] = compensation_requests(rt, a)
        assert b in again.what and c in again.what
        assert again.evidence["who"] == first.evidence["who"]
        with pytest.raises(lw.NotPermittedError):
            rt.approve(a, by="ops", approval_id=again.approval_id)
        assert provider.collected() == 5.0  # not refunded
        rt.approve(a, by="fin", approval_id=again.approval_id)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0 and len(told(rt, b)) == len(told(rt, c)) == 1


def test_a_refund_asked_again_for_a_new_reuser_expires_as_its_rule_says(url: str) -> None:
    # Before: the request asked again had no expiry (its rule's ``expires_after_s`` left
    # out), so the refund waited for ever where the first request would have escalated.
    provider = Provider()
    refund_rule = lw.PolicyRule(
        kind="spend", effect="pay.compensate", action="require", expires_after_s=3600
    )
    with lw.Runtime(url) as rt:
        loop = paying(provider, approvals=lw.ApprovalPolicy((refund_rule, *ALLOW.rules)))
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.cancel(a, by="ops", loop=loop)
        [first] = compensation_requests(rt, a)
        assert first.expires_at is not None
        rt.approve(a, by="ops", approval_id=first.approval_id)
        b = rt.run_sync(loop, TASK, task_key="B").run_id  # reuses the approved refund's payment
        assert rt.resume_sync(a, loop).status == "cancelled"
        [again] = compensation_requests(rt, a)
        assert b in again.what and again.expires_at is not None
        assert 0 < again.expires_at - again.requested_at <= 3600  # the rule's, from its asking


def test_a_run_is_told_once_of_a_refund_its_payer_resumed_after(url: str) -> None:
    # A's process dies after its refund's original was recorded undone (the claim
    # ``compensated``, B told), before the run's commit: the resume reports the refund as it
    # ended. Before: it marked the claim ``undoing`` again, then ``compensated``, telling B a
    # second time of the one refund.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, b = approved_after_reuse(rt, provider)
    crashed = lw.Runtime(url)
    put = crashed.store.journal_put

    def journal_put(*args: Any, **kw: Any) -> Any:
        entry = put(*args, **kw)
        if kw.get("kind") == "effect" and kw.get("status") == "compensated":
            raise Crash  # the process dies as the original is recorded undone
        return entry

    crashed.store.journal_put = journal_put  # type: ignore[method-assign]
    with pytest.raises(Crash):
        crashed.resume_sync(a, loop)
    crashed.close()
    with lw.Runtime(url) as rt:
        assert len(told(rt, b)) == 1
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0 and provider.asked == ["pay:I6"]
        assert len(started(rt, b)) == len(told(rt, b)) == 1
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "compensated", 1)


class Refusing(Provider):
    """A provider that refuses refunds (the charge stands): the outside world said no."""

    def refund(self, key: str, result: Any, args: dict[str, Any]) -> dict[str, Any]:
        raise lw.RefusedError("the charge is disputed: no refund")


def test_a_run_is_told_when_a_refund_it_was_told_of_was_refused(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # B was told the refund started; the provider refused it and A's claim stands ``done``
    # again. Before: B's show said "refund started (may be done)" for ever, of a payment
    # that stands (a person reading it might pay by hand again).
    with lw.Runtime(url) as rt:
        loop, a, b = approved_after_reuse(rt, provider := Refusing())
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 5.0
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "done", 1)
        said = {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": a}
        assert started(rt, b) == [said] and told(rt, b) == []
        refused = [e.data for e in rt.store.events(b) if e.kind == "effect_reuse_refund_refused"]
        assert refused == [said]
    out = shown(url, b, capsys)
    assert "may be done" not in out and "reused were refunded since" not in out


def test_a_deny_rule_still_denies_the_refund_of_a_reused_payment(url: str) -> None:
    # ``deny`` offers nothing, reused or not: no request, no refund, no run told of one. Before,
    # its note said "so a person decides" of a refund no person is asked about.
    deny = lw.PolicyRule(kind="spend", effect="pay.compensate", action="deny")
    with lw.Runtime(url) as rt:
        provider = Provider()
        loop = paying(provider, approvals=lw.ApprovalPolicy((deny, *ALLOW.rules)))
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        rt.cancel(a, by="ops", loop=loop)
        assert compensation_requests(rt, a) == []
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 5.0 and started(rt, b) == told(rt, b) == []
        [note] = (rt.store.get_run(a).packet or {})["compensations"]
        assert note["status"] == "not_run" and "denied by policy" in note["why"]
        assert b in note["why"] and "a person decides" not in note["why"]
