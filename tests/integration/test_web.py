"""The dashboard over a real SQLite store: pages, API, authentication, CSRF, escaping.

The store is filled by a small spec-backed loop that parks for approval (its repair changes
``doc/pay``), so approving from the inbox resumes it to accepted in the background.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.dashboard import dashboard

import loopwright as lw
from loopwright.web import create_app

XSS = "<script>alert(1)</script>"

LOOP_MODULE = """
import loopwright as lw

XSS = "<script>alert(1)</script>"
WANT = {"a": 1, "b": 2, "title": XSS, "pay": 10}

def actor(ctx):
    fixes = {f.part: f.evidence["expected"] for f in ctx.findings}
    return lw.Proposal.edit("doc", fixes or {"a": 1}, note="note " + XSS,
                            usage=lw.Usage(cost_usd=0.05, tokens=100))

def check(state, proposal):
    doc = state.artifacts["doc"].values()
    bad = [lw.Finding(f"{k} wrong " + XSS, "doc", k, "value", evidence={"expected": v})
           for k, v in WANT.items() if doc.get(k) != v]
    return lw.Verdict(passed=not bad, score=1 - len(bad) / len(WANT), findings=tuple(bad))

def audit(state, proposal):
    return lw.Verdict(passed=True)
"""

SPEC = """
name = "web"
project = "webtests"
[actor]
ref = "webloop.py:actor"
[[verifiers]]
ref = "webloop.py:check"
[[verifiers]]
ref = "webloop.py:audit"
held_out = true
[contract.budget]
max_cycles = 6
[contract.no_progress]
cycles = 3
[[contract.risk]]
name = "payment_change"
touches = ["doc/pay"]
"""


def make_parked_run(tmp: Path) -> tuple[str, str]:
    """Write the spec, run it once into a store under ``tmp``; (store path, run id)."""
    (tmp / "webloop.py").write_text(LOOP_MODULE)
    (tmp / "web.toml").write_text(SPEC)
    store = str(tmp / "web.db")
    loop = lw.load_spec(tmp / "web.toml")
    task = {"id": "t", "artifacts": {"doc": {"a": 0, "b": 0, "title": "", "pay": 0}}}
    with lw.Runtime(store) as rt:
        res = rt.run_sync(loop, task, task_key=XSS)
    assert res.status == "awaiting_approval", json.dumps(res.status)
    return store, res.run_id


TOKEN = "test-token-0123456789"
LOCAL = "http://127.0.0.1"  # the dashboard answers to loopback names (and --host) only
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def parked(tmp_path: Path) -> tuple[str, str]:
    return make_parked_run(tmp_path)


@pytest.fixture
def client(parked: tuple[str, str]) -> TestClient:
    return dashboard(parked[0], token=TOKEN, identity="ana")


def _sign_in(c: TestClient) -> str:
    r = c.post("/login", data={"token": TOKEN, "next": "/approvals"}, follow_redirects=False)
    assert r.status_code == 303
    page = c.get("/approvals").text
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m, page
    return m.group(1)


def _wait_status(store: str, run_id: str, want: str, timeout: float = 120) -> lw.RunRecord:
    from loopwright.store import open_store

    st = open_store(store)
    deadline = time.monotonic() + timeout
    while True:
        rec = st.get_run(run_id)
        if rec.status == want or time.monotonic() > deadline:
            st.close()
            return rec
        time.sleep(0.1)


def test_pages_render(client: TestClient, parked: tuple[str, str]) -> None:
    for path in ("/", "/approvals", "/metrics", "/login", f"/runs/{parked[1]}", "/docs"):
        r = client.get(path)
        assert r.status_code == 200, path
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "http" not in csp, (path, csp)  # no CDN anywhere
    docs = client.get("/docs").text
    assert "/api/approvals/{approval_id}/approve" in docs or "/api/approvals/" in docs
    assert "cdn" not in docs.lower()
    assert client.get("/openapi.json").json()["paths"]
    assert "awaiting approval" in client.get("/").text
    assert client.get("/?status=accepted").text.count("data-run-id=") == 0
    assert client.get("/?project=webtests").text.count("data-run-id=") == 1


def test_run_detail_shows_chart_and_held_out(client: TestClient, parked: tuple[str, str]) -> None:
    page = client.get(f"/runs/{parked[1]}").text
    assert "<svg" in page
    assert "last improvement" in page
    assert "HELD-OUT" in page
    assert "never shown to the actor" in page
    assert "Waiting for you" in page
    assert "doc/pay" in page
    assert client.get("/runs/nope").status_code == 404


def test_approve_via_inbox_resumes_to_accepted(client: TestClient, parked: tuple[str, str]) -> None:
    store, run_id = parked
    csrf = _sign_in(client)
    [a] = client.get("/api/approvals").json()
    r = client.post(
        f"/approvals/{a['approval_id']}/decide",
        data={"csrf": csrf, "action": "approve", "note": "ok " + XSS},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    for t in client.app.state.resumes:  # type: ignore[attr-defined]
        t.join(30)
    rec = _wait_status(store, run_id, "accepted")
    assert rec.status == "accepted"
    decided = client.get("/api/approvals?status=approved").json()
    assert decided[0]["decided_by"] == "ana"
    page = client.get(f"/runs/{run_id}").text
    assert "ok &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "accepted" in page


def test_mutations_need_the_token(client: TestClient) -> None:
    [a] = client.get("/api/approvals").json()
    aid = a["approval_id"]
    r = client.post(f"/approvals/{aid}/decide", data={"action": "approve", "csrf": "x"})
    assert r.status_code == 401
    assert client.post(f"/api/approvals/{aid}/approve").status_code == 401
    bad = {"Authorization": "Bearer wrong-token-0000000"}
    assert client.post(f"/api/approvals/{aid}/approve", headers=bad).status_code == 401
    assert client.post("/login", data={"token": "wrong-token-0000"}).status_code == 403
    assert client.get("/api/approvals").json()[0]["status"] == "pending"


def test_wrong_csrf_is_refused(client: TestClient) -> None:
    _sign_in(client)
    [a] = client.get("/api/approvals").json()
    for csrf in ("", "forged"):
        r = client.post(
            f"/approvals/{a['approval_id']}/decide", data={"csrf": csrf, "action": "approve"}
        )
        assert r.status_code == 403
    # A cookie alone cannot drive the API either: it needs the CSRF header.
    assert client.post(f"/api/approvals/{a['approval_id']}/approve").status_code == 403
    assert client.get("/api/approvals").json()[0]["status"] == "pending"


def test_adversarial_content_is_escaped(client: TestClient, parked: tuple[str, str]) -> None:
    for path in ("/", "/approvals", f"/runs/{parked[1]}"):
        page = client.get(path).text
        assert XSS not in page, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, path


def test_api_shapes_and_bearer_decision(client: TestClient, parked: tuple[str, str]) -> None:
    store, run_id = parked
    runs = client.get("/api/runs").json()
    assert runs[0]["run_id"] == run_id
    assert {"status", "stop_reason", "stop_words", "cost_usd", "task_key"} <= set(runs[0])
    detail = client.get(f"/api/runs/{run_id}").json()
    assert set(detail) >= {"run", "timeline", "chart", "artifacts", "approvals", "packet", "plan"}
    assert detail["timeline"][0]["held_out"][0]["name"] == "audit"
    assert detail["chart"][0]["cycle"] == 1
    m = client.get("/api/metrics?project=webtests").json()
    assert m["runs"] == 1
    assert "stop_reasons" in m
    assert client.get("/api/metrics?since=garbage").status_code == 400
    assert "/api/approvals/{approval_id}/approve" in client.get("/openapi.json").json()["paths"]
    [a] = client.get("/api/approvals").json()
    r = client.post(
        f"/api/approvals/{a['approval_id']}/deny",
        json={"note": "no"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["approval"]["decided_by"] == "ana"
    again = client.post(
        f"/api/approvals/{a['approval_id']}/approve",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert again.status_code in (404, 409)
    # one wording whichever check finds it (stop 50; test_already_decided_wording)
    said = f"run {run_id}: request {a['approval_id']} was already denied by ana"
    assert again.json()["detail"] == said, again.text
    for t in client.app.state.resumes:  # type: ignore[attr-defined]
        t.join(30)
    assert _wait_status(store, run_id, "escalated").status == "escalated"


def test_reads_need_the_token_when_configured(parked: tuple[str, str]) -> None:
    c = dashboard(parked[0], token=TOKEN, require_token_for_reads=True)
    assert c.get("/api/runs").status_code == 401
    assert c.get("/openapi.json").status_code == 401
    r = c.get("/", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/login")
    assert c.get("/static/app.js").status_code == 200
    ok = c.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200
    c.post("/login", data={"token": TOKEN})
    assert c.get("/").status_code == 200


def test_a_token_in_a_link_signs_nobody_in(parked: tuple[str, str]) -> None:
    """GET /login?token= (which an <img> on any page could request) shows the form and signs
    nobody in, even with the right token; the form's POST does."""
    c = dashboard(parked[0], token=TOKEN, require_token_for_reads=True)
    r = c.get(f"/login?token={TOKEN}&next=/approvals", follow_redirects=False)
    assert r.status_code == 400 and "a token in a link does not sign in" in r.text
    assert "set-cookie" not in r.headers and not c.cookies
    assert c.get("/api/runs").status_code == 401
    r = c.post("/login", data={"token": TOKEN, "next": "/approvals"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/approvals"
    assert c.get("/api/runs").status_code == 200


def test_a_sign_in_from_another_site_is_refused(parked: tuple[str, str]) -> None:
    """Login CSRF: another site's form posting the right token (its owner's) would sign the
    operator's browser in as them. A browser says where a POST comes from: another site's is
    refused, this dashboard's own form (or a client that is no browser) signs in."""
    app = create_app(parked[0], token=TOKEN)
    form = {"token": TOKEN}
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1:9999"},  # another port: another origin
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1"},
    ):
        c = TestClient(app, base_url=LOCAL)
        r = c.post("/login", data=form, headers=headers, follow_redirects=False)
        assert r.status_code == 403 and "another site" in r.json()["detail"], headers
        assert not c.cookies, headers
    for headers in (
        {"Origin": "http://127.0.0.1"},
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1"},
        {"Sec-Fetch-Site": "none"},
        {},
    ):
        c = TestClient(app, base_url=LOCAL)
        r = c.post("/login", data=form, headers=headers, follow_redirects=False)
        assert r.status_code == 303 and c.cookies.get("lw_session"), headers


def test_token_must_be_given() -> None:
    with pytest.raises(lw.ConfigError, match="token must be at least 16 characters"):
        create_app(":memory:", token="")


def test_a_rebound_host_name_reads_nothing(parked: tuple[str, str]) -> None:
    """DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1 sends
    ``Host: evil.example``; the loopback dashboard (reads open) refuses it before any read."""
    app = create_app(parked[0], token=TOKEN)
    for base in ("http://evil.example:8321", "http://evil.example", "http://127.0.0.1.nip.io"):
        c = TestClient(app, base_url=base)
        for path in ("/", "/api/runs", f"/api/runs/{parked[1]}", "/approvals", "/openapi.json"):
            r = c.get(path)
            assert r.status_code == 400, (base, path, r.status_code)
            assert parked[1] not in r.text and "webtests" not in r.text
            # the API's one shape of refusal (it was the text "Invalid host header")
            assert r.headers["content-type"] == "application/json", r.headers
            assert r.json()["detail"].startswith("Invalid host header: ")
        r = c.post(f"/api/runs/{parked[1]}/cancel", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 400 and "--allow-host" in r.json()["detail"]
    for base in ("http://127.0.0.1:8321", "http://localhost:8321", "http://[::1]:8321"):
        r = TestClient(app, base_url=base).get("/api/runs")
        assert r.status_code == 200, base
        assert r.json()[0]["run_id"] == parked[1]


def test_the_given_host_is_allowed_and_still_needs_the_token(parked: tuple[str, str]) -> None:
    """``loopwright ui --host 10.1.2.3 --allow-host dash.example``: those names are served,
    reads still need the token there, and other names are refused."""
    app = create_app(
        parked[0],
        token=TOKEN,
        require_token_for_reads=True,
        allowed_hosts=["10.1.2.3", "dash.example", "fd00::5"],
    )
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for base in ("http://10.1.2.3:8321", "http://dash.example", "http://[fd00::5]:8321"):
        c = TestClient(app, base_url=base)
        assert c.get("/api/runs").status_code == 401, base
        assert c.get("/api/runs", headers=bearer).status_code == 200, base
    other = TestClient(app, base_url="http://10.1.2.4:8321")
    assert other.get("/api/runs", headers=bearer).status_code == 400


def test_host_names_are_checked() -> None:
    from loopwright import ConfigError
    from loopwright.web._app import allowed_host_names

    names = allowed_host_names(["::1", "Dash.Example", "*.corp.example", "[fd00::1]"])
    assert names == [
        "localhost",
        "127.0.0.1",
        "[::1]",
        "::1",
        "dash.example",
        "*.corp.example",
        "fd00::1",
        "[fd00::1]",
    ]
    for bad in ("*", "a*b.example", "http://x", "", "user@host"):
        with pytest.raises(ConfigError, match="not a host name"):
            allowed_host_names([bad])


def test_svg_parts_are_shown_as_inert_images(tmp_path: Path) -> None:
    """A drawn panel (an SVG part) appears as a thumbnail through an <img>; the SVG itself is
    served with a CSP that forbids scripts, and an SVG with a script stays inert."""
    svg_ok = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="5" height="5" fill="red"/></svg>'
    svg_evil = '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("panel", {"svg": svg_evil if ctx.cycle == 1 else svg_ok})

    loop = lw.Loop(
        name="svg",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=s.values()["panel"]["svg"] == svg_ok)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    store = str(tmp_path / "svg.db")
    with lw.Runtime(store) as rt:
        r = rt.run_sync(loop, {"task_key": "svg-1", "artifacts": {"panel": {"svg": ""}}})
    client = dashboard(store, token="t0ken-12345-abcdef")
    page = client.get(f"/runs/{r.run_id}").text
    assert (
        f'src="/runs/{r.run_id}/svg?ref=panel/svg&amp;v=2"' in page
    )  # the one with a script: inert in an <img>
    assert "<script>alert(1)</script>" not in page
    img = client.get(f"/runs/{r.run_id}/svg", params={"ref": "panel/svg", "v": 2})
    assert img.status_code == 200 and img.headers["content-type"].startswith("image/svg+xml")
    csp = img.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "sandbox" in csp and "script" not in csp
    assert f'src="/runs/{r.run_id}/svg?ref=panel/svg&amp;cycle=2"' in page  # timeline thumbnail
    by_cycle = client.get(f"/runs/{r.run_id}/svg", params={"ref": "panel/svg", "cycle": 2})
    assert by_cycle.status_code == 200 and by_cycle.text == svg_ok
    assert (
        client.get(f"/runs/{r.run_id}/svg", params={"ref": "panel/svg", "v": 9}).status_code == 404
    )
    assert client.get(f"/runs/{r.run_id}/svg", params={"ref": "nope/x", "v": 1}).status_code == 404


# --- issue 19: stop causes, effects on the run page, pages that scale, cancel/resume ---------
def _doc_loop(name: str, actor: Any, contract: lw.Contract, **kw: Any) -> lw.Loop:
    def check(state: Any, proposal: Any) -> lw.Verdict:
        ok = state.values()["doc"].get("a") == 1
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.0)

    return lw.Loop(name=name, actor=actor, verifiers=[check], contract=contract, **kw)


def _ended_runs(tmp: Path) -> tuple[str, dict[str, str]]:
    """A store with runs that ended for different reasons; (store, reason -> run id)."""
    store, parked_id = make_parked_run(tmp)
    fix = lw.Proposal.edit("doc", {"a": 1})
    stuck = lw.Proposal.edit("doc", {"a": 0})

    def down(ctx: lw.Context) -> lw.Proposal:
        raise ValueError("model server at http://127.0.0.1:9 refused the connection")

    bank: list[str] = []

    def pay(invoice: str, amount: float) -> dict[str, Any]:
        bank.append(invoice)
        return {"paid": invoice, "ref": "tx-1"}

    pay_fx = lw.effect("ledger", name="pay", key=lambda a: str(a["invoice"]))(pay)
    paying = lw.Proposal(edits=fix.edits, effects=(pay_fx.call(invoice="INV-7", amount=12.5),))
    cycles2 = lw.Contract(budget=lw.Budget(max_cycles=2))
    loops = {
        "success": (_doc_loop("ok", lambda c: paying, cycles2, effects=[pay_fx]), "inv-7"),
        "budget_cycles": (_doc_loop("cap", lambda c: stuck, cycles2), "cap-1"),
        "no_progress": (
            _doc_loop(
                "stall",
                lambda c: lw.Proposal.edit("doc", {"b": c.cycle}),
                lw.Contract(budget=lw.Budget(max_cycles=9), no_progress=lw.NoProgress(cycles=2)),
            ),
            "stall-1",
        ),
        "escalated": (
            _doc_loop("down", down, cycles2, retry=lw.RetryPolicy(attempts=1)),
            "down-1",
        ),
    }
    ids = {}
    task = {"artifacts": {"doc": {"a": 0, "b": 0}}}
    with lw.Runtime(store) as rt:
        for reason, (loop, key) in loops.items():
            r = rt.run_sync(loop, {**task, "task_key": key})
            assert r.stop_reason == reason, (reason, r.packet)
            ids[reason] = r.run_id
        rt.deny(parked_id, by="bea", note="the payee is unknown")
    assert bank == ["INV-7"]
    ids["denied"] = parked_id
    return store, ids


@pytest.fixture
def ended(tmp_path: Path) -> tuple[str, dict[str, str]]:
    return _ended_runs(tmp_path)


def test_stop_cause_in_list_header_and_api(ended: tuple[str, dict[str, str]]) -> None:
    store, ids = ended
    c = dashboard(store, token=TOKEN)
    c.get(f"/runs/{ids['denied']}")  # a read resumes nothing: the denial is applied by a resume
    with lw.Runtime(store) as rt:
        rt.resume_sync(ids["denied"], lw.load_spec(Path(store).parent / "web.toml"))
    want = {
        "success": "accepted at cycle 1: every required check passed, score 1.00",
        "budget_cycles": "stopped after 2 cycles: the cycle budget of 2 is used up",
        "no_progress": "by the no-progress rule: no improvement in 2 cycles",
        "escalated": "escalated before its first cycle concluded: the actor raised an exception "
        "(ValueError: model server at http://127.0.0.1:9 refused the connection)",
        "denied": "bea denied",
    }
    listing = c.get("/").text
    api = {r["run_id"]: r for r in c.get("/api/runs").json()}
    for reason, words in want.items():
        rid = ids[reason]
        assert words in listing, (reason, words)
        head = c.get(f"/runs/{rid}").text
        m = re.search(r'id="stop-cause">([^<]*)<', head)
        assert m and words in m.group(1), (reason, m and m.group(1))
        assert words in api[rid]["stop_cause"]
        assert words in c.get(f"/api/runs/{rid}").json()["run"]["stop_cause"]
    assert "the payee is unknown" in api[ids["denied"]]["stop_cause"]
    # list endpoints carry summaries, not tasks or packets
    assert not {"task", "contract", "packet"} & set(api[ids["success"]])
    # the next action speaks of this page, not of a command
    here = c.get(f"/api/runs/{ids['escalated']}").json()["next_action_here"]
    assert "loopwright show" not in here
    # the error's way on (roll back, resume) is the page's button, not the CLI's commands; a
    # run started from Python (as this one) is resumed there, with its loop (newuser52)
    assert "Roll back to a cycle below (cycle 0), then resume it with `Runtime.resume(" in here
    assert (
        "loopwright rollback" not in here
        and "loopwright rollback" in (c.get(f"/api/runs/{ids['escalated']}").json()["next_action"])
    )
    # a budget's advice names `loopwright show RUN` to review the best candidate: this page
    # shows it (advice47); the fork with a higher budget is the CLI's
    here = c.get(f"/api/runs/{ids['budget_cycles']}").json()["next_action_here"]
    assert "Review the best candidate below." in here and "loopwright show" not in here, here
    assert "loopwright fork" in here, here


def test_effect_journal_retries_and_events_on_the_run_page(
    ended: tuple[str, dict[str, str]],
) -> None:
    store, ids = ended
    c = dashboard(store, token=TOKEN)
    page = c.get(f"/runs/{ids['success']}").text
    effects = page.split('id="effects"')[1].split('id="retries"')[0]
    assert "pay" in effects and "INV-7" in effects and "tx-1" in effects and ">done<" in effects
    assert 'data-kind="effect_done"' in page and 'data-kind="stopped"' in page
    only = c.get(f"/runs/{ids['success']}", params={"kind": "effect_done"}).text
    log = only.split('id="event-log"')[1]
    assert 'data-kind="effect_done"' in log and 'data-kind="stopped"' not in log
    detail = c.get(f"/api/runs/{ids['success']}").json()
    [entry] = [e for e in detail["journal"] if e["kind"] == "effect"]
    assert (entry["status"], entry["attempts"], entry["in_doubt"]) == ("done", 1, False)
    assert {e["kind"] for e in detail["events"]} >= {"effect_done", "stopped"}
    down = c.get(f"/runs/{ids['escalated']}").text.split('id="retries"')[1]
    assert "gave up" in down and "ValueError" in down


def test_runs_pages_and_search_over_hundreds(tmp_path: Path) -> None:
    from loopwright.store import open_store

    store = str(tmp_path / "many.db")
    st = open_store(store)
    n = 230
    for i in range(n):
        st.create_run(
            run_id=f"{i:04d}" + "ab" * 14,
            task_key=f"invoice-{i:04d}",
            loop_name="bulk" if i % 2 else "other",
            project="p1" if i % 3 else "p2",
            spec_ref=None,
            loop_version=None,
            contract={"budget": {"max_cycles": 3}},
            task={"artifacts": {"doc": {"a": "x" * 200}}},
            initial_state={"cycle": 0, "artifacts": {}},
        )
    st.close()
    c = dashboard(store, token=TOKEN)
    seen: list[str] = []
    url: str | None = "/"
    pages = 0
    while url:
        html = c.get(url).text
        seen += re.findall(r'<tr data-run-id="([^"]+)"', html)
        m = re.search(r'href="([^"]+)" rel="next"', html)
        url = m.group(1).replace("&amp;", "&") if m else None
        pages += 1
    assert pages == 5 and len(seen) == n == len(set(seen))
    assert f"{n} run(s) match" in c.get("/").text
    # the API pages by cursor too, with the total
    r = c.get("/api/runs", params={"limit": 100})
    assert len(r.json()) == 100 and r.headers["x-total-count"] == str(n)
    r2 = c.get("/api/runs", params={"limit": 100, "after": r.headers["x-next-cursor"]})
    assert {x["run_id"] for x in r.json()}.isdisjoint(x["run_id"] for x in r2.json())
    assert "task" not in r.json()[0]
    # search: task key, run id prefix, loop, project
    hit = c.get("/api/runs", params={"q": "invoice-0042"}).json()
    assert [x["task_key"] for x in hit] == ["invoice-0042"]
    assert [x["task_key"] for x in c.get("/api/runs", params={"q": "0100ab"}).json()] == [
        "invoice-0100"
    ]
    bulk = c.get("/api/runs", params={"q": "BULK", "limit": 500})
    assert bulk.headers["x-total-count"] == str(n // 2)
    assert c.get("/", params={"q": "invoice-0042"}).text.count("<tr data-run-id=") == 1
    assert c.get("/api/runs", params={"q": "100%"}).json() == []  # a wildcard is a character
    assert c.get("/api/runs", params={"after": "garbage"}).status_code == 400


def test_cancel_and_resume_from_the_page(parked: tuple[str, str]) -> None:
    store, run_id = parked
    c = dashboard(store, token=TOKEN, identity="ana")
    assert c.post(f"/api/runs/{run_id}/cancel").status_code == 401
    csrf = _sign_in(c)
    page = c.get(f"/runs/{run_id}").text
    assert 'value="cancel"' in page
    # a parked run is resumed by a decision, not by the button
    assert c.post(f"/runs/{run_id}/act", data={"csrf": csrf, "action": "resume"}).status_code == 409
    assert c.post(f"/runs/{run_id}/act", data={"action": "cancel"}).status_code == 403
    assert c.post(f"/api/runs/{run_id}/cancel").status_code == 403  # cookie without header
    r = c.post(
        f"/runs/{run_id}/act", data={"csrf": csrf, "action": "cancel"}, follow_redirects=False
    )
    assert r.status_code == 303
    rec = c.get(f"/api/runs/{run_id}").json()
    assert rec["run"]["status"] == "cancelled"
    assert "cancelled by ana" in rec["run"]["stop_cause"]
    [ev] = [e for e in rec["events"] if e["kind"] == "cancel_requested"]
    assert "ana" in ev["data"] and ev["ts"] > 0
    again = c.post(f"/api/runs/{run_id}/cancel", headers={"Authorization": f"Bearer {TOKEN}"})
    assert again.status_code == 409


def test_resume_is_recorded_and_approvals_page_and_search(parked: tuple[str, str]) -> None:
    from loopwright.store import open_store

    store, run_id = parked
    st = open_store(store)
    idle, _ = st.create_run(
        run_id="f" * 16,
        task_key="never-started",
        loop_name="web",
        project="webtests",
        spec_ref=None,
        loop_version=None,
        contract={"budget": {"max_cycles": 3}},
        task={"artifacts": {}},
        initial_state={"cycle": 0, "artifacts": {}},
    )
    st.close()
    c = dashboard(store, token=TOKEN, identity="ana")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert c.post(f"/api/runs/{idle.run_id}/resume").status_code == 401
    r = c.post(f"/api/runs/{idle.run_id}/resume", headers=bearer)
    assert r.status_code == 200, r.text
    assert "resume requested by ana" in r.json()["message"]
    assert "no spec file here" in r.json()["message"]  # said, not failed silently
    [ev] = [e for e in c.get(f"/api/runs/{idle.run_id}").json()["events"] if "resume" in e["kind"]]
    assert ev["kind"] == "resume_requested" and "ana" in ev["data"]
    # approvals: searched by run id prefix or text, paged with a total
    hit = c.get("/api/approvals", params={"q": run_id[:6]})
    assert [a["run_id"] for a in hit.json()] == [run_id] and hit.headers["x-total-count"] == "1"
    assert c.get("/api/approvals", params={"q": "no such words"}).json() == []
    assert "1 request(s) waiting" in c.get("/approvals", params={"q": "doc/pay"}).text
    assert c.get("/api/approvals", params={"after": "x"}).status_code == 400


def test_a_stored_stop_cause_is_derived_alike_for_older_runs(
    ended: tuple[str, dict[str, str]],
) -> None:
    """Runs stored before the field existed (no packet["stop_cause"]) read the same sentence."""
    from loopwright._stored_run_words import run_stop_cause
    from loopwright.store import open_store

    store, ids = ended
    st = open_store(store)
    for reason in ("budget_cycles", "no_progress", "escalated"):
        rec = st.get_run(ids[reason])
        assert rec.packet and rec.packet["stop_cause"]
        older = {k: v for k, v in rec.packet.items() if k != "stop_cause"}
        assert run_stop_cause(rec, older) == rec.packet["stop_cause"], reason
    accepted = st.get_run(ids["success"])
    assert accepted.packet is None
    [stopped] = [e for e in st.events(accepted.run_id) if e.kind == "stopped"]
    assert run_stop_cause(accepted) == stopped.data["stop_cause"]
    st.close()


# --- issue 18: a person edits a part from the dashboard or /api; forks are linked -------------
def _denied_run(tmp: Path) -> tuple[str, str]:
    """The parked run with its payment change denied and applied: it has ended (stopped)."""
    store, run_id = make_parked_run(tmp)
    with lw.Runtime(store) as rt:
        rt.deny(run_id, by="bea", note="not that payee")
        rec = rt.resume_sync(run_id, lw.load_spec(tmp / "web.toml"))
    assert rec.status not in ("awaiting_approval", "accepted", "pending", "running"), rec.status
    return store, run_id


def test_edit_a_part_from_the_api_and_the_loop_goes_on(tmp_path: Path) -> None:
    store, run_id = _denied_run(tmp_path)
    c = dashboard(store, token=TOKEN, identity="ana")
    url = f"/api/runs/{run_id}/parts/doc/pay"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert c.post(url, json={"value": 10}).status_code == 401  # no token
    _sign_in(c)
    r = c.post(url, json={"value": 10})  # a cookie alone: the CSRF header is missing
    assert r.status_code == 403 and "X-CSRF-Token" in r.json()["detail"]
    # one-line errors, as JSON, for the person's mistakes
    bad = {
        c.post(url, content=b"{not json", headers={**bearer, **JSON}): "must be JSON",
        c.post(url, json={"note": "x"}, headers=bearer): '"value"',
        c.post(url, json={"value": 10, "nope": 1}, headers=bearer): "unknown field(s) nope",
        c.post(url, json={"value": 10, "resume": "yes"}, headers=bearer): "true or false",
        c.post(f"/api/runs/{run_id}/parts/doc/nope", json={"value": 1}, headers=bearer): (
            "no part 'doc/nope'"
        ),
    }
    for resp, words in bad.items():
        assert resp.status_code == 400, (words, resp.text)
        detail = resp.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and words in detail, detail
    assert (
        c.post("/api/runs/nosuchrun/parts/doc/pay", json={"value": 1}, headers=bearer).status_code
        == 404
    )
    assert c.get(f"/api/runs/{run_id}").json()["edits"] == []  # refused edits changed nothing
    r = c.post(url, json={"value": 10, "note": "the PO says 10", "resume": True}, headers=bearer)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["edit"]["by"] == "ana" and out["edit"]["part"] == "doc/pay"
    assert out["edit"]["changed"] == ["value"] and out["edit"]["note"] == "the PO says 10"
    assert "edited by ana" in out["message"] and "resuming" in out["message"]
    for t in c.app.state.resumes:  # type: ignore[attr-defined]
        t.join(60)
    rec = _wait_status(store, run_id, "accepted")
    assert rec.status == "accepted", rec.packet
    detail = c.get(f"/api/runs/{run_id}").json()
    [pay] = [a for a in detail["artifacts"] if a["ref"] == "doc/pay"]
    # the person's version stands: the loop went on from it and never wrote pay again
    assert pay["status"] == "accepted" and pay["versions"][-1]["value"] == "10"
    assert pay["versions"][-1]["n"] == out["edit"]["version"]
    kinds = [e["kind"] for e in detail["events"]]
    assert kinds.index("edited") < kinds.index("resume_requested")
    assert not [a for a in detail["approvals"] if a["status"] == "pending"]  # pay not re-asked
    # the resumed run judged the person's edit first: a check-only cycle, no actor call
    checked = [row for row in detail["timeline"] if row.get("check_only")]
    assert [(row["kind"], row["note"]) for row in checked] == [
        ("check only", "judged the person's edit")
    ]
    page = c.get(f"/runs/{run_id}").text
    assert "check only" in page
    edits = page.split('id="edits"')[1].split("</table>")[0]
    assert "ana" in edits and "doc/pay" in edits and "the PO says 10" in edits


def test_a_part_whose_name_holds_a_slash_is_edited_from_the_api(tmp_path: Path) -> None:
    """``doc/sub/x`` (artifact ``doc``, part ``sub/x``) was read at its versions' URL but its
    edit's URL answered 404 for any spelling: the route took one path segment for the part."""
    loop = _doc_loop(
        "slash",
        lambda ctx: lw.Proposal.edit("doc", {"a": 1, "sub/x": "b"}),
        lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=2)),
    )
    store = str(tmp_path / "slash.db")
    with lw.Runtime(store) as rt:
        run_id = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0, "sub/x": "a"}}}).run_id
    c = dashboard(store, token=TOKEN, identity="ana")
    url = f"/api/runs/{run_id}/parts/doc/sub/x"
    r = c.post(url, json={"value": "c"}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    assert r.json()["edit"]["part"] == "doc/sub/x"
    assert c.get(f"{url}/versions").json()[-1]["value"] == "c"


def test_edit_from_the_run_page_needs_token_and_csrf(parked: tuple[str, str]) -> None:
    store, run_id = parked
    c = dashboard(store, token=TOKEN, identity="ana")
    form = {"ref": "doc/title", "value": "Plain " + XSS, "note": "a person's title"}
    assert "Save edit" not in c.get(f"/runs/{run_id}").text  # signed out: no form
    assert c.post(f"/runs/{run_id}/edit", data=form).status_code == 401
    csrf = _sign_in(c)
    assert c.post(f"/runs/{run_id}/edit", data=form).status_code == 403  # no CSRF
    assert c.post(f"/runs/{run_id}/edit", data={**form, "csrf": "forged"}).status_code == 403
    # a part the parked proposal changes waits for the decision: said in one line
    waiting = c.post(f"/runs/{run_id}/edit", data={**form, "csrf": csrf})
    assert waiting.status_code == 400, waiting.text
    assert "waits for a decision on a change to doc/title" in waiting.json()["detail"]
    assert c.get(f"/api/runs/{run_id}").json()["edits"] == []
    # another part is edited beside the request; the run still waits for its decision
    beside = {**form, "ref": "doc/a", "value": "5", "csrf": csrf}
    assert c.post(f"/runs/{run_id}/edit", data=beside, follow_redirects=False).status_code == 303
    assert c.get(f"/api/runs/{run_id}").json()["run"]["status"] == "awaiting_approval"
    with lw.Runtime(store) as rt:
        rt.deny(run_id, by="bea")
        rt.resume_sync(run_id, lw.load_spec(Path(store).parent / "web.toml"))
    page = c.get(f"/runs/{run_id}").text
    assert page.count("Save edit") == 4  # one per part: a, b, title, pay
    # a JSON part takes JSON; a browser's CRLF line ends are the text's own
    bad = c.post(f"/runs/{run_id}/edit", data={**form, "ref": "doc/a", "value": "{x", "csrf": csrf})
    assert bad.status_code == 400 and "holds JSON" in bad.json()["detail"]
    r = c.post(
        f"/runs/{run_id}/edit",
        data={**form, "value": "[1,\r\n2]", "ref": "doc/b", "csrf": csrf},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"].endswith("#edits")
    r = c.post(f"/runs/{run_id}/edit", data={**form, "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text
    detail = c.get(f"/api/runs/{run_id}").json()
    assert [(e["part"], e["by"]) for e in detail["edits"]] == [
        ("doc/a", "ana"),
        ("doc/b", "ana"),
        ("doc/title", "ana"),
    ]
    assert detail["run"]["status"] == "pending"  # reopened: Resume goes on from the edits
    page = c.get(r.headers["location"]).text
    assert "Resume the run to go on from it" in page
    assert "Plain &lt;script&gt;" in page and "Plain <script>" not in page
    [b] = [a for a in detail["artifacts"] if a["ref"] == "doc/b"]
    assert b["versions"][-1]["value"] == "[1, 2]"


def test_a_fork_links_to_its_origin(parked: tuple[str, str]) -> None:
    store, run_id = parked
    with lw.Runtime(store) as rt:
        fork = rt.fork(run_id, 1)
    c = dashboard(store, token=TOKEN)
    page = c.get(f"/runs/{fork.run_id}").text
    m = re.search(r'id="forked-from">run <a href="/runs/([0-9a-f]+)">', page)
    assert m and m.group(1) == run_id and "at cycle 1" in page
    assert 'id="forked-from"' not in c.get(f"/runs/{run_id}").text
    listed = {r["run_id"]: r for r in c.get("/api/runs").json()}
    assert (listed[fork.run_id]["forked_from"], listed[fork.run_id]["forked_at"]) == (run_id, 1)
    assert listed[run_id]["forked_from"] is None


def test_a_part_too_long_for_the_page_is_edited_from_the_cli(
    parked: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwright.web import _views

    monkeypatch.setattr(_views, "EDIT_MAX_CHARS", 0)  # only doc/title ("" while parked) fits
    store, run_id = parked
    c = dashboard(store, token=TOKEN, identity="ana")
    _sign_in(c)
    page = c.get(f"/runs/{run_id}").text
    assert page.count("Too long to edit in the page") == 3
    assert f"loopwright edit {run_id[:12]} doc/pay --file FILE</code> (FILE:" in page
    assert page.count("Save edit") == 1


def test_the_inbox_lists_the_ten_latest_decisions_reading_ten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the pending requests, the ten decided ones most recently requested, newest first,
    read as ten rows, and the badge's count counted by the database: the page costs the same in
    a store holding every decision ever made."""
    from loopwright.store import NewApproval, open_store

    path = str(tmp_path / "decided.db")
    st = open_store(path)
    ids = [f"req-{i:02d}" for i in range(14)]
    for i, aid in enumerate(ids):
        run_id = f"{i:04d}" + "cd" * 14
        st.create_run(
            run_id=run_id,
            task_key=f"t-{i}",
            loop_name="bulk",
            project="",
            spec_ref=None,
            loop_version=None,
            contract={"budget": {"max_cycles": 3}},
            task={"artifacts": {"doc": {"a": 1}}},
            initial_state={"cycle": 0, "artifacts": {}},
        )
        token = st.acquire_lease(run_id, "me", 60)
        request = NewApproval(aid, 1, "risk", "r", f"do {aid}", "why", {}, None, "h", None)
        st.commit(
            run_id,
            token,
            seq=1,
            cycle=1,
            state={"cycle": 1},
            record=None,
            events=[],
            run={"status": "awaiting_approval"},
            approvals=[request],
        )
        if i != 13:  # the newest stays pending
            st.decide_approval(aid, status="approved", by="ann", note=None, now=time.time())
    st.close()
    app = create_app(path, token=TOKEN)
    read: list[Any] = []
    monkeypatch.setattr(
        "loopwright.store.sqlite.SQLiteStore.approvals",
        lambda self, **kw: read.append(kw) or [],
    )
    page = TestClient(app, base_url=LOCAL).get("/approvals").text
    shown = page.split("Recently decided")[1]
    assert re.findall(r"do (req-\d\d)", shown) == [f"req-{i:02d}" for i in range(12, 2, -1)]
    assert all(kw.get("status") == "pending" for kw in read)  # never every request
    assert '<span class="badge" id="pending-count">1</span>' in page  # counted, not listed


# --- request bodies: a limit, the type each endpoint takes, who asks before the body is read ---
class _Body:
    """An ASGI ``receive`` handing out ``chunk`` bytes ``chunks`` times; counts what was read."""

    def __init__(self, chunk: bytes, chunks: int) -> None:
        self.chunk, self.left, self.read = chunk, chunks, 0

    async def __call__(self) -> dict[str, Any]:
        if self.left <= 0:  # all sent: what a server says next is that the client left
            return {"type": "http.disconnect"}
        self.left -= 1
        self.read += len(self.chunk)
        return {"type": "http.request", "body": self.chunk, "more_body": self.left > 0}


def _asgi_post(
    app: Any, path: str, body: _Body, headers: dict[str, str], starts: list[Any] | None = None
) -> tuple[int, Any]:
    """POST ``path`` to ``app`` at the ASGI level (the body streamed from ``body``): the status
    and the JSON answer (the answer's start message added to ``starts``, when given)."""
    import asyncio

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1", **headers}.items()
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, body, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    if starts is not None:
        starts.append(start)
    raw = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(raw) if raw.startswith(b"{") else raw.decode()


def test_a_body_over_the_limit_is_refused_unread(parked: tuple[str, str]) -> None:
    """A declared length over the limit is 413 before anything reads the body (or asks who
    sends it); a body streamed without a length is cut at the limit: 413, the rest unread."""
    store, _ = parked
    app = create_app(store, token=TOKEN, max_body=64 * 1024)
    [a] = TestClient(app, base_url=LOCAL).get("/api/approvals").json()
    url = f"/api/approvals/{a['approval_id']}/approve"
    json_type = {"Content-Type": "application/json"}
    huge = _Body(b" " * 65536, 3200)  # 200 MiB, if anyone read it
    status, answer = _asgi_post(app, url, huge, {**json_type, "Content-Length": str(200 << 20)})
    assert status == 413 and "64 KiB" in answer["detail"]
    assert huge.read == 0
    # chunked, from someone who may decide: read until the limit passes, then refused
    streamed = _Body(b" " * 16384, 12800)
    bearer = {"Authorization": f"Bearer {TOKEN}", "Transfer-Encoding": "chunked"}
    status, answer = _asgi_post(app, url, streamed, {**json_type, **bearer})
    assert status == 413 and "64 KiB" in answer["detail"], answer
    assert streamed.read <= 64 * 1024 + 16384
    # within the limit, the same request is decided
    c = TestClient(app, base_url=LOCAL)
    ok = c.post(url, json={"note": "x" * 1000}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200, ok.text
    # the default is 1 MiB
    big = dashboard(store, token=TOKEN)
    r = big.post(url, content=b" " * (1024 * 1024 + 1), headers=json_type)
    assert r.status_code == 413 and "1 MiB" in r.json()["detail"]
    with pytest.raises(lw.ConfigError):
        create_app(store, token=TOKEN, max_body=0)


def test_a_chunked_body_a_route_never_reads_closes_the_connection(
    parked: tuple[str, str],
) -> None:
    """docs/ui.md: every request's body is held to ``--max-body-mib``. A chunked body sent to
    an endpoint that never reads it (a cancel, then) was answered 200 on a connection kept open, so
    the client could go on sending past the limit. The answer is the route's, and it closes the
    connection: the rest is never read."""
    store, run_id = parked
    app = create_app(store, token=TOKEN, max_body=64 * 1024)
    chunked = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "Transfer-Encoding": "chunked",
    }
    # a body read to its end (a rerun not started) keeps the connection
    whole, starts = _Body(b'{"at_cycle": 0, "start": false}', 1), []
    assert _asgi_post(app, f"/api/runs/{run_id}/rerun", whole, chunked, starts)[0] == 200
    assert (b"connection", b"close") not in starts[0]["headers"]
    streamed, starts = _Body(b" " * 16384, 12800), []  # 200 MiB, if anyone read it
    # (a cancel reads its optional note since web53b: a POST refused before its body is read)
    unsigned = {k: v for k, v in chunked.items() if k != "Authorization"}
    status, _answer = _asgi_post(app, f"/api/runs/{run_id}/cancel", streamed, unsigned, starts)
    assert status == 401
    assert (b"connection", b"close") in starts[0]["headers"]
    assert streamed.read <= 64 * 1024 + 16384
    # a cancel's body read past the limit: refused, the rest never read
    streamed, starts = _Body(b" " * 16384, 12800), []
    status, _answer = _asgi_post(app, f"/api/runs/{run_id}/cancel", streamed, chunked, starts)
    assert status == 413
    assert streamed.read <= 64 * 1024 + 16384


def test_a_write_is_refused_before_its_body_is_read(client: TestClient) -> None:
    """Without a token, a write's body is never read (nor parsed): 401 first, for the API's
    decisions and the pages' forms alike."""
    [a] = client.get("/api/approvals").json()
    for how in ("approve", "deny", "answer"):
        body = _Body(b" " * 65536, 8)  # 512 KiB, under the limit
        status, _ = _asgi_post(
            client.app,
            f"/api/approvals/{a['approval_id']}/{how}",
            body,
            {"Content-Type": "application/json", "Content-Length": str(8 * 65536)},
        )
        assert (status, body.read) == (401, 0), how
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for path in (f"/approvals/{a['approval_id']}/decide", "/runs/x/rollback", "/logout"):
        body = _Body(b"a" * 65536, 8)
        status, _ = _asgi_post(client.app, path, body, {**form, "Content-Length": str(8 * 65536)})
        assert (status, body.read) == (401, 0), path
    # signed in, a decision's body is still checked as before
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    r = client.post(f"/api/approvals/{a['approval_id']}/answer", headers=bearer)
    assert r.status_code == 422
    r = client.post(f"/api/approvals/{a['approval_id']}/deny", json={"note": 5}, headers=bearer)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "note"]
    assert client.get("/api/approvals").json()[0]["status"] == "pending"
    schema = client.get("/openapi.json").json()["paths"]
    body_of = schema["/api/approvals/{approval_id}/answer"]["post"]["requestBody"]
    assert body_of["required"] and "answer" in str(body_of["content"]["application/json"])


def test_a_write_takes_its_own_content_type_only(client: TestClient) -> None:
    """``text/plain`` (what any page may send without a CORS preflight) and other types are
    415 on a write with a body: the API takes JSON, the pages' forms a form."""
    csrf = _sign_in(client)
    [a] = client.get("/api/approvals").json()
    aid = a["approval_id"]
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for kind in ("text/plain", "application/x-www-form-urlencoded", ""):
        r = client.post(
            f"/api/approvals/{aid}/approve",
            content=b'{"note": "forged"}',
            headers={**bearer, "Content-Type": kind},
        )
        assert r.status_code == 415 and "application/json" in r.json()["detail"], kind
    r = client.post(
        f"/approvals/{aid}/decide",
        content=f"action=approve&csrf={csrf}".encode(),
        headers={"Content-Type": "text/plain"},
    )
    assert r.status_code == 415 and "form" in r.json()["detail"]
    r = client.post(f"/approvals/{aid}/decide", json={"action": "approve", "csrf": csrf})
    assert r.status_code == 415
    assert client.get("/api/approvals").json()[0]["status"] == "pending"
    # a write without a body needs no type; JSON with a charset is JSON
    r = client.post(f"/api/approvals/{aid}/deny", headers=bearer)
    assert r.status_code == 200, r.text


def test_a_decision_with_an_unknown_field_is_refused_not_decided(
    client: TestClient, parked: tuple[str, str]
) -> None:
    """``{"reason": "..."}`` (not ``note``) denied the request with no note: the person's
    reason silently lost, on the audit log and the escalation too."""
    [a] = client.get("/api/approvals").json()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for how in ("deny", "approve"):
        r = client.post(
            f"/api/approvals/{a['approval_id']}/{how}",
            json={"reason": "wrong vendor", "by": "mallory"},
            headers=auth,
        )
        assert r.status_code == 422, r.text
        assert "reason" in r.text and "by" in r.text
    [still] = client.get("/api/approvals").json()
    assert still["status"] == "pending"
    r = client.post(
        f"/api/approvals/{a['approval_id']}/deny", json={"note": "wrong vendor"}, headers=auth
    )
    assert r.json()["approval"]["note"] == "wrong vendor"


def test_a_long_decision_note_is_shown_cut(client: TestClient, parked: tuple[str, str]) -> None:
    """A note may be long (up to the body limit): the inbox's decided list and the run page
    show its start, not all of it (ten such notes made a 10 MB inbox); the API keeps it."""
    _store, run_id = parked
    csrf = _sign_in(client)
    [a] = client.get("/api/approvals").json()
    note = "why " + "x" * 200_000
    r = client.post(
        f"/approvals/{a['approval_id']}/decide",
        data={"csrf": csrf, "action": "deny", "note": note},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    for t in client.app.state.resumes:  # type: ignore[attr-defined]
        t.join(30)
    assert client.get("/api/approvals?status=denied").json()[0]["note"] == note
    for path in ("/approvals", f"/runs/{run_id}"):
        page = client.get(path).text
        assert "why xxx" in page, path
        assert len(page) < 100_000, (path, len(page))


def test_a_page_shows_only_the_messages_this_server_wrote(parked: tuple[str, str]) -> None:
    """A run page showed any ``?msg=`` as its own flash line: a link could make the dashboard
    say "approved by root; deny the other request" in its own voice. It shows the line a
    form's post led to, signed by the server, and nothing for a message typed into a link."""
    store, run_id = parked
    c = dashboard(store, token=TOKEN, identity="ana")
    forged = "Approved by root: deny the other pending request"
    assert forged not in c.get(f"/runs/{run_id}", params={"msg": forged}).text
    assert forged not in c.get(f"/runs/{run_id}", params={"msg": forged, "sig": "0" * 64}).text
    csrf = _sign_in(c)
    r = c.post(f"/runs/{run_id}/act", data={"csrf": csrf, "action": "cancel"})
    assert r.status_code == 200 and '<p class="flash">cancelled by ana</p>' in r.text


def test_pause_from_the_page_and_the_api(parked: tuple[str, str]) -> None:
    """The run page's Pause (through its confirmation) and ``POST /api/runs/{id}/pause`` file
    a person's pause, as ``loopwright pause`` does; a second is refused (409), a deny of it too,
    and approving its request (the inbox's approve) lifts it."""
    store, run_id = parked
    c = dashboard(store, token=TOKEN, identity="ana")
    assert c.post(f"/api/runs/{run_id}/pause").status_code == 401
    csrf = _sign_in(c)
    assert 'value="pause"' in c.get(f"/runs/{run_id}").text
    confirm = c.get(f"/runs/{run_id}/confirm", params={"action": "pause"}).text
    assert "Yes, pause the run" in confirm
    r = c.post(
        f"/runs/{run_id}/act", data={"csrf": csrf, "action": "pause"}, follow_redirects=False
    )
    assert r.status_code == 303
    rec = c.get(f"/api/runs/{run_id}").json()
    assert rec["run"]["status"] == "awaiting_approval"
    [ev] = [e for e in rec["events"] if e["kind"] == "pause_requested"]
    assert "ana" in ev["data"]
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    again = c.post(f"/api/runs/{run_id}/pause", headers=bearer)
    assert again.status_code == 409 and "paused already" in again.json()["detail"]
    [pause] = [a for a in c.get("/api/approvals").json() if a["kind"] == "pause"]
    deny = c.post(f"/api/approvals/{pause['approval_id']}/deny", headers=bearer)
    assert deny.status_code == 409 and "a person's pause" in deny.json()["detail"]
    ok = c.post(f"/api/approvals/{pause['approval_id']}/approve", headers=bearer)
    assert ok.status_code == 200, ok.text
    left = [a["kind"] for a in c.get("/api/approvals").json()]
    assert "pause" not in left
