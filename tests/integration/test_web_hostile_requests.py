"""Requests an outside tester's scripts send to the dashboard (web50, stop 50).

- A decision's note holding an escape sequence or a bidirectional control was refused with 409
  (the engine's ``ConfigError`` read as the request's state having moved on), where docs/ui.md
  says text a store cannot keep is a 400: a script retried it as a conflict.
- A search of more than 50,000 bytes (SQLite's longest LIKE pattern) was answered 503 "the store
  failed ... restore it from a backup", and the server logged a failed store: any reader (on
  loopback, with no token at all) could make the dashboard say its store was damaged. A search
  is now at most ``MAX_SEARCH`` characters, a longer one a 400 naming the limit.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from support.dashboard import dashboard
from support.modules import load_sibling

import loopwright as lw
from loopwright._authority import hash_token
from loopwright.web import create_app

LOCAL = "http://127.0.0.1"
MAX_SEARCH = 1000  # web._queries.MAX_SEARCH (not imported: the test runs on the tree before it)
TOKENS = {"ana": "tok-ana-0123456789", "root": "tok-root-0123456789"}


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_helpers_hostile")


@pytest.fixture
def setup(tmp_path: Path) -> tuple[TestClient, str, str]:
    store, run_id = _web().make_parked_run(tmp_path)
    with lw.Runtime(store) as rt:
        for name, roles in (("root", ["admin"]), ("ana", ["approver"])):
            rt.store.add_user(name, roles=roles, limits={}, by="test", now=time.time())
            rt.store.set_token(name, hash_token(TOKENS[name]), now=time.time())
    app = create_app(store, token="server-token-0123456789", identity="server")
    return TestClient(app, base_url=LOCAL), store, run_id


def _ana() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS['ana']}"}


@pytest.mark.parametrize("note", ["paid\x1b[2J", "ACME\u202e1-VNI", "a\u2066b"])
def test_a_note_a_store_cannot_print_is_a_400_and_decides_nothing(
    setup: tuple[TestClient, str, str], note: str
) -> None:
    c, store, run_id = setup
    with lw.Runtime(store) as rt:
        aid = rt.pending_approval(run_id).approval_id
    r = c.post(f"/api/approvals/{aid}/approve", json={"note": note}, headers=_ana())
    assert r.status_code == 400, r.text
    assert r.json()["detail"].startswith("note: must not hold")
    deny = c.post(f"/api/approvals/{aid}/deny", json={"note": note}, headers=_ana())
    assert deny.status_code == 400, deny.text
    with lw.Runtime(store) as rt:
        assert rt.store.approval(aid).status == "pending"  # type: ignore[union-attr]
    # the same request with a plain note is decided
    ok = c.post(f"/api/approvals/{aid}/approve", json={"note": "checked"}, headers=_ana())
    assert ok.status_code == 200, ok.text


def test_a_note_refused_from_the_inbox_form_is_a_400_page(
    setup: tuple[TestClient, str, str],
) -> None:
    c, store, run_id = setup
    with lw.Runtime(store) as rt:
        aid = rt.pending_approval(run_id).approval_id
    r = c.post("/login", data={"token": TOKENS["ana"]}, follow_redirects=False)
    assert r.status_code == 303
    page = c.get("/approvals").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    form = c.post(
        f"/approvals/{aid}/decide",
        data={"action": "approve", "csrf": csrf, "note": "ok\u202e"},
        headers={"Accept": "text/html"},
    )
    assert form.status_code == 400, form.text
    assert "bidirectional control" in form.text


@pytest.mark.parametrize("path", ["/api/runs?q=", "/api/approvals?q=", "/?q=", "/approvals?q="])
def test_a_search_longer_than_the_limit_is_a_400_not_a_failed_store(
    setup: tuple[TestClient, str, str], path: str, caplog: pytest.LogCaptureFixture
) -> None:
    c, _store, run_id = setup
    # '%' is escaped to '!%' in the LIKE pattern: 25,001 of them made 50,004 bytes
    for q in ("x" * 60_000, "%" * (MAX_SEARCH + 1)):
        with caplog.at_level(logging.WARNING, logger="loopwright.web"):
            r = c.get(path + q, headers=_ana())
        assert r.status_code == 400, (path, r.status_code, r.text[:200])
        assert f"at most {MAX_SEARCH:,}" in r.text
        assert "store" not in r.text
    assert not [m for m in caplog.messages if "store failed" in m]
    # a search at the limit is read (each of its characters escaped)
    r = c.get(path + "%" * MAX_SEARCH, headers=_ana())
    assert r.status_code == 200, r.text[:200]
    found = c.get(path + run_id[:8], headers=_ana())
    assert found.status_code == 200 and run_id[:8] in found.text


HUGE = "1" + "0" * 400  # a whole number past every float (JSON has no limit; TOML has)


@pytest.mark.parametrize(
    "contract",
    [
        '{"budget": {"max_cycles": HUGE}}',
        '{"budget": {"max_cost_usd": HUGE}}',
        '{"no_progress": {"cycles": HUGE}}',
        '{"success": {"min_score": HUGE}}',
        '{"marginal_return": {"value_per_success_usd": 1, "hazard": [[[1, HUGE]]]}}',
    ],
)
def test_a_rerun_with_a_number_past_every_float_is_a_400_not_a_500(
    tmp_path: Path, contract: str
) -> None:
    """``Contract`` compared such a number with ``math.isfinite``, whose ``OverflowError`` no
    route caught: a 500 with a traceback; a hazard table's cell passed, and the run it made
    failed dividing by it. Now the contract refuses both (``ConfigError``)."""
    store, run_id = _web().make_parked_run(tmp_path)
    token = "server-token-0123456789"
    c = TestClient(
        create_app(store, token=token, identity="oscar"),
        base_url=LOCAL,
        raise_server_exceptions=False,
    )
    api = c.post(
        f"/api/runs/{run_id}/rerun",
        content='{"at_cycle": 0, "start": false, "contract": C}'.replace("C", contract).replace(
            "HUGE", HUGE
        ),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert api.status_code == 400, api.text[:300]
    # (the table's cell was accepted, and the run it made failed with OverflowError)
    assert "too large" in api.json()["detail"] or "hazard" in api.json()["detail"]
    # the rerun form's budget boxes too
    c.post("/login", data={"token": token})
    csrf = c.get(f"/runs/{run_id}").text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    form = c.post(
        f"/runs/{run_id}/rerun",
        data={"at_cycle": "0", "csrf": csrf, "max_cycles": HUGE, "start": "no"},
        follow_redirects=False,
    )
    assert form.status_code == 400, form.text[:300]
    with lw.Runtime(store) as rt:
        assert [r.run_id for r in rt.store.list_runs()] == [run_id]  # nothing forked


def test_the_server_keeps_the_resumes_under_way_not_every_one_it_started(
    tmp_path: Path,
) -> None:
    """Every decision, resume and rerun started a thread kept in ``app.state.resumes`` for
    the server's life (2 KB each once finished): a long-lived dashboard, or an operator's
    script asking again and again, grew it without bound. Each is joined here before the
    next is asked, so the list holds the one under way only."""
    store, run_id = _web().make_parked_run(tmp_path)
    token = "server-token-0123456789"
    c = dashboard(store, token=token, identity="oscar")
    resumes = c.app.state.resumes  # type: ignore[attr-defined]
    for _ in range(4):
        r = c.post(
            f"/api/runs/{run_id}/rerun",
            json={"at_cycle": 0, "start": True},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text
        assert "resuming" in r.json()["message"]
        for t in list(resumes):
            t.join(120)
            assert not t.is_alive()
    assert len(resumes) == 1


def test_a_forged_sign_out_is_refused_and_audited(setup: tuple[TestClient, str, str]) -> None:
    """docs/ui.md: a write without the page's CSRF token is refused with 403 and recorded in
    the audit log. ``/logout`` refused it and recorded nothing: another page's form could
    sign a person out again and again, leaving no trace."""
    c, store, _run = setup
    r = c.post("/login", data={"token": TOKENS["ana"]}, follow_redirects=False)
    assert r.status_code == 303
    for data in ({}, {"csrf": "forged"}):
        r = c.post("/logout", data=data, follow_redirects=False)
        assert r.status_code == 403, r.text
    assert c.get("/api/me").json()["name"] == "ana"  # still signed in
    with lw.Runtime(store) as rt:
        rows = [(x.actor, x.action, x.target, x.outcome) for x in rt.store.audit()]
    # the first from this source in a window is recorded, the next counted (a forged request's
    # flood cannot fill the log: test_web_people.py)
    assert rows.count(("ana", "POST", "/logout", "refused")) == 1, rows
    c.app.state.sign_ins.flush()
    with lw.Runtime(store) as rt:
        assert rt.store.audit()[-1].detail["counted"] == 1


@pytest.mark.parametrize("name", ["loopwright", "policy:earned", "x\x1b[2Jy", "a\u202eb"])
def test_the_dashboard_s_own_name_is_held_to_the_rule_of_names(tmp_path: Path, name: str) -> None:
    """Where the store has no users every action is recorded under ``identity``: refused at
    start, as ``--by`` is, not per click (decisions refused, cancels recorded under it)."""
    store, _run = _web().make_parked_run(tmp_path)
    with pytest.raises(lw.ConfigError, match="identity"):
        create_app(store, token="server-token-0123456789", identity=name)


def test_a_person_keeps_their_newest_sessions_only(setup: tuple[TestClient, str, str]) -> None:
    """A session lived until its sign-out or the server's stop: a script signing in with a
    valid token again and again grew the server's memory without bound. Each person keeps
    their newest 32 (``MAX_SESSIONS``); a newer sign-in ends their own oldest, never another
    person's."""
    c, _store, _run = setup
    app = c.app
    assert c.post("/login", data={"token": TOKENS["root"]}).status_code == 200
    browsers = []
    for _ in range(32 + 3):
        b = TestClient(app, base_url=LOCAL)
        assert b.post("/login", data={"token": TOKENS["ana"]}).status_code == 200
        browsers.append(b)
    assert [b.get("/api/me").status_code for b in browsers] == [401] * 3 + [200] * 32
    assert c.get("/api/me").json()["name"] == "root"  # another person's session stays
    assert len(app.state.auth._sessions) == 32 + 1  # type: ignore[attr-defined]


def test_a_rerun_setting_the_default_ceilings_mark_is_a_400(tmp_path: Path) -> None:
    """``budget.max_cycles_default`` is the engine's mark of its default cycle ceiling, kept in
    a run's snapshot: a rerun's contract tables setting it were accepted (stall50b)."""
    store, run_id = _web().make_parked_run(tmp_path)
    token = "server-token-0123456789"
    c = dashboard(store, token=token, identity="oscar")
    budget = {"max_cycles": 1000, "max_cycles_default": True, "max_seconds": 60}
    api = c.post(
        f"/api/runs/{run_id}/rerun",
        json={"at_cycle": 0, "start": False, "contract": {"budget": budget}},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert api.status_code == 400, api.text[:300]
    assert "max_cycles_default" in api.json()["detail"]
    with lw.Runtime(store) as rt:
        assert len(rt.store.list_runs()) == 1  # no fork made


@pytest.mark.parametrize("note", ["paid\x1b[2J", "ACME\u202e1-VNI"])
def test_a_decision_refused_for_its_note_is_audited_without_the_note(
    setup: tuple[TestClient, str, str], note: str
) -> None:
    """docs/permissions.md: every decision, allowed or refused, is recorded with the reason. A
    decision refused for its note (an ESC, a bidirectional override) was recorded nowhere: the
    engine checked the text before it audited. It is recorded refused, the reason naming the
    character; the note itself is left out (it holds what the log must not carry)."""
    c, store, run_id = setup
    with lw.Runtime(store) as rt:
        aid = rt.pending_approval(run_id).approval_id
        before = len(rt.store.audit())
    r = c.post(f"/api/approvals/{aid}/deny", json={"note": note}, headers=_ana())
    assert r.status_code == 400, r.text
    with lw.Runtime(store) as rt:
        with pytest.raises(lw.ConfigError):  # Python, as the CLI reaches it
            rt.approve(run_id, by="ana", note=note, origin="cli")
        rows = rt.store.audit()[before:]
        assert rt.pending_approval(run_id).approval_id == aid  # decided nothing
    got = [(a.actor, a.action, a.outcome, a.origin) for a in rows]
    assert got == [
        ("ana", "deny", "refused", "http testclient"),
        ("ana", "approve", "refused", "cli"),
    ]
    for a in rows:
        assert a.detail["reason"].startswith("note: must not hold"), a.detail
        assert note not in repr(a) and repr(note)[1:-1] not in repr(a)


def test_the_session_cookie_is_secure_where_the_browser_came_over_https(
    tmp_path: Path,
) -> None:
    """Behind a TLS proxy the session cookie lacked ``Secure``: the browser sent it over plain
    http too (the same name on port 80, before its redirect to https)."""
    store, _run = _web().make_parked_run(tmp_path)
    app = create_app(store, token="server-token-0123456789")
    token = {"token": "server-token-0123456789"}

    def cookie(base: str, **headers: str) -> str:
        r = TestClient(app, base_url=base).post(
            "/login", data=token, headers=headers, follow_redirects=False
        )
        assert r.status_code == 303, r.text
        return r.headers["set-cookie"].lower()

    assert "secure" in cookie("https://127.0.0.1")
    assert "secure" in cookie(LOCAL, **{"X-Forwarded-Proto": "https"})
    plain = cookie(LOCAL)
    assert "secure" not in plain and "httponly" in plain and "samesite=strict" in plain
