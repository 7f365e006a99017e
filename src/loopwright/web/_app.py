"""The FastAPI application: pages, the JSON API under ``/api``, authentication and CSRF."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.base import RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware

from .._authority import audit, operate, require, why_not_approve
from .._contract import RUN_STATUSES, STOP_REASONS, TERMINAL_STATUSES
from .._engine import Runtime
from .._errors import (
    ConfigError,
    ConflictError,
    LoopwrightError,
    NotPermittedError,
    RunNotFoundError,
    StoreCorruptError,
)
from .._inherited import inherited
from .._json import strict_loads
from .._metrics import METRIC_NAMES, compute_metrics
from .._reflection import REFLECTION_KEY
from .._spec import loop_of_run
from .._state import TaskState
from ..store import Approval, Checkpoint, NewEvent, RunRecord, Store, open_store
from ..store._base import with_newer
from ._actions import ActionDeps, register_actions
from ._auth import COOKIE, Auth, RefusedSignIns, check_token, cross_site
from ._cards import (
    approval_card,
    latest_part,
    register_card_routes,
    register_part_image_route,
)
from ._compare_view import register_compare
from ._http import (
    BodyLimit,
    Flash,
    HeadAsGet,
    check_body_limit,
    http_error,
    json_body,
    origin_of,
    text_field,
)
from ._live import install_live
from ._notify import NotifyConfig
from ._people_views import register_people_routes
from ._pictures import inline_blob_refs, register_picture_routes
from ._run_json import run_document
from ._views import (
    Cursor,
    approval_summary,
    artifacts_view,
    chart_points,
    chart_svg,
    decided_while_parked,
    edits_view,
    ended_row,
    events_view,
    held_or_stored,
    is_svg,
    journal_view,
    next_action_here,
    run_summary,
    stop_cause_of,
    stop_words,
    timeline,
)
from ._waterfall import MAX_CYCLES, duration, install_waterfall, log_window, waterfall_html

__all__ = ["LOOPBACK_HOSTS", "allowed_host_names", "create_app"]

log = logging.getLogger("loopwright.web")
HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
OPEN_PATHS = ("/login", "/static/", "/healthz")
# Liveness and readiness probes: open, and no use of the dashboard (the poller stays asleep).
PROBE_PATHS = frozenset({"/healthz"})
# The largest request body read (``loopwright ui --max-body-mib``): a larger one is answered 413
# before anything reads it. A request, a note, an edited part fit many times over; a picture
# part edited by hand may not: raise it for that.
MAX_BODY = 1024 * 1024
WRITES = ("POST", "PUT", "PATCH", "DELETE")
JSON_TYPE = "application/json"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
PAGE_SIZE = 50  # runs or approvals per page (and the API's default limit)
MAX_PAGE = 500
RESUMING = "the run is resuming"


def _validation_words(errors: Any) -> str:
    """FastAPI's validation errors as one line a person reads: "to_cycle: Input should be a
    valid integer"."""
    try:
        return "; ".join(
            f"{e['loc'][-1]}: {e['msg']}" if e.get("loc") else str(e["msg"]) for e in errors
        )
    except (TypeError, KeyError, IndexError):
        return "a value in the request is not valid"


def page_size(limit: int) -> int:
    """A list endpoint's ``limit``: 1 or more (400 otherwise), at most ``MAX_PAGE``."""
    if limit < 1:
        raise HTTPException(400, f"limit must be 1 or more (a page holds at most {MAX_PAGE})")
    return min(limit, MAX_PAGE)


EVENTS_SHOWN = 500
CYCLES_SHOWN = 200  # a run page's timeline: its newest cycles
VERSIONS_SHOWN = 50  # a run page's versions of each part: the newest
# A run page reads the newest this many checkpoints (its timeline and chart), not a long run's
# every one: the timeline's CYCLES_SHOWN cycles and more fit in it.
CHECKPOINTS_READ = 1000
# The Host names a loopback dashboard answers to. A DNS-rebinding page reaches 127.0.0.1 under
# its own name (evil.example), so its requests carry that name and are refused before any read.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


def allowed_host_names(extra: Iterable[str] = (), *, field: str = "allowed_hosts") -> list[str]:
    """The loopback names plus ``extra`` (the ``--host`` given, ``--allow-host`` names), in
    the form a ``Host`` header carries them: lower case, IPv6 addresses also in brackets, and
    ``*.example.com`` for a domain's subdomains."""
    names = list(LOOPBACK_HOSTS)
    for raw in extra:
        name = raw.strip().lower()
        if name.startswith("[") and name.endswith("]"):
            name = name[1:-1]
        wildcard = name.startswith("*.") and "*" not in name[2:] and len(name) > 2
        if not name or ("*" in name and not wildcard) or any(c in name for c in "/ @?#"):
            raise ConfigError(
                f"{raw!r} is not a host name (give a name, an address or *.domain)",
                field=field,
            )
        names.extend([name, f"[{name}]"] if ":" in name else [name])
    return list(dict.fromkeys(names))


class Decision(BaseModel):
    """A decision posted to the API. ``answer`` is for questions only. Another field is
    refused, not dropped: ``{"reason": "..."}`` would have decided with no note."""

    model_config = ConfigDict(extra="forbid")

    note: str | None = None
    answer: Any = None


def _isotime(ts: float | None) -> str:
    """A stored time (UTC seconds) as ``2026-12-01 06:44:03Z``."""
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


def _wrong_type(request: Request) -> JSONResponse | None:
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


def _inherited_usd(store: Store, rec: RunRecord, cks: Sequence[Checkpoint]) -> float:
    """What a fork inherited of its origin's spend (0 for any other run), from its first
    checkpoint: the one in hand when the page read the run from its start, else among the
    checkpoints of the cycle it was forked at (a long fork's page reads its newest only)."""
    if rec.forked_from is None:
        return 0.0
    first = cks[0] if cks and cks[0].seq == 0 else None
    if first is None:
        at = store.checkpoints_at(rec.run_id, rec.forked_at or 0)
        first = next((c for c in at if c.seq == 0), None)
    return inherited(rec, None if first is None else first.fields).cost_usd


def _safe_next(target: str | None) -> str:
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def create_app(
    store_url: str | None,
    *,
    token: str,
    identity: str = "operator",
    require_token_for_reads: bool = False,
    allowed_hosts: Iterable[str] = (),
    notify: NotifyConfig | None = None,
    max_body: int = MAX_BODY,
) -> FastAPI:
    """The dashboard over the store at ``store_url``; ``token`` authorises every mutation (and
    every read when ``require_token_for_reads``); decisions are recorded as ``identity``.
    Requests whose ``Host`` is neither a loopback name nor one of ``allowed_hosts`` get 400.
    ``notify``: webhooks to post when a request appears (``_notify``). A request body over
    ``max_body`` bytes is answered 413 without being read."""
    check_token(token)  # before anything is opened: a bad token is one line
    check_body_limit(max_body)
    hosts = allowed_host_names(allowed_hosts)
    store = open_store(store_url)
    auth = Auth(token, identity, require_token_for_reads=require_token_for_reads, store=store)
    # Swagger UI and ReDoc load their assets from a CDN: /docs is rendered here instead, from
    # the same OpenAPI document (served at /openapi.json), so nothing comes from the internet.
    app = FastAPI(
        title="loopwright",
        version="0.1.0",
        description="Runs, approvals, metrics.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.auth = auth
    app.state.store = store
    app.state.resumes = []
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True
    )
    env.filters["isotime"] = _isotime
    env.filters["duration"] = duration
    templates = Jinja2Templates(env=env)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

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
        early = _wrong_type(request)  # before anything reads the body
        if early is None and (
            "\x00" in path or any("\x00" in k + v for k, v in request.query_params.multi_items())
        ):
            # No id, filter or search holds one; PostgreSQL refuses it in a query (a 500).
            early = JSONResponse(
                {"detail": "the path or query holds a NUL character (%00)"}, status_code=400
            )
        if early is not None:
            response: Response = early
        elif (
            request.method in WRITES
            and not path.startswith(OPEN_PATHS)
            and not auth.signed_in(request)
        ):
            # Every write needs a sign-in, asked before a route reads (or FastAPI parses) its
            # body; the route checks the rest (the CSRF token, what the person may do).
            response = JSONResponse(
                {"detail": "token required"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        elif (
            auth.require_token_for_reads
            and not path.startswith(OPEN_PATHS)
            and not auth.signed_in(request)
        ):
            if path.startswith(("/api", "/docs", "/openapi", "/redoc")):
                response = JSONResponse({"detail": "token required"}, status_code=401)
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

    # A body over ``max_body``: 413, declared or found as it streams, the rest never read.
    app.add_middleware(BodyLimit, max_body=max_body)
    # A foreign Host is refused before the guard or any route runs.
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False)
    # Outermost of all: HEAD is the GET of the same address, refused where a GET is, no body.
    app.add_middleware(HeadAsGet)
    # /api/events and the store poller behind it; webhooks when ``notify`` names URLs.
    install_live(app, store, notify=notify)
    register_picture_routes(app, store)  # pictures kept as blobs (adapters.openai_images)

    flash = Flash()

    def page(request: Request, name: str, **ctx: Any) -> HTMLResponse:
        ctx.update(
            request=request,
            signed_in=auth.signed_in(request),
            csrf=auth.csrf_for(request) or "",
            flash=flash.of(request),  # a form's outcome, when this server signed it
            identity=auth.who(request) if auth.signed_in(request) else auth.identity,
            users_mode=auth.users_mode,
            can_decide=auth.may(request, "decide"),
            can_operate=auth.may(request, "operate"),
            can_admin=auth.may(request, "admin"),
            pending_count=store.count_approvals(status="pending"),
            # The live stream's position when the request began (``guard``): live.js asks for
            # the changes after it, so one found while the page is drawn is not lost.
            live_after=getattr(request.state, "live_after", app.state.messages.last_seq),
        )
        return templates.TemplateResponse(request, name, ctx)

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

    async def refused(request: Request, status: int, detail: Any) -> Response:
        detail = hide_store(detail)
        if not wants_page(request) or status not in titles:
            return await http_exception_handler(request, StarletteHTTPException(status, detail))
        referer = urlsplit(request.headers.get("referer", ""))
        back = referer.path + (f"?{referer.query}" if referer.query else "")
        if not back or (referer.netloc and referer.netloc != request.headers.get("host")):
            back = "/"  # only ever back to this dashboard
        resp = await run_in_threadpool(
            page,
            request,
            "refused.html",
            title=titles[status],
            detail=detail if isinstance(detail, str) else _validation_words(detail),
            status=status,
            back=_safe_next(back),
        )
        resp.status_code = status
        return resp

    @app.exception_handler(StarletteHTTPException)
    async def refused_page(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 401 or exc.headers:  # sign-in flows keep their own answer
            exc.detail = hide_store(exc.detail)
            return await http_exception_handler(request, exc)
        return await refused(request, exc.status_code, exc.detail)

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
        from ..cli._damage import store_damage

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

    def refused_csrf(request: Request) -> None:
        """A signed-in person's write without the page's CSRF token: a forged request (or a
        stale page); audited where people are."""
        if auth.users_mode:
            audit(store, auth.who(request), request.method, request.url.path,
                  outcome="refused", origin=origin_of(request),
                  reason="missing or wrong CSRF token")  # fmt: skip

    def require_write(request: Request) -> None:
        if not auth.signed_in(request):
            raise HTTPException(401, "token required", headers={"WWW-Authenticate": "Bearer"})

    def require_form_write(request: Request, csrf: str) -> None:
        """A page's form: signed in, with the page's CSRF token."""
        require_write(request)
        if not auth.csrf_ok(request, csrf):
            refused_csrf(request)
            raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")

    def require_api_write(request: Request) -> None:
        """An API call: the bearer token, or a session cookie with its X-CSRF-Token."""
        require_write(request)
        if not auth.bearer_ok(request) and not auth.csrf_ok(
            request, request.headers.get("x-csrf-token")
        ):
            refused_csrf(request)
            raise HTTPException(403, "cookie-authenticated API calls need X-CSRF-Token")

    def blocked(
        request: Request, pending: list[Approval], runs: dict[str, RunRecord]
    ) -> dict[str, str]:
        """Why the signed-in person may not approve each request they could otherwise decide
        (their limits, the rule's role, separation of duties, a vote given): the card then
        offers Deny only and says why. Only where people are; the engine checks again."""
        if not auth.users_mode or not auth.may(request, "decide"):
            return {}
        who = auth.who(request)
        out = {}
        for a in pending:
            if a.kind == "question":
                continue
            why = why_not_approve(store, a, runs[a.run_id], who)
            if why:
                out[a.approval_id] = why
        return out

    def voters(a: Approval) -> list[str]:
        """Who approved a request that needs several approvers, so far."""
        return [v.by for v in store.votes(a.approval_id)]

    def find_approval(approval_id: str) -> Approval:
        found = store.approval(approval_id)
        if found is None:
            raise HTTPException(404, f"no approval request {approval_id}")
        return found

    def resume_later(run_id: str) -> str:
        try:
            loop = loop_of_run(store.get_run(run_id))
        except ConfigError:
            return "the run has no spec file here: resume it where its loop is defined"

        def work() -> None:
            try:
                with Runtime(store_url) as rt:
                    rt.resume_sync(run_id, loop)
            except Exception:
                log.exception("resuming run %s failed", run_id)

        t = threading.Thread(target=work, name=f"resume-{run_id[:12]}", daemon=True)
        app.state.resumes.append(t)
        t.start()
        return RESUMING

    def decide(
        request: Request, approval_id: str, how: str, note: str | None, answer: Any
    ) -> tuple[Approval, str]:
        """A decision by the signed-in person (the engine checks what they may decide)."""
        a = find_approval(approval_id)
        note = text_field((note or "").strip() or None, "note")
        if isinstance(answer, str):
            text_field(answer, "answer")
        rt = Runtime(store)
        by, where = auth.who(request), origin_of(request)
        try:
            if how == "approve":
                done = rt.approve(
                    a.run_id, by=by, note=note, approval_id=a.approval_id, origin=where
                )
            elif how == "deny":
                done = rt.deny(a.run_id, by=by, note=note, approval_id=a.approval_id, origin=where)
            elif how == "answer":
                done = rt.answer(
                    a.run_id, answer, by=by, note=note, approval_id=a.approval_id, origin=where
                )
            else:
                raise HTTPException(400, f"unknown decision {how!r}")
        except LoopwrightError as exc:
            raise http_error(exc) from exc
        if done.status == "pending":  # one of several approvers
            need = int((done.evidence.get("who") or {}).get("approvers") or 1)
            votes = len(store.votes(done.approval_id))
            return done, f"{votes} of {need} approvers so far: it waits for another person"
        resumed = resume_later(a.run_id)
        if how == "deny" and resumed == RESUMING:  # a denial ends the run: say so
            resumed = "the run ends escalated to a person, as a denied request does"
        return done, resumed

    def may_operate(by: str, action: str, run_id: str, where: str) -> bool:
        """Whether ``by`` may do ``action`` on the run, asked without recording anything (the
        action itself is checked and audited where it is done)."""
        try:
            require(store, by, "operate", action=action, target=f"run {run_id}", origin=where,
                    record=False)  # fmt: skip
        except NotPermittedError:
            return False
        return True

    def act(request: Request, run_id: str, how: str) -> tuple[RunRecord, str]:
        """Cancel or resume a run as the signed-in person; the event log keeps who and
        when (``cancel_requested`` / ``resume_requested``, beside the engine's own)."""
        try:
            rec = store.get_run(run_id)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        if rec.status in TERMINAL_STATUSES:
            raise HTTPException(409, f"run {rec.run_id[:12]} already ended ({rec.status})")
        by, where = auth.who(request), origin_of(request)
        if how == "resume":  # cancel is checked (and audited) by the engine
            try:
                operate(store, by, "resume", f"run {rec.run_id}", origin=where)
            except LoopwrightError as exc:
                raise http_error(exc) from exc
        who = {"by": by}
        if how == "cancel":
            # The request is written only when it may be made: a refused cancel leaves the run's
            # log as it was, and is audited once, by the engine (below), as every refusal is.
            if may_operate(by, "cancel", rec.run_id, where):
                store.append_events(rec.run_id, [NewEvent(rec.cycle, "cancel_requested", who)])
            try:
                loop = loop_of_run(rec)
            except ConfigError:
                loop = None
            try:
                done = Runtime(store).cancel(rec.run_id, by=by, loop=loop, origin=where)
            except LoopwrightError as exc:
                raise http_error(exc) from exc
            said = "cancelled" if done.status == "cancelled" else "cancellation requested"
            return done, f"{said} by {by}"
        if how == "resume":
            if rec.status == "awaiting_approval" and store.approvals(
                run_id=rec.run_id, status="pending"
            ):
                raise HTTPException(409, "the run waits for a decision: approve or deny it first")
            store.append_events(rec.run_id, [NewEvent(rec.cycle, "resume_requested", who)])
            return rec, f"resume requested by {by}: {resume_later(rec.run_id)}"
        raise HTTPException(400, f"unknown action {how!r}")

    def edit_part(
        request: Request, run_id: str, ref: str, value: Any, note: str | None, resume: bool
    ) -> tuple[RunRecord, str]:
        """A person's version of part ``ref``, as the signed-in person (``Runtime.edit``);
        ``resume``: then resume the run in the background, where its spec file is found."""
        by = auth.who(request)
        note = text_field((note or "").strip() or None, "note")
        try:
            done = Runtime(store).edit(
                run_id,
                ref,
                value,
                by=by,
                note=note,
                origin=origin_of(request),
            )
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        except ConflictError as exc:
            raise http_error(exc) from exc
        except ConfigError as exc:
            raise HTTPException(400, str(exc)) from exc
        except LoopwrightError as exc:
            raise http_error(exc) from exc
        # the run's last ``edited`` event (this edit's), not its whole log
        mine = edits_view(store.events_of_kinds(done.run_id, ("edited",), limit=1))
        version = mine[0]["version"] if mine else "?"
        msg = f"{ref} edited by {by} (version {version}, accepted)"
        if resume and done.status not in TERMINAL_STATUSES and done.status != "awaiting_approval":
            who = {"by": by}
            store.append_events(done.run_id, [NewEvent(done.cycle, "resume_requested", who)])
            msg += f"; {resume_later(done.run_id)}"
        elif done.status not in ("running", "awaiting_approval"):
            msg += "; Resume the run to go on from it"
        return done, msg

    def run_payload(run_id: str) -> dict[str, Any]:
        """What a run's page shows: of each part's versions, the newest ``VERSIONS_SHOWN``
        (``/api/runs/{id}``, streamed by ``_run_json``, lists every one); of the checkpoints,
        the newest ``CHECKPOINTS_READ`` (``windowed`` says whether some were left out)."""
        newest, window = VERSIONS_SHOWN, CHECKPOINTS_READ
        try:
            rec = store.get_run(run_id)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        windowed = False
        try:
            last = store.latest_checkpoint(rec.run_id)
        except RunNotFoundError:
            cks, state = [], TaskState()
        else:
            # records and fields of the window, no state but the newest one's
            cks = store.checkpoints_after(rec.run_id, max(last.seq - window, -1))
            windowed = bool(cks) and last.seq - window >= 0
            state = last.task_state()
        nxt = state.next_step()
        approvals = store.approvals(run_id=rec.run_id)
        return {
            "rec": rec,
            "state": state,
            "next_step": nxt,
            # (a windowed page lists the newest CYCLES_SHOWN: only those rows are built)
            # (and the cycle the run ended inside, if it has no record: its cost, why)
            "timeline": [
                *(
                    rows := timeline(
                        cks,
                        ended=rec.status in TERMINAL_STATUSES,
                        newest=CYCLES_SHOWN if windowed else None,
                    )
                ),
                *ended_row(store, rec),
            ],
            # An ended run's held-out verdict is its last judged candidate's (issue 17): say so
            # when that candidate was never applied (a failed effect, a denied request).
            "held_of_unapplied": rows[-1]["cycle"]
            if rows
            and rows[-1].get("unapplied")
            and rows[-1].get("held_out")
            and rec.status in TERMINAL_STATUSES
            else None,
            "points": chart_points(cks),
            "inherited_usd": _inherited_usd(store, rec, cks),
            # (the page's newest versions of each part read alone, not a part's every one)
            "artifacts": artifacts_view(
                state,
                newest=newest,
                read=lambda ref, after, limit: store.versions_page(
                    rec.run_id, ref, after=after, limit=limit
                ),
            ),
            "approvals": approvals,
            "stop_words": stop_words(rec, approvals),
            "resumable": rec.status not in TERMINAL_STATUSES
            and (
                rec.status != "awaiting_approval"
                or decided_while_parked(rec, approvals) is not None
            ),
            "stop_cause": stop_cause_of(rec),
            "next_here": next_action_here(rec, state, approvals),
            "terminal": rec.status in TERMINAL_STATUSES,
            "checkpoints": cks,
            "windowed": windowed,
        }

    def runs_query(
        status: str | None,
        stop_reason: str | None,
        project: str | None,
        q: str | None,
        after: str | None,
        limit: int,
    ) -> tuple[list[RunRecord], str | None, int]:
        """One page of runs newest first, the cursor of the next page (``None``: the last),
        and how many match in all."""
        try:
            cur = Cursor.parse(after)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from exc
        limit = page_size(limit)
        flt: dict[str, Any] = {
            "status": status or None,
            "stop_reason": stop_reason or None,
            "project": project or None,
            "search": (q or "").strip() or None,
        }
        rows = store.list_runs(**flt, after=(cur.at, cur.key) if cur else None, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        nxt = Cursor(rows[-1].created_at, rows[-1].run_id).text() if more and rows else None
        return rows, nxt, store.count_runs(**flt)

    def approvals_query(
        status: str | None, run_id: str | None, q: str | None, after: str | None, limit: int
    ) -> tuple[list[Approval], str | None, int]:
        """A page of approval requests, newest first: one page read and a COUNT, in the
        store (not every request filtered here)."""
        try:
            cur = Cursor.parse(after)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from exc
        limit = page_size(limit)
        flt: dict[str, Any] = {
            "status": status or None,
            "run_id": run_id or None,
            "search": (q or "").strip() or None,
        }
        rows = store.page_approvals(
            **flt, after=(cur.at, cur.key) if cur else None, limit=limit + 1
        )
        # (a store whose count_approvals predates run_id/search: counted by the default)
        newer = {"run_id": flt["run_id"], "search": flt["search"]}
        total = with_newer(store.count_approvals, {"status": flt["status"]}, newer)
        if total is None:
            total = Store.count_approvals(store, **flt)
        page_rows = rows[:limit]
        more = len(rows) > limit
        nxt = (
            Cursor(page_rows[-1].requested_at, page_rows[-1].approval_id).text()
            if more and page_rows
            else None
        )
        return page_rows, nxt, total

    # --- pages ---------------------------------------------------------------------------
    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        """For liveness and readiness probes: the server answers (nothing is read)."""
        return {"status": "ok"}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def runs_page(
        request: Request,
        status: str = "",
        stop_reason: str = "",
        project: str = "",
        q: str = "",
        after: str = "",
    ) -> HTMLResponse:
        runs, nxt, total = runs_query(status, stop_reason, project, q, after, PAGE_SIZE)
        f = {"status": status, "stop_reason": stop_reason, "project": project, "q": q}
        keep = {k: v for k, v in f.items() if v}
        return page(
            request,
            "runs.html",
            runs=runs,
            total=total,
            words={r.run_id: stop_words(r) for r in runs},
            causes={r.run_id: stop_cause_of(r) for r in runs},
            statuses=RUN_STATUSES,
            stop_reasons=STOP_REASONS,
            projects=project_names(),
            f=f,
            first_url="/?" + urlencode(keep) if after else "",
            next_url="/?" + urlencode({**keep, "after": nxt}) if nxt else "",
            terminal=TERMINAL_STATUSES,
        )

    def project_names() -> list[str]:
        return store.run_projects()  # one indexed query, not every run

    @app.get("/runs/{run_id}/svg", include_in_schema=False)
    def part_svg(run_id: str, ref: str, v: int = 0, cycle: int = 0) -> Response:
        """One version of an SVG part as an image. Browsers never run scripts in an SVG shown
        through <img>; the response also forbids everything but inline styles, and sandboxes
        it should someone open it directly."""
        state, part = latest_part(store, run_id, ref)
        if part is not None and cycle and not v:  # the version written in that cycle
            v = next((x.n for x in reversed(part.versions) if x.cycle == cycle), 0)
        if (
            part is None
            or not 1 <= v <= len(part.versions)
            or not is_svg(part.versions[v - 1].value)
        ):
            raise HTTPException(404, f"no SVG version {v} of {ref}")
        return Response(
            inline_blob_refs(store, state, str(part.versions[v - 1].value)),
            media_type="image/svg+xml",
            headers={
                # data: images only: the run's own pictures, put in by inline_blob_refs
                "Content-Security-Policy": (
                    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox"
                ),
                "Cache-Control": "private, max-age=3600",
            },
        )

    @app.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    def run_page(request: Request, run_id: str, kind: str = "") -> HTMLResponse:
        # What the page draws, not the whole run: the newest CHECKPOINTS_READ checkpoints
        # (timeline, chart), the log's end (events, waterfall) and counts read in the store;
        # a long run's every cycle and event are in /api/runs/{id} and `loopwright show`.
        data = run_payload(run_id)
        rec, points = data["rec"], data["points"]
        first = (rec.forked_at or 0) + 1 if rec.forked_from else 1  # the run's own first cycle
        data["chart"] = chart_svg(
            points,
            rec.cost_usd,
            inherited_usd=data["inherited_usd"],
            # cycles of its own not drawn: its last improvement may be among them
            windowed=data["windowed"] and (not points or points[0].cycle > first),
        )
        data["timeline_total"] = len(data["timeline"])
        data["timeline"] = data["timeline"][-CYCLES_SHOWN:]
        rid = data["rec"].run_id
        entries = journal_view(store.journal(rid))
        counts = store.event_counts(rid)
        # (the journal's ``reflection`` entry marks the last cycle reflected on: no effect)
        data["effects"] = [e for e in entries if e["kind"] not in ("retry", REFLECTION_KEY)]
        data["retries"] = [e for e in entries if e["kind"] == "retry"]
        data["event_kinds"] = sorted(counts)
        if kind:
            # (a kind the log lacks is not asked of the database: it has none to show)
            shown = store.events_of_kinds(rid, {kind}, limit=EVENTS_SHOWN) if kind in counts else []
        else:
            shown = store.events_tail(rid, before_id=None, limit=EVENTS_SHOWN)[::-1]
        data["events"] = events_view(shown)
        data["events_total"] = counts.get(kind, 0) if kind else sum(counts.values())
        # the person's edits and the reruns asked for, in one read (none where the log has none)
        noted = [k for k in ("edited", "rerun_requested") if k in counts]
        extra = store.events_of_kinds(rid, set(noted)) if noted else []
        data["edits"] = edits_view([e for e in extra if e.kind == "edited"])
        data["event_kind"] = kind
        win = log_window(store, rid, MAX_CYCLES, sum(counts.values()))
        data["waterfall"] = waterfall_html(
            data["rec"],
            win.events,
            data["checkpoints"],
            data["approvals"],
            window=win,
            cycles_total=counts.get("cycle_started", 0),
            # (where the window reaches before the newest checkpoints read: every one)
            read_all=(lambda: store.checkpoints_after(rid, -1)) if data["windowed"] else None,
        )
        data["cards"] = {
            a.approval_id: approval_card(a, data["rec"], data["state"], votes=voters(a))
            for a in data["approvals"]
            if a.status == "pending"
        }
        data["blocked"] = blocked(
            request, [a for a in data["approvals"] if a.status == "pending"], {rid: data["rec"]}
        )
        data["reruns"] = [str(e.data.get("new_run")) for e in extra if e.kind == "rerun_requested"]
        return page(request, "run.html", **data)

    @app.post("/runs/{run_id}/act", include_in_schema=False)
    def act_form(
        request: Request, run_id: str, action: str = Form(...), csrf: str = Form("")
    ) -> Response:
        require_form_write(request, csrf)
        rec, msg = act(request, run_id, action)
        return RedirectResponse(flash.url(rec.run_id, msg), status_code=303)

    @app.post("/runs/{run_id}/edit", include_in_schema=False)
    def edit_form(
        request: Request,
        run_id: str,
        ref: str = Form(...),
        value: str = Form(...),
        note: str = Form(""),
        resume: str = Form(""),
        csrf: str = Form(""),
    ) -> Response:
        require_form_write(request, csrf)
        try:
            ck = store.latest_checkpoint(store.get_run(run_id).run_id)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        try:
            part = ck.task_state().part(ref)
        except ConfigError as exc:
            raise HTTPException(400, str(exc)) from exc
        # A browser sends a textarea's line ends as CRLF: a text part keeps its own.
        new: Any = value.replace("\r\n", "\n")
        if part is not None and not isinstance(part.value, str):
            try:
                new = strict_loads(new)
            except ValueError as exc:  # not JSON, NaN, or a number out of range
                raise HTTPException(400, f"{ref} holds JSON: the new value is not ({exc})") from exc
        rec, msg = edit_part(request, run_id, ref, new, note, resume == "yes")
        return RedirectResponse(flash.url(rec.run_id, msg, "#edits"), status_code=303)

    @app.get("/approvals", response_class=HTMLResponse, include_in_schema=False)
    def inbox_page(
        request: Request, done: str = "", msg: str = "", q: str = "", after: str = ""
    ) -> HTMLResponse:
        pending, nxt, total = approvals_query("pending", None, q, after, PAGE_SIZE)
        runs = {a.run_id: store.get_run(a.run_id) for a in pending}
        states = {rid: store.latest_checkpoint(rid).task_state() for rid in runs}
        cards = {
            a.approval_id: approval_card(a, runs[a.run_id], states[a.run_id], votes=voters(a))
            for a in pending
        }
        decided = store.decided_approvals(10)
        keep = {"q": q} if q else {}
        return page(
            request,
            "inbox.html",
            pending=pending,
            total=total,
            runs=runs,
            cards=cards,
            blocked=blocked(request, pending, runs),
            decided=decided,
            msg=msg,
            q=q,
            next_url="/approvals?" + urlencode({**keep, "after": nxt}) if nxt else "",
        )

    @app.post("/approvals/{approval_id}/decide", include_in_schema=False)
    def decide_form(
        request: Request,
        approval_id: str,
        action: str = Form(...),
        csrf: str = Form(""),
        note: str = Form(""),
        answer: str = Form(""),
    ) -> Response:
        require_form_write(request, csrf)
        done, resumed = decide(
            request, approval_id, action, note, answer if action == "answer" else None
        )
        if done.status == "pending":
            msg = f"{auth.who(request)} approved {done.approval_id}; {resumed}"
        else:
            msg = f"{done.status} {done.approval_id} by {done.decided_by}; {resumed}"
        return RedirectResponse(flash.url(done.run_id, msg), status_code=303)

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def api_docs(request: Request) -> HTMLResponse:
        endpoints = [
            {"method": m.upper(), "path": path, "summary": op.get("summary", "")}
            for path, ops in app.openapi().get("paths", {}).items()
            for m, op in ops.items()
        ]
        return page(request, "apidocs.html", endpoints=endpoints)

    @app.get("/metrics", response_class=HTMLResponse, include_in_schema=False)
    def metrics_page(
        request: Request, project: str = "", since: str = "", until: str = ""
    ) -> HTMLResponse:
        error = ""
        try:
            m = compute_metrics(
                store, project=project or None, since=since or None, until=until or None
            )
        except LoopwrightError as exc:
            error, m = str(exc), compute_metrics(store)
        # By day, over the runs the metrics selected (already read: no second listing); a
        # fork's own spend, as the metrics count it.
        days: dict[str, list[float]] = {}
        for r in m.per_run:
            d = days.setdefault(time.strftime("%Y-%m-%d", time.localtime(r.created_at)), [0.0, 0.0])
            d[0] += r.cost_usd
            d[1] += r.status == "accepted"
        reasons = Counter({k: v for k, v in m.stop_reasons.items() if v})
        return page(
            request,
            "metrics.html",
            m=m,
            names=METRIC_NAMES,
            reasons=reasons.most_common(),
            reason_max=max(reasons.values(), default=1),
            days=sorted(days.items()),
            projects=store.run_projects(),
            f={"project": project, "since": since, "until": until},
            error=error,
        )

    def record_refused(source: str, reason: str, counted: int) -> None:
        if auth.users_mode:  # sign-ins are audited where people are
            audit(store, "(unknown token)", "sign in", "dashboard", outcome="refused",
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
        resp = page(request, "login.html", next=_safe_next(next), error=error)
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
        resp = RedirectResponse(_safe_next(target), status_code=303)
        resp.set_cookie(
            COOKIE, auth.new_session(token.strip()), httponly=True, samesite="strict", path="/"
        )
        return resp

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request, csrf: str = Form("")) -> Response:
        if not auth.csrf_ok(request, csrf):
            raise HTTPException(403, "missing or wrong CSRF token")
        auth.end_session(request)
        resp = RedirectResponse("/", status_code=303)
        resp.delete_cookie(COOKIE, path="/")
        return resp

    # Approval cards' images, run actions with confirmation, the comparison page (issue 19).
    register_card_routes(app, store)
    register_part_image_route(app, store)
    register_actions(
        app,
        ActionDeps(store, auth, page, require_form_write, require_api_write, resume_later, flash),
    )
    register_compare(app, store, page)
    register_people_routes(app, store, auth, page)  # /audit, /authority, /api/me (issue 21)

    install_waterfall(app, store, page)  # a model call's page; /api/runs/{id}/calls, /spans

    # --- JSON API ------------------------------------------------------------------------
    @app.get("/api/runs", tags=["runs"])
    def api_runs(
        response: Response,
        status: str | None = None,
        stop_reason: str | None = None,
        project: str | None = None,
        q: str | None = None,
        after: str | None = None,
        limit: int = PAGE_SIZE,
    ) -> list[dict[str, Any]]:
        """Run summaries (no task, contract or packet: see ``/api/runs/{run_id}``), newest
        first, ``limit`` at a time (at most 500). ``q`` searches the task key, run id prefix,
        loop, project, stop reason and cause. The next page is ``after=`` the
        ``X-Next-Cursor`` header (also in ``Link: rel="next"``); ``X-Total-Count`` counts all
        matches."""
        runs, nxt, total = runs_query(status, stop_reason, project, q, after, limit)
        paged(
            response,
            "/api/runs",
            nxt,
            total,
            status=status,
            stop_reason=stop_reason,
            project=project,
            q=q,
            limit=limit,
        )
        return [run_summary(r) for r in runs]

    def paged(response: Response, path: str, nxt: str | None, total: int, **query: Any) -> None:
        response.headers["X-Total-Count"] = str(total)
        if nxt:
            keep = {k: v for k, v in query.items() if v not in (None, "")}
            response.headers["X-Next-Cursor"] = nxt
            response.headers["Link"] = f'<{path}?{urlencode({**keep, "after": nxt})}>; rel="next"'

    @app.get("/api/runs/{run_id}", tags=["runs"], response_class=JSONResponse)
    def api_run(run_id: str) -> Response:
        """The whole run: ``run``, ``next_action``, ``next_action_here``, ``journal``,
        ``events``, ``plan``, ``timeline``, ``chart``, ``artifacts`` (every version),
        ``approvals``, ``edits``, ``packet``. Streamed: written as the store's pages are
        read, so a long run's document is never held whole (its bytes are the same)."""
        try:
            rec = store.get_run(run_id)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        try:
            state = store.latest_checkpoint(rec.run_id).task_state()
        except RunNotFoundError:
            state = TaskState()
        approvals = store.approvals(run_id=rec.run_id)
        run = rec.to_dict()
        run["stop_words"] = stop_words(rec, approvals)
        run["stop_cause"] = stop_cause_of(rec)
        head = {
            "run": run,
            "next_action": state.next_action,
            "next_action_here": next_action_here(rec, state, approvals),
        }
        return StreamingResponse(
            run_document(store, rec, head, state, approvals), media_type="application/json"
        )

    @app.get("/api/approvals", tags=["approvals"])
    def api_approvals(
        response: Response,
        status: str | None = "pending",
        run_id: str | None = None,
        q: str | None = None,
        after: str | None = None,
        limit: int = PAGE_SIZE,
    ) -> list[dict[str, Any]]:
        """Approval requests, newest first, paged like ``/api/runs``; ``q`` searches the
        request id or run id prefix and what, why, rule and kind."""
        rows, nxt, total = approvals_query(status, run_id, q, after, limit)
        paged(
            response, "/api/approvals", nxt, total, status=status, run_id=run_id, q=q, limit=limit
        )
        return [approval_summary(a) for a in rows]

    @app.post("/api/runs/{run_id}/cancel", tags=["runs"])
    def api_cancel(request: Request, run_id: str) -> dict[str, Any]:
        """Cancel a run (recorded as the dashboard's identity)."""
        return api_act(request, run_id, "cancel")

    @app.post("/api/runs/{run_id}/resume", tags=["runs"])
    def api_resume(request: Request, run_id: str) -> dict[str, Any]:
        """Resume an interrupted run in the background, where its spec file is found."""
        return api_act(request, run_id, "resume")

    def api_act(request: Request, run_id: str, how: str) -> dict[str, Any]:
        require_api_write(request)
        rec, msg = act(request, run_id, how)
        return {"run": run_summary(store.get_run(rec.run_id)), "message": msg}

    # ``part:path``: a part's name may hold a slash (an artifact's may not), and the run page
    # links here with it as written
    @app.get("/api/runs/{run_id}/parts/{artifact}/{part:path}/versions", tags=["runs"])
    def api_versions(
        response: Response,
        run_id: str,
        artifact: str,
        part: str,
        after: int = 0,
        limit: int = PAGE_SIZE,
    ) -> list[dict[str, Any]]:
        """One part's versions, oldest first, ``limit`` at a time (at most 500), each whole:
        ``{"n", "value", "cycle", "status"}``. The next page is ``after=`` the last ``n``
        given (the ``X-Next-Cursor`` header, also in ``Link: rel="next"``); ``X-Total-Count``
        is the part's number of versions. The run page lists a part's newest versions and
        links here for the others; only the page's rows are read, however long the run."""
        if after < 0:
            raise HTTPException(400, "after must be 0 or more (the n of the last version given)")
        limit = page_size(limit)
        ref = f"{artifact}/{part}"
        try:
            rec = store.get_run(run_id)
            held = store.latest_checkpoint(rec.run_id).task_state().part(ref)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        if held is None:
            raise HTTPException(404, f"run {rec.run_id} has no part {ref}")
        count = held.count
        last = min(count, after + limit)
        got = held_or_stored(
            held,
            lambda: store.versions_page(rec.run_id, ref, after=after, limit=last - after),
            after,
            last,
        )
        nxt = str(last) if last < count else None
        paged(
            response,
            f"/api/runs/{quote(rec.run_id)}/parts/{quote(artifact)}/{quote(part)}/versions",
            nxt,
            count,
            limit=limit,
        )
        return [dict(v.to_dict()) for v in got]

    # {part:path}: a part's name may hold a slash (``doc/sub/x``), as at its versions' URL
    @app.post("/api/runs/{run_id}/parts/{artifact}/{part:path}", tags=["runs"])
    async def api_edit(request: Request, run_id: str, artifact: str, part: str) -> dict[str, Any]:
        """A person's version of a part, as the dashboard's identity: JSON
        ``{"value": ..., "note": "...", "resume": false}``. The version is accepted and
        recorded (an ``edited`` event with the diff, an ``edit`` memory signal); an ended
        run is reopened, and ``resume`` resumes it in the background."""
        require_api_write(request)
        body = await json_body(request, '{"value": ..., "note": "..."}')
        if not isinstance(body, dict) or "value" not in body:
            raise HTTPException(400, 'the body must be a JSON object with "value"')
        note, resume = body.get("note"), body.get("resume", False)
        if note is not None and not isinstance(note, str):
            raise HTTPException(400, "note must be text")
        if not isinstance(resume, bool):
            raise HTTPException(400, "resume must be true or false")
        extra = sorted(set(body) - {"value", "note", "resume"})
        if extra:
            raise HTTPException(
                400, f"unknown field(s) {', '.join(extra)}: give value, note, resume"
            )
        ref = f"{artifact}/{part}"
        rec, msg = await run_in_threadpool(
            edit_part, request, run_id, ref, body["value"], note, resume
        )
        done = store.get_run(rec.run_id)
        return {
            "run": run_summary(done),
            "edit": edits_view(store.events_of_kinds(done.run_id, ("edited",), limit=1))[-1],
            "message": msg,
        }

    @app.get("/api/metrics", tags=["metrics"])
    def api_metrics(
        project: str | None = None, since: str | None = None, until: str | None = None
    ) -> dict[str, Any]:
        try:
            return compute_metrics(store, project=project, since=since, until=until).to_dict()
        except LoopwrightError as exc:
            raise HTTPException(400, str(exc)) from exc

    async def api_decide(
        request: Request, approval_id: str, how: str, *, required: bool
    ) -> dict[str, Any]:
        # Who is asking first: a request that may not decide is refused before its body is
        # read (FastAPI would read and parse a declared body before the function runs).
        await run_in_threadpool(require_api_write, request)
        body = await decision_of(request, required=required)
        done, resumed = await run_in_threadpool(
            decide, request, approval_id, how, body.note, body.answer
        )
        return {"approval": done.to_dict(), "resume": resumed}

    async def decision_of(request: Request, *, required: bool) -> Decision:
        """The request's ``Decision`` (empty or ``null``: none given, unless ``required``)."""
        raw = await request.body()
        data = await json_body(request, '{"note": "...", "answer": ...}') if raw.strip() else None
        if data is None:
            if not required:
                return Decision()
            raise RequestValidationError(
                [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
            )
        try:
            return Decision.model_validate(data)
        except ValidationError as exc:
            raise RequestValidationError(
                [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
            ) from None

    def decision_schema(required: bool) -> dict[str, Any]:
        """The OpenAPI request body of a decision (read by the endpoint itself, after the
        token is checked)."""
        schema = Decision.model_json_schema()
        return {
            "requestBody": {
                "required": required,
                "content": {JSON_TYPE: {"schema": schema}},
            }
        }

    @app.post(
        "/api/approvals/{approval_id}/approve",
        tags=["approvals"],
        openapi_extra=decision_schema(False),
    )
    async def api_approve(request: Request, approval_id: str) -> dict[str, Any]:
        """Approve a request as the token's person: JSON ``{"note": "..."}`` (optional)."""
        return await api_decide(request, approval_id, "approve", required=False)

    @app.post(
        "/api/approvals/{approval_id}/deny",
        tags=["approvals"],
        openapi_extra=decision_schema(False),
    )
    async def api_deny(request: Request, approval_id: str) -> dict[str, Any]:
        """Deny a request as the token's person: JSON ``{"note": "..."}`` (optional)."""
        return await api_decide(request, approval_id, "deny", required=False)

    @app.post(
        "/api/approvals/{approval_id}/answer",
        tags=["approvals"],
        openapi_extra=decision_schema(True),
    )
    async def api_answer(request: Request, approval_id: str) -> dict[str, Any]:
        """Answer a question: JSON ``{"answer": ..., "note": "..."}``."""
        return await api_decide(request, approval_id, "answer", required=True)

    return app
