"""Small HTTP helpers shared by the dashboard's route modules."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import HTTPException
from starlette.requests import Request

from .._errors import LoopwrightError, NotPermittedError, StoreCorruptError, StoreUnavailableError
from .._json import strict_loads

__all__ = ["http_error", "json_body", "origin_of"]

log = logging.getLogger("loopwright.web")


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
        return strict_loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPException(400, f"the body must be JSON ({exc}): {shape}") from None
