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
until the deadline. A response's headers are checked when they have all arrived.

This module imports the SDK's HTTP library; the adapters import it only when they make a
client (the ``openai`` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx2
import openai

from .._calls import call_deadline

__all__ = ["async_http_client", "http_client"]

_DEADLINE = "loopwright.deadline"  # a request's extension: time.monotonic() it must end by


def _late(request: httpx2.Request, timeout_s: float) -> httpx2.ReadTimeout:
    return httpx2.ReadTimeout(
        f"the request took longer than timeout_s={timeout_s:g} s (its whole time, the reply's "
        "body included) or than the engine's time for the call",
        request=request,
    )


def _check(deadline: float, request: httpx2.Request, timeout_s: float) -> None:
    if time.monotonic() > deadline:
        raise _late(request, timeout_s)


class _SyncBounded(httpx2.SyncByteStream):
    """A response body that fails once its request's deadline has passed."""

    def __init__(
        self, inner: httpx2.SyncByteStream, deadline: float, request: httpx2.Request, t: float
    ) -> None:
        self._inner, self._deadline, self._request, self._timeout_s = inner, deadline, request, t

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            _check(self._deadline, self._request, self._timeout_s)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class _AsyncBounded(httpx2.AsyncByteStream):
    """``_SyncBounded`` for the async client: each piece is awaited only until the deadline."""

    def __init__(
        self, inner: httpx2.AsyncByteStream, deadline: float, request: httpx2.Request, t: float
    ) -> None:
        self._inner, self._deadline, self._request, self._timeout_s = inner, deadline, request, t

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        while True:
            try:
                with anyio.fail_after(max(0.0, self._deadline - time.monotonic())):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise _late(self._request, self._timeout_s) from exc
            _check(self._deadline, self._request, self._timeout_s)  # it came, but too late
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
    deadline = time.monotonic() + timeout_s
    engine = call_deadline()
    return deadline if engine is None else min(deadline, engine)


def _deadline_of(response: httpx2.Response) -> float | None:
    deadline = response.request.extensions.get(_DEADLINE)
    return deadline if isinstance(deadline, float) else None


def http_client(timeout_s: float) -> httpx2.Client:
    """The SDK's default sync HTTP client, each request of which ends within ``timeout_s``."""

    def start(request: httpx2.Request) -> None:
        request.extensions[_DEADLINE] = _deadline(timeout_s)

    def bound(response: httpx2.Response) -> None:
        deadline = _deadline_of(response)
        if deadline is None or not isinstance(response.stream, httpx2.SyncByteStream):
            return
        _check(deadline, response.request, timeout_s)  # the headers came too late
        response.stream = _SyncBounded(response.stream, deadline, response.request, timeout_s)

    return _Client(timeout=timeout_s, event_hooks={"request": [start], "response": [bound]})


def async_http_client(timeout_s: float) -> httpx2.AsyncClient:
    """The SDK's default async HTTP client, each request of which ends within ``timeout_s``."""

    async def start(request: httpx2.Request) -> None:
        request.extensions[_DEADLINE] = _deadline(timeout_s)

    async def bound(response: httpx2.Response) -> None:
        deadline = _deadline_of(response)
        if deadline is None or not isinstance(response.stream, httpx2.AsyncByteStream):
            return
        _check(deadline, response.request, timeout_s)
        response.stream = _AsyncBounded(response.stream, deadline, response.request, timeout_s)

    return _AsyncClient(timeout=timeout_s, event_hooks={"request": [start], "response": [bound]})
