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
from ._auth import (
    COOKIE,
    SIGN_IN,
    TOO_MANY_SESSIONS,
    RefusedSignIns,
    SignInBackoff,
    cross_site,
)
from ._context import RESUME_REFUSED_COUNTED, WebContext
from ._http import origin_of

__all__ = ["SESSION_ENDED", "SIGNED_IN_COUNTED", "register_sign_in", "safe_next"]

SESSION_ENDED = ("end session", "dashboard")  # a person's oldest session, ended by a sign-in
SIGNED_IN_COUNTED = "sign-ins counted since the last record from here"
ENDED_COUNTED = "sessions ended by a newer sign-in counted since the last record from here"


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
    # wrong tokens from a source: past its limit, the guard answers its sign-ins 429
    backoff = SignInBackoff()
    app.state.backoff = backoff

    def record_allowed(
        source: str, reason: str, counted: int, what: tuple[str, str], who: str
    ) -> None:
        if auth.users_mode:
            extra = {"reason": reason} if reason else {}
            audit(store, who, what[0], what[1], outcome="allowed", origin=source,
                  counted=counted or None, **extra)  # fmt: skip

    # Allowed sign-ins, and the sessions they end (a person's beyond MAX_SESSIONS), audited as
    # refused ones are: once per person and source in a window, the rest counted. A valid
    # token (a viewer's) signing in again and again wrote a record each, without bound.
    signed_in = RefusedSignIns(record_allowed, counted_reason=SIGNED_IN_COUNTED)
    ended_by = RefusedSignIns(record_allowed, counted_reason=ENDED_COUNTED)
    app.state.signed_ins, app.state.sessions_ended = signed_in, ended_by

    def record_no_room(
        source: str, reason: str, counted: int, what: tuple[str, str], who: str
    ) -> None:  # an operator's action refused: audited either way, as ``operate`` does
        audit(store, who, what[0], what[1], outcome="refused", origin=source, reason=reason,
              counted=counted or None)  # fmt: skip

    # Resumes refused for room (``WebContext.room_to_resume``): one an operator may repeat at
    # will, so once per person and source in a window, the rest counted.
    no_room = RefusedSignIns(record_no_room, counted_reason=RESUME_REFUSED_COUNTED)
    app.state.resumes_refused = no_room
    inner_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: FastAPI) -> AsyncIterator[Any]:
        try:
            async with inner_lifespan(a) as state:
                yield state
        finally:  # the sign-ins counted and not yet recorded
            await run_in_threadpool(sign_ins.flush)
            await run_in_threadpool(signed_in.flush)
            await run_in_threadpool(ended_by.flush)
            await run_in_threadpool(no_room.flush)

    app.router.lifespan_context = lifespan

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_page(request: Request, token: str = "", next: str = "/") -> Response:
        # Sign-in is a POST from this page's form. A token in a link (GET /login?token=) signs
        # nobody in and records nothing: an <img> on any page could send one (login CSRF, and a
        # refused sign-in recorded per request), and a URL lands in history and logs.
        error = "Paste the token in the form: a token in a link does not sign in." if token else ""
        # A session the server ended (a newer sign-in beyond the person's MAX_SESSIONS): the
        # browser it was is told why, once, rather than finding itself signed out.
        resp = page(
            request, "login.html", next=safe_next(next), error=error, ended=auth.why_ended(request)
        )
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
            backoff.failed(where)
            sign_ins.refused(where, "wrong, unknown or revoked token")
            raise HTTPException(403, "wrong, unknown or revoked token")
        # audited where people are: once per person and source in a window, the rest counted
        signed_in.refused(where, "", SIGN_IN, name)
        session, ended = auth.sign_in_session(token.strip())
        if ended:  # their oldest session, ended to keep MAX_SESSIONS: audited, not silent
            ended_by.refused(where, TOO_MANY_SESSIONS, SESSION_ENDED, name)
        resp = RedirectResponse(safe_next(target), status_code=303)
        # Secure where the browser reached the dashboard over https (the TLS proxy in front
        # says so in X-Forwarded-Proto; `loopwright ui` reads no proxy header, so its scheme is
        # http): the browser then never sends the session over plain http, to the same name on
        # port 80 that redirects to https. A client that claims https only marks its own
        # cookie so.
        proto = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        resp.set_cookie(
            COOKIE,
            session,
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
