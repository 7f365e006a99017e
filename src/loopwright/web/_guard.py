"""What every request meets before a route: a write refused before its body is read (a body
of the wrong type, no sign-in), reads behind the token when ``require_token_for_reads``, the
live stream's position and the poller woken, and the security headers on every answer."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import RequestResponseEndpoint

from ._auth import NO_TOKEN, SIGN_IN, UNKNOWN_TOKEN, Auth
from ._http import origin_of

__all__ = [
    "CSP",
    "FORM_TYPES",
    "JSON_TYPE",
    "OPEN_PATHS",
    "PROBE_PATHS",
    "WRITES",
    "install_guard",
    "wrong_type",
]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
OPEN_PATHS = ("/login", "/static/", "/healthz")
# Liveness and readiness probes: open, and no use of the dashboard (the poller stays asleep).
PROBE_PATHS = frozenset({"/healthz"})
WRITES = ("POST", "PUT", "PATCH", "DELETE")
JSON_TYPE = "application/json"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def wrong_type(request: Request) -> JSONResponse | None:
    """A write refused before its body is read (415) when the body is not of the type its
    endpoint takes: JSON for ``/api``, a form for the pages. A body of another type
    (``text/plain``) is what a page elsewhere can send without a CORS preflight; no endpoint
    here takes one."""
    declared = request.headers.get("content-length")
    has_body = (declared is not None and declared.strip() not in ("", "0")) or (
        "transfer-encoding" in request.headers
    )
    if request.method not in WRITES or not has_body:
        return None
    given = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.url.path.startswith("/api/"):
        if given == JSON_TYPE or (given.startswith("application/") and given.endswith("+json")):
            return None
        wanted = f"JSON ({JSON_TYPE})"
    else:
        if given in FORM_TYPES:
            return None
        wanted = f"a form ({' or '.join(FORM_TYPES)})"
    return JSONResponse(
        {"detail": f"this endpoint takes {wanted}, not {given or 'a body without a type'}"},
        status_code=415,
    )


def _forged(auth: Auth, request: Request) -> bool:
    """Whether a write refused for its body's type came with a person's session cookie and
    none of the proof a page of this dashboard gives (an API call's ``X-CSRF-Token``; a form's
    token is in the body, never read here, and no page posts another type): what another page
    on the same site (another port of 127.0.0.1) makes the browser send. Audited as a write
    without the CSRF token is; it was a 415 that no record showed. A bearer token is a
    script's, not a browser's."""
    if request.url.path.startswith(OPEN_PATHS) or auth.bearer_ok(request):
        return False
    if not auth.signed_in(request):
        return False
    return not (
        request.url.path.startswith("/api/")
        and auth.csrf_ok(request, request.headers.get("x-csrf-token"))
    )


def _backed_off(
    app: FastAPI, auth: Auth, request: Request, path: str, bearer: bool
) -> JSONResponse | None:
    """429 with ``Retry-After`` for a sign-in (the form's, a bearer token on any request)
    from a source past its wrong tokens' limit (``SignInBackoff``), counted with the refused
    sign-ins; None to go on, a bearer token that names nobody counted (the form's are counted
    by ``/login``). A read too: ``/api/me`` says whom a token names."""
    where = origin_of(request)
    wait: int = app.state.backoff.retry_after(where)
    if not wait:
        if bearer and not auth.bearer_ok(request):
            app.state.backoff.failed(where)
        return None
    why = f"too many wrong tokens from here: try again in {wait} s"
    what = SIGN_IN if path == "/login" else (request.method, path[:200])
    app.state.sign_ins.refused(where, why, what)
    return JSONResponse({"detail": why}, status_code=429, headers={"Retry-After": str(wait)})


def install_guard(app: FastAPI, auth: Auth) -> None:
    """The ``guard`` middleware: added first, it runs inside the Host, body-size and HEAD
    middlewares ``create_app`` adds after it, before any route."""

    @app.middleware("http")
    async def guard(request: Request, call_next: RequestResponseEndpoint) -> Response:
        # The live stream's position before the route reads the store: a page drawn from what
        # it reads then asks for every change found after this moment (none is lost between).
        request.state.live_after = app.state.messages.last_seq
        # The poller looks at the store only while the dashboard is in use: wake it. What
        # differs from its last look is found by its next one, after this position (not a
        # change that came and went while it slept: _feed.Feed). A probe is no use: it wakes
        # nothing, or a liveness probe would keep the poller looking for good.
        path = request.url.path
        if path not in PROBE_PATHS and app.state.messages.touch():
            app.state.feed.wake()
        early: Response | None = None
        if "\x00" in path or any("\x00" in k + v for k, v in request.query_params.multi_items()):
            # No id, filter or search holds one; PostgreSQL refuses it in a query (a 500).
            early = JSONResponse(
                {"detail": "the path or query holds a NUL character (%00)"}, status_code=400
            )
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        bearer = scheme.lower() == "bearer" and bool(value.strip())
        if early is None and (bearer or (request.method == "POST" and path == "/login")):
            # a token tried from a source past its wrong tokens' limit: not checked (a right
            # one let through would say which guess was right), counted as refused
            early = await run_in_threadpool(_backed_off, app, auth, request, path, bearer)
        unsigned = (
            early is None
            and request.method in WRITES
            and not path.startswith(OPEN_PATHS)
            and not auth.signed_in(request)
        )
        if early is None and not unsigned:
            # (a write with no sign-in is 401 whatever it sends, and audited: the text/plain
            # post another site may send without a preflight, and without the SameSite
            # cookie, was a 415 that no audit record showed)
            early = wrong_type(request)  # before anything reads the body
            if early is not None and request.method in WRITES and _forged(auth, request):
                await run_in_threadpool(
                    app.state.sign_ins.refused,
                    origin_of(request),
                    "a body of the wrong type with the session cookie, which no page here "
                    "posts: a forged request",
                    (request.method, path[:200]),
                    auth.who(request),
                )
        if early is not None:
            response: Response = early
        elif unsigned:
            # Every write needs a sign-in, asked before a route reads (or FastAPI parses) its
            # body; the route checks the rest (the CSRF token, what the person may do).
            # A token that names nobody (wrong, unknown, revoked) is recorded, as the CLI's
            # `(unknown token)` is, and a write with no token or session at all as its
            # `(no token)` (it was recorded nowhere), through the refused sign-ins' count per
            # source: a flood of such writes cannot fill the audit log.
            if bearer:
                who, why = UNKNOWN_TOKEN, "wrong, unknown or revoked token"
            else:
                who, why = NO_TOKEN, "no token, or a session that ended"
            await run_in_threadpool(
                app.state.sign_ins.refused,
                origin_of(request),
                why,
                (request.method, path[:200]),
                who,
            )
            response = JSONResponse(
                {"detail": auth.refusal(request)},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        elif (
            auth.require_token_for_reads
            and not path.startswith(OPEN_PATHS)
            and not auth.signed_in(request)
        ):
            if path.startswith(("/api", "/docs", "/openapi", "/redoc")):
                response = JSONResponse({"detail": auth.refusal(request)}, status_code=401)
            else:
                # The query too: a notification's link (/approvals?q=ID) survives signing in.
                target = path + (f"?{request.url.query}" if request.url.query else "")
                response = RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        else:
            response = await call_next(request)
        if "content-security-policy" not in response.headers:  # the SVG route sets a stricter one
            response.headers["Content-Security-Policy"] = CSP
        if "cache-control" not in response.headers and not path.startswith("/static/"):
            # Runs, requests and who signed in: kept by no browser cache or proxy (Back after
            # signing out, another user of the machine). Pictures set their own (private).
            response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        return response
