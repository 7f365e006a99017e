"""Test loops without a model: a scripted OpenAI-compatible server on loopback.

``FakeOpenAI`` is a real HTTP server (stdlib ``http.server``, one thread per request) on
``127.0.0.1`` at an ephemeral port. It answers ``POST /v1/chat/completions`` in OpenAI's format
from scripted queues of replies, and records every request, so that a test can assert what a
model was shown. Point ``ChatActor``/``ChatReviewer`` (or any OpenAI client) at its
``base_url``; nothing leaves the machine and no key is needed::

    from loopwright.adapters import ChatActor
    from loopwright.testing import FakeOpenAI, fail, ok

    with FakeOpenAI() as server:
        server.script(fail(429, retry_after=1), ok({"edits": []}), model="actor")
        actor = ChatActor("actor", base_url=server.base_url)
        ...                                     # run your loop with it
        assert "expected" in server.requests_for("actor")[-1].text

Replies (``Reply``; helpers ``ok``, ``fail``, ``slow``, ``garbage``) carry the content (a dict
or list is sent as JSON text, a string as is), the ``usage`` numbers, an HTTP status with
headers (``Retry-After``), a delay (longer than a client's timeout to test timeouts), a body
trickled a byte at a time (``trickle_s``: valid headers at once, then a reply that takes its
time to arrive), a refusal, or raw bytes. ``before_headers`` and ``mid_body`` are called in the
server's thread before the status line, and after the body's first byte (a stream's first
event) before the rest: a test that moves a client's clock there makes the reply late at a
point it chose, without waiting for anything. A queue is chosen per request: the most specific one
whose ``model`` matches and whose ``when`` text occurs in the request's messages. A callable in a queue (``Request ->
Reply``) answers every request that reaches it and is never used up: a small rule-based "model".
A request no queue answers gets 418 (a permanent error that names the model), so a missing
script fails loudly.

``reject={"json_schema"}`` makes the server answer 400 to that ``response_format`` type (or
``"tools"``), as servers without structured outputs do.

A request with ``"stream": true`` is answered as OpenAI streams: server-sent
``chat.completion.chunk`` events, the content (or a tool call's arguments) in pieces of
``Reply.chunk_chars`` characters, the usage in a last chunk when ``stream_options.include_usage``
asks for it, then ``data: [DONE]``; ``Reply.cut_after`` breaks the stream off after that many
pieces (a connection dropped mid-reply).

For limits: ``in_flight`` is the number of chat requests being answered now and
``max_in_flight`` the most there ever were at once; ``served_tokens`` adds up the usage of
every reply sent. ``sent_in_full`` counts the answers written to their last byte (a trickled
one whose client gave up, or that ``stop()`` ended, is not). ``pause()`` holds every request
that arrives (counted in flight) until ``resume()``, so that a test can see how many a client
lets through at once without timing anything; ``wait_in_flight(n)`` waits until ``n`` are.

This module imports only the standard library: it works without the ``openai`` extra (the
adapters that talk to it need that extra). The server's threads are daemons, so a process that
forgets to ``stop()`` it still exits.

``FakeImages`` (loaded on first use, from ``loopwright._fake_images``) is the same for the images
API: ``/v1/images/generations`` and ``/v1/images/edits`` with deterministic PNGs drawn from the
prompt's layout and masks honoured (docs/images.md).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._fake_images import FakeImages

__all__ = ["FakeImages", "FakeOpenAI", "Reply", "Request", "fail", "garbage", "ok", "slow"]


def __getattr__(name: str) -> Any:
    # the image server on first use: it brings loopwright's PNG code, which FakeOpenAI's users
    # need not load
    if name == "FakeImages":
        from ._fake_images import FakeImages

        return FakeImages
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    content: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    prompt_tokens: int = 120
    completion_tokens: int = 30
    cached_tokens: int = 0
    usage: bool = True
    finish_reason: str = "stop"
    refusal: str | None = None
    tool_call: bool | None = None  # None: answer with a tool call when the request offered tools
    error: str = "scripted failure"
    raw_body: bytes | None = None
    model: str | None = None  # the model name reported back (default: the one asked for)
    chunk_chars: int = 8  # a streamed reply's text comes in pieces of this many characters
    cut_after: int | None = None  # a streamed reply breaks off after this many pieces
    trickle_s: float = 0.0  # the body (a stream's events too) sent a byte at a time, this apart
    # called in the server's thread before the status line is sent, and once the body's first
    # byte (a stream's first event) is, before the rest: a test moves a clock there (a reply
    # late at a point the test chose, without waiting for it)
    before_headers: Callable[[], object] | None = None
    mid_body: Callable[[], object] | None = None


def ok(content: Any, **kw: Any) -> Reply:
    """A successful reply with ``content`` (a dict or list is sent as JSON text)."""
    return Reply(content=content, **kw)


def fail(status: int, message: str = "scripted failure", *, retry_after: Any = None) -> Reply:
    """An HTTP error in OpenAI's error format, with ``Retry-After`` when given."""
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return Reply(status=status, headers=headers, error=message)


def slow(content: Any, delay_s: float, **kw: Any) -> Reply:
    """A reply that starts only after ``delay_s`` seconds (a client timeout test)."""
    return Reply(content=content, delay_s=delay_s, **kw)


def garbage(text: str = "Sure! Here is my answer: the doc looks fine.") -> Reply:
    """A successful HTTP reply whose content is not the JSON the adapter asked for."""
    return Reply(content=text)


@dataclass(frozen=True)
class Request:
    """A request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def text(self) -> str:
        """Every message's content, joined: what the model was shown."""
        out = []
        for m in self.messages:
            c = m.get("content")
            if isinstance(c, list):
                c = "".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
            out.append(str(c or ""))
        return "\n".join(out)

    @property
    def response_format(self) -> str | None:
        rf = self.body.get("response_format")
        if isinstance(rf, dict):
            return str(rf.get("type"))
        return "tools" if self.body.get("tools") else None


Responder = Callable[[Request], Reply]


@dataclass
class _Queue:
    model: str | None
    when: str | None
    items: list[Reply | Responder]

    def matches(self, req: Request) -> bool:
        if not self.items:
            return False
        if self.model is not None and req.model != self.model:
            return False
        return self.when is None or self.when in req.text


class LoopbackServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that says nothing when a client goes away: a client that
    closes a kept-alive connection, or gives up mid-reply (a timeout, a refused redirect), is
    how a client under test behaves, and ``socketserver`` printed a traceback to stderr for
    it ("Exception occurred during processing of request"). Any other error of a handler is
    printed as before."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class FakeOpenAI:
    """The server; a context manager that starts and stops it."""

    def __init__(self, *, reject: Iterable[str] = ()) -> None:
        self.reject = set(reject)
        self.requests: list[Request] = []
        self._queues: list[_Queue] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._ids = 0
        self._changed = threading.Condition(self._lock)
        self._running = threading.Event()
        self._running.set()
        self.in_flight = 0
        self.max_in_flight = 0
        self.served_prompt_tokens = 0
        self.served_completion_tokens = 0
        self.sent_in_full = 0

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
        handler = type("Handler", (_Handler,), {"fake": self})
        server = LoopbackServer(("127.0.0.1", 0), handler)
        server.block_on_close = False  # a sleeping (timed-out) reply must not hold up stop()
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "start the server first"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting and inspection -------------------------------------------------------
    def script(
        self, *replies: Reply | Responder, model: str | None = None, when: str | None = None
    ) -> None:
        """Queue replies for requests to ``model`` (any model when ``None``) whose messages
        contain ``when`` (any when ``None``). Queues with the same selector are extended."""
        with self._lock:
            for q in self._queues:
                if q.model == model and q.when == when:
                    q.items.extend(replies)
                    return
            self._queues.append(_Queue(model, when, list(replies)))

    def requests_for(self, model: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.model == model]

    @property
    def pending(self) -> int:
        """Scripted replies not yet used (callables not counted)."""
        with self._lock:
            return sum(1 for q in self._queues for i in q.items if isinstance(i, Reply))

    @property
    def served_tokens(self) -> int:
        """The tokens of every reply sent (prompt and completion), as their usage said."""
        with self._lock:
            return self.served_prompt_tokens + self.served_completion_tokens

    def pause(self) -> None:
        """Hold every chat request that arrives from now on (counted in flight) until
        ``resume()``."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def wait_in_flight(self, n: int, timeout_s: float = 30.0) -> bool:
        """Wait until at least ``n`` chat requests are in flight; whether they were."""
        with self._changed:
            return self._changed.wait_for(lambda: self.in_flight >= n, timeout_s)

    # --- answering ------------------------------------------------------------------------
    def _enter(self) -> None:
        with self._changed:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._changed.notify_all()
        while not self._running.wait(0.05):  # paused: hold it, unless the server stops
            if self._stopping.is_set():
                return

    def _leave(self) -> None:
        with self._changed:
            self.in_flight -= 1
            self._changed.notify_all()

    def _served(self, reply: Reply) -> None:
        if reply.usage:
            with self._lock:
                self.served_prompt_tokens += reply.prompt_tokens
                self.served_completion_tokens += reply.completion_tokens

    def _next(self, req: Request) -> Reply | None:
        with self._lock:
            self.requests.append(req)
            # most specific selector first: model and text, then model, then text, then any
            order = sorted(self._queues, key=lambda q: (q.model is None, q.when is None))
            for q in order:
                if q.matches(req):
                    item = q.items[0]
                    if isinstance(item, Reply):
                        q.items.pop(0)
                        return item
                    return item(req)
        return None

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def _sent(self) -> None:
        with self._lock:
            self.sent_in_full += 1

    def _new_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids


def _error(status: int, message: str, kind: str = "scripted_error") -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def _send(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        trickle_s: float = 0.0,
        mid_body: Callable[[], object] | None = None,
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if mid_body is not None and body:
                self._write(body[:1], 0.0)
                mid_body()
                body = body[1:]
            if self._write(body, trickle_s):
                self.fake._sent()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): nothing to answer

    def _write(self, data: bytes, trickle_s: float, chunked: bool = False) -> bool:
        """Write ``data`` (as one HTTP chunk when ``chunked``), or a byte at a time
        ``trickle_s`` apart (each its own chunk); whether all of it was written before the
        server stopped."""
        pieces = [data[i : i + 1] for i in range(len(data))] if trickle_s else [data]
        for i, piece in enumerate(pieces):
            if i and self.fake._stopping.wait(trickle_s):
                self.close_connection = True  # stopped mid-body: the connection is no use
                return False
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece)
            self.wfile.flush()
        return True

    def _route(self) -> str:
        """The request's path without its query (``?api-version=…`` an endpoint may carry)."""
        return self.path.partition("?")[0].rstrip("/")

    def do_GET(self) -> None:
        if self._route().endswith("/models"):
            with self.fake._lock:
                names = sorted({q.model for q in self.fake._queues if q.model})
            data = [{"id": n, "object": "model", "owned_by": "fake"} for n in names]
            self._send(200, json.dumps({"object": "list", "data": data}).encode())
            return
        self._send(404, _error(404, f"no route {self.path}", "not_found"))

    def do_POST(self) -> None:
        chat = self._route().endswith("/chat/completions")
        if chat:
            self.fake._enter()
        try:
            self._post()
        finally:
            if chat:
                self.fake._leave()

    def _post(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, _error(400, "the request body is not JSON", "invalid_request_error"))
            return
        req = Request(
            "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time()
        )
        if not self._route().endswith("/chat/completions"):
            self._send(404, _error(404, f"no route {self.path}", "not_found"))
            return
        fmt = req.response_format
        if fmt is not None and fmt in self.fake.reject:
            with self.fake._lock:
                self.fake.requests.append(req)
            self._send(
                400,
                _error(
                    400,
                    f"response_format type {fmt!r} is not supported by this server",
                    "invalid_request_error",
                ),
            )
            return
        reply = self.fake._next(req)
        if reply is None:
            self._send(418, _error(418, f"fake server: no scripted reply for model {req.model!r}"))
            return
        if reply.delay_s:
            self.fake._sleep(reply.delay_s)
        if reply.before_headers is not None:
            reply.before_headers()
        if reply.raw_body is not None:
            self._send(reply.status, reply.raw_body, reply.headers)
            return
        if reply.status >= 400:
            self._send(reply.status, _error(reply.status, reply.error), reply.headers)
            return
        if req.body.get("stream"):
            self._stream(req, reply)
            return
        self.fake._served(reply)
        body = json.dumps(self._completion(req, reply)).encode()
        self._send(reply.status, body, reply.headers, reply.trickle_s, reply.mid_body)

    def _stream(self, req: Request, reply: Reply) -> None:
        """The reply as server-sent events, chunked; a cut stream ends without ``[DONE]`` or
        the closing chunk, and closes the connection."""
        whole = self._completion(req, reply)
        message = whole["choices"][0]["message"]
        calls = message.get("tool_calls")
        text = calls[0]["function"]["arguments"] if calls else message.get("content")
        size = max(1, reply.chunk_chars)
        pieces = [text[i : i + size] for i in range(0, len(text), size)] if text else []
        base = {
            "id": whole["id"],
            "object": "chat.completion.chunk",
            "created": whole["created"],
            "model": whole["model"],
        }

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
            event = {**base, "choices": choices, **extra}
            return f"data: {json.dumps(event)}\n\n".encode()

        events = [chunk({"role": "assistant", "content": None if calls else ""})]
        if message.get("refusal"):
            events.append(chunk({"refusal": message["refusal"]}))
        for i, piece in enumerate(pieces):
            if calls:
                fn: dict[str, Any] = {"arguments": piece}
                if i == 0:
                    fn["name"] = calls[0]["function"]["name"]
                delta: dict[str, Any] = {
                    "tool_calls": [{"index": 0, "id": calls[0]["id"], "function": fn}]
                }
            else:
                delta = {"content": piece}
            events.append(chunk(delta))
        cut = reply.cut_after is not None
        if cut:
            events = events[: 1 + (reply.cut_after or 0)]
        else:
            events.append(chunk({}, whole["choices"][0]["finish_reason"]))
            opts = req.body.get("stream_options") or {}
            if "usage" in whole and isinstance(opts, dict) and opts.get("include_usage"):
                usage_event = {**base, "choices": [], "usage": whole["usage"]}
                events.append(f"data: {json.dumps(usage_event)}\n\n".encode())
            events.append(b"data: [DONE]\n\n")
            self.fake._served(reply)
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            for k, v in reply.headers.items():
                self.send_header(k, v)
            if cut:
                self.send_header("Connection", "close")
            self.end_headers()
            for i, event in enumerate(events):
                if i == 1 and reply.mid_body is not None:
                    reply.mid_body()
                if not self._write(event, reply.trickle_s, chunked=True):
                    return  # the server stopped
            if cut:
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
            self.fake._sent()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up

    def _completion(self, req: Request, reply: Reply) -> dict[str, Any]:
        content = reply.content
        text = content if isinstance(content, str) or content is None else json.dumps(content)
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": reply.refusal}
        finish = reply.finish_reason
        use_tool = reply.tool_call if reply.tool_call is not None else bool(req.body.get("tools"))
        if use_tool and text is not None:
            tools = req.body.get("tools") or [{"function": {"name": "proposal"}}]
            name = tools[0].get("function", {}).get("name", "proposal")
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": f"call_{self.fake._new_id()}",
                    "type": "function",
                    "function": {"name": name, "arguments": text},
                }
            ]
            finish = "tool_calls" if finish == "stop" else finish
        out: dict[str, Any] = {
            "id": f"chatcmpl-{self.fake._new_id()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.model or req.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if reply.usage:
            out["usage"] = {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
            }
        return out
