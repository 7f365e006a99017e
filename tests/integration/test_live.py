"""Live updates and webhooks over real stores: the store poller (``web/_feed``), the signed
webhook to a loopback listener with its retry, the server-sent event stream of a served app.

Runs are driven by the web tests' small loop (it parks for approval on a payment change).
Waits poll with generous deadlines only as a safety net; nothing asserts on elapsed time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.dashboard import dashboard
from support.modules import load_sibling

import loopwright as lw
from loopwright.store import open_store
from loopwright.web import create_app
from loopwright.web._feed import Change, Feed
from loopwright.web._live import Messages
from loopwright.web._notify import MARKER, Notifier, NotifyConfig, verify

TOKEN = "live-token-0123456789"
SECRET = "webhook-secret-for-tests"
LOCAL = "http://127.0.0.1"
TASK = {"id": "t", "artifacts": {"doc": {"a": 0, "b": 0, "title": "", "pay": 0}}}


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_live_web_helpers")


WEB = _web()


def park(tmp: Path, store: str, key: str) -> str:
    """Run the web tests' loop on ``store`` until it parks for approval; its run id."""
    if not (tmp / "web.toml").exists():
        (tmp / "webloop.py").write_text(WEB.LOOP_MODULE)
        (tmp / "web.toml").write_text(WEB.SPEC)
    loop = lw.load_spec(tmp / "web.toml")
    with lw.Runtime(store) as rt:
        res = rt.run_sync(loop, TASK, task_key=key)
    assert res.status == "awaiting_approval"
    return res.run_id


def until(check: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    """``check()``'s first truthy value, polled; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "live.db")


def test_feed_follows_new_runs_requests_and_decisions(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = open_store(store_url)
    try:
        feed = Feed(st)
        stream = Messages()  # what /api/events sends
        feed.listen(stream)
        assert feed.poll() == []  # the first look only records where things stand
        run_id = park(tmp_path, store_url, "first")
        got = {(c.kind, c.new): c for c in feed.poll()}
        assert set(got) == {("run", True), ("approval", True)}
        run, req = got["run", True].run, got["approval", True].approval
        assert run is not None and run.run_id == run_id and run.status == "awaiting_approval"
        assert req is not None and req.run_id == run_id and req.status == "pending"
        assert feed.poll() == []  # nothing changed since
        with lw.Runtime(store_url) as rt:
            rt.approve(run_id, by="ana")
            rt.resume_sync(run_id, lw.load_spec(tmp_path / "web.toml"))
        changes = feed.poll()
        kinds = {
            (c.kind, c.run.status if c.run else c.approval.status if c.approval else "")
            for c in changes
        }
        assert kinds == {("run", "accepted"), ("approval", "approved")}, kinds
        # Browsers get the changes after the id they saw last, as event-stream text.
        sent = stream.after(0)
        assert [seq for seq, _ in sent] == [1, 2, *(c.seq for c in changes)]
        assert [seq for seq, _ in stream.after(2)] == [c.seq for c in changes]
        assert sent[0][1].startswith("id: 1\nevent: run\ndata: {") and run_id in sent[0][1]
        # The marks: open runs and the runs created since; an ended old run is not read.
        assert [m.run_id for m in st.run_marks(created_since=0)] == [run_id]
        assert st.run_marks(created_since=time.time() + 3600) == []
        assert st.pending_approval_marks() == []
        # A second server starting now gets no request left to notify.
        fresh = Feed(st)
        assert fresh.poll() == []
        # An ended run reopened by a person's edit changes, but is not a new run (a feed that
        # looks back no further than its first look has not seen it).
        monkeypatch.setattr("loopwright.web._feed.CREATED_MARGIN_S", 0.0)
        fresh = Feed(st)
        assert fresh.poll() == [] and st.run_marks(created_since=time.time()) == []
        with lw.Runtime(store_url) as rt:
            rt.edit(run_id, "doc/pay", 11, by="ana", note="more")
        (reopened,) = fresh.poll()
        assert reopened.run is not None and reopened.run.run_id == run_id
        assert reopened.run.status != "accepted" and not reopened.new
    finally:
        st.close()


class Listener:
    """A loopback webhook receiver answering with the given statuses, then 200."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.got: list[tuple[int, dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = outer.statuses.pop(0) if outer.statuses else 200
                outer.got.append((status, dict(self.headers.items()), body))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T0/B0/secretpath"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener([500])
    try:
        yield lst
    finally:
        lst.close()


def _markers(store: str, run_id: str) -> list[dict[str, Any]]:
    st = open_store(store)
    try:
        return [e.data for e in st.events_of_kind(run_id, MARKER)]
    finally:
        st.close()


def test_webhook_signed_retried_and_sent_once(
    listener: Listener, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = str(tmp_path / "live.db")
    open_store(store).close()
    caplog.set_level(logging.DEBUG, logger="loopwright.notify")  # (a try: a debug line)
    cfg = dataclasses.replace(
        NotifyConfig.of([listener.url], secret=SECRET, link_base="http://dash.example:8321"),
        first_wait_s=0.05,
    )
    app = create_app(store, token=TOKEN, notify=cfg)
    with TestClient(app, base_url=LOCAL):  # the lifespan starts the poller and the notifier
        run_id = park(tmp_path, store, "to-notify")  # as if another process ran it
        until(lambda: len(listener.got) >= 2, "the webhook and its retry")
        marks = until(lambda: _markers(store, run_id), "the delivery marker")
    (first, _, body1), (second, headers, body) = listener.got[:2]
    assert (first, second) == (500, 200) and body1 == body  # retried, the same message
    assert verify(
        SECRET, body, headers["X-Loopwright-Timestamp"], headers["X-Loopwright-Signature"]
    )
    assert headers["X-Loopwright-Event"] == "approval_requested"
    msg = json.loads(body)
    approval = open_store(store).approvals(run_id=run_id)[0]
    assert msg["approval_id"] == approval.approval_id and msg["run_id"] == run_id
    assert msg["kind"] == "risk" and msg["url"].startswith("http://dash.example:8321/approvals?q=")
    assert msg["url"] in msg["text"] and msg["what"] == approval.what
    assert len(listener.got) == 2  # delivered: not posted again
    assert marks == [
        {"key": f"approval:{approval.approval_id}", "target": marks[0]["target"], "attempts": 2}
    ]
    # Neither the secret nor the webhook's path reaches the store or the log.
    every = json.dumps([e.to_dict() for e in open_store(store).events(run_id)])
    logged = caplog.text
    for secret in (SECRET, "secretpath"):
        assert secret not in every and secret not in logged
    assert "HTTP 500" in logged

    # A restarted server finds the request delivered to this URL and posts nothing; a new URL
    # still gets it (so the check above can fail).
    posted: list[str] = []

    def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
        posted.append(url)
        return 200

    st = open_store(store)
    try:
        for urls in ([listener.url], ["http://elsewhere.example/hook"]):
            feed = Feed(st)
            notifier = Notifier(st, NotifyConfig.of(urls, secret=SECRET), post=post)
            feed.listen(notifier)
            feed.poll()
            notifier.drain()
        assert posted == ["http://elsewhere.example/hook"]
    finally:
        st.close()


def test_requests_already_waiting_are_posted_as_one_message_when_many(tmp_path: Path) -> None:
    """Turning notifications on over a store with many waiting requests posts one message
    listing them, not one per request; a few still go one by one; a restart posts nothing."""
    store = str(tmp_path / "live.db")
    ids = [park(tmp_path, store, f"waiting-{i}") for i in range(7)]
    posted: list[tuple[str, dict[str, Any]]] = []

    def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
        posted.append((headers["X-Loopwright-Event"], json.loads(body)))
        return 200

    st = open_store(store)
    try:

        def start(urls: list[str], posts: int) -> None:  # a server starting to notify
            cfg = dataclasses.replace(
                NotifyConfig.of(urls, link_base="http://dash.example"), baseline_posts=posts
            )
            feed = Feed(st)
            notifier = Notifier(st, cfg, post=post)
            feed.listen(notifier)
            feed.poll()
            notifier.drain()

        start(["http://chat.example/hook"], 5)
        [(event, msg)] = posted
        assert event == "approvals_waiting" and msg["count"] == 7
        assert msg["url"] == "http://dash.example/approvals" and msg["url"] in msg["text"]
        assert sorted(a["run_id"] for a in msg["approvals"]) == sorted(ids)
        for run_id in ids:  # each request counts as delivered to that URL
            assert [m.get("summary") for m in _markers(store, run_id)] == [True]
        posted.clear()
        start(["http://chat.example/hook"], 5)  # a restart: nothing left to post
        assert posted == []
        start(["http://other.example/hook"], 10)  # few enough for this URL: one by one
        assert [e for e, _ in posted] == ["approval_requested"] * 7
    finally:
        st.close()


def test_webhook_gives_up_on_a_client_error_and_never_raises(tmp_path: Path) -> None:
    store = str(tmp_path / "live.db")
    run_id = park(tmp_path, store, "refused")
    lst = Listener([404])
    st = open_store(store)
    try:
        feed = Feed(st)
        notifier = Notifier(st, NotifyConfig.of([lst.url]))
        feed.listen(notifier)
        feed.poll()  # the pending request is in the first look
        notifier.drain()
        assert [s for s, _, _ in lst.got] == [404]  # not retried: the receiver refused it
        assert notifier.failed == 1
        # notify56c: given up as a settling is: marked failed, audited (it was neither)
        [mark] = [e.data for e in st.events_of_kind(run_id, MARKER)]
        assert (mark["failed"], mark["rounds"], mark["error"]) == (True, 1, "HTTP 404")
        [a] = st.audit(action="notify")
        assert (a.target, a.outcome) == (f"run {run_id}", "failed")
        assert "X-Loopwright-Signature" not in lst.got[0][1]  # no secret: unsigned
    finally:
        st.close()
        lst.close()


def _read_request(conn: socket.socket) -> bytes:
    """One whole HTTP request from ``conn`` (its headers, then Content-Length bytes of body),
    so that the answer never comes while the client is still sending."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    size = next(
        (int(v) for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n")[1:])
         if k.strip().lower() == b"content-length"),
        0,
    )  # fmt: skip
    while len(body) < size:
        more = conn.recv(65536)
        if not more:
            break
        body += more
    return head + b"\r\n\r\n" + body


def test_webhook_answered_with_something_not_http_is_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver (or a proxy) answering with a broken status line raised http.client's
    BadStatusLine, which is no OSError: the delivery stopped at its first attempt (not retried,
    not counted failed) and the log had a traceback. It is a failed attempt, retried."""
    store = str(tmp_path / "live.db")
    run_id = park(tmp_path, store, "not-http")
    answers = [b"HELLO\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]
    got: list[bytes] = []
    listening = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        for reply in answers:
            conn, _ = listening.accept()
            with conn:
                got.append(_read_request(conn))
                conn.sendall(reply)

    server = threading.Thread(target=answer, daemon=True)
    server.start()
    url = f"http://127.0.0.1:{listening.getsockname()[1]}/hook"
    st = open_store(store)
    try:
        notifier = Notifier(st, dataclasses.replace(NotifyConfig.of([url]), first_wait_s=0.0))
        feed = Feed(st)
        feed.listen(notifier)
        feed.poll()
        with caplog.at_level(logging.DEBUG, logger="loopwright.notify"):  # (a try: debug)
            notifier.drain()
        server.join(timeout=30)
        assert len(got) == 2 and (notifier.delivered, notifier.failed) == (1, 0)
        [mark] = [e.data for e in st.events_of_kind(run_id, MARKER)]
        assert mark["attempts"] == 2
        assert "BadStatusLine" in caplog.text and "Traceback" not in caplog.text
    finally:
        st.close()
        listening.close()


@contextlib.contextmanager
def served(app: Any) -> Iterator[int]:
    """``app`` under uvicorn on a free loopback port, in this process; yields the port."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        until(lambda: server.started, "uvicorn to start")
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@contextlib.contextmanager
def streaming(tmp_path: Path) -> Iterator[tuple[str, Any, http.client.HTTPConnection]]:
    """A fresh store served by the dashboard, once its poller has had its first look: the
    store's path, the app and a connection to it."""
    store = str(tmp_path / "live.db")
    open_store(store).close()
    app = create_app(store, token=TOKEN)
    with served(app) as port:
        until(app.state.feed.ready.is_set, "the poller's first look")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            yield store, app, conn
        finally:
            conn.close()


def live_after(html: str) -> int:
    """The stream position a page was drawn with."""
    m = re.search(r'data-live-after="(\d+)"', html)
    assert m, html[:300]
    return int(m.group(1))


def read_events(
    resp: http.client.HTTPResponse, want: Callable[[str, dict[str, Any]], bool]
) -> list[tuple[str, dict[str, Any]]]:
    """Events read from the stream until one satisfies ``want``."""
    got: list[tuple[str, dict[str, Any]]] = []
    kind = ""
    while True:
        line = resp.readline().decode()
        if not line:
            pytest.fail(f"the stream ended; events so far: {got}")
        if line.startswith("event: "):
            kind = line[7:].strip()
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            got.append((kind, data))
            if want(kind, data):
                return got


def test_event_stream_sends_run_and_request_changes(tmp_path: Path) -> None:
    with streaming(tmp_path) as (store, _, conn):
        conn.request("GET", "/api/events", headers={"Accept": "text/event-stream"})
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.readline() == b"retry: 3000\n"
        run_id = park(tmp_path, store, "streamed")
        got = read_events(resp, lambda k, d: k == "approval" and d["run_id"] == run_id)
        runs = [d for k, d in got if k == "run"]
        assert runs and runs[0]["run_id"] == run_id and runs[0]["new"] is True
        assert "task" not in runs[0] and "evidence" not in got[-1][1]  # summaries only
        assert got[-1][1]["status"] == "pending" and got[-1][1]["new"] is True
        with lw.Runtime(store) as rt:
            rt.deny(run_id, by="bea", note="no")
        got = read_events(resp, lambda k, d: k == "approval" and d["status"] == "denied")
        assert got[-1][1]["decided_by"] == "bea"


def test_a_change_found_while_a_page_loads_reaches_it(tmp_path: Path) -> None:
    """A page carries the stream's position it was drawn at; connecting with ``?after=`` that
    position gets a change the poller found between drawing and connecting (a browser on a
    loaded machine connects seconds after the page was drawn)."""
    with streaming(tmp_path) as (store, app, conn):
        conn.request("GET", "/")
        drawn = live_after(conn.getresponse().read().decode())
        run_id = park(tmp_path, store, "while-loading")
        until(lambda: app.state.messages.last_seq > drawn, "the poller finding the new run")
        conn.request("GET", f"/api/events?after={drawn}", headers={"Accept": "text/event-stream"})
        resp = conn.getresponse()
        assert resp.readline() == b"retry: 3000\n"
        got = read_events(resp, lambda k, d: k == "run" and d["run_id"] == run_id)
        assert got[-1][1]["new"] is True


def test_a_change_found_while_the_server_draws_a_page_is_after_its_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The position a page carries is taken when its request begins, so a change the poller
    finds while the route reads the store is after it (the page may show the old state)."""
    from loopwright.web import _run_page

    store = str(tmp_path / "live.db")
    run_id = park(tmp_path, store, "drawn-while-changing")
    app = create_app(store, token=TOKEN)
    feed = app.state.feed
    feed.poll()  # the first look: where things stand
    drawn_with = _run_page.timeline

    def changed_meanwhile(*args: Any, **kw: Any) -> Any:
        with lw.Runtime(store) as rt:
            rt.cancel(run_id, by="bea")
        feed.poll()  # the poller finds it while the page is being drawn
        return drawn_with(*args, **kw)

    monkeypatch.setattr(_run_page, "timeline", changed_meanwhile)
    html = TestClient(app, base_url=LOCAL).get(f"/runs/{run_id}").text
    later = [text for _, text in app.state.messages.after(live_after(html))]
    assert any("event: run" in t and run_id in t and "cancelled" in t for t in later), later


def test_event_stream_needs_the_token_where_reads_do(tmp_path: Path) -> None:
    store = str(tmp_path / "live.db")
    open_store(store).close()
    app = create_app(store, token=TOKEN, require_token_for_reads=True)
    c = TestClient(app, base_url=LOCAL)
    r = c.get("/api/events")
    assert r.status_code == 401 and r.json() == {"detail": "token required"}
    assert (
        "/api/events"
        in c.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()["paths"]
    )


def test_a_worker_notifies_the_requests_its_runs_raise(listener: Listener, tmp_path: Path) -> None:
    """`loopwright worker --notify`: the run it drives parks; the request is posted (after one
    500) before the worker exits, signed, linking to the dashboard named."""
    import os
    import subprocess
    import sys

    store = str(tmp_path / "live.db")
    (tmp_path / "webloop.py").write_text(WEB.LOOP_MODULE)
    (tmp_path / "web.toml").write_text(WEB.SPEC)
    with lw.Runtime(store) as rt:
        run_id = rt.create(lw.load_spec(tmp_path / "web.toml"), TASK, task_key="by-worker")[
            0
        ].run_id
    exe = str(Path(sys.executable).with_name("loopwright"))
    env = {**os.environ, "LOOPWRIGHT_NOTIFY_SECRET": SECRET, "LOOPWRIGHT_NOTIFY": listener.url}
    done = subprocess.run(
        [exe, "worker", "--once", "--store", store, "--dashboard-url", "http://dash.example/"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "webhooks: new approval requests to http://127.0.0.1:" in done.stdout
    assert "secretpath" not in done.stdout + done.stderr
    assert [s for s, _, _ in listener.got] == [500, 200]
    _, headers, body = listener.got[-1]
    ts, sig = headers["X-Loopwright-Timestamp"], headers["X-Loopwright-Signature"]
    assert verify(SECRET, body, ts, sig)
    msg = json.loads(body)
    assert msg["run_id"] == run_id and msg["url"].startswith("http://dash.example/approvals?q=")
    assert _markers(store, run_id)[0]["attempts"] == 2


def test_a_notification_link_survives_signing_in(tmp_path: Path) -> None:
    """On a dashboard whose reads need the token, the webhook's link (/approvals?q=ID) leads
    through the sign-in page back to that request, query included."""
    store = str(tmp_path / "live.db")
    run_id = park(tmp_path, store, "linked")
    aid = open_store(store).approvals(run_id=run_id)[0].approval_id
    c = dashboard(store, token=TOKEN, require_token_for_reads=True)
    r = c.get(f"/approvals?q={aid}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/login?next=/approvals%3Fq%3D{aid}"
    r = c.post(
        "/login", data={"token": TOKEN, "next": f"/approvals?q={aid}"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == f"/approvals?q={aid}"
    page = c.get(r.headers["location"]).text
    assert f'data-approval-id="{aid}"' in page


def test_the_poller_reads_nothing_while_nobody_uses_the_dashboard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each look reads every open run and pending request (90 ms a second at 50,000 runs): the
    # served dashboard looked once a second with nobody connected. Now it looks at start, then
    # only while a page or stream is in use; a change made meanwhile is still found, after the
    # position the next page is drawn at.
    store = str(tmp_path / "live.db")
    open_store(store).close()
    app = create_app(store, token=TOKEN)
    feed = app.state.feed
    feed.interval_s = 0.01
    looks: list[float] = []
    real = type(feed.store).run_marks

    def counted(self: Any, **kw: Any) -> Any:
        looks.append(time.monotonic())
        return real(self, **kw)

    monkeypatch.setattr(type(feed.store), "run_marks", counted)
    with TestClient(app, base_url=LOCAL) as client:  # the lifespan starts the poller
        until(feed.ready.is_set, "the poller's first look")
        time.sleep(0.5)  # fifty intervals, nobody connected
        assert len(looks) == 1, len(looks)
        run_id = park(tmp_path, store, "while-idle")
        time.sleep(0.2)
        assert len(looks) == 1, len(looks)
        page = client.get("/")  # a page: the poller wakes
        assert page.status_code == 200, page.status_code
        after = live_after(page.text)  # the position the page was drawn at
        until(lambda: len(looks) > 2, "the poller to look again")
        sent = until(lambda: app.state.messages.after(after), "the change made while idle")
        assert any(run_id in text for _, text in sent), sent


def test_a_health_probe_does_not_keep_the_poller_looking(tmp_path: Path) -> None:
    # Every request woke the poller and kept it looking for a minute: a liveness probe every
    # few seconds kept it looking for good, with nobody using the dashboard. /healthz is the
    # probes' path: open (even with tokens required for reads), and no use of the dashboard.
    store = str(tmp_path / "live.db")
    open_store(store).close()
    app = create_app(store, token=TOKEN, require_token_for_reads=True)
    messages = app.state.messages
    with TestClient(app, base_url=LOCAL) as client:
        assert not messages.active()
        for _ in range(3):
            r = client.get("/healthz")
            assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert not messages.active()  # the poller stays asleep
        client.get("/login")  # a person at the dashboard: it wakes
        assert messages.active()


def _rows_read(st: Any, query: str, args: Any) -> int:
    """Rows of ``events`` a statement reads: EXPLAIN ANALYZE's scans on PostgreSQL."""

    def walk(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Relation Name") == "events" or "events" in str(node.get("Index Name", "")):
            own = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            own = (own + node.get("Rows Removed by Index Recheck", 0)) * node.get("Actual Loops", 1)
        return own + sum(walk(c) for c in node.get("Plans", ()))

    with st._conn() as conn:
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, args).fetchone()
    return walk(plan["Plan"])


def test_a_delivery_reads_as_much_however_long_the_runs_log(store_url: str, tmp_path: Path) -> None:
    """ "Was this request posted?" read every event of its run (kept by kind after the read):
    each delivery cost more the longer the run. The markers have a partial index of their
    own: a request of a run with 2,000 more events costs a delivery the same store work (VM
    steps on SQLite, rows read on PostgreSQL) — and a restart still posts nothing twice."""
    _delivery_costs(store_url, tmp_path, lambda i: ("note", {"i": i}))


def test_a_delivery_reads_as_much_however_many_requests_its_run_had_posted(
    store_url: str, tmp_path: Path
) -> None:
    """The markers' partial index held every marker of the run, and a delivery read them all:
    a run with 2,000 requests posted before cost a delivery 2,000 marker rows (SQLite: ~16,000
    VM steps; PostgreSQL: 2,001 rows). The markers are indexed by key too: the same work."""
    from loopwright.web._notify import target_id

    target = target_id(HOOK)
    _delivery_costs(
        store_url, tmp_path, lambda i: (MARKER, {"key": f"approval:old-{i}", "target": target})
    )


HOOK = "http://chat.example/hook"


def _delivery_costs(
    store_url: str, tmp_path: Path, filler: Callable[[int], tuple[str, dict[str, Any]]]
) -> None:
    """Deliver a request of a short run and of one with 2,000 more ``filler`` events, twice
    (the second time as a restarted server); each delivery's store work is the same."""
    from loopwright.store import NewEvent

    short, long = park(tmp_path, store_url, "short-log"), park(tmp_path, store_url, "long-log")
    st = open_store(store_url)
    try:
        st.append_events(long, [NewEvent(1, *filler(i)) for i in range(2000)])
        posted: list[str] = []

        def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
            posted.append(json.loads(body)["run_id"])
            return 200

        cost: dict[str, int] = {}
        sqlite = not store_url.startswith("postgresql")
        for _ in range(2):  # then as a restarted server: nothing is posted again
            feed = Feed(st)
            notifier = Notifier(st, NotifyConfig.of([HOOK]), post=post)
            feed.listen(lambda c: None)  # the first look's requests come as new ones
            feed.poll()
            for run_id in (short, long):
                [a] = st.approvals(run_id=run_id, status="pending")
                notifier(dataclasses.replace(Change(0, "approval", approval=a), new=True))
                steps = [0]
                seen: list[tuple[str, Any]] = []
                if sqlite:

                    def step(steps: list[int] = steps) -> int:
                        steps[0] += 1
                        return 0

                    st._db.set_progress_handler(step, 1)  # type: ignore[attr-defined]
                else:
                    real = st._all  # type: ignore[attr-defined]

                    def spy(q: str, args: Any, real: Any = real, seen: Any = seen) -> Any:
                        seen.append((q, args))
                        return real(q, args)

                    st._all = spy  # type: ignore[attr-defined]
                try:
                    notifier.drain()
                finally:
                    if sqlite:
                        st._db.set_progress_handler(None, 1)  # type: ignore[attr-defined]
                    else:
                        del st._all  # type: ignore[attr-defined]
                if not sqlite:
                    steps[0] = sum(_rows_read(st, q, a) for q, a in seen if "events" in q)
                cost.setdefault(run_id, steps[0])
        assert posted == [short, long]  # once each, across the restart
        assert cost[long] <= cost[short] + 20, cost  # not 2,000 events more
    finally:
        st.close()


def test_a_revoked_users_open_stream_sends_nothing_more(tmp_path: Path) -> None:
    """A stream opened while signed in is asked again before each change it sends: once its
    user is revoked, the next change ends the stream instead of reaching them."""
    from loopwright._authority import hash_token

    store = str(tmp_path / "live.db")
    with lw.Runtime(store) as rt:
        for name, role in (("root", "admin"), ("vic", "viewer")):
            rt.store.add_user(name, roles=[role], limits={}, by="test", now=time.time())
            rt.store.set_token(name, hash_token(f"tok-{name}-0123456789"), now=time.time())
    app = create_app(store, token=TOKEN)
    with served(app) as port:
        until(app.state.feed.ready.is_set, "the poller's first look")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn.request(
                "GET", "/api/events", headers={"Authorization": "Bearer tok-vic-0123456789"}
            )
            resp = conn.getresponse()
            assert resp.status == 200 and resp.readline() == b"retry: 3000\n"
            seen = park(tmp_path, store, "seen-by-vic")
            read_events(resp, lambda k, d: k == "run" and d["run_id"] == seen)
            with lw.Runtime(store) as rt:
                rt.store.revoke_user("vic", now=time.time())
            hidden = park(tmp_path, store, "after-revocation")
            # Read until the stream ends (after the fix) or sends the new run (before it).
            while line := resp.readline().decode():
                assert hidden not in line, "a revoked user's stream was sent a change"
        finally:
            conn.close()
