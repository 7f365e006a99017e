"""Small HTTP helpers shared by the dashboard's route modules."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from typing import Any
from urllib.parse import quote

from fastapi import HTTPException
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import (
    ConfigError,
    LoopwrightError,
    NotPermittedError,
    StoreCorruptError,
    StoreUnavailableError,
)
from .._json import DuplicateKeyError, not_text, strict_loads
from .._redact_logs import masked_logger

__all__ = [
    "BodyLimit",
    "Flash",
    "HeadAsGet",
    "HostCheck",
    "NotText",
    "check_body_limit",
    "http_error",
    "json_body",
    "origin_of",
    "size_words",
    "text_field",
]

log = masked_logger("loopwright.web")


class Flash:
    """The line a run's page shows once after a form's post (``?msg=…``), signed with this
    server's key (``&sig=``): a link someone sends cannot make the dashboard say what they wrote
    ("approved by root; deny the other one") in its own voice."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def _sig(self, run_id: str, msg: str) -> str:
        # Bound to the run's page: signed for the message alone, a line said of one run
        # ("cancellation requested by ana") was shown on any other run's page it was moved to.
        signed = f"{run_id}\n{msg}".encode("utf-8", "replace")
        return hmac.new(self._key, signed, hashlib.sha256).hexdigest()

    def url(self, run_id: str, msg: str, fragment: str = "") -> str:
        """The run page's address showing ``msg``."""
        return f"/runs/{run_id}?msg={quote(msg)}&sig={self._sig(run_id, msg)}{fragment}"

    def of(self, request: Request) -> str:
        """The message ``request`` carries when this server signed it for the run whose page
        it asks for, else ``""``."""
        msg = request.query_params.get("msg", "")
        sig = request.query_params.get("sig", "")
        run_id = str(request.path_params.get("run_id", ""))
        want = self._sig(run_id, msg)
        return msg if msg and hmac.compare_digest(sig.encode(), want.encode()) else ""


def http_error(exc: LoopwrightError) -> HTTPException:
    """A refused action as HTTP: 403 when the person may not (roles, limits, the rule), 503
    when the store failed (the detail, which names the database's host or path, goes to the
    server's log only), 409 for anything else the run's state refuses."""
    if isinstance(exc, StoreUnavailableError | StoreCorruptError):
        log.warning("the store failed: %s", exc)
        return HTTPException(503, "the store is unavailable or failed; the server's log says why")
    return HTTPException(403 if isinstance(exc, NotPermittedError) else 409, str(exc))


def origin_of(request: Request) -> str:
    """Where a request came from, for the audit log."""
    return f"http {request.client.host if request.client else '?'}"


async def json_body(request: Request, shape: str) -> Any:
    """The request's body as strict JSON (no NaN or Infinity, no number out of range, not
    nested past Python's stack); 400 naming the ``shape`` expected otherwise."""
    raw = await request.body()
    try:
        body = strict_loads(raw.decode("utf-8"))
    except DuplicateKeyError as exc:  # JSON readers keep the last: which was meant is unknown
        raise HTTPException(400, f"the body is ambiguous: {exc}; give each key once") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPException(400, f"the body must be JSON ({exc}): {shape}") from None
    try:
        _all_text(body)
    except ValueError as exc:
        raise NotText(400, f"the body must be JSON ({exc}): {shape}") from None
    return body


class NotText(HTTPException):
    """A JSON body refused for a string that is not text (a lone surrogate): a route that
    audits its refusals (a decision) records this one too."""


def _all_text(value: Any) -> None:
    """``ValueError`` for a string (or key) holding a lone surrogate (JSON's ``"\\udfff"``):
    stored, it would make every page and API answer showing it fail to encode."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            not_text(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def text_field(value: str | None, field: str) -> str | None:
    """A person's text kept in a column of the store (a note, a task key): 400 when it holds a
    NUL character (PostgreSQL's text columns refuse one: the store's error, a 409, before) or
    a lone surrogate (not text)."""
    if value is None:
        return None
    if "\x00" in value:
        raise HTTPException(400, f"{field} holds a NUL character, which the store does not keep")
    try:
        not_text(value)
    except ValueError as exc:
        raise HTTPException(400, f"{field}: {exc}") from None
    return value


def size_words(n: int) -> str:
    """A byte count as people read it: ``1 MiB``, ``64 KiB``, ``100 bytes``."""
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} bytes"


def check_body_limit(max_body: int) -> None:
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise ConfigError(f"{max_body!r} is not a body size (1 byte or more)", field="max_body")


class _TooLarge(StarletteHTTPException):
    """Raised by ``receive`` once a body passes the limit: a route reading it answers 413 through
    the usual handlers; ``BodyLimit`` answers it when nothing else did."""

    def __init__(self, detail: str) -> None:
        super().__init__(413, detail)


class BodyLimit:
    """Every request's body held to ``max_body`` bytes (ASGI middleware). A declared
    ``Content-Length`` over it is answered 413 at once, before any route runs or a byte of the
    body is read; a body sent without one (chunked) is counted as it is read and refused the
    moment it passes the limit, the rest unread. Nothing reads a request body but through
    ``receive``, so no route, form parser or JSON decoder sees more than ``max_body``. A chunked
    body a route answers without reading to its end is not refused (its answer is the route's):
    that answer closes the connection, so the rest is never read."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        check_body_limit(max_body)
        self.app = app
        self.max_body = max_body
        self.detail = (
            f"the request body is larger than this server accepts ({size_words(max_body)})"
        )

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int = 413, detail: str = ""
    ) -> None:
        headers = {"Connection": "close", "X-Content-Type-Options": "nosniff"}
        body = {"detail": detail or self.detail}
        await JSONResponse(body, status, headers=headers)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and not declared.strip().isdigit():
            await self._refuse(scope, receive, send, 400, "Content-Length is not a number")
            return
        if declared is not None and int(declared) > self.max_body:
            await self._refuse(scope, receive, send)  # before anything reads a byte of it
            return
        read = 0
        started = False
        # A body sent without a length (chunked) that the route answers without reading to its
        # end (a cancel takes none): the answer says ``Connection: close``, so the server reads
        # no more of it. Kept open, the connection let the client go on sending, unread and
        # unbounded, past the limit that "every request" is held to.
        unread = declared is None and any(k == b"transfer-encoding" for k, _ in scope["headers"])

        async def limited() -> Message:
            nonlocal read, unread
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > self.max_body:
                    raise _TooLarge(self.detail)
                unread = unread and message.get("more_body", False)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and unread:
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watched)
        except Exception as exc:
            if started or not _over(exc):
                raise
            await self._refuse(scope, receive, send)


def _over(exc: BaseException) -> bool:
    """Whether ``exc`` is the limit's alone (a middleware's task group may wrap it)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_over(e) for e in exc.exceptions)
    return isinstance(exc, _TooLarge)


class HeadAsGet:
    """HEAD answered as the GET of the same address, without its body (RFC 9110: the same
    status and headers). FastAPI's routes answer only the methods they name: HEAD was 405
    everywhere, ``/healthz`` included, which load balancers probe with HEAD. Outermost, so that
    everything inside (the Host check, the sign-in guard, the routes) sees the GET it is: a
    HEAD is let through exactly where a GET is, and refused (401, the sign-in redirect) where a
    GET is. A streamed body (``/api/events``) ends once its headers are sent: the request's
    ``receive`` then says the client has gone."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        done = asyncio.Event()
        asked = False

        async def no_body() -> Message:
            nonlocal asked
            if not asked:  # a HEAD carries no body
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def headers_only(message: Message) -> None:
            if done.is_set():
                return
            if message["type"] == "http.response.body":
                done.set()
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app(dict(scope, method="GET"), no_body, headers_only)


class HostCheck:
    """The ``Host`` names served (``TrustedHostMiddleware``), its refusal answered as every
    other is: JSON with a ``detail`` (it was the text ``Invalid host header``, the only answer
    of the API that was not JSON)."""

    DETAIL = (
        "Invalid host header: this dashboard answers to its own names only "
        "(loopwright ui --allow-host NAME adds one)"
    )
    _PASSED = "loopwright.host_ok"

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        self.app = app
        self._check = TrustedHostMiddleware(
            self._passed, allowed_hosts=allowed_hosts, www_redirect=False
        )

    async def _passed(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[self._PASSED] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._check(scope, receive, send)
            return

        async def refused_as_json(message: Message) -> None:
            if scope.get(self._PASSED):
                await send(message)
            elif message["type"] == "http.response.start":  # the check's own refusal
                await JSONResponse({"detail": self.DETAIL}, status_code=400)(scope, receive, send)

        await self._check(scope, receive, refused_as_json)
