"""A reply larger than any model's is refused as it arrives, not read into memory.

The SDK read a response body whole: a server that sent without end (or a 300 MB reply, which
took a gigabyte of memory) could exhaust the process within ``timeout_s``. The adapters' HTTP
clients now stop at ``MAX_REPLY_BYTES`` (32 MiB for chat, 256 MiB for images: see
test_image_adapter.py for the picture an image reply names by ``url``): ``ReplyTooLarge``, permanent, naming the endpoint.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from support.fake_openai import FakeOpenAI, Reply, ok

import loopwright as lw
from loopwright.adapters import (
    AsyncChatActor,
    ChatActor,
    _chat_client,  # where the clients read MAX_REPLY_BYTES
)

FIX = {"edits": [{"artifact": "doc", "part": "title", "value": "Hello"}], "note": "fixed"}
MSG = [{"role": "user", "content": "hi"}]


pytestmark = pytest.mark.usefixtures("no_openai_env")


@pytest.fixture
def server(fake_openai: FakeOpenAI) -> FakeOpenAI:
    return fake_openai


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
    monkeypatch.setattr(_chat_client, "MAX_REPLY_BYTES", 64 * 1024)
    server.script(ok({**FIX, "note": "y" * 200_000}, chunk_chars=1000), model="m")
    with pytest.raises(lw.PermanentError, match=r"larger than 0\.0625 MiB") as caught:
        _call(kind, server, stream=True)
    assert type(caught.value).__name__ == "ReplyTooLarge"
    # a reply within it is read as before
    server.script(ok({**FIX, "note": "y" * 20_000}, chunk_chars=1000), model="m")
    body, *_ = _call(kind, server, stream=True)
    assert "y" * 20_000 in body["choices"][0]["message"]["content"]


@pytest.mark.parametrize("kind", [ChatActor, AsyncChatActor], ids=["sync", "async"])
def test_a_compressed_reply_is_counted_as_it_is_decompressed(
    server: FakeOpenAI, kind: type[ChatActor], monkeypatch: pytest.MonkeyPatch
) -> None:
    # From review (review43): the limit counted the bytes on the wire, and the SDK reads them
    # decompressed: a gzip reply of a few KB (here 1 MB of one letter, 1 KB compressed; at
    # scale, 32 MiB on the wire held about 32 GB) passed the limit whole.
    import gzip

    monkeypatch.setattr(_chat_client, "MAX_REPLY_BYTES", 64 * 1024)
    bomb = gzip.compress(_completion(json.dumps({**FIX, "note": "z" * 2**20})))
    assert len(bomb) < 64 * 1024
    server.script(Reply(raw_body=bomb, headers={"Content-Encoding": "gzip"}), model="m")
    with pytest.raises(lw.PermanentError, match=r"larger than 0\.0625 MiB") as caught:
        _call(kind, server)
    assert type(caught.value).__name__ == "ReplyTooLarge"
    # a compressed reply within it is read as before
    small = gzip.compress(_completion(json.dumps({**FIX, "note": "z" * 20_000})))
    server.script(Reply(raw_body=small, headers={"Content-Encoding": "gzip"}), model="m")
    body, *_ = _call(kind, server)
    assert "z" * 20_000 in body["choices"][0]["message"]["content"]
