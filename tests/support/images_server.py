"""A loopback server answering the images API with a reply of the test's making, and each GET
(a picture's ``url``) with a raw HTTP response as it is."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def images_server(
    data: Any = None,
    answer: Callable[[str], bytes] = lambda path: b"",
    raw: bytes | None = None,
) -> Iterator[ThreadingHTTPServer]:
    """POST: ``{"created": 1, "data": data}`` (``PORT`` in it: the server's port), or the body
    ``raw``. GET of a path: ``answer(path)`` written as it is (a whole raw HTTP response, one
    cut short, or not HTTP at all)."""

    class Answer(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            port = self.server.server_address[1]
            body = json.dumps({"created": 1, "data": data}).replace("PORT", str(port)).encode()
            body = body if raw is None else raw
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self.wfile.write(answer(self.path))

    with ThreadingHTTPServer(("127.0.0.1", 0), Answer) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield server
        finally:
            server.shutdown()
