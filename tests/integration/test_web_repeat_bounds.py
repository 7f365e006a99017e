"""Records one can repeat at will held to a bound (fix/web51b): allowed sign-ins and the
sessions they end are audited once per person and source in a window, the rest counted; a count
names what it counted; the browser whose session a newer sign-in ended is told why."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from support.modules import load_sibling

import loopwright as lw
from loopwright.store import AuditRecord
from loopwright.web import _auth, create_app
from loopwright.web._auth import COUNTED, RefusedSignIns


def _people() -> ModuleType:
    return load_sibling(__file__, "test_web_people.py", "_web_people_helpers_bounds")


@pytest.fixture
def people(tmp_path: Path) -> tuple[ModuleType, str]:
    p = _people()
    store, _run = p._web().make_parked_run(tmp_path)
    p.add_people(store)
    return p, store


def _audit(store: str, action: str) -> list[AuditRecord]:
    with lw.Runtime(store) as rt:
        return [a for a in rt.store.audit() if a.action == action]


def test_allowed_sign_ins_are_recorded_once_per_person_and_source_then_counted(
    people: tuple[ModuleType, str],
) -> None:
    p, store = people
    app = create_app(store, token=p.SERVER_TOKEN, identity="server")
    now = [0.0]
    app.state.signed_ins.clock = lambda: now[0]
    with TestClient(app, base_url=p.LOCAL) as c:
        for _ in range(20):
            assert c.post("/login", data={"token": p.TOKENS["vic"]}).status_code == 200
        assert c.post("/login", data={"token": p.TOKENS["ana"]}).status_code == 200
        rows = _audit(store, "sign in")
        assert [(a.actor, a.outcome) for a in rows] == [("vic", "allowed"), ("ana", "allowed")]
        now[0] += app.state.signed_ins.window_s  # vic's next window: the 19 counted recorded
        assert c.post("/login", data={"token": p.TOKENS["vic"]}).status_code == 200
        rows = _audit(store, "sign in")
        assert len(rows) == 3 and rows[2].detail.get("counted") == 19
        assert c.post("/login", data={"token": p.TOKENS["vic"]}).status_code == 200
    rows = _audit(store, "sign in")  # stopped: the one counted since is recorded
    assert len(rows) == 4 and rows[3].actor == "vic" and rows[3].detail.get("counted") == 1


def test_a_session_ended_by_a_newer_sign_in_is_audited_and_its_browser_told_why(
    people: tuple[ModuleType, str],
) -> None:
    p, store = people
    app = create_app(store, token=p.SERVER_TOKEN, identity="server")
    first = TestClient(app, base_url=p.LOCAL)
    assert first.post("/login", data={"token": p.TOKENS["ana"]}).status_code == 200
    for _ in range(32):
        b = TestClient(app, base_url=p.LOCAL)
        assert b.post("/login", data={"token": p.TOKENS["ana"]}).status_code == 200
    ended = _audit(store, "end session")
    assert [(a.actor, a.outcome) for a in ended] == [("ana", "allowed")]
    assert "too many sessions" in str(ended[0].detail.get("reason"))
    r = first.get("/approvals")  # signed out: the sign-in page says why
    assert "/login" in str(r.url) and "signed out: too many sessions" in r.text
    assert "too many sessions" not in first.get("/login").text  # said once


def test_a_count_names_the_actions_it_counted() -> None:
    """A count named its window's first record's action, while the attempts it counted may
    have been other paths (a wrong token's sign-in, then forged posts)."""
    written: list[tuple[str, str, int, tuple[str, str], str]] = []
    now = [0.0]
    log = RefusedSignIns(lambda *a: written.append(a), clock=lambda: now[0])
    post_a, post_b = ("POST", "/api/runs/a/cancel"), ("POST", "/api/runs/b/cancel")
    log.refused("s", "no token", post_a, "(no token)")
    log.refused("s", "no token", post_b, "(no token)")
    log.refused("s", "no token", post_b, "(no token)")
    log.refused("s", "no token", _auth.SIGN_IN, "(no token)")
    now[0] = log.window_s  # the next record (of post_a) does not carry a count of others
    log.refused("s", "no token", post_a, "(no token)")
    assert written[0] == ("s", "no token", 0, post_a, "(no token)")
    src, why, n, what, _who = written[1]
    assert src == "s"
    assert (n, what) == (3, _auth.SEVERAL)
    assert why.startswith(COUNTED) and "POST /api/runs/b/cancel: 2" in why
    assert "sign in dashboard: 1" in why
    assert written[2] == ("s", "no token", 0, post_a, "(no token)")
    log.refused("s", "no token", post_b, "(no token)")
    log.flush()  # one kind counted: named as it
    assert written[3] == ("s", COUNTED, 1, post_b, "(no token)")


def test_a_count_beyond_the_sources_kept_names_what_it_counted() -> None:
    written: list[tuple[str, str, int, tuple[str, str], str]] = []
    log = RefusedSignIns(lambda *a: written.append(a), clock=lambda: 0.0, max_sources=1)
    forged = ("POST", "/runs/x/cancel")
    log.refused("a", "wrong")
    log.refused("b", "forged", forged, "ana")
    log.refused("c", "forged", forged, "ana")
    log.flush()
    assert written[-1][2:4] == (2, forged)


def test_the_sign_in_page_says_nothing_of_sessions_to_a_new_browser(
    people: tuple[ModuleType, str],
) -> None:
    p, store = people
    c = TestClient(create_app(store, token=p.SERVER_TOKEN, identity="server"), base_url=p.LOCAL)
    c.cookies.set("lw_session", "made-up")
    r = c.get("/login")
    assert r.status_code == 200 and "too many sessions" not in r.text


def test_one_who_may_not_resume_is_refused_for_that_not_for_room(
    people: tuple[ModuleType, str],
) -> None:
    """With the server full, a viewer's resume is the 403 their role gets (audited by the
    action's own check), not a 503 that an operator's gets."""
    p, store = people
    app = create_app(store, token=p.SERVER_TOKEN, identity="server", max_resumes=1)
    app.state.resuming["another-run"] = [False]  # as a resume thread alive holds its place
    c = TestClient(app, base_url=p.LOCAL)
    with lw.Runtime(store) as rt:
        run_id = rt.store.list_runs()[0].run_id
    r = c.post(f"/api/runs/{run_id}/resume", json={}, headers=p.bearer("vic"))
    assert r.status_code == 403, r.text
    r = c.post(f"/api/runs/{run_id}/rerun", json={"start": True}, headers=p.bearer("oscar"))
    assert r.status_code == 503 and "as many runs as it may at once (1," in r.json()["detail"], (
        r.text
    )
    r = c.post(f"/api/runs/{run_id}/rerun", json={"start": True}, headers=p.bearer("vic"))
    assert r.status_code == 403, r.text


def test_a_form_refused_for_room_gets_a_page_saying_so(people: tuple[ModuleType, str]) -> None:
    """The browser's rerun form, the server full: a page that says why (with Retry-After), not
    the API's JSON."""
    p, store = people
    app = create_app(store, token=p.SERVER_TOKEN, identity="server", max_resumes=1)
    app.state.resuming["another-run"] = [False]  # as a resume thread alive holds its place
    c = TestClient(app, base_url=p.LOCAL)
    csrf = p.sign_in(c, "oscar")
    with lw.Runtime(store) as rt:
        run_id = rt.store.list_runs()[0].run_id
    r = c.post(
        f"/runs/{run_id}/rerun",
        data={"csrf": csrf, "start": "yes"},
        headers={"Accept": "text/html"},
    )
    assert r.status_code == 503 and r.headers["retry-after"] == "30"
    assert "text/html" in r.headers["content-type"] and "Busy: try again later" in r.text


def test_a_request_of_a_session_a_newer_sign_in_ended_is_told_why(
    people: tuple[ModuleType, str],
) -> None:
    """Only ``/login`` said why: an API read, the live stream or a form's post with the ended
    session's cookie was answered "token required", as if it never signed in."""
    p, store = people
    app = create_app(store, token=p.SERVER_TOKEN, identity="server")
    first = TestClient(app, base_url=p.LOCAL)
    assert first.post("/login", data={"token": p.TOKENS["ana"]}).status_code == 200
    for _ in range(32):
        b = TestClient(app, base_url=p.LOCAL)
        assert b.post("/login", data={"token": p.TOKENS["ana"]}).status_code == 200
    for method, path in (("GET", "/api/runs"), ("GET", "/api/events"), ("POST", "/runs/r/cancel")):
        r = first.request(method, path, follow_redirects=False)
        assert r.status_code == 401, (method, path)
        assert "signed out: too many sessions" in r.json()["detail"], (method, path)
    assert "signed out: too many sessions" in first.get("/login").text  # still said there, once
    assert first.get("/api/runs").json()["detail"] == "token required"
    assert TestClient(app, base_url=p.LOCAL).get("/api/runs").json()["detail"] == "token required"
