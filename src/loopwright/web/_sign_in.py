"""Signing in and out of the dashboard: the sign-in form (a POST from this page only; a token in
a link signs nobody in), the session cookie, refused sign-ins counted and audited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from .._authority import audit
from ._auth import COOKIE, RefusedSignIns, cross_site
from ._context import WebContext
from ._http import origin_of

__all__ = ["register_sign_in", "safe_next"]


def safe_next(target: str | None) -> str:
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def register_sign_in(app: FastAPI, ctx: WebContext) -> None:
    """``/login`` and ``/logout``; the refused sign-ins recorded when the application stops."""
    store, auth, page = ctx.store, ctx.auth, ctx.page

    def record_refused(
        source: str, reason: str, counted: int, what: tuple[str, str], who: str
    ) -> None:
        if auth.users_mode:  # sign-ins are audited where people are
            audit(store, who, what[0], what[1], outcome="refused",
                  origin=source, reason=reason, counted=counted or None)  # fmt: skip

    sign_ins = RefusedSignIns(record_refused)
    app.state.sign_ins = sign_ins
    inner_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: FastAPI) -> AsyncIterator[Any]:
        try:
            async with inner_lifespan(a) as state:
                yield state
        finally:  # the refused sign-ins counted and not yet recorded
            await run_in_threadpool(sign_ins.flush)

    app.router.lifespan_context = lifespan

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_page(request: Request, token: str = "", next: str = "/") -> Response:
        # Sign-in is a POST from this page's form. A token in a link (GET /login?token=) signs
        # nobody in and records nothing: an <img> on any page could send one (login CSRF, and a
        # refused sign-in recorded per request), and a URL lands in history and logs.
        error = "Paste the token in the form: a token in a link does not sign in." if token else ""
        resp = page(request, "login.html", next=safe_next(next), error=error)
        if token:
            resp.status_code = 400
        return resp

    @app.post("/login", include_in_schema=False)
    def login_post(request: Request, token: str = Form(""), next: str = Form("/")) -> Response:
        return _sign_in(request, token, next)

    def _sign_in(request: Request, token: str, target: str) -> Response:
        where = origin_of(request)
        elsewhere = cross_site(request)
        if elsewhere is not None:  # another site's form signing this browser in (login CSRF)
            sign_ins.refused(where, f"sign-in from another site ({elsewhere})")
            raise HTTPException(403, "a sign-in from another site is refused: use this page")
        name = auth.name_for(token.strip())
        if name is None:
            sign_ins.refused(where, "wrong, unknown or revoked token")
            raise HTTPException(403, "wrong, unknown or revoked token")
        if auth.users_mode:  # sign-ins are audited where people are
            audit(store, name, "sign in", "dashboard", outcome="allowed", origin=where)
        resp = RedirectResponse(safe_next(target), status_code=303)
        # Secure where the browser reached the dashboard over https (the TLS proxy in front
        # says so in X-Forwarded-Proto; `loopwright ui` reads no proxy header, so its scheme is
        # http): the browser then never sends the session over plain http, to the same name on
        # port 80 that redirects to https. A client that claims https only marks its own
        # cookie so.
        proto = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        resp.set_cookie(
            COOKIE,
            auth.new_session(token.strip()),
            httponly=True,
            samesite="strict",
            path="/",
            secure="https" in (request.url.scheme, proto),
        )
        return resp

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request, csrf: str = Form("")) -> Response:
        if not auth.csrf_ok(request, csrf):
            # another site's form signing this browser out: a forged request, audited as the
            # other writes' are (it was refused and recorded nowhere)
            ctx.refused_csrf(request)
            raise HTTPException(403, "missing or wrong CSRF token")
        auth.end_session(request)
        resp = RedirectResponse("/", status_code=303)
        resp.delete_cookie(COOKIE, path="/")
        return resp
