"""HTTP clients for the ``openai`` SDK whose every request must end within ``timeout_s``.

The SDK hands its ``timeout`` to ``httpx2`` as limits on each network step (connecting, each
write, each read), not on the request: a server that sent a valid response's headers and then
its body a byte every half second held a call open without end. These clients are the SDK's
own defaults (``openai.DefaultHttpxClient``: its connection limits and redirects, proxies and
certificates from the environment as before) with two event hooks: a request is given a
deadline when it is sent, and its response must have arrived, body included, by then.

Past the deadline the response fails with ``httpx2.ReadTimeout``: a timeout, which the SDK
raises as ``APITimeoutError`` and the engine retries as transient (a streamed reply that breaks
off this way is the adapter's broken stream, transient too). The per-step limits stay: the sync
client checks the deadline as each piece of the body arrives, so a server that goes silent is
cut off by the per-read limit (``timeout_s`` too); the async client waits for each piece only
until the deadline. A response's headers are checked when they have all arrived. The deadline is the first
request's: a redirect's request goes on under it (each hop's was restarted, so that a chain of
redirects could take ``timeout_s`` a hop).

A redirect to another server (another scheme, host or port than the request's; ``http`` to
``https`` on the same host excepted, as ``httpx2`` allows it) is not followed: it fails as
``CrossOriginRedirect``, permanent. ``httpx2`` would re-send the request's body (the prompt,
the task's text) to wherever the ``Location`` named, and drops only ``Authorization`` on the
way: a key sent in any other header (``api-key``, ``x-api-key``) went along. Redirects within
the server (``/v1`` to ``/v1/``) are followed as before, up to ``MAX_REDIRECTS``: a loop fails
as ``RedirectLoop``, permanent (it was the SDK's "Connection error.", transient, retried).

A response body larger than ``max_bytes`` (counted as it arrives, and again as it is
decompressed, which is what the SDK reads: a gzip reply of a few KB can decompress to
gigabytes) fails as ``ReplyTooLarge``, permanent: the SDK read a whole body into memory, so a server
that sent without end (a 300 MB reply took a gigabyte) could exhaust the process's memory
within ``timeout_s``.

``fetch`` is the same rules for a picture a reply names by ``url`` (``urllib``, no SDK): the
whole download, the bodies of redirects followed included, is read up to ``max_bytes``
(``urllib`` read a redirect's body whole, however large, before following it), and a redirect
to another server is not followed.

This module imports the SDK's HTTP library; the adapters import it only when they make a
client (the ``openai`` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx2
import openai
from httpx2._decoders import ContentDecoder

from .._calls import call_deadline
from .._retry import PermanentError
from ._endpoint import public_url

__all__ = ["CrossOriginRedirect", "ReplyTooLarge", "async_http_client", "fetch", "http_client"]

_DEADLINE = "loopwright.deadline"  # a request's extension: _clock() it must end by
_ORIGIN = "loopwright.origin"  # and the URL it was first sent to (a redirect's keeps both)
_HOPS = "loopwright.hops"  # and the URLs it was sent to, one a hop (a list the hops share)
MAX_REDIRECTS = 10


# The clock deadlines are read on: time.monotonic, as the engine's call_deadline is. A test
# moves it (tests/integration/test_openai_adapter.py) to make a reply late without waiting.
_clock = time.monotonic


class CrossOriginRedirect(PermanentError):
    """The server answered with a redirect to another server, which is not followed."""


class RedirectLoop(PermanentError):
    """The server redirected a request more than ``MAX_REDIRECTS`` times."""


class ReplyTooLarge(PermanentError):
    """A response body larger than the client's ``max_bytes``: not read further."""


def _same_server(first: httpx2.URL, then: httpx2.URL) -> bool:
    """``then`` is on ``first``'s server: the same origin, or ``http`` upgraded to ``https``
    on the same host's default ports (as ``httpx2`` keeps ``Authorization`` for)."""
    if (then.scheme, then.host, then.port) == (first.scheme, first.host, first.port):
        return True
    return (
        (first.scheme, then.scheme) == ("http", "https")
        and first.host == then.host
        and first.port in (None, 80)
        and then.port in (None, 443)
    )


def _refuse_cross_origin(response: httpx2.Response) -> None:
    if not response.has_redirect_location:
        return
    first = response.request.extensions.get(_ORIGIN, response.request.url)
    try:
        then = response.request.url.join(response.headers["Location"])
    except Exception:  # httpx2 refuses a malformed Location itself (RemoteProtocolError)
        return
    if isinstance(first, httpx2.URL) and not _same_server(first, then):
        raise CrossOriginRedirect(
            f"the server answered {response.status_code} redirecting to {public_url(str(then))}"
            f", another server than {public_url(str(first))}: not followed (the request, its "
            "prompt and its key go only where base_url says); if the model moved, set "
            "base_url to its new address"
        )


def _late(request: httpx2.Request, timeout_s: float) -> httpx2.ReadTimeout:
    return httpx2.ReadTimeout(
        f"the request took longer than timeout_s={timeout_s:g} s (its whole time, the reply's "
        "body included) or than the engine's time for the call",
        request=request,
    )


def _check(deadline: float, request: httpx2.Request, timeout_s: float) -> None:
    if _clock() > deadline:
        raise _late(request, timeout_s)


class _Size:
    """The bytes of a response body (or of a picture's whole download) so far, refused past
    ``most``, in words saying ``what`` was refused and ``why``."""

    def __init__(
        self,
        most: int,
        url: str,
        what: str = "the reply from",
        why: str = "a model's reply is far smaller; a server sending without end held it all "
        "in memory",
    ) -> None:
        self.most, self.seen, self.url, self.what, self.why = most, 0, url, what, why

    def add(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        if self.seen > self.most:
            raise ReplyTooLarge(
                f"{self.what} {public_url(self.url)} is larger than "
                f"{self.most / 2**20:g} MiB: not read further ({self.why})"
            )


class _Decoded(ContentDecoder):
    """A response's content decoder whose output counts against its limit: the SDK reads a
    body decompressed, and a gzip reply of a few KB on the wire can decompress to gigabytes
    (``httpx2`` decodes in bounded pieces, so each is counted before the next is made)."""

    def __init__(self, inner: ContentDecoder, size: _Size) -> None:
        self._inner, self._size = inner, size

    def decode(self, data: bytes) -> Iterator[bytes]:
        for piece in self._inner.decode(data):
            self._size.add(piece)
            yield piece

    def flush(self) -> Iterator[bytes]:
        for piece in self._inner.flush():
            self._size.add(piece)
            yield piece


def _count_decoded(response: httpx2.Response, max_bytes: int) -> None:
    """Count ``response``'s body as it is decoded (what the SDK holds), besides its bytes on
    the wire (``_SyncBounded``/``_AsyncBounded``)."""
    response._decoder = _Decoded(
        response._get_content_decoder(), _Size(max_bytes, str(response.request.url))
    )


class _SyncBounded(httpx2.SyncByteStream):
    """A response body that fails once its request's deadline has passed, or once it is
    larger than its limit."""

    def __init__(
        self,
        inner: httpx2.SyncByteStream,
        deadline: float,
        request: httpx2.Request,
        t: float,
        size: _Size,
    ) -> None:
        self._inner, self._deadline, self._request, self._timeout_s = inner, deadline, request, t
        self._size = size

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            _check(self._deadline, self._request, self._timeout_s)
            self._size.add(chunk)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class _AsyncBounded(httpx2.AsyncByteStream):
    """``_SyncBounded`` for the async client: each piece is awaited only until the deadline."""

    def __init__(
        self,
        inner: httpx2.AsyncByteStream,
        deadline: float,
        request: httpx2.Request,
        t: float,
        size: _Size,
    ) -> None:
        self._inner, self._deadline, self._request, self._timeout_s = inner, deadline, request, t
        self._size = size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        while True:
            try:
                with anyio.fail_after(max(0.0, self._deadline - _clock())):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise _late(self._request, self._timeout_s) from exc
            _check(self._deadline, self._request, self._timeout_s)  # it came, but too late
            self._size.add(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Client(openai.DefaultHttpxClient):
    """Closed when collected, as the SDK's own client is (else its sockets are left open)."""

    def __del__(self) -> None:
        if not self.is_closed:
            with contextlib.suppress(Exception):
                self.close()


class _AsyncClient(openai.DefaultAsyncHttpxClient):
    """Closed when collected, as the SDK's own async client is (the adapters close theirs when
    their event loop shuts down)."""

    def __del__(self) -> None:
        if not self.is_closed:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().create_task(self.aclose())


def _deadline(timeout_s: float) -> float:
    """When a request sent now must have ended: ``timeout_s`` from now, or sooner when the
    engine gives up on the call it belongs to (``call_deadline``: an abandoned sync call's
    request must not run on, to be answered and billed with nobody to count it)."""
    deadline = _clock() + timeout_s
    engine = call_deadline()
    return deadline if engine is None else min(deadline, engine)


def _started(request: httpx2.Request, timeout_s: float) -> None:
    """A request's deadline and first URL, set when it is sent; a redirect's request is given
    its predecessor's extensions, and keeps both."""
    request.extensions.setdefault(_DEADLINE, _deadline(timeout_s))
    request.extensions.setdefault(_ORIGIN, request.url)
    hops = request.extensions.setdefault(_HOPS, [])
    hops.append(request.url)
    if len(hops) > MAX_REDIRECTS + 1:
        raise RedirectLoop(
            f"the server redirected the request more than {MAX_REDIRECTS} times (from "
            f"{public_url(str(hops[0]))}, last to {public_url(str(request.url))}): a redirect "
            "loop, not followed further"
        )


def _deadline_of(response: httpx2.Response) -> float | None:
    deadline = response.request.extensions.get(_DEADLINE)
    return deadline if isinstance(deadline, float) else None


def http_client(timeout_s: float, max_bytes: int) -> httpx2.Client:
    """The SDK's default sync HTTP client, each request of which ends within ``timeout_s``
    and whose each response body is at most ``max_bytes``."""

    def start(request: httpx2.Request) -> None:
        _started(request, timeout_s)

    def bound(response: httpx2.Response) -> None:
        _refuse_cross_origin(response)
        deadline = _deadline_of(response)
        if deadline is None or not isinstance(response.stream, httpx2.SyncByteStream):
            return
        _check(deadline, response.request, timeout_s)  # the headers came too late
        size = _Size(max_bytes, str(response.request.url))
        response.stream = _SyncBounded(response.stream, deadline, response.request, timeout_s, size)
        _count_decoded(response, max_bytes)

    return _Client(timeout=timeout_s, event_hooks={"request": [start], "response": [bound]})


def async_http_client(timeout_s: float, max_bytes: int) -> httpx2.AsyncClient:
    """``http_client`` for the async SDK client."""

    async def start(request: httpx2.Request) -> None:
        _started(request, timeout_s)

    async def bound(response: httpx2.Response) -> None:
        _refuse_cross_origin(response)
        deadline = _deadline_of(response)
        if deadline is None or not isinstance(response.stream, httpx2.AsyncByteStream):
            return
        _check(deadline, response.request, timeout_s)
        size = _Size(max_bytes, str(response.request.url))
        response.stream = _AsyncBounded(
            response.stream, deadline, response.request, timeout_s, size
        )
        _count_decoded(response, max_bytes)

    return _AsyncClient(timeout=timeout_s, event_hooks={"request": [start], "response": [bound]})


class _Download:
    """The bytes of one ``fetch`` so far, over all its hops, refused past ``most``."""

    def __init__(self, url: str, most: int) -> None:
        self.url = url
        self.size = _Size(most, url, "the picture at", "its whole download, redirects included")

    def read(self, response: http.client.HTTPResponse) -> bytes:
        parts = []
        while piece := response.read(min(2**20, self.size.most + 1 - self.size.seen)):
            self.size.add(piece)
            parts.append(piece)
        return b"".join(parts)


class _SameServerRedirects(urllib.request.HTTPRedirectHandler):
    """``urllib``'s redirects (up to its 10), but none to another server than the first
    request's, and a redirect's body read within the download's limit (``urllib`` read it
    whole, however large, and dropped it)."""

    def __init__(self, download: _Download) -> None:
        self.download = download

    def redirect_request(  # type: ignore[no-untyped-def]  # (typeshed's signature)
        self, req, fp, code, msg, headers, newurl
    ) -> urllib.request.Request | None:
        try:
            same = _same_server(httpx2.URL(self.download.url), httpx2.URL(newurl))
        except Exception:  # a Location httpx2 cannot parse: no server to compare
            same = False
        if not same:
            fp.close()
            raise CrossOriginRedirect(
                f"the picture at {public_url(self.download.url)} answered {code} redirecting "
                f"to {public_url(newurl)}, another server: not followed (a reply's url is "
                "fetched only from the server it names)"
            )
        try:
            self.download.read(fp)  # counted, then dropped
        finally:
            fp.close()  # (urllib's own fp.read() then reads nothing)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch(url: str, timeout_s: float, max_bytes: int) -> bytes:
    """The body of a GET of ``url`` (http or https: the caller checks), whole: at most
    ``max_bytes`` over the download (``ReplyTooLarge``), redirects followed only within its
    server (``CrossOriginRedirect``); a failed download raises ``OSError`` (``urllib``'s
    ``URLError``, a refused connection) or ``http.client.HTTPException`` (a body cut short)."""
    download = _Download(url, max_bytes)
    opener = urllib.request.build_opener(_SameServerRedirects(download))
    with opener.open(url, timeout=timeout_s) as r:
        data = download.read(r)
        if r.length:  # its Content-Length not reached
            raise http.client.IncompleteRead(data, r.length)
    return data
