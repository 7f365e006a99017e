"""What an outside tester found attacking the dashboard from its docs alone (web53, stop 53).

- The line a run's page shows after a form's post (``?msg=…&sig=…``) was signed for the
  message alone: the signed address of one run's "cancellation requested by ana", its run id
  changed, made another run's page say it in the dashboard's own voice, which is what the
  signature is there to prevent (docs/ui.md, Security). It is signed for the run's page now.
- An edit's note took an escape sequence, a bidirectional override and a line separator
  (``POST /api/runs/{id}/parts/...``, the Edit box, ``Runtime.edit``), which a decision's and a
  pause's note refuse: they went into the append-only audit log, the run's notes and the
  actor's next context as typed (docs/security.md: notes people type are refused with them).
- A write with no sign-in whose body was ``text/plain`` (what another site may post without a
  CORS preflight, and, the session cookie being SameSite=Strict, without a session) was
  answered 415 before its sign-in was asked: not the 401 docs/ui.md promises "whatever it
  sends", and recorded nowhere, where a write with no token is audited as ``(no token)``.
  The same post from a page on the same site (another port of 127.0.0.1), which the browser
  sends with the person's session cookie, was a 415 recorded nowhere too, where a write without
  the page's CSRF token is audited under that person's name as a forged request.
- ``POST /api/runs/{id}/pause`` with ``{"note": "..."}`` answered 200 and dropped the note
  unread (``loopwright pause --note`` keeps it on the request); a note the rule of notes
  refuses, or a field it does not know, paused the run all the same.
- ``--allow-host '*.com'`` (``create_app(allowed_hosts=...)``) was taken: every site under a
  top-level domain could rebind its name to 127.0.0.1 and read the runs, which the Host check
  is there to prevent. A wildcard names a domain of one's own (``*.example.com``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import pytest
from support.dashboard import dashboard
from support.modules import load_sibling

import loopwright as lw
from loopwright._authority import hash_token
from loopwright.web import create_app

LOCAL = "http://127.0.0.1"
TOKEN = "probe-token-0123456789"


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_helpers_outside_probe")


def _other_run(store: str) -> str:
    return _other_run_keyed(store, "other")


def _other_run_keyed(store: str, key: str) -> str:
    loop = lw.Loop(
        name="other",
        actor=lambda ctx: lw.Proposal.edit("doc", {"v": 1}),
        verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(store) as rt:
        return rt.create(loop, {"artifacts": {"doc": {"v": 0}}}, task_key=key)[0].run_id


def test_a_signed_message_of_one_run_is_not_shown_on_another_runs_page(tmp_path: Path) -> None:
    store, run_id = _web().make_parked_run(tmp_path)
    other = _other_run(store)
    c = dashboard(store, token=TOKEN, identity="ana")
    c.post("/login", data={"token": TOKEN}, follow_redirects=False)
    page = c.get(f"/runs/{run_id}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    done = c.post(
        f"/runs/{run_id}/act",
        data={"csrf": csrf.group(1), "action": "cancel"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    where = urlsplit(done.headers["location"])
    shown = c.get(f"{where.path}?{where.query}").text
    line = re.search(r'<p class="flash">([^<]+)</p>', shown)
    assert line is not None and "cancel" in line.group(1)  # its own run's page shows it
    moved = c.get(f"/runs/{other}?{where.query}").text
    assert '<p class="flash">' not in moved, "another run's page said what was done to this one"


@pytest.mark.parametrize("note", ["a\x1b[2Jb", "a\u202eb", "a\u2028b", "a\x07b"])
def test_an_edits_note_is_held_to_the_rule_of_a_decisions_note(tmp_path: Path, note: str) -> None:
    store, run_id = _web().make_parked_run(tmp_path)
    c = dashboard(store, token=TOKEN, identity="ana")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with lw.Runtime(store) as rt:
        before = len(rt.store.audit())
    r = c.post(f"/api/runs/{run_id}/parts/doc/a", json={"value": 7, "note": note}, headers=bearer)
    assert r.status_code == 400, r.text
    assert "note" in r.json()["detail"]
    with lw.Runtime(store) as rt:
        assert rt.store.latest_checkpoint(run_id).task_state().part("doc/a").value != 7
        assert len(rt.store.audit()) == before
        with pytest.raises(lw.ConfigError) as e:
            rt.edit(run_id, "doc/a", 7, by="ana", note=note)
        assert e.value.field == "note"
    # a line break, a tab and a form's CRLF are a note's own
    ok = c.post(
        f"/api/runs/{run_id}/parts/doc/a",
        json={"value": 7, "note": "checked\r\nagainst\tthe PO"},
        headers=bearer,
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["edit"]["note"] == "checked\nagainst\tthe PO"


def test_a_write_with_no_sign_in_is_401_and_audited_whatever_its_type(tmp_path: Path) -> None:
    store, run_id = _web().make_parked_run(tmp_path)
    with lw.Runtime(store) as rt:
        rt.store.add_user("root", roles=["admin"], limits={}, by="test", now=1.0)
        rt.store.set_token("root", hash_token("tok-root-0123456789"), now=1.0)
        [req] = rt.store.approvals(run_id=run_id, status="pending")
    c = dashboard(store, token=TOKEN, identity="server")
    path = f"/api/approvals/{req.approval_id}/approve"
    forged = c.post(path, content=b'{"note": "ok"}', headers={"Content-Type": "text/plain"})
    assert forged.status_code == 401, forged.text
    with lw.Runtime(store) as rt:
        refused = [
            (a.actor, a.action, a.target) for a in rt.store.audit() if a.outcome == "refused"
        ]
        assert refused == [("(no token)", "POST", path)]
        assert rt.store.approvals(run_id=run_id, status="pending") != []
    # signed in, a body of the wrong type is still 415, unread
    bearer = {"Authorization": "Bearer tok-root-0123456789", "Content-Type": "text/plain"}
    assert c.post(path, content=b"{}", headers=bearer).status_code == 415


def test_a_same_site_post_of_the_wrong_type_is_audited_as_forged(tmp_path: Path) -> None:
    store, run_id = _web().make_parked_run(tmp_path)
    with lw.Runtime(store) as rt:
        rt.store.add_user("ana", roles=["approver"], limits={}, by="test", now=time.time())
        rt.store.set_token("ana", hash_token("tok-ana-0123456789"), now=time.time())
        [req] = rt.store.approvals(run_id=run_id, status="pending")
    c = dashboard(store, token=TOKEN, identity="server")
    signed = c.post("/login", data={"token": "tok-ana-0123456789"}, follow_redirects=False)
    assert signed.status_code == 303
    plain = {"Content-Type": "text/plain"}
    api = f"/api/approvals/{req.approval_id}/approve"
    form = f"/approvals/{req.approval_id}/decide"
    assert c.post(api, content=b'{"note": "ok"}', headers=plain).status_code == 415
    with lw.Runtime(store) as rt:
        refused = [
            (a.actor, a.action, a.target, a.detail.get("reason", ""))
            for a in rt.store.audit()
            if a.outcome == "refused"
        ]
        assert [r[:3] for r in refused] == [("ana", "POST", api)], refused
        assert "forged" in refused[0][3]
        assert rt.store.approvals(run_id=run_id, status="pending") != []
    # the rest from that address and person in the window are counted, not a record each
    assert c.post(form, content=b"action=approve", headers=plain).status_code == 415
    with lw.Runtime(store) as rt:
        assert len([a for a in rt.store.audit() if a.outcome == "refused"]) == 1
    # a script's bearer token is no browser's: its wrong type is a 415 and nothing more
    bearer = {**plain, "Authorization": "Bearer tok-ana-0123456789"}
    c.cookies.clear()
    assert c.post(api, content=b"{}", headers=bearer).status_code == 415
    with lw.Runtime(store) as rt:
        assert len([a for a in rt.store.audit() if a.outcome == "refused"]) == 1
        assert rt.store.approvals(run_id=run_id, status="pending") != []


def test_a_pause_from_the_api_keeps_its_note_and_refuses_a_bad_one(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    rid = _other_run(store)
    c = dashboard(store, token=TOKEN, identity="ana")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    path = f"/api/runs/{rid}/pause"
    # a note holding a control character is 400 (a decision's note's rule); a body of the
    # wrong shape is 422, as every API body checked against its schema (docs/ui.md)
    for bad, status in (
        ({"note": "a\x1b[2Jb"}, 400),
        ({"note": 5}, 422),
        ({"why": "x"}, 422),
        (["x"], 422),
    ):
        r = c.post(path, json=bad, headers=bearer)
        assert r.status_code == status, (bad, r.text)
    with lw.Runtime(store) as rt:
        assert rt.store.approvals(run_id=rid, status="pending") == []  # nothing filed
    r = c.post(path, json={"note": "checking the invoice first"}, headers=bearer)
    assert r.status_code == 200, r.text
    with lw.Runtime(store) as rt:
        [pause] = rt.store.approvals(run_id=rid, status="pending")
    assert pause.kind == "pause" and pause.why == "checking the invoice first"
    schema = c.get("/openapi.json").json()["paths"]["/api/runs/{run_id}/pause"]["post"]
    assert "note" in str(schema["requestBody"])
    # no body, as before
    other = _other_run_keyed(store, "other-2")
    assert c.post(f"/api/runs/{other}/pause", headers=bearer).status_code == 200


@pytest.mark.parametrize("name", ["*.com", "*.COM", "*.org.", " *.io "])
def test_a_wildcard_over_a_whole_top_level_domain_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(lw.ConfigError, match="top-level domain") as e:
        create_app(str(tmp_path / "s.db"), token=TOKEN, allowed_hosts=[name])
    assert e.value.field == "allowed_hosts"
    # a domain's subdomains, and loopback's, are still named so
    create_app(str(tmp_path / "s.db"), token=TOKEN, allowed_hosts=["*.example.com", "*.localhost"])
