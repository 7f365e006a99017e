"""People in the dashboard: the audit log, earned authority, and who is signed in
(docs/permissions.md). Reads like every other page; the log's export is JSON lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from .._earned import standings
from .._errors import ConfigError
from ..store import Store
from ._auth import Auth

__all__ = ["register_people_routes"]

PAGE = 100


def register_people_routes(
    app: FastAPI, store: Store, auth: Auth, page: Callable[..., HTMLResponse]
) -> None:
    def read(request: Request) -> None:
        if auth.users_mode and not auth.may(request, "read"):
            raise HTTPException(403, f"{auth.who(request)} may not read this store")

    def records(after: int, actor: str, target: str, limit: int) -> list[dict[str, Any]]:
        if after < 0 or not 1 <= limit <= 10000:
            raise HTTPException(400, "after must be >= 0 and limit between 1 and 10000")
        got = store.audit(after=after, actor=actor or None, target=target or None, limit=limit)
        return [r.to_dict() for r in got]

    @app.get("/audit", response_class=HTMLResponse, include_in_schema=False)
    def audit_page(
        request: Request, after: int = 0, actor: str = "", target: str = ""
    ) -> HTMLResponse:
        read(request)
        rows = records(after, actor, target, PAGE)
        nxt = rows[-1]["audit_id"] if len(rows) == PAGE else None
        return page(request, "audit.html", rows=rows, actor=actor, target=target, next_after=nxt)

    @app.get("/api/audit", tags=["people"])
    def api_audit(
        request: Request,
        after: int = 0,
        actor: str = "",
        target: str = "",
        limit: int = 1000,
        format: str = "json",
    ) -> Response:
        """The audit log, oldest first (``after``: the last id you have; ``actor``, ``target``:
        only that person's, only those on that, as the log names it: ``run ID``).
        ``format=jsonl``: one JSON object a line, an export."""
        read(request)
        rows = records(after, actor, target, limit)
        if format == "jsonl":
            text = "".join(json.dumps(r, default=str) + "\n" for r in rows)
            return PlainTextResponse(text, media_type="application/x-ndjson")
        if format != "json":
            raise HTTPException(400, "format must be json or jsonl")
        return Response(json.dumps(rows, default=str), media_type="application/json")

    def standing_rows() -> list[dict[str, Any]]:
        try:
            return [s.to_dict() for s in standings(store)]
        except ConfigError as exc:
            raise HTTPException(409, str(exc)) from exc

    @app.get("/authority", response_class=HTMLResponse, include_in_schema=False)
    def authority_page(request: Request) -> HTMLResponse:
        read(request)
        return page(request, "authority.html", rows=standing_rows())

    @app.get("/api/authority", tags=["people"])
    def api_authority(request: Request) -> list[dict[str, Any]]:
        """Earned authority per loop and kind: earned or not, from which approvals, since
        when, and what revoked it last."""
        read(request)
        return standing_rows()

    @app.get("/api/me", tags=["people"])
    def api_me(request: Request) -> dict[str, Any]:
        """Who this request is signed in as, and what they may do."""
        if not auth.signed_in(request):
            raise HTTPException(401, "not signed in", headers={"WWW-Authenticate": "Bearer"})
        user = auth.user(request)
        return {
            "name": auth.who(request),
            "roles": list(user.roles) if user is not None else None,
            "limits": dict(user.limits) if user is not None else None,
            "may": [p for p in ("read", "operate", "decide", "admin") if auth.may(request, p)],
            "users_mode": auth.users_mode,
        }
