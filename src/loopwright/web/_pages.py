"""The dashboard's pages: the runs list, a run's page and its forms (act, edit), an SVG part
shown as an image, the approvals inbox and its decision form, the API's own docs page, the
metrics page, and ``/healthz`` for probes."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from .._contract import RUN_STATUSES, STOP_REASONS, TERMINAL_STATUSES
from .._errors import ConfigError, LoopwrightError, RunNotFoundError
from .._json import strict_loads
from .._metrics import METRIC_NAMES, compute_metrics
from .._reuse_now import as_now
from ._cards import approval_card, clock_for, latest_part
from ._context import WebContext
from ._operations import act, decide, edit_part
from ._pictures import inline_blob_refs
from ._queries import PAGE_SIZE, approvals_query, runs_query
from ._run_page import run_page_data
from ._values import is_svg
from ._views import stop_cause_of, stop_words

__all__ = ["register_pages"]


def register_pages(app: FastAPI, ctx: WebContext) -> None:
    """The pages' routes (the JSON API is ``_api``'s, signing in ``_sign_in``'s)."""
    store, auth, page, flash = ctx.store, ctx.auth, ctx.page, ctx.flash

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
        runs, nxt, total = runs_query(store, status, stop_reason, project, q, after, PAGE_SIZE)
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
        return page(request, "run.html", **run_page_data(ctx, request, run_id, kind))

    @app.post("/runs/{run_id}/act", include_in_schema=False)
    def act_form(
        request: Request, run_id: str, action: str = Form(...), csrf: str = Form("")
    ) -> Response:
        ctx.require_form_write(request, csrf)
        rec, msg = act(ctx, request, run_id, action)
        return RedirectResponse(flash.url(rec.run_id, msg), status_code=303)

    @app.post("/runs/{run_id}/edit", include_in_schema=False)
    async def edit_form(
        request: Request,
        run_id: str,
        ref: str = Form(...),
        note: str = Form(""),
        resume: str = Form(""),
        csrf: str = Form(""),
    ) -> Response:
        # The edit box's value is read from the form itself: a ``Form`` field takes an empty
        # one for a missing one, so a text part could not be cleared ("value: Field required").
        value = (await request.form()).get("value")
        return await run_in_threadpool(edit_posted, request, run_id, ref, value, note, resume, csrf)

    def edit_posted(
        request: Request, run_id: str, ref: str, value: Any, note: str, resume: str, csrf: str
    ) -> Response:
        ctx.require_form_write(request, csrf)
        if not isinstance(value, str):  # none sent (a file is no part's value either)
            raise HTTPException(400, "value: the form sent no value for the part")
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
        rec, msg = edit_part(ctx, request, run_id, ref, new, note, resume == "yes")
        return RedirectResponse(flash.url(rec.run_id, msg, "#edits"), status_code=303)

    @app.get("/approvals", response_class=HTMLResponse, include_in_schema=False)
    def inbox_page(
        request: Request, done: str = "", msg: str = "", q: str = "", after: str = ""
    ) -> HTMLResponse:
        pending, nxt, total = approvals_query(store, "pending", None, q, after, PAGE_SIZE)
        pending = as_now(store, pending)  # a card's reuse refunded since: said (one read)
        runs = {a.run_id: store.get_run(a.run_id) for a in pending}
        states = {rid: store.latest_checkpoint(rid).task_state() for rid in runs}
        now = clock_for(store, pending)  # expiry on the store's clock, as it is decided
        cards = {
            a.approval_id: approval_card(
                a, runs[a.run_id], states[a.run_id], now=now, votes=ctx.voters(a)
            )
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
            blocked=ctx.blocked(request, pending, runs),
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
        ctx.require_form_write(request, csrf)
        done, resumed = decide(
            ctx, request, approval_id, action, note, answer if action == "answer" else None
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
            stopped_by=list(m.stopped_by.items()),
            stopped_max=max(m.stopped_by.values(), default=0) or 1,
            reason_max=max(reasons.values(), default=1),
            days=sorted(days.items()),
            projects=store.run_projects(),
            f={"project": project, "since": since, "until": until},
            error=error,
        )
