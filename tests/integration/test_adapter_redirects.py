"""A model endpoint that redirects: followed within its server, refused to another.

``httpx2`` (under the ``openai`` SDK) followed a 307/308 to any host, re-sending the request's
body (the prompt: the task's text) there and dropping only ``Authorization`` on the way, so a
key in another header (``api-key``, ``x-api-key``) went along too. The adapters' HTTP clients
now refuse a redirect to another server (scheme, host or port: ``127.0.0.1`` and ``localhost``
are two) as a permanent error that names both ends; one within the server is followed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.deadline_clock import HANG_S, DeadlineClock
from support.fake_openai import FakeOpenAI, Reply, ok

import loopwright as lw
from loopwright.adapters import AsyncChatActor, ChatActor, ImageModel
from loopwright.testing import FakeImages

FIX = {"edits": [{"artifact": "doc", "part": "title", "value": "Hello"}], "note": "fixed"}
PROMPT = "PROMPT-THAT-STAYS-HOME"


pytestmark = pytest.mark.usefixtures("no_openai_env")


@pytest.fixture
def servers() -> Iterator[tuple[FakeOpenAI, FakeOpenAI]]:
    with FakeOpenAI() as first, FakeOpenAI() as other:
        yield first, other


def _moved(to: str, status: int = 307) -> Reply:
    return Reply(status=status, headers={"Location": to}, error="moved")


def _call(kind: type[ChatActor], base_url: str) -> Any:
    actor = kind("m", base_url=base_url, api_key="sk-REDIRECT-KEY", timeout_s=60)
    messages = [{"role": "user", "content": PROMPT}]
    if kind is AsyncChatActor:
        return asyncio.run(actor._arequest(messages))
    return actor._request(messages)


@pytest.mark.parametrize("status", [307, 308])
@pytest.mark.parametrize("kind", [ChatActor, AsyncChatActor], ids=["sync", "async"])
def test_a_redirect_to_another_host_is_refused_not_followed(
    servers: tuple[FakeOpenAI, FakeOpenAI], kind: type[ChatActor], status: int
) -> None:
    first, other = servers
    elsewhere = f"http://localhost:{other.port}/v1/chat/completions"  # another host name
    first.script(_moved(elsewhere, status), model="m")
    other.script(ok(FIX), model="m")
    with pytest.raises(lw.PermanentError) as caught:
        _call(kind, first.base_url)
    assert other.requests == []  # neither the prompt nor any header reached it
    assert len(first.requests) == 1
    text = str(caught.value)
    assert f"redirecting to http://localhost:{other.port}/v1/chat/completions" in text
    assert "another server than" in text and "set base_url" in text
    assert lw.classify(caught.value) == "permanent"


def test_another_port_on_the_same_host_is_another_server(
    servers: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    first, other = servers
    first.script(_moved(f"{other.base_url}/chat/completions?api-key=Q-SECRET"), model="m")
    other.script(ok(FIX), model="m")
    with pytest.raises(lw.PermanentError) as caught:
        _call(ChatActor, first.base_url)
    assert other.requests == []
    assert "api-key=***" in str(caught.value) and "Q-SECRET" not in str(caught.value)


@pytest.mark.parametrize("kind", [ChatActor, AsyncChatActor], ids=["sync", "async"])
def test_a_redirect_within_the_server_is_followed(
    servers: tuple[FakeOpenAI, FakeOpenAI], kind: type[ChatActor]
) -> None:
    first, _ = servers
    first.script(_moved("/v1/chat/completions"), ok(FIX), model="m")
    body, *_ = _call(kind, first.base_url)
    assert "Hello" in body["choices"][0]["message"]["content"]
    assert len(first.requests) == 2


def test_a_run_stops_at_the_refused_redirect_without_retrying(
    servers: tuple[FakeOpenAI, FakeOpenAI], tmp_path: Path
) -> None:
    first, other = servers
    first.script(_moved(f"http://localhost:{other.port}/v1/chat/completions"), model="actor-m")
    other.script(ok(FIX), model="actor-m")
    actor = ChatActor("actor-m", base_url=first.base_url, timeout_s=60)
    loop = lw.Loop(
        name="redirects",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0))],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.05, jitter=False),
    )
    task = {"goal": PROMPT, "artifacts": {"doc": {"title": "Helo"}}}
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, task)
        events = rt.store.events(r.run_id)
    assert r.status == "escalated" and len(first.requests) == 1  # permanent: no retry
    assert [e.data["class"] for e in events if e.kind == "gave_up"] == ["permanent"]
    assert other.requests == []


class _Redirect(BaseHTTPRequestHandler):
    to = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(307)
        self.send_header("Location", self.to + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.mark.parametrize("run", ["sync", "async"])
def test_the_image_adapter_refuses_it_too(tmp_path: Path, run: str) -> None:
    with FakeImages() as pictures:
        to = pictures.base_url.replace("127.0.0.1", "localhost").removesuffix("/v1")
        handler = type("H", (_Redirect,), {"to": to})
        first = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=first.serve_forever, daemon=True).start()
        try:
            base = f"http://127.0.0.1:{first.server_port}/v1"
            model = ImageModel("img", base_url=base, store=str(tmp_path / "p.db"), timeout_s=60)
            with pytest.raises(lw.PermanentError, match="another server"):
                if run == "sync":
                    model.generate("a quay at night")
                else:
                    asyncio.run(model.agenerate("a quay at night"))
        finally:
            first.shutdown()
            first.server_close()
        assert pictures.requests == []


def test_a_redirect_goes_on_under_the_first_requests_deadline(
    servers: tuple[FakeOpenAI, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each hop of a redirect was given a deadline of its own, timeout_s from when it was sent:
    # a chain of redirects could take timeout_s a hop. Here the clock is 0.8 of timeout_s on
    # when the first hop's answer (a redirect) comes, and 1.6 when the second's does: late for
    # the request, in time for a deadline restarted at the second hop.
    first, _ = servers
    clock = DeadlineClock(monkeypatch)
    ahead = functools.partial(clock.ahead, 0.8 * HANG_S)
    later = functools.partial(clock.ahead, 1.6 * HANG_S)
    moved = dataclasses.replace(_moved("/v1/chat/completions"), before_headers=ahead)
    first.script(moved, ok(FIX, before_headers=later), model="m")
    actor = ChatActor("m", base_url=first.base_url, timeout_s=HANG_S)
    with pytest.raises(Exception) as caught:
        actor._request([{"role": "user", "content": PROMPT}])
    assert type(caught.value).__name__ == "APITimeoutError", repr(caught.value)
    assert len(first.requests) == 2


@pytest.mark.parametrize("kind", [ChatActor, AsyncChatActor], ids=["sync", "async"])
def test_a_redirect_loop_is_permanent_and_says_so(
    servers: tuple[FakeOpenAI, FakeOpenAI], kind: type[ChatActor]
) -> None:
    # It was the SDK's "Connection error." (httpx2's TooManyRedirects under it), transient:
    # retried, 21 requests an attempt.
    first, _ = servers
    first.script(lambda req: _moved("/v1/chat/completions"), model="m")
    with pytest.raises(lw.PermanentError, match="redirected the request more than 10 times"):
        _call(kind, first.base_url)
    assert len(first.requests) == 11
