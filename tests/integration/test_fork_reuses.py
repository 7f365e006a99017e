"""A fork relies on the payments it inherited as a run that reused them does.

From outside (money46): A paid invoice I6 and parked; a person forked A at the payment's cycle
(``loopwright fork``), and the fork F went on, holding the payment as done (inherited, never
asked for again). A person then cancelled A, whose refund ran under an ``allow`` rule: F stayed
on a payment that no longer stood, the request (there was none) named nobody, and F was never
told. Now a fork is recorded on the claim of each business action it inherits done (in the
transaction that makes it; the migration records the forks made before), so the origin's
refund waits for a person, names the fork, and tells it. A fork's own cancel or rollback never
refunds what it inherited (the origin did it). SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from doc_loop import TASK
from test_redo_keys import ALLOW, Crash, Provider, dying, paying
from test_reused_refunds import (
    cancelled_payer,
    compensation_requests,
    reusers,
    shown,
    started,
    told,
)

import loopwright as lw


def a_and_fork(rt: lw.Runtime, provider: Provider) -> tuple[lw.Loop, str, str]:
    """A pays I6 in cycle 1 and parks; F, a fork of A at cycle 1, goes on and parks too
    (it never asks for I6 again: the payment is its inheritance)."""
    loop = paying(provider)
    a = rt.run_sync(loop, TASK, task_key="A").run_id
    f = rt.fork(a, 1, loop=loop, task_key="F").run_id
    assert rt.resume_sync(f, loop).status == "awaiting_approval"
    assert provider.asked == ["pay:I6"]  # paid once: F inherited it
    [inherited] = rt.store.journal(f, kind="effect")
    assert inherited.data["inherited_from"] == a and not inherited.data.get("from_run")
    return loop, a, f


def refunded_under_a_fork(rt: lw.Runtime, provider: Provider) -> tuple[lw.Loop, str, str]:
    """As ``a_and_fork``, then A cancelled by ops and its refund (naming F) approved by fin
    and run."""
    loop, a, f = a_and_fork(rt, provider)
    rt.cancel(a, by="ops", loop=loop)
    [req] = compensation_requests(rt, a)
    rt.approve(a, by="fin", approval_id=req.approval_id)
    assert rt.resume_sync(a, loop).status == "cancelled"
    assert provider.collected() == 0
    return loop, a, f


def test_a_fork_is_recorded_as_reusing_the_payment_it_inherited(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        _loop, _a, f = a_and_fork(rt, provider)
        assert reusers(rt) == [(f, "awaiting_approval")]


def test_the_refund_of_a_payment_a_fork_inherited_waits_for_a_person_naming_it(
    url: str,
) -> None:
    # Before: the cancel's refund ran under the allow rule, F left on a refunded payment,
    # nobody named it nor told it.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, f = a_and_fork(rt, provider)
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        assert f in req.what and req.evidence["reused_by"][0]["run_id"] == f
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 5.0  # not refunded: nobody decided
        rt.approve(a, by="fin", approval_id=req.approval_id)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0
        said = {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": a}
        assert started(rt, f) == [said] and told(rt, f) == [said]


def test_forks_of_forks_and_of_a_reuser_are_named_by_the_refund(url: str) -> None:
    # F2 forked F (its entry names A, the run that paid); G forked B, which reused A's
    # payment (its entry names A as ``from_run``, B as ``inherited_from``): all rely on A's.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, f = a_and_fork(rt, provider)
        f2 = rt.fork(f, 1, loop=loop, task_key="F2").run_id
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        g = rt.fork(b, 1, loop=loop, task_key="G").run_id
        assert provider.asked == ["pay:I6"]
        assert sorted(r for r, _st in reusers(rt)) == sorted([f, f2, b, g])
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        assert all(r in req.what for r in (f, f2, b, g)), req.what


def test_a_fork_of_a_payment_since_refunded_is_no_reuse(url: str) -> None:
    # A's payment was refunded (a person approved it, naming F); F2, forked from F after,
    # inherits a payment no longer there: not recorded on the claim (nothing of it is left
    # to refund), and the next run asking pays again under the next key.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, _a, f = refunded_under_a_fork(rt, provider)
        f2 = rt.fork(f, 1, loop=loop, task_key="F2").run_id
        assert f2 not in [r for r, _st in reusers(rt)]  # (F stays listed: it was told)
        rt.run_sync(loop, TASK, task_key="C")
        assert provider.asked == ["pay:I6", "pay:I6~2"]


def test_a_forks_cancel_refunds_nothing_it_inherited(url: str) -> None:
    # The origin did the payment: a fork's cancel lists it as done by A, refunds nothing,
    # asks no one, and leaves A's claim (and A's refund, naming F) as they were.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, f = a_and_fork(rt, provider)
        rt.cancel(f, by="ops", loop=loop)
        assert compensation_requests(rt, f) == []
        assert rt.resume_sync(f, loop).status == "cancelled"
        assert provider.collected() == 5.0
        packet = rt.store.get_run(f).packet or {}
        [note] = packet["compensations"]
        assert note["status"] == "irreversible" and f"done by run {a}" in note["effect"]
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "done", 1)
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        assert f"{f} (cancelled)" in req.what


def test_a_forks_rollback_refunds_nothing_it_inherited(url: str) -> None:
    # F forked A at cycle 2 (the payment in cycle 2, staged): F cannot be rolled back before
    # the cycle it starts from (no checkpoint of its own there), and its rollback to that
    # cycle offers nothing of the inherited payment.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider, staged=True)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        f = rt.fork(a, 2, loop=loop, task_key="F").run_id
        assert rt.resume_sync(f, loop).status == "awaiting_approval"
        with pytest.raises(lw.ConfigError, match="no completed checkpoint for cycle 1"):
            rt.rollback(f, 1, by="ops", loop=loop)
        rt.rollback(f, 2, by="ops", loop=loop)
        assert compensation_requests(rt, f) == []
        rt.resume_sync(f, loop)
        assert provider.collected() == 5.0 and provider.asked == ["pay:I6"]
        assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "done", 1)


def as_before_fork_reuses(rt: lw.Runtime, url: str) -> int:
    """Put the store back as the release before forks were recorded as reusers: the forks'
    rows gone, the schema version before that step (returned: the latest)."""
    from loopwright.store._pg_schema import PG_MIGRATIONS
    from loopwright.store._schema import BACKFILL_FORK_REUSES, SQLITE_MIGRATIONS

    steps = PG_MIGRATIONS if url.startswith("postgres") else SQLITE_MIGRATIONS
    before = steps.index([BACKFILL_FORK_REUSES])
    with rt.store._tx() as conn:  # type: ignore[attr-defined]
        conn.execute(
            "DELETE FROM effect_reuses WHERE run_id IN (SELECT run_id FROM runs "
            "WHERE forked_from IS NOT NULL)"
        )
        conn.execute(f"UPDATE loopwright_meta SET value = '{before}' WHERE key = 'schema_version'")
    return len(steps)


def test_an_upgraded_store_records_the_forks_that_inherited_a_payment(url: str) -> None:
    # F forked A (inherited its payment) and G forked B (inherited B's reuse of it) under the
    # release before; H forked C, whose payment was refunded since. After the upgrade A's
    # refund names F and G as it names B; H is not recorded on anything.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, a, f = a_and_fork(rt, provider)
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        g = rt.fork(b, 1, loop=loop, task_key="G").run_id
        live = sorted(reusers(rt))
        latest = as_before_fork_reuses(rt, url)
        assert [r for r, _st in reusers(rt)] == [b]
    with lw.Runtime(url) as rt:
        assert rt.store.schema_version == latest  # type: ignore[attr-defined]
        assert sorted(reusers(rt)) == live
        assert sorted(r for r, _st in live) == sorted([f, b, g])
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        assert all(r in req.what for r in (f, b, g))


@pytest.mark.parametrize("redone", [False, True])
def test_an_upgrade_records_no_fork_of_a_payment_no_longer_standing(url: str, redone: bool) -> None:
    # A's payment, which F inherited, was refunded (and, ``redone``, paid again by C under the
    # next key): F relies on nothing standing; the upgrade records it on nothing.
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop, _a, _f = refunded_under_a_fork(rt, provider)
        if redone:
            rt.run_sync(loop, TASK, task_key="C")
        as_before_fork_reuses(rt, url)
    with lw.Runtime(url) as rt:
        assert reusers(rt) == []  # (C paid: nobody reused its payment)


def test_an_allowed_refund_of_a_payment_nobody_forked_still_runs(url: str) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider, approvals=ALLOW)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.cancel(a, by="ops", loop=loop)
        assert compensation_requests(rt, a) == []
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0


def fork_of_a_refund_in_doubt(url: str, rt: lw.Runtime) -> tuple[str, str]:
    """A pays I6, is cancelled, and its refund (allowed) dies after the provider refunded: in
    doubt, the claim ``undoing``. F, forked from A at the payment's cycle in ``rt``, inherits
    the payment as done. Returns F and A."""
    provider = Provider()
    loop, a = cancelled_payer(rt, provider)
    crashed = dying(url, "before_effect_result")
    with pytest.raises(Crash):
        crashed.resume_sync(a, loop)
    crashed.close()
    assert rt.resume_sync(a, loop).status == "cancelled"
    assert provider.collected() == 0  # the provider refunded it
    assert rt.store.effect_claim("spend", "pay:I6") == lw.store.EffectClaim(a, "undoing", 1)
    return rt.fork(a, 1, loop=loop, task_key="F").run_id, a


def test_a_fork_of_a_payment_whose_refund_started_is_told_and_counted(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A was cancelled and its refund (allowed) died after the provider refunded: in doubt, the
    # claim ``undoing``. F, forked from A at the payment's cycle, inherited the payment as
    # done, was recorded on nothing and told nothing (a run reusing it then is held in
    # doubt). Now F is told, as a reuser is when a refund starts, and counted on the claim:
    # a refund that settles (or is refused) tells it, and a later one names it (review46b).
    with lw.Runtime(url) as rt:
        f, a = fork_of_a_refund_in_doubt(url, rt)
        assert [r for r, _st in reusers(rt)] == [f]
        [said] = started(rt, f)
        assert said == {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": a}
    assert "refund started (may be done)" in shown(url, f, capsys)


def test_a_fork_made_before_while_its_origins_refund_ran_is_told_by_the_upgrade(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # As above, F forked from A while A's refund was in doubt (the claim ``undoing``), but
    # under the release before forks were counted: recorded on nothing, told nothing. The
    # upgrade recorded F on the claim and told it nothing, where a fork made now is told as it
    # is made (effect47). Now the upgrade tells it too, once: the step run again (a store put
    # back to the version before) does not tell it twice.
    with lw.Runtime(url) as rt:
        f, a = fork_of_a_refund_in_doubt(url, rt)
        said = {"kind": "spend", "key": "pay:I6", "generation": 1, "refunded_by": a}
        as_before_fork_reuses(rt, url)
        with rt.store._tx() as conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM events WHERE kind = 'effect_reuse_refunding'")
        assert reusers(rt) == [] and started(rt, f) == []
    with lw.Runtime(url) as rt:
        assert [r for r, _st in reusers(rt)] == [f]
        assert started(rt, f) == [said]
        latest = rt.store.schema_version  # type: ignore[attr-defined]
        with rt.store._tx() as conn:  # type: ignore[attr-defined]
            conn.execute(
                f"UPDATE loopwright_meta SET value = '{latest - 1}' WHERE key = 'schema_version'"
            )
    with lw.Runtime(url) as rt:  # the step run again: F, recorded already, is not told again
        assert [r for r, _st in reusers(rt)] == [f]
        assert started(rt, f) == [said]
    assert "refund started (may be done)" in shown(url, f, capsys)
