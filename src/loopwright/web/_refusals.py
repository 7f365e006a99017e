"""A request refused, answered for who asked: a browser's page or form post gets a page that
says why with a way back, the API and scripts the JSON; the store's location never shown, and a
store that failed is a 503 with one line in the log, not a traceback."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._errors import ConfigError, StoreCorruptError
from .._redact_logs import masked_logger
from ._context import WebContext
from ._sign_in import safe_next

__all__ = ["install_refusals"]

log = masked_logger("loopwright.web")


def _validation_words(errors: Any) -> str:
    """FastAPI's validation errors as one line a person reads: "to_cycle: Input should be a
    valid integer"."""
    try:
        return "; ".join(
            f"{e['loc'][-1]}: {e['msg']}" if e.get("loc") else str(e["msg"]) for e in errors
        )
    except (TypeError, KeyError, IndexError):
        return "a value in the request is not valid"


def install_refusals(app: FastAPI, ctx: WebContext) -> None:
    """The exception handlers: a refusal's page or JSON."""
    store, page = ctx.store, ctx.page
    # A browser's page or form post refused (403 may not, 409 the run's state, 400 or 422 a bad
    # value, 404 no such thing): a page that says why, with a way back, instead of the API's
    # JSON. API calls and scripts (no text/html in Accept) keep the JSON body. Neither names
    # where the store is (a visitor who may read pages need not learn its path).
    titles = {
        400: "Not accepted",
        403: "Not permitted",
        404: "Not found",
        409: "Not possible now",
        422: "Not accepted",
        503: "Store unavailable",
    }
    where = str(getattr(store, "url", "") or "")

    def hide_store(detail: Any) -> Any:
        if isinstance(detail, str) and where and where in detail:
            return detail.replace(where, "this store")
        return detail

    def wants_page(request: Request) -> bool:
        """A browser's request for a page (not the API, not a script)."""
        return not request.url.path.startswith("/api/") and "text/html" in request.headers.get(
            "accept", ""
        )

    async def refused(
        request: Request, status: int, detail: Any, headers: Mapping[str, str] | None = None
    ) -> Response:
        detail = hide_store(detail)
        if not wants_page(request) or status not in titles:
            exc = StarletteHTTPException(status, detail, headers=headers)
            return await http_exception_handler(request, exc)
        referer = urlsplit(request.headers.get("referer", ""))
        back = referer.path + (f"?{referer.query}" if referer.query else "")
        if not back or (referer.netloc and referer.netloc != request.headers.get("host")):
            back = "/"  # only ever back to this dashboard
        busy = headers is not None and "Retry-After" in headers
        resp = await run_in_threadpool(
            page,
            request,
            "refused.html",
            title="Busy: try again later" if busy else titles[status],
            detail=detail if isinstance(detail, str) else _validation_words(detail),
            status=status,
            back=safe_next(back),
        )
        resp.status_code = status
        resp.headers.update(headers or {})
        return resp

    @app.exception_handler(StarletteHTTPException)
    async def refused_page(request: Request, exc: StarletteHTTPException) -> Response:
        busy = exc.headers is not None and "Retry-After" in exc.headers
        if exc.status_code == 401 or (exc.headers and not busy):  # sign-in flows' own answer
            exc.detail = hide_store(exc.detail)
            return await http_exception_handler(request, exc)
        # (a 503 with Retry-After, the server full: a browser's form gets a page saying so)
        return await refused(request, exc.status_code, exc.detail, exc.headers)

    @app.exception_handler(ConfigError)
    async def bad_input_page(request: Request, exc: ConfigError) -> Response:
        # A mistake in what was sent that only the core could tell (a run id or task key that
        # breaks the rule of keys, looked up by any page or API): 400, not a server error.
        return await refused(request, 400, str(exc))

    @app.exception_handler(StoreCorruptError)
    @app.exception_handler(sqlite3.DatabaseError)
    async def store_failed_page(request: Request, exc: Exception) -> Response:
        # Damage found only when a page reads that part of the file (a page overwritten:
        # "database disk image is malformed", which the store raises as StoreCorruptError),
        # or the file failing under a read: the store failed, not the server. One line in the
        # log (it names the file), 503 for the visitor, as `loopwright show` says it in one
        # line; not a 500 with a traceback.
        from ..store._damage import store_damage

        damage = exc if isinstance(exc, StoreCorruptError) else store_damage(exc)
        log.warning("the store failed: %s", damage if damage is not None else exc)
        what = "is damaged" if damage is not None else "failed"
        return await refused(
            request, 503, f"the store {what}; the server's log says why (restore it from a backup)"
        )

    @app.exception_handler(RequestValidationError)
    async def bad_value_page(request: Request, exc: RequestValidationError) -> Response:
        if not wants_page(request):
            return await request_validation_exception_handler(request, exc)
        return await refused(request, 422, exc.errors())
