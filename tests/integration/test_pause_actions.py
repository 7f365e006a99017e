"""What a pause request offers (stop 52): the dashboard's card showed Approve and Deny, and
`loopwright approvals` said "approve … (or deny)", though denying a pause answers 409 /
an ``ApprovalError``. A pause is lifted (Unpause, ``loopwright unpause``) or its run cancelled."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.dashboard import dashboard

import loopwright as lw
from loopwright.cli._decide_cmd import _decide_hint
from loopwright.web import create_app

TOKEN = "pause-actions-token-0123456789"


def _ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


def _loop() -> lw.Loop:
    return lw.Loop(
        name="pausing",
        actor=lambda ctx: lw.Proposal.edit("doc", {"v": 1}),
        verifiers=[_ok],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )


def _paused(store: str, key: str = "p-1") -> str:
    with lw.Runtime(store) as rt:
        rid = rt.create(_loop(), {"artifacts": {"doc": {"v": 0}}}, task_key=key)[0].run_id
        rt.pause(rid, by="ann")
    return rid


def _buttons(page: str) -> list[str]:
    return re.findall(r'<button name="action" value="(\w+)"', page)


def _unpause(c: TestClient, approval_id: str) -> int:
    """The status of ``c``'s Unpause of ``approval_id``, posted as the card's form does."""
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/approvals").text)
    assert csrf is not None
    data = {"csrf": csrf.group(1), "action": "approve", "note": ""}
    return c.post(f"/approvals/{approval_id}/decide", data=data).status_code


def test_the_card_of_a_pause_offers_unpause_and_cancel_not_deny(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    rid = _paused(store)
    c = dashboard(store, token=TOKEN, identity="ana")
    assert c.post("/login", data={"token": TOKEN, "next": "/approvals"}).status_code == 200
    for path in ("/approvals", f"/runs/{rid}"):
        page = c.get(path).text
        card = page[page.index('class="decide"') :]
        assert "deny" not in _buttons(card), path  # before: Deny, answered with a 409
        assert "Unpause" in card and f"/runs/{rid}/confirm?action=cancel" in card, path
    assert "The run is paused: Unpause it" in c.get(f"/runs/{rid}").text
    # the offered actions work: Unpause lifts the pause
    with lw.Runtime(store) as rt:
        [pause] = rt.store.approvals(run_id=rid, status="pending")
    assert _unpause(c, pause.approval_id) == 200
    with lw.Runtime(store) as rt:
        assert rt.store.approvals(run_id=rid, status="pending") == []
    assert c.get(f"/runs/{rid}/confirm?action=cancel").status_code == 200


def test_the_approvals_hint_for_a_pause_says_unpause_or_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwright.cli import _options

    # (no --store given on this process's command line: an earlier in-process CLI call of the
    # same test worker would otherwise leave its own store in the hints)
    monkeypatch.setitem(_options._GIVEN, "store", None)
    store = str(tmp_path / "s.db")
    rid = _paused(store)
    with lw.Runtime(store) as rt:
        reqs = rt.store.approvals(status="pending")
    hint = _decide_hint(reqs, 1, "", None, time.time())
    assert "deny" not in hint and "approve" not in hint, hint  # before: "approve … (or deny)"
    assert f"loopwright unpause {rid[:12]}" in hint and f"loopwright cancel {rid[:12]}" in hint
    rid2 = _paused(store, "p-2")
    with lw.Runtime(store) as rt:
        reqs = rt.store.approvals(status="pending")
    hint = _decide_hint(reqs, 2, "", None, time.time())
    # several: the form names the first listed pause's run, runnable as pasted (notify56)
    first = reqs[0].run_id[:12]
    assert first in (rid[:12], rid2[:12]), (first, rid, rid2)
    assert "deny" not in hint and "approve" not in hint, hint
    assert f"loopwright unpause {first}" in hint and f"loopwright cancel {first}" in hint, hint


def test_the_pause_card_follows_the_operator_role_not_the_approver_role(tmp_path: Path) -> None:
    """Lifting a pause or cancelling its run needs the operator role (``_authority``); the
    card showed Unpause and Cancel only to approvers, so an operator who is not one saw none
    (and an approver-only person saw buttons that answer 403)."""
    from loopwright._authority import hash_token

    store = str(tmp_path / "s.db")
    rid = _paused(store)  # paused before the store has users
    tokens = {"oscar": "tok-oscar-0123456789", "ava": "tok-ava-0123456789"}
    with lw.Runtime(store) as rt:
        for name, role in (("oscar", "operator"), ("ava", "approver")):
            rt.store.add_user(name, roles=[role], limits={}, by="test", now=0.0)
            rt.store.set_token(name, hash_token(tokens[name]), now=0.0)
        [pause] = rt.store.approvals(run_id=rid, status="pending")
    app = create_app(store, token=TOKEN)

    def client(name: str) -> TestClient:
        c = TestClient(app, base_url="http://127.0.0.1")
        assert c.post("/login", data={"token": tokens[name], "next": "/approvals"}).status_code
        return c

    ava = client("ava")
    for path in ("/approvals", f"/runs/{rid}"):
        page = ava.get(path).text
        assert 'class="decide"' not in page and "Unpause</button>" not in page, path
        assert "ava may view this request but not lift it" in page, path
        assert "operator role" in page, path
    assert _unpause(ava, pause.approval_id) == 403  # what the card no longer offers her
    oscar = client("oscar")
    for path in ("/approvals", f"/runs/{rid}"):
        page = oscar.get(path).text
        card = page[page.index('class="decide"') :]  # before: absent, as for a viewer
        assert _buttons(card) == ["approve"] and "Unpause" in card, path
        assert f"/runs/{rid}/confirm?action=cancel" in card, path
        assert "may view this request but not" not in page, path
    assert _unpause(oscar, pause.approval_id) == 200
    with lw.Runtime(store) as rt:
        assert rt.store.approvals(run_id=rid, status="pending") == []
