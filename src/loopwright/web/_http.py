"""Small HTTP helpers shared by the dashboard's route modules."""

from __future__ import annotations

from fastapi import HTTPException
from starlette.requests import Request

from .._errors import LoopwrightError, NotPermittedError

__all__ = ["http_error", "origin_of"]


def http_error(exc: LoopwrightError) -> HTTPException:
    """A refused action as HTTP: 403 when the person may not (roles, limits, the rule), 409
    for anything else the run's state refuses."""
    return HTTPException(403 if isinstance(exc, NotPermittedError) else 409, str(exc))


def origin_of(request: Request) -> str:
    """Where a request came from, for the audit log."""
    return f"http {request.client.host if request.client else '?'}"
