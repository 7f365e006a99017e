"""A holder whose clock runs ahead (another host, an hour fast) stops mid-cycle; the executor
that takes the run over waits out at most what the holder meant to wait, not the hour the two
clocks disagree by (probe46d): an effect left in doubt (the intent's ``deadline_at``), a call
stopped in its retry's backoff (``next_at``), actor or effect.

A backoff's time is on the holder's clock; so is the journal entry's own time, written just
after it. Their difference is what was meant, measured on one clock, so the taker never waits
longer, whatever its own clock says. An intent's deadline is on the store's clock (its
``clock_at`` and ``limit_s``): a taker whose clock runs ahead of a frozen holder's still waits
until that holder, thawed, cannot start its call (the last test, both directions). The holder is stopped at a fixed point (a phase of its
cycle) and the taker's wait is recorded, not slept: no step depends on timing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import loopwright as lw
from loopwright import _call_retry, _effect_journal, _effect_run
from loopwright.store.sqlite import SQLiteStore

TTL = 30.0
SKEW = 3600.0  # the holder's clock, an hour ahead
BACKOFF = 60.0
TASK = {"artifacts": {"inv": {"amount": 0}}}
RETRY = lw.RetryPolicy(attempts=3, backoff_s=BACKOFF, max_backoff_s=BACKOFF, jitter=False)


class Stop(BaseException):
    """The holder stops at a fixed point of its cycle (its host lost)."""


def _loop(paid: list[str], calls: list[str], fail: str | None) -> lw.Loop:
    """Pays once; ``fail``: the actor's or the effect's first call (of either executor's: the
    ``calls`` are shared) fails, transiently."""

    def pay(invoice: str, key: str) -> dict[str, Any]:
        calls.append("effect")
        if fail == "effect" and calls.count("effect") == 1:
            raise lw.TransientError("upstream 503")
        paid.append(key)
        return {"paid": key}

    def find(key: str) -> dict[str, Any] | None:
        return {"paid": key} if key in paid else None

    eff = lw.effect("spend", name="pay", key=lambda a: a["invoice"], reconcile=find, retry=RETRY)(
        pay
    )

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append("actor")
        if fail == "actor" and calls.count("actor") == 1:
            raise lw.TransientError("model 503")
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"amount": 40.0}).edits,
            effects=(eff.call(invoice="INV-9"),),
        )

    return lw.Loop(
        name="pay",
        actor=actor,
        verifiers=[lambda state, proposal: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[eff],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
        retry=RETRY,
    )


def _taken_over(
    url: str, monkeypatch: pytest.MonkeyPatch, stop_at: str, fail: str | None
) -> tuple[lw.RunResult, list[str], list[Any]]:
    """The holder (another host, so the taker cannot see whether it lives; its clock an hour
    fast) runs the loop until ``stop_at`` and stops there; the taker (this host's clock) claims
    the run and resumes it. Returns the taker's result, the payments and its events."""
    paid: list[str] = []
    calls: list[str] = []
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + SKEW)
    with lw.Runtime(url, lease_ttl_s=TTL, owner="far-host:4242:cafe") as f:

        def stop(phase: str) -> None:
            if phase == stop_at:
                raise Stop

        f._on_phase = stop
        with pytest.raises(Stop):
            f.run_sync(_loop(paid, calls, fail), TASK, task_key="skew")
    monkeypatch.setattr(time, "time", real_time)
    assert paid == []
    with lw.Runtime(url, lease_ttl_s=TTL) as g:
        # Claimed once the holder's lease has expired on any clock (SQLite keeps the holder's
        # now + TTL, an hour ahead; PostgreSQL the server's).
        [(run_id, token)] = g.store.claim_runs(g.owner, TTL, now=real_time() + SKEW + 2 * TTL)
        result = asyncio.run(g.resume(run_id, _loop(paid, calls, fail), token=token))
        return result, paid, g.store.events(run_id)


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The taker's waits (a grace, a backoff), recorded instead of slept."""
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> Any:
        waits.append(delay)
        return await real_sleep(0)

    async def backoff(store: Any, ex: Any, delay: float, what: str) -> None:
        waits.append(delay)

    monkeypatch.setattr(_effect_journal, "asyncio", _asyncio_sleeping(sleep))
    monkeypatch.setattr(_effect_run, "backoff", backoff)
    monkeypatch.setattr(_call_retry, "backoff", backoff)
    return waits


def test_an_effect_in_doubt_is_waited_for_no_longer_than_its_call_was_given(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = _recorded(monkeypatch)
    result, paid, events = _taken_over(url, monkeypatch, "after_effect_intent", None)
    assert result.accepted and paid == ["pay:INV-9"]
    # It waits for the holder's call (another host: it cannot tell whether it lives), but no
    # longer than the call was given, inside the lease: not the hour the clocks disagree by.
    assert len(waits) == 1 and 0 < waits[0] <= TTL, waits
    [grace] = [e.data for e in events if e.kind == "effect_grace"]
    assert grace["holder_alive"] is False


@pytest.mark.parametrize("fail", ["actor", "effect"])
def test_a_backoff_is_waited_out_for_no_longer_than_it_was_meant(
    url: str, monkeypatch: pytest.MonkeyPatch, fail: str
) -> None:
    waits = _recorded(monkeypatch)
    result, paid, _ = _taken_over(url, monkeypatch, f"backoff:{fail}", fail)
    assert result.accepted and paid == ["pay:INV-9"]
    # what is left of the holder's 60 s backoff, not an hour more
    assert len(waits) == 1 and 0 < waits[0] <= BACKOFF, waits


@pytest.mark.parametrize(
    ("skew", "older"),
    [(-SKEW, False), (SKEW, False), (-SKEW, True)],
    ids=["holder-behind", "holder-ahead", "older-holder-behind"],
)
def test_a_taker_whose_clock_disagrees_waits_until_the_holder_cannot_start(
    url: str, monkeypatch: pytest.MonkeyPatch, skew: float, older: bool
) -> None:
    """The holder (another host, its clock ``skew`` from the taker's) writes its intent and
    pauses right there (a frozen process); the taker claims the run, finds the intent in doubt
    and the reconcile hook says "not done". Then the holder thaws and goes on to its call.

    Only one of them may pay. The taker waits until the holder's deadline has passed on the
    store's clock (PostgreSQL's server; SQLite's one host clock, both read here), the holder
    counts its deadline on its own clocks from before it read the store's: whichever host's
    clock is ahead, the thawed holder finds its deadline passed and never pays (probe47: a
    holder an hour behind once looked long past its deadline to the taker, which paid at
    once, and the holder, thawed, paid again). The taker's wait is not slept: it moves the
    clocks on, deterministically.

    ``older``: the intent as a version before this one wrote it, its deadline on the holder's
    clock only: the taker waits all the holder gave its call, counted from when it reads it."""
    paid: list[str] = []
    calls: list[str] = []
    moved = [0.0]  # how far the taker's waits have moved every clock on
    taker: set[int] = set()  # the taker's thread: this host's clock; the rest the holder's
    real_time = time.time

    def now() -> float:
        return real_time() + moved[0] + (0.0 if threading.get_ident() in taker else skew)

    async def sleep(delay: float, *args: Any) -> Any:
        waits.append(delay)
        moved[0] += max(delay, 0.0)

    waits: list[float] = []
    monkeypatch.setattr(_effect_journal, "asyncio", _asyncio_sleeping(sleep))
    monkeypatch.setattr(time, "time", now)
    if url.startswith("sqlite"):  # one host: one clock for both, whatever each process says
        monkeypatch.setattr(SQLiteStore, "clock", lambda self: real_time() + moved[0])
    outcome: list[lw.RunResult] = []

    def take_over() -> None:
        taker.add(threading.get_ident())
        with lw.Runtime(url, lease_ttl_s=TTL) as g:
            # claimed as if the holder's lease had expired (it was lost early)
            [(run_id, token)] = g.store.claim_runs(g.owner, TTL, now=real_time() + SKEW + 2 * TTL)
            outcome.append(asyncio.run(g.resume(run_id, _loop(paid, calls, None), token=token)))

    def freeze(phase: str) -> None:
        if phase == "after_effect_intent" and not outcome:
            t = threading.Thread(target=take_over)
            t.start()
            t.join()

    with lw.Runtime(url, lease_ttl_s=TTL, owner="far-host:4242:cafe") as f:
        f._on_phase = freeze
        if older:
            put = f.store.journal_put

            def old_put(*args: Any, data: dict[str, Any], **kw: Any) -> Any:
                old = {k: v for k, v in data.items() if k not in ("limit_s", "clock_at")}
                return put(*args, data=old, **kw)

            monkeypatch.setattr(f.store, "journal_put", old_put)
        with pytest.raises(lw.StaleLeaseError):  # thawed: its lease is gone, and it knows
            f.run_sync(_loop(paid, calls, None), TASK, task_key="skew")
    [result] = outcome
    assert result.accepted
    assert paid == ["pay:INV-9"]  # once: the taker's
    # it waited for the holder's deadline (what its call was given, inside the lease)
    assert len(waits) == 1 and 0 < waits[0] <= TTL, waits


def _asyncio_sleeping(sleep: Any) -> Any:
    """``asyncio`` for ``_effect_journal`` (where ``grace`` sleeps) with its ``sleep`` replaced,
    the rest the real module's."""

    class _Asyncio:
        def __getattr__(self, name: str) -> Any:
            return getattr(asyncio, name)

    fake = _Asyncio()
    fake.sleep = sleep  # type: ignore[attr-defined]
    return fake
