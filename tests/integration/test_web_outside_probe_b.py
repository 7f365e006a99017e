"""What the outside tester of the dashboard left (web53, stop 53), fixed (web53b).

- ``POST /api/runs/{id}/cancel`` and ``/resume`` read no body: ``{"note": "..."}`` or any field
  was dropped unread, where a pause keeps its note and refuses another field. Both take a note
  now (why, on the ``cancel_requested`` / ``resume_requested`` event beside who asked), held to
  a decision's note's rule, and refuse another field.
- An action on an ended run was answered 409 "already ended" before its request was looked
  at: an unknown action, or a bad body, said the run had ended. The request is checked first.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.dashboard import dashboard
from support.modules import load_sibling

import loopwright as lw
from loopwright.web import create_app

LOCAL = "http://127.0.0.1"
TOKEN = "probe-b-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _run(store: str, key: str) -> str:
    """A run created and not started (the first probe's)."""
    probe = load_sibling(__file__, "test_web_outside_probe.py", "_web_outside_probe_a")
    run_id: str = probe._other_run_keyed(store, key)
    return run_id


def _events(store: str, run_id: str, kind: str) -> list[dict[str, object]]:
    with lw.Runtime(store) as rt:
        return [dict(e.data) for e in rt.store.events_of_kinds(run_id, (kind,))]


@pytest.mark.parametrize("how", ["cancel", "resume"])
def test_a_cancel_or_resume_keeps_its_note_and_refuses_a_bad_body(tmp_path: Path, how: str) -> None:
    store = str(tmp_path / "s.db")
    rid = _run(store, "one")
    c = dashboard(store, token=TOKEN, identity="ana")
    path = f"/api/runs/{rid}/{how}"
    # a note against the rule of a decision's note is 400; a body of another shape is 422, as
    # a pause's (the API's schema-checked bodies)
    for bad, status in (
        ({"note": "a\x1b[2Jb"}, 400),
        ({"note": 5}, 422),
        ({"why": "x"}, 422),
        (["x"], 422),
    ):
        r = c.post(path, json=bad, headers=BEARER)
        assert r.status_code == status, (bad, r.text)
    assert "why" in str(c.post(path, json={"why": "x"}, headers=BEARER).json()["detail"])
    assert _events(store, rid, f"{how}_requested") == []  # nothing done
    with lw.Runtime(store) as rt:
        assert rt.store.get_run(rid).status not in ("cancelled",)
    r = c.post(path, json={"note": "duplicate of the invoice run"}, headers=BEARER)
    assert r.status_code == 200, r.text
    [asked] = _events(store, rid, f"{how}_requested")
    assert asked == {"by": "ana", "note": "duplicate of the invoice run"}
    schema = c.get("/openapi.json").json()["paths"][f"/api/runs/{{run_id}}/{how}"]["post"]
    assert "note" in str(schema["requestBody"])
    # no body, as before: recorded without a note
    other = _run(store, "two")
    assert c.post(f"/api/runs/{other}/{how}", headers=BEARER).status_code == 200
    assert _events(store, other, f"{how}_requested") == [{"by": "ana"}]


def test_a_note_typed_with_a_cancel_is_stored_masked(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    rid = _run(store, "one")
    c = dashboard(store, token=TOKEN, identity="ana")
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0" * 2
    r = c.post(f"/api/runs/{rid}/cancel", json={"note": f"leaked {key}"}, headers=BEARER)
    assert r.status_code == 200, r.text
    [asked] = _events(store, rid, "cancel_requested")
    assert key not in str(asked) and str(asked["note"]).startswith("leaked ")


def test_a_bad_request_on_an_ended_run_is_400_not_409(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    rid = _run(store, "one")
    c = dashboard(store, token=TOKEN, identity="ana")
    assert c.post(f"/api/runs/{rid}/cancel", headers=BEARER).status_code == 200
    with lw.Runtime(store) as rt:
        assert rt.store.get_run(rid).status == "cancelled"
    # the API: a body it does not take is the mistake named, whatever the run's state
    for how in ("cancel", "pause", "unpause", "resume"):
        r = c.post(f"/api/runs/{rid}/{how}", json={"why": "x"}, headers=BEARER)
        assert r.status_code == 422, (how, r.text)
        assert "why" in str(r.json()["detail"])
    # as it was: a good request on an ended run is 409
    assert c.post(f"/api/runs/{rid}/resume", headers=BEARER).status_code == 409
    # the run page's form: an unknown action is 400, not "already ended"
    c.post("/login", data={"token": TOKEN}, follow_redirects=False)
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get(f"/runs/{rid}").text)
    assert csrf is not None
    r = c.post(
        f"/runs/{rid}/act",
        data={"csrf": csrf.group(1), "action": "explode"},
        follow_redirects=False,
    )
    assert r.status_code == 400, r.text
    assert "unknown action" in r.text and "already ended" not in r.text


KEY = "sk-proj-" + "Q9w8E7r6T5y4U3i2O1p0" * 2  # a key's shape: masked wherever it is written


def test_the_servers_own_log_lines_are_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``loopwright ui`` masked loopwright's loggers, not uvicorn's: a route that failed was
    logged by ``uvicorn.error`` with its traceback, a key in the exception's message (or the
    query string it quotes) written in clear. The real server runs, as ``loopwright ui``
    configures it; one request to a route that fails, then the server is told to stop."""
    pytest.importorskip("uvicorn")
    import http.client
    import socket
    import threading

    import uvicorn

    import loopwright.web
    from loopwright.cli import main

    store = str(tmp_path / "ui.db")
    with lw.Runtime(store):
        pass
    real_create_app = loopwright.web.create_app

    def create_app_failing(*a: object, **k: object) -> object:
        app = real_create_app(*a, **k)  # type: ignore[arg-type]

        @app.get("/fail")
        def fail(q: str = "") -> None:
            raise RuntimeError(f"upstream refused {q}")

        return app

    answers: list[int] = []

    def run(app: object, **kwargs: object) -> None:  # uvicorn.run, with a way to stop it
        server = uvicorn.Server(uvicorn.Config(app, **kwargs))  # type: ignore[arg-type]
        fd = kwargs["fd"]
        assert isinstance(fd, int)
        with socket.socket(fileno=socket.dup(fd)) as listening:
            port = listening.getsockname()[1]

        def ask() -> None:  # the socket listens already: the request waits in its backlog
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port)
                conn.request("GET", f"/fail?q={KEY}")
                answers.append(conn.getresponse().status)
                conn.close()
            finally:
                server.should_exit = True

        asker = threading.Thread(target=ask)
        asker.start()
        server.run()
        asker.join()

    monkeypatch.setattr(loopwright.web, "create_app", create_app_failing)
    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.setenv("LOOPWRIGHT_UI_TOKEN", "ui-log-token-0123456789")
    code = main(["ui", "--port", "0", "--store", store])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert answers == [500]
    assert "upstream refused" in out.err  # the failure is logged, its traceback too
    assert "Traceback" in out.err
    assert KEY not in out.out + out.err


def test_wrong_tokens_from_one_source_are_answered_429_past_the_limit(tmp_path: Path) -> None:
    """Refused sign-ins were counted per source for the audit log, never slowed: a script could
    try tokens as fast as the server answered, by the form or as a bearer token (whose answer,
    401 or not, says whether it was right). Past ``SignInBackoff.limit`` wrong tokens from a
    source within its window, every token it tries is 429 with Retry-After, a right one too,
    until the window is over. The window's clock is the test's: nothing here is timed."""
    store = str(tmp_path / "s.db")
    rid = _run(store, "one")
    app = create_app(store, token=TOKEN, identity="ana")
    now = [1000.0]
    app.state.backoff.clock = lambda: now[0]
    limit, window = app.state.backoff.limit, app.state.backoff.window_s
    assert limit == 10 and window == 60.0
    c = TestClient(app, base_url=LOCAL)
    cancel = f"/api/runs/{rid}/cancel"
    for i in range(limit):  # the form's and bearer tokens count together
        if i % 2:
            assert c.post("/login", data={"token": f"guess-{i}"}).status_code == 403
        else:
            r = c.post(cancel, headers={"Authorization": f"Bearer guess-{i}"})
            assert r.status_code == 401
    now[0] += 15.0
    for r in (
        c.post("/login", data={"token": TOKEN}, follow_redirects=False),  # right, and refused
        c.post(cancel, headers=BEARER),
        c.get("/api/me", headers={"Authorization": "Bearer guess-x"}),  # a read says who, too
    ):
        assert r.status_code == 429, r.text
        assert r.headers["Retry-After"] == "45"
        assert "too many wrong tokens" in r.json()["detail"]
    assert _events(store, rid, "cancel_requested") == []
    # the window over: the right token signs in (and a session is no token tried)
    now[0] += 45.0
    assert c.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
    assert c.get("/api/me").status_code == 200
    assert c.post(cancel, headers=BEARER).status_code == 200


def test_the_backoff_forgets_the_oldest_source_first() -> None:
    from loopwright.web._auth import SignInBackoff

    b = SignInBackoff(limit=2, window_s=60.0, clock=lambda: 0.0, max_sources=2)
    for source in ("a", "a", "b", "b", "c"):
        b.failed(source)
    assert (b.retry_after("a"), b.retry_after("b"), b.retry_after("c")) == (0, 60, 0)


def test_a_short_ui_token_is_refused_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``LOOPWRIGHT_UI_TOKEN`` could be 8 characters, where the printed token is 32 and a
    person's 256 bits: under 16 is refused, one line, exit 2."""
    pytest.importorskip("uvicorn")
    import uvicorn

    from loopwright.cli import main

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)  # a start taken listens not
    store = str(tmp_path / "ui.db")
    with lw.Runtime(store):
        pass
    monkeypatch.setenv("LOOPWRIGHT_UI_TOKEN", "hunter2-secret")  # 14
    assert main(["ui", "--port", "0", "--store", store]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "LOOPWRIGHT_UI_TOKEN" in err and "16 characters" in err
    with pytest.raises(lw.ConfigError, match="16 characters"):
        create_app(store, token="hunter2-secret")
