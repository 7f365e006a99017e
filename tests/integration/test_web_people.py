"""The dashboard with people (docs/permissions.md): each person signs in with their own token,
decisions are recorded under them, roles decide what they may do, revocation is immediate,
and every attempt reaches the audit log."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from support.modules import load_sibling

import loopwright as lw
from loopwright._authority import hash_token
from loopwright.web import create_app

SERVER_TOKEN = "server-token-0123456789"
LOCAL = "http://127.0.0.1"
TOKENS = {"root": "tok-root-0123456789", "ana": "tok-ana-0123456789",
          "vic": "tok-vic-0123456789", "oscar": "tok-oscar-0123456789"}  # fmt: skip
ROLES = {"root": ["admin"], "ana": ["approver"], "vic": ["viewer"], "oscar": ["operator"]}


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_helpers_people")


def add_people(store: str) -> None:
    with lw.Runtime(store) as rt:
        for name, roles in ROLES.items():
            rt.store.add_user(name, roles=roles, limits={}, by="test", now=time.time())
            rt.store.set_token(name, hash_token(TOKENS[name]), now=time.time())


@pytest.fixture
def setup(tmp_path: Path) -> tuple[TestClient, str, str]:
    store, run_id = _web().make_parked_run(tmp_path)
    add_people(store)
    app = create_app(store, token=SERVER_TOKEN, identity="server")
    return TestClient(app, base_url=LOCAL), store, run_id


def sign_in(c: TestClient, name: str) -> str:
    r = c.post("/login", data={"token": TOKENS[name], "next": "/approvals"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    m = re.search(r'name="csrf" value="([^"]+)"', c.get("/approvals").text)
    assert m
    return m.group(1)


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def pending_id(store: str, run_id: str) -> str:
    with lw.Runtime(store) as rt:
        return rt.pending_approval(run_id).approval_id


def test_each_person_signs_in_as_themselves_and_roles_decide_what_they_may_do(
    setup: tuple[TestClient, str, str],
) -> None:
    c, store, run_id = setup
    aid = pending_id(store, run_id)
    # once the store has users, the server's shared token no longer signs anyone in ...
    assert c.post("/login", data={"token": SERVER_TOKEN}).status_code == 403
    # ... and reading needs a sign-in
    assert c.get("/api/runs").status_code == 401
    assert c.get("/api/runs", headers=bearer("vic")).status_code == 200

    csrf = sign_in(c, "vic")
    inbox = c.get("/approvals").text
    assert "vic may view this request but not decide it" in inbox
    assert 'value="approve"' not in inbox
    assert "may not cancel, pause, resume, roll back or rerun" in c.get(f"/runs/{run_id}").text
    forged = c.post(f"/approvals/{aid}/decide", data={"action": "approve", "csrf": csrf})
    assert forged.status_code == 403 and "approver role" in forged.json()["detail"]
    no_csrf = c.post(f"/approvals/{aid}/decide", data={"action": "approve"})
    assert no_csrf.status_code == 403
    api = c.post(f"/api/approvals/{aid}/approve", json={}, headers=bearer("vic"))
    assert api.status_code == 403
    cancel = c.post(f"/api/runs/{run_id}/cancel", headers=bearer("ana"))
    assert cancel.status_code == 403 and "operator role" in cancel.json()["detail"]
    assert c.get("/api/me", headers=bearer("ana")).json()["may"] == ["read", "decide"]

    done = c.post(f"/api/approvals/{aid}/approve", json={"note": "ok"}, headers=bearer("ana"))
    assert done.status_code == 200, done.text
    assert done.json()["approval"]["decided_by"] == "ana"

    rows = c.get("/api/audit", headers=bearer("vic")).json()
    seen = [(r["actor"], r["action"], r["outcome"]) for r in rows]
    assert ("(unknown token)", "sign in", "refused") in seen  # the server token
    assert ("vic", "sign in", "allowed") in seen
    assert seen.count(("vic", "approve", "refused")) == 2  # the form and the API
    assert ("ana", "cancel", "refused") in seen
    assert ("ana", "approve", "allowed") in seen
    assert all(r["origin"].startswith("http") for r in rows if r["actor"] in ("vic", "ana"))
    export = c.get("/api/audit?format=jsonl", headers=bearer("vic"))
    assert export.headers["content-type"].startswith("application/x-ndjson")
    assert len(export.text.strip().splitlines()) == len(rows)
    assert "audit" in c.get("/audit").text


def test_a_revoked_user_is_refused_at_once(setup: tuple[TestClient, str, str]) -> None:
    c, store, run_id = setup
    aid = pending_id(store, run_id)
    sign_in(c, "ana")
    assert c.get("/api/me").json()["name"] == "ana"
    with lw.Runtime(store) as rt:
        rt.store.revoke_user("ana", now=time.time())
    assert c.get("/api/me").status_code == 401  # her session ended with her
    r = c.post(f"/api/approvals/{aid}/approve", json={}, headers=bearer("ana"))
    assert r.status_code == 401
    assert c.post("/login", data={"token": TOKENS["ana"]}).status_code == 403


def test_authority_page_and_api_answer(setup: tuple[TestClient, str, str]) -> None:
    c, _store, _run = setup
    assert c.get("/api/authority", headers=bearer("vic")).json() == []  # no [[authority]] here
    sign_in(c, "vic")
    assert "No loop here has" in c.get("/authority").text


def test_a_refused_cancel_writes_nothing_but_its_audit_record(
    setup: tuple[TestClient, str, str],
) -> None:
    """A person who may not cancel (a viewer, an approver) is refused with 403, the run's event
    log gets no ``cancel_requested`` and the audit log one refused record per attempt (the
    engine's); an operator's cancel is recorded in both."""
    c, store, run_id = setup
    csrf = sign_in(c, "vic")
    form = c.post(f"/runs/{run_id}/act", data={"action": "cancel", "csrf": csrf})
    assert form.status_code == 403
    for name in ("vic", "ana"):
        r = c.post(f"/api/runs/{run_id}/cancel", headers=bearer(name))
        assert r.status_code == 403 and "operator role" in r.json()["detail"]
    with lw.Runtime(store) as rt:
        assert [e for e in rt.store.events(run_id) if e.kind == "cancel_requested"] == []
        assert rt.store.get_run(run_id).status == "awaiting_approval"
        cancels = [(a.actor, a.outcome) for a in rt.store.audit() if a.action == "cancel"]
    assert cancels == [("vic", "refused"), ("vic", "refused"), ("ana", "refused")]

    r = c.post(f"/api/runs/{run_id}/cancel", headers=bearer("oscar"))
    assert r.status_code == 200, r.text
    with lw.Runtime(store) as rt:
        asked = [e.data for e in rt.store.events(run_id) if e.kind == "cancel_requested"]
        assert asked == [{"by": "oscar"}]
        assert [a.outcome for a in rt.store.audit() if a.actor == "oscar"] == ["allowed"]


def test_the_dashboards_quiet_permission_check_answers_and_records_nothing(
    setup: tuple[TestClient, str, str],
) -> None:
    """``permitted_unrecorded`` (the dashboard's cancel asks it before writing the request):
    yes for an operator, no for a viewer, an approver or a stranger, and no audit record for
    any answer. It was ``may_operate``, as ``_authority.may_operate`` is named, which raises
    and audits: the dashboard has no function of that name now."""
    from loopwright import _authority
    from loopwright.web import _operations

    _c, store, run_id = setup
    with lw.Runtime(store) as rt:
        before = len(rt.store.audit())
        asked = {
            who: _operations.permitted_unrecorded(rt.store, who, "cancel", run_id, "test")
            for who in ("oscar", "root", "vic", "ana", "nobody")
        }
        assert len(rt.store.audit()) == before
    assert asked == {"oscar": True, "root": True, "vic": False, "ana": False, "nobody": False}
    assert getattr(_operations, "may_operate", _authority.may_operate) is _authority.may_operate


def test_refused_sign_ins_are_recorded_once_per_source_and_window(tmp_path: Path) -> None:
    """Anyone who reaches the sign-in page can try tokens: the first refusal from a source in a
    window is recorded, the others counted and their count recorded with the next record (or
    when the server stops); a token in a link records nothing. The window's clock is the
    test's, so nothing here depends on time."""
    store, _ = _web().make_parked_run(tmp_path)
    add_people(store)
    app = create_app(store, token=SERVER_TOKEN, identity="server")
    now = [1000.0]
    app.state.sign_ins.clock = lambda: now[0]
    app.state.backoff.limit = 10**6  # what is recorded, not the 429 past the limit (below)

    def refused() -> list[dict[str, object]]:
        with lw.Runtime(store) as rt:
            return [
                {"origin": a.origin, **a.detail}
                for a in rt.store.audit()
                if a.action == "sign in" and a.outcome == "refused"
            ]

    with TestClient(app, base_url=LOCAL) as c:
        for i in range(30):  # what an <img> on any page could send
            r = c.get(f"/login?token=junk-{i}", headers={"Origin": "http://evil.example"})
            assert r.status_code == 400 and not c.cookies
        assert refused() == []
        for i in range(30):
            assert c.post("/login", data={"token": f"junk-{i}"}).status_code == 403
        cross = c.post(
            "/login", data={"token": TOKENS["vic"]}, headers={"Origin": "http://x.example"}
        )
        assert cross.status_code == 403
        rows = refused()
        assert len(rows) == 1 and rows[0]["reason"] == "wrong, unknown or revoked token"
        assert rows[0]["origin"] == "http testclient" and "counted" not in rows[0]

        now[0] += app.state.sign_ins.window_s  # the next window
        assert c.post("/login", data={"token": "junk"}).status_code == 403
        rows = refused()
        assert len(rows) == 2 and rows[1]["counted"] == 30  # 29 wrong tokens, 1 cross-site
        for _ in range(3):
            assert c.post("/login", data={"token": "junk"}).status_code == 403
        assert len(refused()) == 2
        assert c.post("/login", data={"token": TOKENS["vic"]}).status_code == 200  # signed in
    rows = refused()  # the server stopped: what was counted is recorded
    assert len(rows) == 3 and rows[2]["counted"] == 3
    with lw.Runtime(store) as rt:
        allowed = [
            a.actor for a in rt.store.audit() if a.action == "sign in" and a.outcome == "allowed"
        ]
    assert allowed == ["vic"]


def test_refused_sign_in_windows_are_bounded() -> None:
    """Many sources: those beyond the windows kept are counted together, and memory stays
    bounded; a window over closes, its count recorded, and makes room."""
    from loopwright.web._auth import MANY_SOURCES, RefusedSignIns

    written: list[tuple[str, str, int, tuple[str, str], str]] = []
    now = [0.0]
    log = RefusedSignIns(lambda *a: written.append(a), clock=lambda: now[0], max_sources=2)
    for source in ("a", "a", "a", "b", "c", "c"):
        log.refused(source, "wrong")
    s, u = ("sign in", "dashboard"), "(unknown token)"
    assert written == [("a", "wrong", 0, s, u), ("b", "wrong", 0, s, u)]
    now[0] = log.window_s  # a's and b's windows are over: c is recorded, a's count too,
    log.refused("c", "wrong")  # and the two from c counted beyond the windows kept
    counted = written[2][1]
    assert written[2:] == [
        ("a", counted, 2, s, u),
        (MANY_SOURCES, counted, 2, s, u),
        ("c", "wrong", 0, s, u),
    ]
    log.flush()  # nothing more counted
    assert len(written) == 5


def test_a_flood_from_more_sources_than_are_kept_writes_no_record_per_attempt() -> None:
    """The oldest window closed to make room for a new source: a flood from more addresses
    than are kept (4,096 by default; an IPv6 prefix holds billions) wrote a record for every
    attempt, and each closed window's count one more. Now at most a record per window kept,
    and the rest one count."""
    from loopwright.web._auth import RefusedSignIns

    written: list[tuple[str, str, int, tuple[str, str], str]] = []
    log = RefusedSignIns(lambda *a: written.append(a), clock=lambda: 0.0, max_sources=8)
    for attempt in range(1000):
        log.refused(f"http 2001:db8::{attempt % 100:x}", "wrong, unknown or revoked token")
    assert len(written) == 8
    from loopwright.web._auth import MANY_SOURCES

    log.flush()
    counted = {src: n for src, _why, n, _what, _who in written[8:]}
    assert (
        counted[MANY_SOURCES] + sum(n for src, n in counted.items() if src != MANY_SOURCES) == 992
    )


def test_a_rerun_from_the_dashboard_is_requested_by_who_signed_in(
    setup: tuple[TestClient, str, str],
) -> None:
    """A rerun is a new run: its requester (whom separation of duties keeps from approving
    its requests) is the signed-in operator, never the server's ``identity``."""
    c, store, run_id = setup
    body = {"at_cycle": 0, "contract": {}, "start": False}
    refused = c.post(f"/api/runs/{run_id}/rerun", json=body, headers=bearer("ana"))
    assert refused.status_code == 403 and "operator role" in refused.json()["detail"]
    made = c.post(f"/api/runs/{run_id}/rerun", json=body, headers=bearer("oscar"))
    assert made.status_code == 200, made.text
    with lw.Runtime(store) as rt:
        new = rt.store.get_run(made.json()["run"]["run_id"])
        assert new.created_by == "oscar" and new.forked_from == run_id


def test_signed_in_pages_and_answers_are_kept_by_no_cache(
    setup: tuple[TestClient, str, str],
) -> None:
    """What a signed-in person reads is marked ``no-store`` (a browser's Back after signing
    out, or a proxy, would show it to the next person); the static assets stay cacheable."""
    c, _, run_id = setup
    sign_in(c, "vic")
    for path in ("/", f"/runs/{run_id}", "/approvals", "/audit", "/api/me", f"/api/runs/{run_id}"):
        r = c.get(path)
        assert r.status_code == 200, path
        assert r.headers.get("cache-control") == "no-store", path
    assert "no-store" not in c.get("/static/style.css").headers.get("cache-control", "")


def post_garbled(c: TestClient, path: str, who: str) -> httpx.Response:
    """POST a body that is not JSON, as ``who``."""
    return c.post(
        path, content=b"{not json", headers={**bearer(who), "Content-Type": "application/json"}
    )


def test_a_viewers_rerun_is_refused_for_the_role_before_its_values_are_checked(
    setup: tuple[TestClient, str, str],
) -> None:
    """A viewer posting the rerun form with a budget that does not validate got the
    validation's 400 (what would be accepted) before the role's 403; the role is checked
    first, on the form and the API alike. An operator still gets the 400."""
    c, store, run_id = setup
    csrf = sign_in(c, "vic")
    form = {"at_cycle": "0", "max_cycles": "lots", "csrf": csrf}
    refused = c.post(f"/runs/{run_id}/rerun", data=form, follow_redirects=False)
    assert refused.status_code == 403, refused.text
    assert "operator role" in refused.json()["detail"] and "max_cycles" not in refused.text
    bad = {"at_cycle": 0, "contract": {"budget": {"max_cycles": "lots"}}, "start": False}
    api = c.post(f"/api/runs/{run_id}/rerun", json=bad, headers=bearer("vic"))
    assert api.status_code == 403 and "operator role" in api.json()["detail"], api.text
    garbled = post_garbled(c, f"/api/runs/{run_id}/rerun", "vic")
    assert garbled.status_code == 403, garbled.text
    csrf = sign_in(c, "oscar")
    form["csrf"] = csrf
    checked = c.post(f"/runs/{run_id}/rerun", data=form, follow_redirects=False)
    assert checked.status_code == 400 and "max_cycles must be" in checked.json()["detail"]
    checked = c.post(f"/api/runs/{run_id}/rerun", json=bad, headers=bearer("oscar"))
    assert checked.status_code == 400, checked.text
    with lw.Runtime(store) as rt:
        assert [r.run_id for r in rt.store.list_runs()] == [run_id]  # no rerun was made


def test_a_viewers_rollback_is_refused_for_the_role_before_its_cycle_is_checked(
    setup: tuple[TestClient, str, str],
) -> None:
    """A viewer rolling back to a cycle that does not validate (negative, not a number,
    missing) got the validation's 400 (or the framework's 422) before the role's 403; the role
    is checked first, as for a rerun, on the form and the API alike. An operator still gets
    the 400, naming the field."""
    c, _, run_id = setup
    csrf = sign_in(c, "vic")
    for sent in ("-1", "abc", ""):
        form = {"to_cycle": sent, "csrf": csrf}
        refused = c.post(f"/runs/{run_id}/rollback", data=form, follow_redirects=False)
        assert refused.status_code == 403, (sent, refused.text)
        assert "operator role" in refused.json()["detail"] and "to_cycle" not in refused.text
    for body in ({"to_cycle": -1}, {"to_cycle": "1"}, {}, {"when": 1}):
        api = c.post(f"/api/runs/{run_id}/rollback", json=body, headers=bearer("vic"))
        assert api.status_code == 403 and "operator role" in api.json()["detail"], api.text
    garbled = post_garbled(c, f"/api/runs/{run_id}/rollback", "vic")
    assert garbled.status_code == 403, garbled.text
    csrf = sign_in(c, "oscar")
    for sent in ("-1", "abc"):
        form = {"to_cycle": sent, "csrf": csrf}
        checked = c.post(f"/runs/{run_id}/rollback", data=form, follow_redirects=False)
        assert checked.status_code == 400 and "to_cycle must be" in checked.json()["detail"]
    checked = c.post(f"/api/runs/{run_id}/rollback", json={"to_cycle": -1}, headers=bearer("oscar"))
    assert checked.status_code == 400 and "to_cycle must be" in checked.json()["detail"]


def _refusals_counted(
    tmp_path: Path,
) -> tuple[Any, str, str, list[float], Callable[[], list[tuple[str, str, str, object]]]]:
    """A store with people and a parked run, its app with the refusals' window on the test's
    clock: (app, store, run id, the clock, the refused records as (actor, action, target,
    counted))."""
    store, run_id = _web().make_parked_run(tmp_path)
    add_people(store)
    app = create_app(store, token=SERVER_TOKEN, identity="server")
    now = [1000.0]
    app.state.sign_ins.clock = lambda: now[0]
    app.state.backoff.limit = 10**6  # what is recorded, not the 429 past the limit (below)

    def refused() -> list[tuple[str, str, str, object]]:
        with lw.Runtime(store) as rt:
            return [
                (a.actor, a.action, a.target, a.detail.get("counted"))
                for a in rt.store.audit()
                if a.outcome == "refused"
            ]

    return app, store, run_id, now, refused


def test_a_write_with_a_token_that_names_nobody_is_recorded_once_per_source(
    tmp_path: Path,
) -> None:
    """docs/permissions.md: every refusal is recorded, a CLI attempt with an unknown or revoked
    token as `(unknown token)`. An API write with such a bearer token got 401 and was recorded
    nowhere. It is now, through the refused sign-ins' count per source: the first one in a
    window is a record (with its method and path), the rest are counted, so a flood cannot
    fill the append-only log. The window's clock is the test's."""
    app, store, run_id, now, refused = _refusals_counted(tmp_path)
    with lw.Runtime(store) as rt:  # vic's token revoked
        rt.store.set_token("vic", hash_token("vic-new-token-0123456789"), now=time.time())
    with TestClient(app, base_url=LOCAL) as c:
        path = f"/api/runs/{run_id}/cancel"
        for tok in [TOKENS["vic"]] + [f"junk-{i}" for i in range(20)]:
            r = c.post(path, json={}, headers={"Authorization": f"Bearer {tok}"})
            assert r.status_code == 401, r.text
        assert refused() == [("(unknown token)", "POST", path, None)]
        assert c.post("/login", data={"token": "junk"}).status_code == 403  # the same count
        assert len(refused()) == 1
        now[0] += app.state.sign_ins.window_s  # the next window: the count is recorded
        r = c.post(path, json={}, headers={"Authorization": "Bearer junk"})
        assert r.status_code == 401
        # 20 writes and a sign-in counted: named as several, each in the reason (it was named
        # as the window's first record's write), and apart from the new write's record
        several = ("(unknown token)", "refused requests", "dashboard", 21)
        assert refused()[1:] == [several, ("(unknown token)", "POST", path, None)]
        r = c.post(path, json={}, headers={"Authorization": "Bearer junk"})
    assert refused()[3:] == [("(unknown token)", "POST", path, 1)]  # at the stop
    with lw.Runtime(store) as rt:
        assert rt.store.get_run(run_id).status == "awaiting_approval"  # nothing cancelled


def test_a_write_with_no_token_is_recorded_once_per_source(tmp_path: Path) -> None:
    """A write with no token or session at all (an API call without one, a form posted after
    the server restarted) got 401 and was recorded nowhere, where the CLI records `(no token)`
    and a bearer token naming nobody is `(unknown token)`. It is now recorded as the CLI's,
    through the same count per source. The window's clock is the test's."""
    app, store, run_id, now, refused = _refusals_counted(tmp_path)
    with TestClient(app, base_url=LOCAL) as c:
        path = f"/api/runs/{run_id}/cancel"
        for _ in range(5):
            assert c.post(path).status_code == 401
        c.cookies.set("lw_session", "a-session-this-server-never-made")
        assert c.post(f"/runs/{run_id}/act", data={"action": "cancel"}).status_code == 401
        assert refused() == [("(no token)", "POST", path, None)]
        now[0] += app.state.sign_ins.window_s
        c.cookies.clear()
        assert c.post(path, headers={"Authorization": "Bearer junk"}).status_code == 401
        assert refused()[1:] == [
            # the window over: its count, of two paths (it was named as the first's alone)
            ("(no token)", "refused requests", "dashboard", 5),
            ("(unknown token)", "POST", path, None),
        ]
    with lw.Runtime(store) as rt:
        assert rt.store.get_run(run_id).status == "awaiting_approval"  # nothing cancelled


def test_an_edit_that_resumes_the_run_audits_the_resume(
    setup: tuple[TestClient, str, str],
) -> None:
    """A resume asked alone, or with a rollback, is audited (and needs the operator role); the
    one asked with an edit (`resume: true`) was the edit's record only."""
    c, store, run_id = setup
    assert c.post(f"/api/runs/{run_id}/cancel", headers=bearer("oscar")).status_code == 200
    r = c.post(
        f"/api/runs/{run_id}/parts/doc/a",
        json={"value": 7, "note": "n", "resume": True},
        headers=bearer("oscar"),
    )
    assert r.status_code == 200, r.text
    assert "resum" in r.json()["message"]
    with lw.Runtime(store) as rt:
        got = [(a.actor, a.action, a.outcome) for a in rt.store.audit(target=f"run {run_id}")]
    assert got[-2:] == [("oscar", "edit", "allowed"), ("oscar", "resume", "allowed")]


def test_a_rerun_started_at_once_audits_the_start(setup: tuple[TestClient, str, str]) -> None:
    """A rerun with ``start`` resumed the new run with the fork's record only."""
    c, store, run_id = setup
    body = {"at_cycle": 0, "contract": {}, "start": True}
    r = c.post(f"/api/runs/{run_id}/rerun", json=body, headers=bearer("oscar"))
    assert r.status_code == 200, r.text
    new = r.json()["run"]["run_id"]
    with lw.Runtime(store) as rt:
        got = [(a.actor, a.action, a.outcome) for a in rt.store.audit(target=f"run {new}")]
    assert got == [("oscar", "resume", "allowed")]


def test_forged_requests_under_a_person_s_name_are_counted_not_recorded_each(
    setup: tuple[TestClient, str, str],
) -> None:
    """A page on the same site (another port of 127.0.0.1, a sibling subdomain) has the
    browser send its session cookie with every post: each post without the page's CSRF token
    was a record, under the name of the person whose browser it was, as fast as the page could
    post. The first from a source in a window is recorded; the rest are counted."""
    c, store, run_id = setup
    sign_in(c, "ana")
    for _ in range(50):
        assert c.post(f"/runs/{run_id}/act", data={"action": "cancel"}).status_code == 403
        assert c.post("/logout", data={}).status_code == 403
    with lw.Runtime(store) as rt:
        rows = [(a.actor, a.action, a.target) for a in rt.store.audit() if a.outcome == "refused"]
    assert rows == [("ana", "POST", f"/runs/{run_id}/act")], rows
    c.app.state.sign_ins.flush()  # as the server's stop does
    with lw.Runtime(store) as rt:
        [last] = [a for a in rt.store.audit() if a.outcome == "refused"][1:]
    # 49 posts to /act and 50 to /logout: the count names both (it named the first's path)
    assert (last.actor, last.action, last.detail["counted"]) == ("ana", "refused requests", 99)
    assert f"POST /logout: 50; POST /runs/{run_id}/act: 49" in last.detail["reason"]
    assert c.get("/api/me").json()["name"] == "ana"  # still signed in, nothing cancelled


def test_a_count_beyond_the_windows_kept_names_whom_and_is_recorded_on_schedule() -> None:
    """The count of refusals beyond the windows kept was recorded under ``(unknown token)``
    whatever was refused (a forged write under a person's name too), and only at a later
    refusal from beyond them or at the server's stop, so a crash lost it. It names whom, and
    is recorded when its window is over, at any later refusal, as a source's count is."""
    from loopwright.web._auth import MANY_SOURCES, RefusedSignIns

    written: list[tuple[str, str, int, tuple[str, str], str]] = []
    now = [0.0]
    log = RefusedSignIns(lambda *a: written.append(a), clock=lambda: now[0], max_sources=1)
    forged = ("POST", "/runs/r1/cancel")
    log.refused("http a", "no CSRF token", forged, "pat")
    log.refused("http b", "no CSRF token", forged, "pat")  # beyond the one window kept
    log.refused("http c", "no CSRF token", forged, "pat")
    log.refused("http d", "wrong token")  # a sign-in, (unknown token)
    assert written == [("http a", "no CSRF token", 0, forged, "pat")]
    now[0] = log.window_s  # the windows are over; the next refusal, from a, records them
    log.refused("http a", "wrong token")
    counts = {(src, who): (n, what) for src, _why, n, what, who in written[1:] if n}
    assert counts == {
        (MANY_SOURCES, "pat"): (2, forged),
        (MANY_SOURCES, "(unknown token)"): (1, ("sign in", "dashboard")),
    }
    assert written[-1] == ("http a", "wrong token", 0, ("sign in", "dashboard"), "(unknown token)")


def test_an_operator_lifts_a_pause_from_the_dashboard(setup: tuple[TestClient, str, str]) -> None:
    """Lifting a pause takes the operate permission (``loopwright unpause``), not the decide
    one: the run page and the inbox showed a pause's card with the approver's form, hidden
    from the operator who paused the run (who could not unpause it there) and offered to an
    approver (who was refused). The operator gets Unpause; an approver is told (review52b)."""
    c, store, run_id = setup
    csrf = sign_in(c, "oscar")
    r = c.post(f"/runs/{run_id}/act", data={"csrf": csrf, "action": "pause"})
    assert r.status_code == 200, r.text
    with lw.Runtime(store) as rt:
        [pause] = [
            a for a in rt.store.approvals(run_id=run_id, status="pending") if a.kind == "pause"
        ]
    for page in (c.get(f"/runs/{run_id}").text, c.get("/approvals").text):
        card = page.split(f'data-approval-id="{pause.approval_id}"', 1)[1].split("</section>", 1)[0]
        assert 'value="approve"' in card and "Unpause" in card
        assert 'value="deny"' not in card
    done = c.post(
        f"/approvals/{pause.approval_id}/decide",
        data={"csrf": csrf, "action": "approve"},
        follow_redirects=False,
    )
    assert done.status_code in (200, 303), done.text
    with lw.Runtime(store) as rt:
        lifted = rt.store.approval(pause.approval_id)
        assert lifted is not None and (lifted.status, lifted.decided_by) == ("approved", "oscar")
        rt.pause(run_id, by="oscar")
    c.post("/logout", data={"csrf": csrf})
    c.cookies.clear()
    sign_in(c, "ana")
    page = c.get(f"/runs/{run_id}").text
    with lw.Runtime(store) as rt:
        [again] = [
            a for a in rt.store.approvals(run_id=run_id, status="pending") if a.kind == "pause"
        ]
    card = page.split(f'data-approval-id="{again.approval_id}"', 1)[1].split("</section>", 1)[0]
    assert 'value="approve"' not in card and "not lift it" in card


@pytest.mark.parametrize("how", ["cancel", "resume"])
def test_a_viewers_cancel_or_resume_is_refused_for_the_role_before_its_body_is_read(
    setup: tuple[TestClient, str, str], how: str
) -> None:
    """Cancel and resume take a note since stop 53 (web53b), but read it before the role was
    checked: a viewer's bad body was 400 or 422 (what would be accepted), a lone surrogate
    400 with no record, where a pause, a rerun and a rollback answer 403 first (review53b).
    The role is checked first, audited once; an operator still gets the body's own answer."""
    c, store, run_id = setup
    path = f"/api/runs/{run_id}/{how}"
    bad: list[Any] = [{"note": "a\x1b[2Jb"}, {"note": 5}, {"why": "x"}, ["x"]]
    for body in bad:
        r = c.post(path, json=body, headers=bearer("vic"))
        assert r.status_code == 403 and "operator role" in r.json()["detail"], (body, r.text)
    garbled = post_garbled(c, path, "vic")
    assert garbled.status_code == 403, garbled.text
    with lw.Runtime(store) as rt:
        refused = [a.outcome for a in rt.store.audit() if a.actor == "vic" and a.action == how]
        assert refused == ["refused"] * (len(bad) + 1)
        assert [e for e in rt.store.events(run_id) if e.kind == f"{how}_requested"] == []
    r = c.post(path, json={"why": "x"}, headers=bearer("oscar"))
    assert r.status_code == 422 and "why" in str(r.json()["detail"]), r.text
    r = c.post(path, json={"note": "a\x1b[2Jb"}, headers=bearer("oscar"))
    assert r.status_code == 400 and r.json()["detail"].startswith("note: must not"), r.text


def test_a_viewers_cancel_or_resume_of_an_ended_run_is_refused_for_the_role(
    setup: tuple[TestClient, str, str],
) -> None:
    """A viewer cancelling or resuming an ended run from the run page got 409 "already ended",
    with no record, where a pause is refused for the role (403, audited) whatever the run's
    state (review53b). The role first, on the form and the API alike; an operator still hears
    that the run ended."""
    c, store, run_id = setup
    assert c.post(f"/api/runs/{run_id}/cancel", headers=bearer("oscar")).status_code == 200
    with lw.Runtime(store) as rt:
        assert rt.store.get_run(run_id).status == "cancelled"
    csrf = sign_in(c, "vic")
    for how in ("cancel", "resume", "pause"):
        form = c.post(f"/runs/{run_id}/act", data={"action": how, "csrf": csrf})
        assert form.status_code == 403 and "operator role" in form.json()["detail"], (
            how,
            form.text,
        )
        api = c.post(f"/api/runs/{run_id}/{how}", headers=bearer("vic"))
        assert api.status_code == 403 and "operator role" in api.json()["detail"], (how, api.text)
    with lw.Runtime(store) as rt:
        refused = [(a.action, a.outcome) for a in rt.store.audit() if a.actor == "vic"]
    for how in ("cancel", "resume", "pause"):
        assert refused.count((how, "refused")) == 2, (how, refused)
    r = c.post(f"/api/runs/{run_id}/resume", headers=bearer("oscar"))
    assert r.status_code == 409 and "already ended" in r.json()["detail"], r.text


@pytest.mark.parametrize("how", ["cancel", "resume", "pause"])
def test_a_note_refused_on_a_cancel_or_resume_is_audited_as_a_pauses_is(
    setup: tuple[TestClient, str, str], how: str
) -> None:
    """A pause's note holding a control character is refused (400) and audited, with the
    reason and not the text (``Runtime.pause``); a cancel's or resume's note, taken since stop
    53, was refused with no record (review53b). Now each is one refused record."""
    c, store, run_id = setup
    r = c.post(f"/api/runs/{run_id}/{how}", json={"note": "a\x1b[2Jb"}, headers=bearer("oscar"))
    assert r.status_code == 400 and "control character" in r.json()["detail"], r.text
    with lw.Runtime(store) as rt:
        rows = [a for a in rt.store.audit() if a.actor == "oscar" and a.action == how]
    assert [a.outcome for a in rows] == ["refused"], rows
    assert "\x1b" not in str(rows[0].to_dict())
