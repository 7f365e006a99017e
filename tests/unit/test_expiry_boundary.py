"""One rule of when a request has expired, at its boundary (stop 50): open at ``expires_at``
itself, expired just after, through the engine (a decision, a resume), the store's poll
(``expired_requests``, the SQL one and the protocol's default), the dashboard's card and
``loopwright approvals``. The card and the CLI said "expired" at ``expires_at == now`` while
the engine took a decision there and the poll left it be. The store's clock is injected (set
to the boundary), so nothing waits for time to pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.cli._decide_cmd import _expiry
from loopwright.store import Store
from loopwright.web._cards import expiry


@lw.effect("spend", name="pay", key=lambda a: "pay-1")
def pay(payee: str) -> dict[str, Any]:
    return {"paid": payee}


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        fix = lw.Proposal.edit("doc", {"payee": "ACME"}).edits
        return lw.Proposal(edits=fix, effects=(pay.call(payee="ACME"),))

    rule = lw.PolicyRule(kind="spend", action="require", expires_after_s=60)
    return lw.Loop(
        name="expiring",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
        effects=[pay],
        approvals=lw.ApprovalPolicy((rule,)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )


def _parked(rt: lw.Runtime) -> tuple[str, lw.Approval]:
    res = rt.run_sync(_loop(), {"artifacts": {"doc": {"payee": ""}}}, task_key="exp")
    assert res.status == "awaiting_approval"
    req = rt.pending_approval(res.run_id)
    assert req.expires_at is not None
    return res.run_id, req


@pytest.mark.parametrize("after", [0.0, 0.001])
def test_the_boundary_is_one_rule_everywhere(tmp_path: Path, after: float) -> None:
    expired = after > 0  # at expires_at itself: still open
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        run_id, req = _parked(rt)
        assert req.expires_at is not None
        now = req.expires_at + after
        store: Any = rt.store
        store.clock = lambda: now  # the store's clock, on which expiry is set and decided
        # the dashboard's card and `loopwright approvals`
        assert expiry(req.expires_at, now)[1] is expired
        assert ("expired" in _expiry(req.expires_at, now)) is expired
        # the store's poll: its SQL and the protocol's default
        assert [a.approval_id for a in rt.store.expired_requests(limit=5)] == (
            [req.approval_id] if expired else []
        )
        assert len(Store.expired_requests(rt.store, limit=5)) == int(expired)
        # the engine: a resume waits (or escalates), a decision is taken (or refused)
        resumed = rt.resume_sync(run_id, _loop())
        assert resumed.status == ("escalated" if expired else "awaiting_approval")
        if not expired:
            assert rt.approve(run_id, by="ana").status == "approved"
