"""An effect left in doubt by a holder whose clock runs ahead (another host, an hour fast):
the executor that takes the run over waits out at most what the intent gave its call, not the
hour the two clocks disagree by (probe46d).

The intent's ``deadline_at`` is on the holder's clock; so is the journal entry's time, written
just after it. Their difference is the call's limit (inside the lease), measured on one clock,
so the taker never waits longer than that, whatever its own clock says. The holder is stopped
at a fixed point (``after_effect_intent``) and the taker's sleep is recorded, not slept: no
step depends on timing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import loopwright as lw
from loopwright import _effect_run

TTL = 30.0
SKEW = 3600.0  # the holder's clock, an hour ahead
TASK = {"artifacts": {"inv": {"amount": 0}}}


class Stop(BaseException):
    """The holder stops right after writing its intent (its host lost)."""


def _loop(paid: list[str]) -> lw.Loop:
    def pay(invoice: str, key: str) -> dict[str, Any]:
        paid.append(key)
        return {"paid": key}

    def find(key: str) -> dict[str, Any] | None:
        return {"paid": key} if key in paid else None

    eff = lw.effect("spend", name="pay", key=lambda a: a["invoice"], reconcile=find)(pay)

    def actor(ctx: lw.Context) -> lw.Proposal:
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
    )


def test_a_holder_with_a_fast_clock_does_not_stall_the_taker(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    paid: list[str] = []
    real_time = time.time
    # The holder: another host (so the taker cannot see whether it lives), clock an hour fast.
    monkeypatch.setattr(time, "time", lambda: real_time() + SKEW)
    with lw.Runtime(url, lease_ttl_s=TTL, owner="far-host:4242:cafe") as f:

        def stop(phase: str) -> None:
            if phase == "after_effect_intent":
                raise Stop

        f._on_phase = stop
        with pytest.raises(Stop):
            f.run_sync(_loop(paid), TASK, task_key="skew")
    monkeypatch.setattr(time, "time", real_time)
    assert paid == []  # stopped between the intent and the call

    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(delay: float, *args: Any) -> Any:
        slept.append(delay)
        return await real_sleep(0)

    shim = type("A", (), {"sleep": staticmethod(recorded)})()
    monkeypatch.setattr(_effect_run, "asyncio", shim)  # the grace's sleep, recorded
    with lw.Runtime(url, lease_ttl_s=TTL) as g:
        # Claimed once the holder's lease has expired on any clock (SQLite keeps the holder's
        # now + TTL, an hour ahead; PostgreSQL the server's).
        [(run_id, token)] = g.store.claim_runs(g.owner, TTL, now=real_time() + SKEW + 2 * TTL)
        result = asyncio.run(g.resume(run_id, _loop(paid), token=token))
        grace = [e.data for e in g.store.events(run_id) if e.kind == "effect_grace"]
    assert result.accepted and paid == ["pay:INV-9"]
    # It may wait for the holder's call (another host: it cannot tell), but no longer than the
    # call was given, inside the lease: not the hour the clocks disagree by.
    assert len(slept) == 1 and 0 < slept[0] <= TTL, slept
    assert len(grace) == 1 and grace[0]["holder_alive"] is False
