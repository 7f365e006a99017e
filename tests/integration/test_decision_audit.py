"""A person's decision and its audit record (stop 53): the record is written in the
transaction that records the decision (``Store.decide_approval(audit=…)``), so that a decision
recorded always has its record and one that failed has none, by the CLI, Python and the
dashboard alike (all decide through ``Runtime``); a store written before ``audit=`` has it
written after, as it was. A pause's lift is the run's ``unpause`` in the log, found by the run
as its pause and its refusals are. SQLite and PostgreSQL (``url``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.dashboard import dashboard
from test_pause_audit import _runs
from test_pause_surface import _parked_on_risk

import loopwright as lw


def _decided(rt: lw.Runtime, rid: str) -> list[tuple[str, str]]:
    return [(a.approval_id, a.status) for a in rt.store.approvals(run_id=rid)]


@pytest.mark.parametrize("how", ["approve", "deny"])
def test_a_decision_always_has_its_audit_record(url: str, how: str) -> None:
    """The record of a decision was written after the store had recorded it: an audit write
    that failed there (a process gone, the connection lost) left a decision no record said
    was made, and its caller an error. It is written in the decision's transaction."""
    rid = _parked_on_risk(url)
    with lw.Runtime(url) as rt:

        def fails(**kwargs: object) -> int:
            raise lw.StoreError("the audit write failed")

        rt.store.audit_put = fails  # type: ignore[method-assign]
        done = getattr(rt, how)(rid, by="rita", note="looked", origin="cli")
        del rt.store.audit_put  # (the instance's: the class's again)
        rows = [
            (a.actor, a.action, a.outcome, a.origin, a.detail.get("note"))
            for a in rt.store.audit(target=f"request {done.approval_id}")
        ]
    assert rows == [("rita", how, "allowed", "cli", "looked")]


def test_a_failed_audit_write_leaves_the_request_undecided(url: str) -> None:
    """The fault between the two writes: the audit row's insert fails inside the decision's
    transaction. The decision is rolled back with it (it stood, unrecorded): the request is
    still pending, no ``approval_decided`` event, and it can be decided again."""
    rid = _parked_on_risk(url)
    with lw.Runtime(url) as rt:
        (req,) = rt.store.approvals(run_id=rid, status="pending")

        def fails(conn: Any, entry: object) -> int:
            raise lw.StoreError("the audit write failed")

        rt.store._audit_row = fails  # type: ignore[attr-defined]
        with pytest.raises(lw.StoreError, match="audit write failed"):
            rt.approve(rid, by="rita")
        del rt.store._audit_row  # type: ignore[attr-defined]
        assert _decided(rt, rid) == [(req.approval_id, "pending")]
        assert not [e for e in rt.store.events(rid) if e.kind == "approval_decided"]
        assert rt.store.audit(target=f"request {req.approval_id}") == []
        rt.approve(rid, by="rita")
        assert _decided(rt, rid) == [(req.approval_id, "approved")]
        assert [a.action for a in rt.store.audit(target=f"request {req.approval_id}")] == [
            "approve"
        ]


def test_a_store_written_before_the_audit_argument_still_records_a_decision(url: str) -> None:
    """A store of one's own whose ``decide_approval`` takes no ``audit`` (written before it):
    the engine writes the record after the decision, as it did (``audit_put``)."""
    rid = _parked_on_risk(url)
    with lw.Runtime(url) as rt:
        real = rt.store.decide_approval

        def older(
            approval_id: str,
            *,
            status: str,
            by: str,
            note: str | None,
            now: float,
            answer: Any = None,
        ) -> lw.Approval:
            return real(approval_id, status=status, by=by, note=note, now=now, answer=answer)

        rt.store.decide_approval = older  # type: ignore[method-assign]
        done = rt.deny(rid, by="rita", note="no")
        rows = [
            (a.actor, a.action, a.detail.get("note"))
            for a in rt.store.audit(target=f"request {done.approval_id}")
        ]
    assert done.status == "denied"
    assert rows == [("rita", "deny", "no")]


def test_a_lift_is_found_by_the_run(url: str) -> None:
    """A pause's lift was recorded as the ``approve`` of ``request ID`` while the pause and
    the refused unpauses were on ``run ID``: the run's records did not show who let it go on.
    The lift is an ``unpause`` of the run, the request in its detail, however it was asked
    (``unpause``, or ``approve`` naming the request), and in the lift's transaction."""
    rid, _ended = _runs(url)
    with lw.Runtime(url) as rt:
        first = rt.pause(rid, by="op", origin="cli")
        rt.unpause(rid, by="op", note="go on", origin="cli")
        second = rt.pause(rid, by="op")
        rt.approve(rid, by="op", approval_id=second.approval_id)
        rows = [
            (a.actor, a.action, a.outcome, a.detail) for a in rt.store.audit(target=f"run {rid}")
        ]
        on_requests = rt.store.audit(target=f"request {first.approval_id}") + rt.store.audit(
            target=f"request {second.approval_id}"
        )
    assert rows == [
        ("op", "pause", "allowed", {"request": first.approval_id}),
        ("op", "unpause", "allowed", {"request": first.approval_id, "note": "go on"}),
        ("op", "pause", "allowed", {"request": second.approval_id}),
        ("op", "unpause", "allowed", {"request": second.approval_id}),
    ]
    assert on_requests == []


def test_the_log_is_searched_by_what_a_record_is_on(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loopwright audit` filtered by who only (``--actor``): the records of one run were
    found by reading them all. ``--target "run ID"`` (and the dashboard's ``target=``) reads
    those on the run, by the log's index, the lift of its pause among them."""
    from loopwright.cli import main

    rid, ended = _runs(url)
    with lw.Runtime(url) as rt:
        filed = rt.pause(rid, by="op")
        rt.unpause(rid, by="op")
        rt.store.audit_put(actor="x", action="cancel", target=f"run {ended}", outcome="allowed",
                           origin="python", detail={}, now=0.0)  # fmt: skip
    capsys.readouterr()
    assert main(["audit", "--target", f"run {rid}", "--jsonl", "--store", url]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["action"], r["detail"]["request"]) for r in got] == [
        ("pause", filed.approval_id),
        ("unpause", filed.approval_id),
    ]
    c = dashboard(url)  # (its token: TOKEN, "server-token-0123456789")
    api = c.get("/api/audit", params={"target": f"run {rid}"}).json()
    assert [r["action"] for r in api] == ["pause", "unpause"]
    page = c.get("/audit", params={"target": f"run {ended}"}).text
    assert f"run {ended}" in page and f"run {rid}" not in page
