"""A person's pause from outside, as a user meets it (stop 53): the HTTP API lifts a pause as
it files one (``POST /api/runs/{id}/unpause``, an operator's, not an approver's); the confirm
page and the run page speak of a pause as lifted, never approved or denied, and tell one who
may not lift it what they can do; every refusal over HTTP is one clear 4xx, audited; the
CLI's hints name the ``--store`` given. SQLite and PostgreSQL (``url``)."""

from __future__ import annotations

import re
import shlex

import pytest
from doc_loop import TASK
from fastapi.testclient import TestClient
from support.dashboard import dashboard
from test_engine_core import fixer, make_loop
from test_pause_audit import _people, _runs, _tok

import loopwright as lw
from loopwright.web import create_app

SERVER = "server-token-0123456789"
LOCAL = "http://127.0.0.1"


def _parked_on_risk(url: str) -> str:
    """A run parked on a risk request at its cycle 2 (not paused)."""

    def asking(ctx: lw.Context) -> lw.Proposal:
        p = fixer(ctx)
        return p if ctx.cycle != 2 else lw.Proposal.edit("doc", {"a": 1}, note="risky")

    risk = (lw.RiskRule(name="risky", check=lambda s, p, v: p.note == "risky"),)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(asking, risk=risk), TASK, task_key="k")
    assert r.status == "awaiting_approval"
    return r.run_id


def _bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {_tok(name)}"}


def _sign_in(c: TestClient, token: str) -> str:
    r = c.post("/login", data={"token": token, "next": "/approvals"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    m = re.search(r'name="csrf" value="([^"]+)"', c.get("/approvals").text)
    assert m
    return m.group(1)


def _audit(url: str) -> list[tuple[str, str, str, str]]:
    with lw.Runtime(url) as rt:
        return [
            (a.actor, a.action, a.outcome, a.origin)
            for a in rt.store.audit()
            if a.action in ("pause", "unpause", "approve")
        ]


def test_the_api_unpauses_under_the_rules_it_pauses_by(url: str) -> None:
    """``POST /api/runs/{id}/pause`` had no ``/unpause``: a script that paused a run over HTTP
    could lift it only by finding the request and approving it. The unpause takes the
    operator's permission (an approver and a viewer are 403, audited), the token or a session
    with its X-CSRF-Token, an optional note; it is in the OpenAPI document under ``runs``."""
    rid, _ended = _runs(url)
    _people(url)
    c = dashboard(url, token=SERVER, identity="server")
    assert c.post(f"/api/runs/{rid}/unpause").status_code == 401
    paused = c.post(f"/api/runs/{rid}/pause", json={"note": "vendor check"}, headers=_bearer("op"))
    assert paused.status_code == 200, paused.text
    filed = paused.json()["approval"]
    assert (filed["kind"], filed["status"]) == ("pause", "pending")
    assert filed["evidence"]["note"] == "vendor check"
    for name in ("ap", "rd"):  # an approver may not lift a pause: no rule asked for it
        r = c.post(f"/api/runs/{rid}/unpause", headers=_bearer(name))
        assert r.status_code == 403 and "operator role" in r.json()["detail"], r.text
    # a signed-in session needs the page's CSRF token in the header
    csrf = _sign_in(c, _tok("op"))
    assert c.post(f"/api/runs/{rid}/unpause").status_code == 403
    bad = c.post(f"/api/runs/{rid}/unpause", json={"reason": "x"}, headers={"X-CSRF-Token": csrf})
    assert bad.status_code == 422  # another field is refused, not dropped
    lifted = c.post(
        f"/api/runs/{rid}/unpause", json={"note": "checked"}, headers={"X-CSRF-Token": csrf}
    )
    assert lifted.status_code == 200, lifted.text
    got = lifted.json()
    assert got["approval"]["approval_id"] == filed["approval_id"]
    assert (got["approval"]["status"], got["approval"]["decided_by"]) == ("approved", "op")
    assert got["approval"]["note"] == "checked"
    assert got["message"].startswith("unpaused by op"), got
    assert got["run"]["run_id"] == rid
    again = c.post(f"/api/runs/{rid}/unpause", headers=_bearer("op"))
    assert again.status_code == 409 and again.json()["detail"] == f"run {rid} is not paused"
    seen = _audit(url)
    assert ("ap", "unpause", "refused") in [s[:3] for s in seen]
    assert ("rd", "unpause", "refused") in [s[:3] for s in seen]
    assert [s[:3] for s in seen].count(("op", "unpause", "refused")) == 1  # the second one
    assert ("op", "unpause", "allowed") in [s[:3] for s in seen]  # the lift: on the run
    assert all(origin.startswith("http") for *_, origin in seen)
    op = create_app(url, token=SERVER).openapi()["paths"]["/api/runs/{run_id}/unpause"]["post"]
    assert op["tags"] == ["runs"] and "requestBody" in op and "approver" in op["description"]


def test_a_pause_refused_over_http_is_one_4xx_and_audited(url: str) -> None:
    """An ended run's pause was a 409 before the role was asked, to an approver too, and left
    no audit record; now the role comes first (403), and an operator's is a 409 in the log.
    An unpause of an ended run says it ended; a run that does not exist is 404; a note with an
    escape sequence is 400, audited with the reason."""
    rid, ended = _runs(url)
    _people(url)
    c = dashboard(url, token=SERVER)
    r = c.post(f"/api/runs/{ended}/pause", headers=_bearer("ap"))
    assert r.status_code == 403 and "operator role" in r.json()["detail"], r.text
    r = c.post(f"/api/runs/{ended}/pause", headers=_bearer("op"))
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == f"run {ended} already ended (accepted); nothing to pause"
    r = c.post(f"/api/runs/{ended}/unpause", headers=_bearer("op"))
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == f"run {ended} already ended (accepted); nothing to unpause"
    for how in ("pause", "unpause"):
        r = c.post(f"/api/runs/no-such-run/{how}", headers=_bearer("op"))
        assert r.status_code == 404 and "no run 'no-such-run'" in r.json()["detail"], r.text
        r = c.post(f"/api/runs/{rid}/{how}", json=["note"], headers=_bearer("op"))
        assert r.status_code == 422, r.text
    r = c.post(f"/api/runs/{rid}/pause", json={"note": "\x1b[2J"}, headers=_bearer("op"))
    assert r.status_code == 400 and "control character" in r.json()["detail"], r.text
    lone = {**_bearer("op"), "content-type": "application/json"}  # a lone surrogate
    r = c.post(f"/api/runs/{rid}/unpause", content=b'{"note": "\\ud800"}', headers=lone)
    assert r.status_code == 400, r.text
    with lw.Runtime(url) as rt:
        assert rt.store.approvals(run_id=rid) == []  # nothing filed
        refusals = [
            (a.actor, a.action, a.target, a.detail.get("reason", ""))
            for a in rt.store.audit()
            if a.outcome == "refused" and a.action in ("pause", "unpause")
        ]
    assert ("ap", "pause", f"run {ended}") in [x[:3] for x in refusals]
    assert ("op", "pause", f"run {ended}", f"run {ended} already ended (accepted); nothing to "
            "pause") in refusals  # fmt: skip
    assert ("op", "unpause", f"run {ended}") in [x[:3] for x in refusals]
    escape, surrogate = [x for x in refusals if x[2] == f"run {rid}"]
    assert escape[:2] == ("op", "pause") and "\x1b" not in escape[3]
    assert surrogate[:2] == ("op", "unpause") and "surrogate" in surrogate[3], surrogate


def test_the_confirm_page_of_a_paused_run_says_unpause_not_approve_or_deny(url: str) -> None:
    """The confirmation of a resume told a paused run's reader to "approve or deny it first"
    (a pause is lifted, its deny refused), the act's 409 too; the pause's said a person
    "approves its pause request", and a second pause was offered a Yes button to a 409."""
    rid, _ended = _runs(url)
    c = dashboard(url, token=SERVER, identity="ana")
    csrf = _sign_in(c, SERVER)
    first = c.get(f"/runs/{rid}/confirm", params={"action": "pause"}).text
    assert "approves its pause request" not in first and "until an operator unpauses it" in first
    assert "Yes, pause the run" in first
    with lw.Runtime(url) as rt:
        filed = rt.pause(rid, by="ana")
    page = c.get(f"/runs/{rid}/confirm", params={"action": "resume"}).text
    assert "approve or deny" not in page, page
    assert "The run is paused by a person: unpause it first (or cancel it)" in page
    r = c.post(f"/runs/{rid}/act", data={"csrf": csrf, "action": "resume"})
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == "the run is paused by a person: unpause it first (or cancel it)"
    again = c.get(f"/runs/{rid}/confirm", params={"action": "pause"}).text
    assert "Yes, pause the run" not in again and "paused already" in again
    assert filed.approval_id in again


def test_the_run_page_tells_who_may_not_unpause_what_they_can_do(url: str) -> None:
    """The run page said "Unpause it below" to an approver and a viewer, who are shown no
    Unpause (it needs the operator role): it says an operator lifts it, and that they may not."""
    rid, _ended = _runs(url)
    with lw.Runtime(url) as rt:
        rt.pause(rid, by="ann")
    _people(url)
    app = create_app(url, token=SERVER)

    def next_action(name: str) -> str:
        c = TestClient(app, base_url=LOCAL)
        _sign_in(c, _tok(name))
        m = re.search(r'<dd id="next-action">([^<]*)</dd>', c.get(f"/runs/{rid}").text)
        assert m
        return m.group(1)

    for name in ("ap", "rd"):
        said = next_action(name)
        assert "Unpause it below" not in said, said
        assert "an operator lifts the pause" in said and f"{name} may not" in said, said
    assert next_action("op").startswith("The run is paused: Unpause it below")


def test_a_reader_not_signed_in_is_told_to_sign_in_to_unpause(url: str) -> None:
    """Not signed in (a store without users lets anyone read), the page said "Unpause it
    below" with no Unpause below, and its sign-in line left pausing out."""
    rid, _ended = _runs(url)
    with lw.Runtime(url) as rt:
        rt.pause(rid, by="ann")
    c = dashboard(url, token=SERVER)
    page = c.get(f"/runs/{rid}").text
    m = re.search(r'<dd id="next-action">([^<]*)</dd>', page)
    assert m and m.group(1).startswith("The run is paused by a person: sign in"), m
    assert "Unpause</button>" not in page
    assert "with your token to cancel, pause, resume, roll back or rerun this run" in page


def test_a_run_parked_on_a_request_and_paused_says_both(url: str) -> None:
    """A run parked on a risk request and paused too: its page said only "approve or deny"
    the request, and its confirmation of a resume the same, though the pause holds it after
    the decision."""
    rid = _parked_on_risk(url)
    with lw.Runtime(url) as rt:
        rt.pause(rid, by="ann")
    c = dashboard(url, token=SERVER, identity="ana")
    _sign_in(c, SERVER)
    m = re.search(r'<dd id="next-action">([^<]*)</dd>', c.get(f"/runs/{rid}").text)
    assert m and "also paused by a person: Unpause it to go on" in m.group(1), m
    page = c.get(f"/runs/{rid}/confirm", params={"action": "resume"}).text
    assert "waits for a decision and is paused: decide the request and unpause it first" in page


def test_the_pause_commands_hints_name_the_store_given(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loopwright pause RUN --store S` said "let it go on with: loopwright unpause RUN", and
    `unpause` "it still waits on 1 request(s): loopwright approvals": copied as printed, each
    read the default store (the other hints name the ``--store`` given: ``store_flag``)."""
    from loopwright.cli import main

    rid = _parked_on_risk(url)
    at = f"--store {shlex.quote(url)}"
    capsys.readouterr()
    assert main(["pause", rid, "--by", "ana", "--store", url]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"let it go on with: loopwright unpause {rid[:12]} {at}" in out, out
    assert "--by" not in out  # the OS user by default (--by NAME was refused as typed)
    assert main(["unpause", rid, "--by", "ana", "--store", url]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"it still waits on 1 request(s): loopwright approvals {at}" in out, out


def test_a_resume_the_cli_cannot_do_is_refused_before_the_decision(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`unpause --resume` (and `approve --resume`) of a run started from Python lifted the
    pause (decided the request), then failed, exit 2, on the resume it cannot do: an error
    for a change that was made. It is refused before anything changes."""
    from loopwright.cli import main

    rid = _parked_on_risk(url)
    with lw.Runtime(url) as rt:
        rt.pause(rid, by="ann")
    capsys.readouterr()
    for args in (["unpause", rid], ["approve", rid, "--request"]):
        if args[0] == "approve":
            with lw.Runtime(url) as rt:
                [risky] = [a for a in rt.store.approvals(run_id=rid, status="pending")
                           if a.kind != "pause"]  # fmt: skip
            args = [*args, risky.approval_id]
        assert main([*args, "--by", "bo", "--resume", "--store", url]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "started from Python" in err, err
        with lw.Runtime(url) as rt:  # nothing decided
            assert len(rt.store.approvals(run_id=rid, status="pending")) == 2
