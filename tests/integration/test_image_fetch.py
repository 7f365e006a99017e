"""A picture a reply names by ``url``: its redirects and the size of its whole download.

Two loopback servers: ``here`` answers the images API (its reply names ``here``'s
``/first.png``) and serves pictures; ``there`` is another server (another port: another
origin) that counts the requests it gets.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.deadline_clock import HANG_S
from support.images_server import images_server

import loopwright as lw
from loopwright.adapters import ImageModel, _image_client, openai_images

pytestmark = pytest.mark.usefixtures("no_openai_env")

PNG = openai_images._png.encode(8, 6, bytes(range(144)))


def _response(status: str, body: bytes = b"", **headers: str) -> bytes:
    head = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items())
    return f"HTTP/1.0 {status}\r\n{head}\r\n".encode() + body


def _picture() -> bytes:
    return _response("200 OK", PNG, Content_Type="image/png", Content_Length=str(len(PNG)))


def _generate(tmp_path: Path, here: dict[str, bytes], there: dict[str, bytes]) -> Any:
    """``generate`` against ``here`` (its reply names its ``/first.png``; its GETs answered
    from ``here``), ``there`` another server: the result, or the error it raised; and the
    paths each server was asked for. ``HERE``/``THERE`` in an answer: the servers' ports."""
    ports: dict[bytes, int] = {}
    got_here: list[str] = []
    got_there: list[str] = []

    def answering(given: dict[str, bytes], got: list[str]) -> Callable[[str], bytes]:
        def answer(path: str) -> bytes:
            got.append(path)
            raw = given[path]
            for name, port in ports.items():
                raw = raw.replace(name, str(port).encode())
            return raw

        return answer

    first = [{"url": "http://127.0.0.1:PORT/first.png"}]
    with (
        images_server(answer=answering(there, got_there)) as other,
        images_server(first, answering(here, got_here)) as server,
    ):
        ports.update({b"HERE": server.server_address[1], b"THERE": other.server_address[1]})
        model = ImageModel(
            "fake-image-1",
            base_url=f"http://127.0.0.1:{ports[b'HERE']}/v1",
            store=str(tmp_path / "pictures.db"),
            timeout_s=HANG_S,
        )
        try:
            result: Any = model.generate("a quay at night")
        except Exception as exc:
            result = exc
    return result, got_here, got_there


def test_a_redirect_to_another_server_is_not_followed(tmp_path: Path) -> None:
    """The picture's url redirecting to another server was followed (``urllib``'s default,
    any host): the docs said it was not, as for the chat adapters. It is refused, permanent,
    naming both addresses, and the other server is never asked."""
    moved = _response("302 Found", Location="http://127.0.0.1:THERE/p.png", Content_Length="0")
    err, got_here, got_there = _generate(tmp_path, {"/first.png": moved}, {"/p.png": _picture()})
    assert type(err).__name__ == "CrossOriginRedirect", repr(err)
    assert lw.classify(err) == "permanent"
    assert "redirecting to http://127.0.0.1:" in str(err) and "not followed" in str(err)
    assert got_here == ["/first.png"] and got_there == []


def test_a_redirect_within_the_server_is_followed(tmp_path: Path) -> None:
    moved = _response("302 Found", b"moved", Location="/p.png", Content_Length="5")
    made, got_here, _ = _generate(tmp_path, {"/first.png": moved, "/p.png": _picture()}, {})
    assert not isinstance(made, Exception), repr(made)
    assert made.value["width"] == 8 and got_here == ["/first.png", "/p.png"]


def test_a_redirects_body_counts_toward_the_download_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read was limited, not the download: ``urllib`` read a redirect's body whole,
    however large (a server answering 302 with gigabytes filled the memory), before following
    it. The whole download, redirects included, is read up to ``MAX_REPLY_BYTES`` (64 KiB
    here): a 256 KiB redirect body is refused as it arrives, permanent."""
    monkeypatch.setattr(_image_client, "MAX_REPLY_BYTES", 64 * 1024)
    body = b"x" * (256 * 1024)
    moved = _response("302 Found", body, Location="/p.png", Content_Length=str(len(body)))
    err, got_here, _ = _generate(tmp_path, {"/first.png": moved, "/p.png": _picture()}, {})
    assert type(err).__name__ == "ReplyTooLarge", repr(err)
    assert lw.classify(err) == "permanent" and "larger than 0.0625 MiB" in str(err)
    assert got_here == ["/first.png"]
