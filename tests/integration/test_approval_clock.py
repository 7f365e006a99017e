"""Approval expiry and the hosts' clocks: on PostgreSQL a request's ``expires_at`` is set and
compared on the database server's clock (``Store.clock()``), as leases are, so a host whose
clock runs ahead does not expire a person's pending request early, and one whose clock runs
behind does not let an expired request be approved. SQLite lives on one host: its clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from doc_loop import TARGET, TASK
from support.dashboard import dashboard
from test_effects_engine import Payments, Script, make_loop, with_effects

import loopwright as lw
from loopwright import _reversal
from loopwright.store import Approval

HOUR = 3600.0


def _skew(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """This process's host clock, moved by ``skew["s"]`` seconds (the server's is not)."""
    real = time.time
    skew = {"s": 0.0}
    monkeypatch.setattr(time, "time", lambda: real() + skew["s"])
    return skew


def _server_now(rt: lw.Runtime) -> float:
    with rt.store._tx() as conn:  # type: ignore[attr-defined]
        return float(conn.execute("SELECT extract(epoch from clock_timestamp())").fetchone()[0])


def _park(rt: lw.Runtime, expires_after_s: float) -> tuple[lw.RunResult, lw.Loop, Payments]:
    bank = Payments()
    pay = bank.effect()
    policy = lw.ApprovalPolicy(
        (
            lw.PolicyRule(
                kind="spend", action="require", name="pay", expires_after_s=expires_after_s
            ),
        )
    )
    actor = Script(
        with_effects(lw.Proposal.edit("doc", TARGET), pay.call(invoice="A-1", amount=5.0))
    )
    loop = make_loop(actor, [pay], approvals=policy)
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    return r, loop, bank


@pytest.fixture
def pg_rt(pg_url: str) -> Iterator[lw.Runtime]:
    rt = lw.Runtime(pg_url)
    try:
        yield rt
    finally:
        rt.close()


@pytest.mark.postgres
def test_a_host_ahead_neither_writes_nor_sweeps_expiry_early(
    pg_rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    skew, rt = _skew(monkeypatch), pg_rt
    skew["s"] = -HOUR  # the host that parks the run runs an hour behind
    r, loop, bank = _park(rt, expires_after_s=600)
    req = rt.pending_approval(r.run_id)
    server = _server_now(rt)
    assert req.expires_at is not None
    assert server + 500 < req.expires_at < server + 700  # ten minutes on the server's clock
    skew["s"] = +HOUR  # the host that resumes it (and the person's) runs an hour ahead
    again = rt.resume_sync(r.run_id, loop)
    assert again.status == "awaiting_approval"  # still waiting, not expired and escalated
    assert rt.pending_approval(r.run_id).status == "pending"
    rt.approve(r.run_id, by="fin")
    done = rt.resume_sync(r.run_id, loop)
    assert done.status != "escalated", done.stop_reason
    assert [p["invoice"] for p in bank.executed] == ["A-1"]


@pytest.mark.postgres
def test_a_host_behind_cannot_approve_a_request_expired_on_the_server(
    pg_rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    skew, rt = _skew(monkeypatch), pg_rt
    r, loop, bank = _park(rt, expires_after_s=600)
    req = rt.pending_approval(r.run_id)
    # the request's ten minutes are over on the server's clock (moved, not waited for)
    with rt.store._tx() as conn:  # type: ignore[attr-defined]
        conn.execute(
            "UPDATE approvals SET expires_at = %s WHERE approval_id = %s",
            (_server_now(rt) - 1, req.approval_id),
        )
    skew["s"] = -HOUR  # the person's host runs an hour behind
    with pytest.raises(lw.ApprovalError, match="expired"):
        rt.approve(r.run_id, by="fin")
    out = rt.resume_sync(r.run_id, loop)
    assert out.status == "escalated"
    assert bank.executed == []
    assert rt.store.approval(req.approval_id).status == "expired"  # type: ignore[union-attr]


def test_sqlite_expires_on_its_hosts_clock(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    skew = _skew(monkeypatch)
    rt = lw.Runtime(str(tmp_path / "s.db"))
    try:
        r, loop, bank = _park(rt, expires_after_s=600)
        skew["s"] = 601.0  # ten minutes and a second later, on the one host's clock
        with pytest.raises(lw.ApprovalError, match="expired"):
            rt.approve(r.run_id, by="fin")
        assert rt.resume_sync(r.run_id, loop).status == "escalated"
        assert bank.executed == []
    finally:
        rt.close()


def test_a_request_asked_again_lasts_as_its_rule_says_whatever_the_writers_clock() -> None:
    """A refund's request asked again expires as long after as the first did: the rule's
    time, not ``expires_at - requested_at`` (the store's clock less the writer's)."""
    prior = Approval(
        approval_id="a1",
        run_id="R",
        cycle=3,
        kind="compensation",
        rule="refunds",
        what="undo pay",
        why="",
        evidence={"who": None},
        diff=None,
        action_hash="h",
        status="pending",
        requested_at=1000.0 + HOUR,  # its writer's clock ran an hour ahead
        expires_at=1000.0 + 600,  # the server's
        decided_by=None,
        decided_at=None,
        note=None,
        answer=None,
    )
    o = {
        "key": "k",
        "effect": "pay",
        "approval_id": "a1",
        "rule": "refunds",
        "why": "",
        "cycle": 2,
        "expires_after_s": 600,
    }
    again = _reversal.repark(o, [], 4, "ops", {"a1": prior}, now=5000.0)  # the store's now
    assert again.expires_at == 5600.0


@pytest.mark.postgres
def test_a_host_ahead_lists_a_pending_request_as_the_server_decides_it(
    pg_rt: lw.Runtime, pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """``loopwright approvals`` and the dashboard's cards said whether a request expired on
    this host's clock: a host an hour ahead listed a request with nine minutes left as
    "expired ... can no longer be decided", and the inbox's card as expired, while approving
    it from that host (the store's clock) was accepted."""

    from loopwright.cli import main

    skew, rt = _skew(monkeypatch), pg_rt
    r, _loop, _bank = _park(rt, expires_after_s=600)
    skew["s"] = +HOUR  # the person's host runs an hour ahead
    assert main(["approvals", "--store", pg_url]) == 0
    out, err = capsys.readouterr()
    assert "expires" in out and "expired" not in out + err, out
    web = dashboard(pg_url, token="t" * 16)
    for page in (web.get("/approvals"), web.get(f"/runs/{r.run_id}")):
        assert page.status_code == 200
        assert "expires in" in page.text and "expired" not in page.text
    rt.approve(r.run_id, by="fin")  # as the store decides it: still open


@pytest.mark.postgres
@pytest.mark.parametrize("parker, decider", [(-HOUR, +HOUR), (+HOUR, -HOUR), (0.0, +HOUR)])
def test_approval_wait_is_the_true_wait_whatever_the_hosts_clocks(
    pg_rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch, parker: float, decider: float
) -> None:
    """A request's ``requested_at`` and ``decided_at`` are on the store's clock, as its
    ``expires_at`` (edit47): before, each was the writing host's, so a person deciding from a
    host an hour ahead of the one that parked the run made ``approval_wait_s`` two hours (or
    minus two: a negative wait), and the trace's approval span as long."""
    from loopwright._metrics import compute_metrics
    from loopwright.trace import run_spans

    skew, rt = _skew(monkeypatch), pg_rt
    skew["s"] = parker  # the host that parks the run
    before = _server_now(rt)
    r, loop, _bank = _park(rt, expires_after_s=600)
    skew["s"] = decider  # the person's host
    rt.approve(r.run_id, by="fin")
    after = _server_now(rt)
    rt.resume_sync(r.run_id, loop)
    [req] = [a for a in rt.store.approvals(run_id=r.run_id) if a.status == "approved"]
    assert req.decided_at is not None
    assert before <= req.requested_at <= req.decided_at <= after  # the server's clock
    wait = req.decided_at - req.requested_at
    assert 0 <= wait <= after - before
    m = compute_metrics(rt.store)
    assert m.approval_wait_s == pytest.approx(wait)
    [span] = [s for s in run_spans(rt.store, r.run_id)[1] if s.kind == "approval"]
    assert span.end - span.start == pytest.approx(wait)
