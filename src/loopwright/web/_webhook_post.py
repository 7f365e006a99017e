"""A webhook's POST that ends within its timeout, the whole request.

urllib's ``timeout`` limits each network read, not the request: a receiver that sent a byte
every so often (a status line, then one header character at a time) held a post, and with it
that URL's delivery thread, for as long as it liked. Here every socket a post opens is
registered with a watch, and a timer shuts them at the deadline; the post then fails as a
``TimeoutError`` (an ``OSError``: a failed attempt, retried). The connections are urllib's own
(proxies from the environment, certificates, HTTPS tunnels as before); only their socket
creation is watched. Written by hand because urllib has no whole-request deadline and the
notifier must keep its standard-library client (no extra dependency for ``ui``).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from threading import Timer
from typing import Any

from .._userinfo import NoRedirect, without_userinfo

__all__ = ["http_post"]


class _Watch:
    """The sockets of one post; ``expire`` shuts them, and any opened after it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.expired = False

    def add(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: a read blocked in another thread returns at once (close would
    # leave it blocked on a descriptor that may be reused)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _watch_creation(conn: http.client.HTTPConnection, watch: _Watch) -> None:
    # ``_create_connection`` is how http.client opens the TCP socket (before a proxy's tunnel
    # and the TLS handshake, so both are watched too); an attribute since Python 3.2
    create = conn._create_connection  # type: ignore[attr-defined]
    conn._create_connection = lambda *a, **kw: watch.add(create(*a, **kw))  # type: ignore[attr-defined]


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, watch: _Watch, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _watch_creation(self, watch)


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, watch: _Watch, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _watch_creation(self, watch)


class _Request(urllib.request.Request):
    watch: _Watch


class _WatchedHTTP(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        assert isinstance(req, _Request)
        return self.do_open(functools.partial(_HTTPConnection, watch=req.watch), req)


class _WatchedHTTPS(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        assert isinstance(req, _Request)
        args: dict[str, Any] = {"context": getattr(self, "_context", None)}
        if hasattr(self, "_check_hostname"):  # Python 3.11 (gone in 3.12)
            args["check_hostname"] = self._check_hostname
        return self.do_open(functools.partial(_HTTPSConnection, watch=req.watch), req, **args)


_OPENER = urllib.request.build_opener(NoRedirect, _WatchedHTTP, _WatchedHTTPS)


def http_post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> int:
    """POST ``body``; the response's status (an HTTP error's too). Network errors raise, and a
    post not answered within ``timeout_s`` (the whole request) raises ``TimeoutError``. A URL's
    ``user:password@`` goes as the Basic header (urllib sends neither, and looked the whole
    ``user:password@host`` up as the host)."""
    url, auth = without_userinfo(url)
    req = _Request(url, data=body, headers={**auth, **headers}, method="POST")
    req.watch = watch = _Watch()
    timer = Timer(timeout_s, watch.expire)
    timer.daemon = True
    timer.start()
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            status = int(resp.status)
            # the answer's status is what counts: its body is read only to leave the
            # connection clean, and a body cut short changes nothing
            with contextlib.suppress(OSError, http.client.HTTPException):
                resp.read(65536)
            return status
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)
    except (OSError, http.client.HTTPException) as exc:
        if watch.expired:
            raise TimeoutError(
                f"the webhook did not answer within timeout_s={timeout_s:g} s"
            ) from exc
        raise
    finally:
        timer.cancel()
