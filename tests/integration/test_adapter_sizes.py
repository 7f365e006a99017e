"""A reply larger than any model's is refused as it arrives, not read into memory.

The SDK read a response body whole: a server that sent without end (or a 300 MB reply, which
took a gigabyte of memory) could exhaust the process within ``timeout_s``. The adapters' HTTP
clients now stop at ``MAX_REPLY_BYTES`` (32 MiB for chat, 256 MiB for images, the picture an
image reply names by ``url`` included): ``ReplyTooLarge``, permanent, naming the endpoint.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.fake_openai import FakeOpenAI, Reply, ok

import loopwright as lw
from loopwright.adapters import AsyncChatActor, ChatActor, ImageModel, openai_chat, openai_images

FIX = {"edits": [{"artifact": "doc", "part": "title", "value": "Hello"}], "note": "fixed"}
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _no_real_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as s:
        yield s


def _call(kind: type[ChatActor], server: FakeOpenAI, **kw: Any) -> Any:
    actor = kind("m", base_url=server.base_url, timeout_s=120, **kw)
    if kind is AsyncChatActor:
        return asyncio.run(actor._arequest(MSG))
    return actor._request(MSG)


def _completion(content: str) -> bytes:
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m"}
    return json.dumps({**body, "choices": [choice]}).encode()


@pytest.mark.parametrize("kind", [ChatActor, AsyncChatActor], ids=["sync", "async"])
def test_a_reply_past_the_limit_is_refused_not_read(
    server: FakeOpenAI, kind: type[ChatActor]
) -> None:
    huge = _completion(json.dumps({**FIX, "note": "x" * (33 * 2**20)}))  # the real limit, 32 MiB
    server.script(Reply(raw_body=huge), model="m")
    with pytest.raises(lw.PermanentError) as caught:
        _call(kind, server)
    assert type(caught.value).__name__ == "ReplyTooLarge"
    assert "larger than 32 MiB" in str(caught.value) and "model 'm' at" in str(caught.value)
    assert lw.classify(caught.value) == "permanent"


@pytest.mark.parametrize("kind", [ChatActor, AsyncChatActor], ids=["sync", "async"])
def test_a_stream_past_the_limit_is_refused_not_a_broken_stream(
    server: FakeOpenAI, kind: type[ChatActor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_chat, "MAX_REPLY_BYTES", 64 * 1024)
    server.script(ok({**FIX, "note": "y" * 200_000}, chunk_chars=1000), model="m")
    with pytest.raises(lw.PermanentError, match=r"larger than 0\.0625 MiB") as caught:
        _call(kind, server, stream=True)
    assert type(caught.value).__name__ == "ReplyTooLarge"
    # a reply within it is read as before
    server.script(ok({**FIX, "note": "y" * 20_000}, chunk_chars=1000), model="m")
    body, *_ = _call(kind, server, stream=True)
    assert "y" * 20_000 in body["choices"][0]["message"]["content"]


def test_a_picture_fetched_past_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_images, "MAX_REPLY_BYTES", 64 * 1024)

    class Answer(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            url = f"http://127.0.0.1:{self.server.server_address[1]}/picture.png"
            body = json.dumps({"created": 1, "data": [{"url": url}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()  # no length: read until the connection closes
            self.wfile.write(b"\x89PNG\r\n\x1a\n" + b"\0" * (256 * 1024))

    with ThreadingHTTPServer(("127.0.0.1", 0), Answer) as http:
        threading.Thread(target=http.serve_forever, daemon=True).start()
        model = ImageModel(
            "fake-image-1",
            base_url=f"http://127.0.0.1:{http.server_address[1]}/v1",
            store=str(tmp_path / "pictures.db"),
            timeout_s=60,
        )
        try:
            with pytest.raises(lw.PermanentError, match=r"picture at .* is larger than") as caught:
                model.generate("a quay")
        finally:
            http.shutdown()
    assert lw.classify(caught.value) == "permanent"
