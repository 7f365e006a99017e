"""A webhook's POST that ends within its timeout, the whole request.

urllib's ``timeout`` limits each network read, not the request: a receiver that sent a byte
every so often (a status line, then one header character at a time) held a post, and with it
that URL's delivery thread, for as long as it liked. Here every socket a post opens is
registered with a watch, and a timer shuts them at the deadline; the post then fails as a
``TimeoutError`` (an ``OSError``: a failed attempt, retried). The connections are urllib's own
(proxies from the environment, certificates, HTTPS tunnels as before); only their socket
creation is ours: the host's name is looked up in a thread of its own, waited for only until
the deadline, and each socket is registered before it connects, so that the deadline cuts a
connect in progress too (the socket was registered once connected: a name server that did not
answer, or an address that dropped the connection's first packet, each address of a name
waited for for ``timeout_s``, held the post past its deadline). Written by hand because urllib has no whole-request deadline and the
notifier must keep its standard-library client (no extra dependency for ``ui``). Also the
webhook URL's checks and masks (``check_webhook_url``, ``url_where``, ``masked_error``: its
path is its credential), moved from ``_notify`` for its size.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import ipaddress
import re
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from threading import Timer
from typing import Any
from urllib.parse import urlsplit

from .._errors import ConfigError
from .._userinfo import NoRedirect, without_userinfo

__all__ = ["check_webhook_url", "http_post", "masked_error", "target_id", "url_where"]


class _Watch:
    """The sockets of one post; ``expire`` shuts them, and any opened after it, and ends a
    wait for the host's addresses."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._lookups: list[threading.Event] = []
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
            for lookup in self._lookups:
                lookup.set()

    def _late(self) -> TimeoutError:
        return TimeoutError("the deadline passed while connecting")

    def addresses(self, host: str, port: int) -> list[Any]:
        """``socket.getaddrinfo`` of ``host``, waited for until the deadline: a lookup that
        hangs is left to its (daemon) thread."""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:  # an address: nothing to look up, no thread needed
            return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        got: list[Any] = []
        done = threading.Event()
        with self._lock:
            if self.expired:
                raise self._late()
            self._lookups.append(done)

        def look_up() -> None:
            try:
                got.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
            except BaseException as exc:  # handed to the post
                got.append(exc)
            finally:
                done.set()

        threading.Thread(target=look_up, name="webhook-lookup", daemon=True).start()
        done.wait()
        if not got:
            raise self._late()
        if isinstance(got[0], BaseException):
            raise got[0]
        return list(got[0])

    def connect(
        self, address: tuple[str, int], timeout: Any, source_address: Any = None
    ) -> socket.socket:
        """``socket.create_connection``, each socket registered before it connects."""
        host, port = address
        err: OSError | None = None
        for family, kind, proto, _, where in self.addresses(host, port):
            if self.expired:
                raise self._late()
            try:
                # (a family this host cannot open, IPv6 where it is off: the next address)
                sock = self.add(socket.socket(family, kind, proto))
            except OSError as exc:
                err = exc
                continue
            try:
                if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
                    sock.settimeout(timeout)
                if source_address:
                    sock.bind(source_address)
                sock.connect(where)
                if self.expired:  # connected as the deadline passed: the socket is shut
                    raise self._late()
                return sock
            except OSError as exc:
                sock.close()
                err = self._late() if self.expired else exc
        raise err or OSError(f"no address for {host!r}")


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: a read blocked in another thread returns at once (close would
    # leave it blocked on a descriptor that may be reused)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _watch_creation(conn: http.client.HTTPConnection, watch: _Watch) -> None:
    # ``_create_connection`` is how http.client opens the TCP socket (before a proxy's tunnel
    # and the TLS handshake, so both are watched too); an attribute since Python 3.2
    conn._create_connection = watch.connect  # type: ignore[attr-defined]


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


def check_webhook_url(url: str, field: str = "--notify") -> str:
    """``url`` if it is an http(s) URL with a host; a user mistake otherwise (one line)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        # Only up to the host: a webhook's path is its credential (invariant 9).
        head = re.match(r"[^/?#]*(//[^/?#]*)?", url.strip())
        shown = head.group(0) if head else ""
        shown += "/…" if len(url.strip()) > len(shown) else ""
        raise ConfigError(f"{shown!r} is not an http(s) URL (http://host/path)", field=field)
    return url.strip()


def url_where(url: str) -> str:
    """The URL without its path or query (where chat tools put the webhook's secret)."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "(an unparsable URL)"


def masked_error(text: str, url: str, where: str) -> str:
    """``text`` (an HTTP client's error) with ``url`` as ``where``, and its path and query
    (quoted alone by some errors: ``InvalidURL``'s) as ``/…``: a webhook's path is its
    credential, and the error is kept (the log, a given-up post's audit record and marker)."""
    text = text.replace(url, where)
    try:
        parts = urlsplit(url)
    except ValueError:
        return text
    query = f"?{parts.query}" if parts.query else ""
    for tail in (parts.path + query, parts.path, parts.query):
        if len(tail) > 1:
            text = text.replace(tail, "/…")
    return text


def target_id(url: str) -> str:
    """What the event log records for a URL: a digest, not the URL."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]
