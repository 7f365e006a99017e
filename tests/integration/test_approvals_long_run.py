"""A run asked to approve something every cycle (from an outside probe, helper-39): what a cycle
stores and reads must not grow with the approvals before it (invariant 8). The state keeps a
window of approved digests (each approval is a request in the store); deciding and resuming
read the one request concerned, never the run's every request."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright._checkpoint import APPROVED_WINDOW


def _loop() -> lw.Loop:
    # every cycle's proposal touches doc/a, which a risk rule sends to a person
    return lw.Loop(
        name="asked",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="c")],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=1000),
            risk=(lw.RiskRule(name="touch_a", touches=("doc/a",)),),
        ),
    )


def _approve_cycles(rt: lw.Runtime, loop: lw.Loop, n: int) -> str:
    r = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="T")
    for _ in range(n):
        assert r.status == "awaiting_approval"
        rt.approve(r.run_id, by="bob")
        r = rt.resume_sync(r.run_id, loop)
    return r.run_id


def test_the_state_keeps_a_window_of_approved_digests(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    loop = _loop()
    with lw.Runtime(db) as rt:
        run_id = _approve_cycles(rt, loop, APPROVED_WINDOW + 15)
        state = rt.store.latest_checkpoint(run_id).task_state()
        approved = [a for a in rt.store.approvals(run_id=run_id) if a.status == "approved"]
    assert len(approved) == APPROVED_WINDOW + 15  # every approval stays a request
    assert state.approved == [a.action_hash for a in approved][-APPROVED_WINDOW:]
    # and what is stored: no head holds more
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        heads = [json.loads(s) for (s,) in conn.execute("SELECT state FROM checkpoints")]
    assert max(len(h.get("approved") or ()) for h in heads) <= APPROVED_WINDOW


def test_deciding_and_resuming_read_one_request_not_every_one(tmp_path: Path) -> None:
    loop = _loop()
    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = _approve_cycles(rt, loop, 5)
        reads: list[dict[str, Any]] = []
        every = rt.store.approvals

        def spy(**kw: Any) -> list[lw.store.Approval]:
            reads.append(kw)
            return every(**kw)

        rt.store.approvals = spy  # type: ignore[method-assign]
        rt.approve(run_id, by="bob")
        rt.resume_sync(run_id, loop)
        [req] = rt.store.approvals(run_id=run_id, status="pending")
        rt.approve(run_id, by="bob", approval_id=req.approval_id)
    # a read of all the run's requests (no status) grows with the run: none on these paths
    assert [kw for kw in reads if kw.get("status") is None] == []
