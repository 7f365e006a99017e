"""An expired request's card offers no decision (outside probe, stop 48): the inbox and the run
page said "expired 2 min ago" yet showed the note box with Approve and Deny, and a person who
filled in a note and pressed Approve got a 409 page. Now the card says it can no longer be
decided. The store's clock (``Store.clock``, on which expiry is set and compared) is moved an
hour on, so nothing waits for time to pass.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import loopwright as lw
from loopwright.web import create_app

TOKEN = "expired-card-token-0123456789"
LOCAL = "http://127.0.0.1"


@lw.effect("spend", name="pay", key=lambda a: "pay-1")
def pay(payee: str) -> dict[str, Any]:
    return {"paid": payee}


def _actor(ctx: lw.Context) -> lw.Proposal:
    fix = lw.Proposal.edit("doc", {"payee": "ACME"}).edits
    return lw.Proposal(edits=fix, effects=(pay.call(payee="ACME"),))


def _passes(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


@pytest.fixture
def parked(tmp_path: Path) -> tuple[str, str]:
    """A run parked on a payment whose request expires after a minute; (store, run id)."""
    rule = lw.PolicyRule(kind="spend", action="require", expires_after_s=60)
    loop = lw.Loop(
        name="expiring",
        actor=_actor,
        verifiers=[_passes],
        effects=[pay],
        approvals=lw.ApprovalPolicy((rule,)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    store = str(tmp_path / "expiring.db")
    with lw.Runtime(store) as rt:
        res = rt.run_sync(loop, {"artifacts": {"doc": {"payee": ""}}}, task_key="exp-1")
    assert res.status == "awaiting_approval"
    return store, res.run_id


def _client(store: str, hours_on: float) -> TestClient:
    app = create_app(store, token=TOKEN, identity="ana")
    later = time.time() + hours_on * 3600
    app.state.store.clock = lambda: later  # the store's clock, an hour on (or now)
    c = TestClient(app, base_url=LOCAL)
    r = c.post("/login", data={"token": TOKEN, "next": "/approvals"}, follow_redirects=False)
    assert r.status_code == 303
    return c


def _buttons(page: str) -> list[str]:
    return re.findall(r'<button name="action" value="(\w+)"', page)


def test_a_pending_request_offers_approve_and_deny(parked: tuple[str, str]) -> None:
    store, run_id = parked
    c = _client(store, hours_on=0)
    for path in ("/approvals", f"/runs/{run_id}"):
        page = c.get(path).text
        assert "expires in" in page and "approve" in _buttons(page), path


def test_an_expired_request_offers_no_decision(parked: tuple[str, str]) -> None:
    store, run_id = parked
    c = _client(store, hours_on=1)
    for path in ("/approvals", f"/runs/{run_id}"):
        page = c.get(path).text
        assert "expired" in page, path
        assert not {"approve", "deny"} & set(_buttons(page)), path  # before: both offered
        assert "can no longer be decided" in page, path
