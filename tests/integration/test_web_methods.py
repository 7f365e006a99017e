"""The dashboard's answers to HEAD, and to a JSON body that repeats a key."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.dashboard import dashboard
from support.modules import load_sibling

TOKEN = "test-token-0123456789"
LOCAL = "http://127.0.0.1"


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_helpers_methods")


@pytest.fixture
def parked(tmp_path: Path) -> tuple[str, str]:
    store, run_id = _web().make_parked_run(tmp_path)
    return store, run_id


def _same_answer(c: TestClient, path: str, **kw: Any) -> Any:
    """HEAD of ``path`` answers as its GET does: status, type, length, where it redirects."""
    got = c.get(path, follow_redirects=False, **kw)
    head = c.head(path, follow_redirects=False, **kw)
    assert head.status_code == got.status_code, (path, head.status_code, head.text)
    for name in ("content-type", "content-length", "location", "www-authenticate"):
        assert head.headers.get(name) == got.headers.get(name), (path, name)
    assert head.content == b""
    return head


def test_get_routes_answer_head(parked: tuple[str, str]) -> None:
    """HEAD was 405 on every GET route (FastAPI routes answer only the methods they name),
    ``/healthz`` included, which load balancers probe with HEAD."""
    store, run_id = parked
    c = dashboard(store, token=TOKEN)
    assert _same_answer(c, "/healthz").status_code == 200
    for path in ("/", f"/runs/{run_id}", "/approvals", "/api/runs", f"/api/runs/{run_id}"):
        assert _same_answer(c, path).status_code == 200, path
    assert _same_answer(c, "/api/runs/no-such-run").status_code == 404
    assert c.head("/logout").status_code == 405  # a POST route is not made a GET one


def test_head_is_refused_where_get_is(parked: tuple[str, str]) -> None:
    """HEAD goes through the same sign-in rules as GET: with reads behind the token, a page is
    sent to sign in and the API refused (401), the probe path stays open."""
    store, run_id = parked
    c = dashboard(store, token=TOKEN, require_token_for_reads=True)
    assert _same_answer(c, "/healthz").status_code == 200
    page = _same_answer(c, f"/runs/{run_id}")
    assert page.status_code == 303 and page.headers["location"].startswith("/login?next=")
    assert _same_answer(c, "/api/runs").status_code == 401
    assert _same_answer(c, "/openapi.json").status_code == 401
    signed = {"Authorization": f"Bearer {TOKEN}"}
    assert _same_answer(c, "/api/runs", headers=signed).status_code == 200


def test_head_sends_no_body_and_ends_a_streamed_one() -> None:
    """The HEAD middleware at the ASGI level: the app sees a GET; what goes out is its
    headers and one empty body; a streamed answer (the live events) is told the client has
    gone once the headers are out, so it ends."""
    from loopwright.web._http import HeadAsGet

    seen: dict[str, Any] = {}

    async def streaming(scope: Any, receive: Any, send: Any) -> None:
        seen["method"] = scope["method"]
        seen["first"] = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"event 1", "more_body": True})
        await send({"type": "http.response.body", "body": b"event 2", "more_body": True})
        seen["then"] = await receive()  # a stream waits for the client to go

    sent: list[dict[str, Any]] = []

    async def never() -> dict[str, Any]:
        raise AssertionError("a HEAD's body is not read")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "HEAD", "path": "/api/events", "headers": []}
    asyncio.run(HeadAsGet(streaming)(scope, never, send))
    assert seen["method"] == "GET"
    assert seen["first"] == {"type": "http.request", "body": b"", "more_body": False}
    assert seen["then"] == {"type": "http.disconnect"}
    assert sent == [
        {"type": "http.response.start", "status": 200, "headers": []},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]


def test_a_json_body_that_repeats_a_key_is_refused(tmp_path: Path) -> None:
    """``{"value": 1, "value": 2}`` was accepted (the last won, silently): which value the
    person meant is not known. 400 naming the key, at any depth, and nothing is edited; the
    dashboard's Edit box refuses such a value too."""
    web = _web()
    store, run_id = web._denied_run(tmp_path)
    c = dashboard(store, token=TOKEN, identity="ana")
    url = f"/api/runs/{run_id}/parts/doc/pay"
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for body in (b'{"value": 1, "value": 2}', b'{"value": {"a": [{"k": 1, "k": 2}]}}'):
        r = c.post(url, content=body, headers=auth)
        assert r.status_code == 400, r.text
        detail = r.json()["detail"]
        assert "given twice" in detail and "give each key once" in detail, detail
    csrf = web._sign_in(c)
    form = {"ref": "doc/pay", "value": '{"n": 1, "n": 2}', "csrf": csrf}
    r = c.post(f"/runs/{run_id}/edit", data=form, follow_redirects=False)
    assert r.status_code == 400 and "'n' is given twice" in r.json()["detail"], r.text
    assert c.get(f"/api/runs/{run_id}").json()["edits"] == []
    r = c.post(url, content=b'{"value": {"a": 1, "b": 1}}', headers=auth)
    assert r.status_code == 200, r.text
