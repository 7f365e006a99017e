"""A loopback OpenAI-compatible image server for tests (``loopwright.testing.FakeImages``):
deterministic PNGs, masks honoured.

``POST /v1/images/generations`` (JSON) and ``POST /v1/images/edits`` (multipart, ``image`` or
``image[]`` parts, optional ``mask``) answer ``{"created", "data": [{"b64_json"}], "usage"}``.

What it draws is a function of the prompt alone: a two-colour gradient seeded by the prompt's
SHA-256, then every ``box X0,Y0,X1,Y1 #RRGGBB`` line of the prompt (fractions of the width and
height) as a filled rectangle. So a prompt that lays out its figures gets them where it asked,
and the same prompt always gives the same bytes. An edit draws the prompt the same way at the
input picture's size and takes from it only the pixels the mask leaves transparent (alpha 0);
every other pixel is the input's, unchanged.

Scripting: ``miscolour={"#1f4e9c": "#b71c1c"}`` paints the first generated picture that asks
for the one colour with the other (a model getting a coat wrong; edits are never miscoloured);
``fail(status, times=1, retry_after=None)`` answers the next requests with an error;
``delay_s`` holds each request (to see concurrency); ``trickle_s`` sends each reply's body a byte
at a time, that far apart (a server slow mid-reply: the client's timeout test). ``requests`` logs what was asked (the
SHA-256 of every image and mask sent), ``peak`` the most requests in flight at once.

Run it by hand (the comic example's ``--model`` mode without a model):
``python -m loopwright._fake_images --port 8765`` (or ``tests/support/fake_images.py`` in a
checkout). Standard library only, plus loopwright's own PNG code.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .adapters import _png

__all__ = ["FakeImages", "ImageRequest", "draw"]

BOX = re.compile(
    r"box\s+([0-9.]+)\s*,\s*([0-9.]+)\s*,\s*([0-9.]+)\s*,\s*([0-9.]+)\s+(#[0-9a-fA-F]{6})"
)
DEFAULT_SIZE = (256, 192)


def _rgb(hexcol: str) -> bytes:
    return bytes.fromhex(hexcol.lstrip("#"))


def draw(prompt: str, width: int, height: int, swap: dict[str, str] | None = None) -> bytearray:
    """The RGB pixels the server draws for ``prompt`` (see the module's docstring)."""
    seed = hashlib.sha256(prompt.encode()).digest()
    top, bottom = seed[0:3], seed[3:6]
    rows = []
    for y in range(height):
        t = y / max(1, height - 1)
        shade = bytes(int(a + (b - a) * t) for a, b in zip(top, bottom, strict=True))
        rows.append(shade * width)
    px = bytearray(b"".join(rows))
    for m in BOX.finditer(prompt):
        x0, y0, x1, y1 = (float(v) for v in m.groups()[:4])
        colour = m.group(5).lower()
        fill = _rgb((swap or {}).get(colour, colour))
        left, right = max(0, int(x0 * width)), min(width, int(x1 * width))
        top_, bot = max(0, int(y0 * height)), min(height, int(y1 * height))
        if right <= left:
            continue
        for y in range(top_, bot):
            px[(y * width + left) * 3 : (y * width + right) * 3] = fill * (right - left)
    return px


@dataclass
class ImageRequest:
    """One request as the server saw it."""

    endpoint: str  # "generations" or "edits"
    model: str
    prompt: str
    size: str | None
    images: list[str] = field(default_factory=list)  # sha256 of each image part, in order
    image_fields: list[str] = field(default_factory=list)  # their form names (image, image[])
    mask: str | None = None  # sha256 of the mask
    fields: dict[str, Any] = field(default_factory=dict)
    status: int = 200
    output: str | None = None  # sha256 of the picture sent back


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FakeImages:
    """The server; ``with FakeImages() as fake: fake.base_url``."""

    def __init__(
        self,
        *,
        miscolour: dict[str, str] | None = None,
        delay_s: float = 0.0,
        usage: bool = True,
        trickle_s: float = 0.0,
    ) -> None:
        self.miscolour = {k.lower(): v.lower() for k, v in (miscolour or {}).items()}
        self.delay_s = delay_s
        self.trickle_s = trickle_s
        self.usage = usage
        self.requests: list[ImageRequest] = []
        self.peak = 0
        self._active = 0
        self._failures: list[tuple[int, float | None]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # --- scripting ----------------------------------------------------------------------------
    def fail(self, status: int, *, times: int = 1, retry_after: float | None = None) -> None:
        with self._lock:
            self._failures += [(status, retry_after)] * times

    def of(self, endpoint: str) -> list[ImageRequest]:
        return [r for r in self.requests if r.endpoint == endpoint and r.status == 200]

    # --- life -------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self, port: int = 0) -> FakeImages:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        from .testing import LoopbackServer

        self._server = LoopbackServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # a trickling reply stops
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeImages:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- requests -----------------------------------------------------------------------------
    @contextmanager
    def _in_flight(self) -> Iterator[None]:
        with self._lock:
            self._active += 1
            self.peak = max(self.peak, self._active)
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        # A request stops counting as in flight before its reply is written: a client that
        # reads the reply and sends its next request at once is never counted twice (the
        # server's span for a request lies inside the client's).
        with self._in_flight():
            status, payload, headers = self._answer(h)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
            self._send(h, status, payload, headers)

    def _answer(
        self, h: BaseHTTPRequestHandler
    ) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        if self.delay_s:
            time.sleep(self.delay_s)
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        path = h.path.split("?")[0].rstrip("/")
        try:
            if path.endswith("/images/generations"):
                req, out = self._generate(json.loads(body or b"{}"))
            elif path.endswith("/images/edits"):
                req, out = self._edit(h.headers.get("Content-Type", ""), body)
            else:
                return 404, {"error": {"message": f"no route {path}"}}, None
        except ValueError as exc:
            return 400, {"error": {"message": str(exc), "type": "invalid"}}, None
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
            self.requests.append(req)
        if failure is not None:
            status, retry_after = failure
            req.status = status
            headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
            return status, {"error": {"message": "scripted failure"}}, headers
        req.output = _sha(out)
        reply: dict[str, Any] = {
            "created": 0,
            "data": [{"b64_json": base64.b64encode(out).decode()}],
        }
        if self.usage:
            tokens_in = len(req.prompt.split()) + 100 * len(req.images)
            reply["usage"] = {
                "input_tokens": tokens_in,
                "output_tokens": 1000,
                "total_tokens": tokens_in + 1000,
            }
        return 200, reply, None

    def _send(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if not self.trickle_s:
            h.wfile.write(data)
            return
        for i in range(len(data)):
            if i and self._stopping.wait(self.trickle_s):
                h.close_connection = True
                return
            h.wfile.write(data[i : i + 1])
            h.wfile.flush()

    @staticmethod
    def _size(size: Any) -> tuple[int, int]:
        if not size or size == "auto":
            return DEFAULT_SIZE
        w, _, hh = str(size).partition("x")
        if not (w.isdigit() and hh.isdigit()) or not 0 < int(w) <= 4096 or not 0 < int(hh) <= 4096:
            raise ValueError(f"bad size {size!r}")
        return int(w), int(hh)

    def _generate(self, fields: dict[str, Any]) -> tuple[ImageRequest, bytes]:
        prompt = str(fields.get("prompt") or "")
        if not prompt:
            raise ValueError("prompt is required")
        w, h = self._size(fields.get("size"))
        swap = self._take_miscolour(prompt)
        out = _png.encode(w, h, bytes(draw(prompt, w, h, swap)))
        req = ImageRequest(
            "generations", str(fields.get("model")), prompt, fields.get("size"), fields=fields
        )
        return req, out

    def _take_miscolour(self, prompt: str) -> dict[str, str]:
        with self._lock:
            for want, wrong in list(self.miscolour.items()):
                if want in prompt.lower():
                    del self.miscolour[want]  # once: the model gets it wrong the first time
                    return {want: wrong}
        return {}

    def _edit(self, ctype: str, body: bytes) -> tuple[ImageRequest, bytes]:
        msg = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {ctype}\r\n\r\n".encode() + body)
        if not msg.is_multipart():
            raise ValueError("an edit is multipart/form-data")
        fields: dict[str, Any] = {}
        images: list[bytes] = []
        names: list[str] = []
        mask: bytes | None = None
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            if name in ("image", "image[]"):
                images.append(payload)
                names.append(str(name))
            elif name == "mask":
                mask = payload
            else:
                fields[str(name)] = payload.decode()
        prompt = str(fields.get("prompt") or "")
        if not images or not prompt:
            raise ValueError("an edit needs an image and a prompt")
        req = ImageRequest(
            "edits",
            str(fields.get("model")),
            prompt,
            fields.get("size"),
            images=[_sha(i) for i in images],
            image_fields=names,
            mask=_sha(mask) if mask is not None else None,
            fields=fields,
        )
        if mask is None:  # references only: a new picture that follows them
            w, h = self._size(fields.get("size"))
            swap = self._take_miscolour(prompt)
            return req, _png.encode(w, h, bytes(draw(prompt, w, h, swap)))
        base = _png.decode(images[0])
        holes = _png.decode(mask)
        if (holes.width, holes.height) != (base.width, base.height):
            raise ValueError("the mask and the image differ in size")
        fresh = draw(prompt, base.width, base.height)
        out = bytearray(base.width * base.height * 3)
        src, alpha = base.rgba, holes.rgba
        for i in range(base.width * base.height):
            if alpha[i * 4 + 3] == 0:
                out[i * 3 : i * 3 + 3] = fresh[i * 3 : i * 3 + 3]
            else:
                out[i * 3 : i * 3 + 3] = src[i * 4 : i * 4 + 3]
        return req, _png.encode(base.width, base.height, bytes(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument(
        "--miscolour", action="append", default=[], help="WANT=WRONG, e.g. '#1f4e9c=#b71c1c'"
    )
    args = ap.parse_args()
    pairs = dict(p.split("=", 1) for p in args.miscolour)
    fake = FakeImages(miscolour=pairs).start(args.port)
    print(f"fake image server at {fake.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
