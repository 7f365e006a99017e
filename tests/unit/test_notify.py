"""Webhook signatures and bodies (loopwright.web._notify, _notify_bodies): what a receiver
relies on."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from typing import Any

import pytest

from loopwright._errors import ConfigError
from loopwright.store import Approval, RunRecord
from loopwright.web._notify import NotifyConfig, check_webhook_url, sign, verify
from loopwright.web._notify_bodies import approval_body, run_end_body

SECRET = "s3cret-for-tests"
BODY = b'{"text":"Approval needed","approval_id":"ap-1"}'


def test_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    want = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, "1700000000", BODY) == "sha256=" + want


def test_verify_accepts_the_signature_and_refuses_tampering() -> None:
    ts = "1700000000"
    sig = sign(SECRET, ts, BODY)
    assert verify(SECRET, BODY, ts, sig, now=1700000010)
    assert not verify(SECRET, BODY + b" ", ts, sig, now=1700000010)  # body changed
    assert not verify("another-secret", BODY, ts, sig, now=1700000010)
    assert not verify(SECRET, BODY, "1700000001", sig, now=1700000010)  # timestamp changed
    assert not verify(SECRET, BODY, ts, sig.replace("sha256=", "sha1="), now=1700000010)
    assert not verify(SECRET, BODY, "not-a-number", sig, now=1700000010)


def test_verify_refuses_a_replay_outside_the_tolerance() -> None:
    ts = "1700000000"
    sig = sign(SECRET, ts, BODY)
    assert verify(SECRET, BODY, ts, sig, now=1700000000 + 299)
    assert not verify(SECRET, BODY, ts, sig, now=1700000000 + 301)
    assert not verify(SECRET, BODY, ts, sig, now=1700000000 - 301)  # from the future
    assert verify(SECRET, BODY, ts, sig, now=1700000000 + 3000, tolerance_s=3600)


def test_verify_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert not verify(SECRET, BODY, "1700000000", "sha256=00", now=1700000000)
    assert calls and calls[0][1] == b"sha256=00"


def test_the_receiver_recipe_in_the_docs_verifies_a_real_signature() -> None:
    """docs/ui.md's five lines, without loopwright, against what the notifier sends."""
    ts = "1700000000"
    headers = {"X-Loopwright-Timestamp": ts, "X-Loopwright-Signature": sign(SECRET, ts, BODY)}
    raw, secret = BODY, SECRET.encode()
    mac = hmac.new(secret, headers["X-Loopwright-Timestamp"].encode() + b"." + raw, "sha256")
    ok = hmac.compare_digest("sha256=" + mac.hexdigest(), headers["X-Loopwright-Signature"])
    assert ok


def _approval(**kw: object) -> Approval:
    base: dict[str, object] = {
        "approval_id": "ap-0123456789",
        "run_id": "ab" * 16,
        "cycle": 2,
        "kind": "risk",
        "rule": "payment_change",
        "what": "change doc/pay\nto 10",
        "why": "touches doc/pay",
        "evidence": {"effects": [{"name": "pay", "args": {"amount": 120.5, "payee": "ACME"}}]},
        "diff": None,
        "action_hash": "h",
        "status": "pending",
        "requested_at": 1700000000.0,
        "expires_at": 1700003600.0,
        "decided_by": None,
        "decided_at": None,
        "note": None,
    }
    base.update(kw)
    return Approval(**base)  # type: ignore[arg-type]


def _run(**kw: object) -> RunRecord:
    base: dict[str, object] = {
        "run_id": "ab" * 16,
        "task_key": "INV-7",
        "loop_name": "invoices",
        "project": "ap",
        "status": "awaiting_approval",
        "stop_reason": None,
        "cycle": 2,
        "best_score": 0.5,
        "cost_usd": 0.25,
        "tokens": 10,
        "seconds": 1.0,
        "spec_ref": None,
        "loop_version": None,
        "contract": {},
        "task": {},
        "packet": None,
        "created_at": 1700000000.0,
        "updated_at": 1700000000.0,
        "ended_at": None,
        "cancel_requested": False,
        "lease_owner": None,
        "lease_expires_at": None,
        "fencing_token": 1,
        "last_seq": 1,
    }
    base.update(kw)
    return RunRecord(**base)  # type: ignore[arg-type]


def test_approval_body_is_a_chat_message_with_structured_fields() -> None:
    body = approval_body(_approval(), _run(), "http://dash.example:8321")
    assert body["event"] == "approval_requested"
    url = "http://dash.example:8321/approvals?q=ap-0123456789"
    assert body["url"] == url
    text = body["text"]
    assert "\n" not in text and text.endswith(url)
    assert "change doc/pay to 10" in text and "INV-7" in text and "payment_change" in text
    assert "pay(amount=120.5, payee=ACME)" in text
    assert body["summary"] == "pay(amount=120.5, payee=ACME)"
    assert body["effects"] == [{"name": "pay", "args": {"amount": 120.5, "payee": "ACME"}}]
    assert body["expires_at"] == "2023-11-14T23:13:20Z"
    assert (body["approval_id"], body["run_id"], body["kind"]) == (
        "ap-0123456789",
        "ab" * 16,
        "risk",
    )
    json.dumps(body)  # all of it is JSON


HOSTILE = "ACME <https://evil.example/pay|Approve here> <!channel> & co"


def test_a_runs_words_make_no_link_or_mention_in_the_chat_text() -> None:
    """An effect's argument, the request's text, a task key or a stop cause (a model's words,
    or a task's) went into ``text`` as they were: Slack, Rocket.Chat and Google Chat show
    ``<https://evil.example/pay|Approve here>`` as a link reading "Approve here", and
    ``<!channel>`` notifies everyone. They are escaped there, as Slack requires; the structured
    fields keep them as they are."""
    a = _approval(
        what=f"pay {HOSTILE}",
        evidence={"effects": [{"name": "pay", "args": {"payee": HOSTILE}}]},
    )
    body = approval_body(a, _run(task_key="<!here>"), "http://dash.example:8321")
    ended = run_end_body(
        _run(status="escalated", task_key="<@U0>", packet={"stop_cause": HOSTILE}), "http://h:1"
    )
    for text in (body["text"], ended["text"]):
        assert "<" not in text and ">" not in text, text
    assert "&lt;https://evil.example/pay|Approve here&gt; &lt;!channel&gt; &amp; co" in body["text"]
    assert "(&lt;!here&gt;)" in body["text"] and "(&lt;@U0&gt;)" in ended["text"]
    assert body["text"].endswith("http://dash.example:8321/approvals?q=ap-0123456789")
    assert body["effects"] == [{"name": "pay", "args": {"payee": HOSTILE}}]
    assert body["what"] == f"pay {HOSTILE}" and ended["stop_cause"] == HOSTILE


def test_approval_body_without_a_dashboard_names_the_command() -> None:
    body = approval_body(_approval(evidence={}, expires_at=None), None, None)
    assert body["url"] is None and body["summary"] is None
    assert body["text"].endswith("loopwright show " + "ab" * 6)


def test_run_end_body_says_how_it_ended() -> None:
    rec = _run(status="escalated", stop_reason="escalated", packet={"stop_cause": "denied by bea"})
    body = run_end_body(rec, "http://h:1")
    assert body["event"] == "run_ended" and body["status"] == "escalated"
    assert "denied by bea" in body["text"] and body["url"] == "http://h:1/runs/" + "ab" * 16


def test_bad_urls_are_one_line_mistakes() -> None:
    for bad in ("hooks.example.com/T0/B0/secretpath", "ftp://h/secretpath", "http://", ""):
        with pytest.raises(ConfigError, match="not an http") as err:
            check_webhook_url(bad)
        assert "secretpath" not in str(err.value)  # a webhook's path is a credential
    with pytest.raises(ConfigError, match="must not be empty"):
        NotifyConfig.of(["http://h/x"], secret=" ")


def test_the_secret_is_not_in_the_config_repr() -> None:
    cfg = NotifyConfig.of(["http://h/x", "http://h/x"], secret=SECRET)
    assert SECRET not in repr(cfg) and "http://h/x" not in repr(cfg)
    assert cfg.urls == ("http://h/x",)


def test_a_webhook_urls_credentials_go_as_basic_auth() -> None:
    """``https://user:password@hooks.example/...``: urllib sends no credentials from a URL
    and looked the whole ``user:password@host`` up as the host, so every post failed."""
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from loopwright.web._notify import http_post

    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.headers.get("Authorization"))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        url = f"http://hook%40ops:pa%3Ass@127.0.0.1:{port}/hooks/approvals"
        assert http_post(url, b"{}", {"Content-Type": "application/json"}, 5.0) == 204
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert seen == ["Basic " + base64.b64encode(b"hook@ops:pa:ss").decode()]


class _Timers:
    """``threading.Timer`` for ``_webhook_post``: started, never firing by itself; the test
    fires it (the deadline passing) at a point it chooses."""

    def __init__(self) -> None:
        self.fns: list[Any] = []
        self.cancelled = 0
        outer = self

        class T:
            daemon = False

            def __init__(self, interval: float, fn: Any) -> None:
                outer.fns.append(fn)

            def start(self) -> None:
                pass

            def cancel(self) -> None:
                outer.cancelled += 1

        self.Timer = T


def _post_in_thread(url: str, outcome: list[Any]) -> threading.Thread:
    from loopwright.web import _webhook_post

    def post() -> None:
        try:  # a per-step timeout far beyond the test: only the deadline can end it
            outcome.append(_webhook_post.http_post(url, b"{}", {}, 3600.0))
        except BaseException as exc:
            outcome.append(exc)

    tx = threading.Thread(target=post, daemon=True)
    tx.start()
    return tx


def _end_at_the_deadline(timers: _Timers, begun: threading.Event, tx: threading.Thread) -> None:
    """Once ``begun`` (the post reached the point under test), the deadline passes (the
    test's timer fires): the post in ``tx`` must end; a limit only a hang reaches."""
    assert begun.wait(60), "the post never reached the point under test"
    [deadline] = timers.fns
    deadline()
    tx.join(60)
    assert not tx.is_alive(), "the post went on past its deadline"


@pytest.mark.parametrize(
    ("sent", "want"),
    [(b"", TimeoutError), (b"HTTP/1.1 200 OK\r\nX-Slow: ", 200)],
    ids=["nothing", "a status line"],
)
def test_a_receiver_that_answers_a_byte_at_a_time_is_cut_off_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch, sent: bytes, want: type[BaseException] | int
) -> None:
    """urllib's timeout limits each read: a receiver sending one byte at a time held the
    post, and that URL's delivery thread, without end. Here it sends ``sent`` and then nothing
    until the test ends; the deadline passing (the timer fired by the test, once the request
    is in) ends the post: a ``TimeoutError`` when no status came, the status when one did
    (the receiver took the request; posting it again would deliver it twice)."""
    import socket
    import threading

    from loopwright.web import _webhook_post

    timers = _Timers()
    monkeypatch.setattr(_webhook_post, "Timer", timers.Timer)
    listener = socket.create_server(("127.0.0.1", 0))
    got, release = threading.Event(), threading.Event()

    def receiver() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"{}"):
                data += conn.recv(4096)
            conn.sendall(sent)  # and nothing more
            got.set()
            release.wait()

    outcome: list[BaseException | int] = []
    rx = threading.Thread(target=receiver, daemon=True)
    rx.start()
    tx = _post_in_thread(f"http://127.0.0.1:{listener.getsockname()[1]}/hook", outcome)
    try:
        _end_at_the_deadline(timers, got, tx)
    finally:
        release.set()
        rx.join(60)
        listener.close()
    [got_back] = outcome
    if want is TimeoutError:
        assert isinstance(got_back, TimeoutError) and "timeout_s=3600" in str(got_back)
    else:
        assert got_back == want
    assert timers.cancelled == 1


def test_the_deadline_ends_a_host_name_lookup_that_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The name was looked up, and the connection made, before the post's sockets were
    watched: a name server that did not answer held the post (and that URL's delivery thread)
    past its deadline, for as long as the lookup took. The lookup here hangs until the test
    ends; the deadline passing (fired by the test once the lookup began) ends the post."""
    from loopwright.web import _webhook_post

    timers = _Timers()
    monkeypatch.setattr(_webhook_post, "Timer", timers.Timer)
    looking, release = threading.Event(), threading.Event()
    real = socket.getaddrinfo

    def hanging(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "hook.example":
            looking.set()
            release.wait()
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    outcome: list[Any] = []
    tx = _post_in_thread("http://hook.example:9/hook", outcome)
    try:
        _end_at_the_deadline(timers, looking, tx)
    finally:
        release.set()
    [got] = outcome
    assert isinstance(got, TimeoutError) and "timeout_s=3600" in str(got)


def test_the_deadline_ends_a_connect_in_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listener whose queue is full drops a new connection's first packet: the connect
    waits for its own timeout (3600 s here; each address of a name in turn), and the socket
    was watched only once connected. The deadline now ends it; fired by the test once the
    address is known, before or during the connect."""
    from loopwright.web import _webhook_post

    timers = _Timers()
    monkeypatch.setattr(_webhook_post, "Timer", timers.Timer)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = socket.create_connection(("127.0.0.1", port))  # fills the queue, never accepted
    resolved = threading.Event()
    real = socket.getaddrinfo

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        found = real("127.0.0.1", *args, **kwargs)
        if host == "full.example":
            resolved.set()
        return found

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    outcome: list[Any] = []
    tx = _post_in_thread(f"http://full.example:{port}/hook", outcome)
    try:
        _end_at_the_deadline(timers, resolved, tx)
    finally:
        queued.close()
        listener.close()
    [got] = outcome
    assert isinstance(got, TimeoutError) and "timeout_s=3600" in str(got)


def test_a_post_answered_in_time_cancels_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer of a post that ended is cancelled, and a deadline that fires after the
    answer changes nothing."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from loopwright.web import _webhook_post

    timers = _Timers()
    monkeypatch.setattr(_webhook_post, "Timer", timers.Timer)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(202)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    import threading

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        assert _webhook_post.http_post(url, b"{}", {}, 5.0) == 202
        assert timers.cancelled == 1
        timers.fns[0]()  # late: nothing is open any more
        assert _webhook_post.http_post(url, b"{}", {}, 5.0) == 202
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_address_whose_family_this_host_cannot_open_is_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From review (review43): the post's own connect made each address's socket outside the
    ``try`` that passes on to the next address, so a name whose first address is of a family
    this host cannot open (IPv6 where it is disabled: "Address family not supported") failed
    the post; ``socket.create_connection``, used before, tries the next address."""
    import http.server

    from loopwright.web import _webhook_post

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    port = server.server_address[1]
    served = threading.Thread(target=server.serve_forever, daemon=True)
    served.start()
    real = socket.getaddrinfo

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "dual.example":
            return real(host, *args, **kwargs)
        unopenable = (255, socket.SOCK_STREAM, 0, "", ("::1", port, 0, 0))
        return [unopenable, *real("127.0.0.1", *args, **kwargs)]

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    try:
        assert _webhook_post.http_post(f"http://dual.example:{port}/hook", b"{}", {}, 60.0) == 204
    finally:
        server.shutdown()
        server.server_close()
        served.join(60)
