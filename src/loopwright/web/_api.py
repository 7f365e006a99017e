"""The JSON API under ``/api``: runs and approval requests listed a page at a time, a run's
whole document streamed, a part's versions, metrics; and, with the token, cancel, resume, a
person's version of a part, and a request approved, denied or answered."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool

from .._errors import LoopwrightError, RunNotFoundError
from .._metrics import compute_metrics
from .._reuse_now import as_now
from .._state import TaskState
from ._context import WebContext
from ._guard import JSON_TYPE
from ._http import NotText, json_body
from ._operations import act, decide, edit_part, refused_decision
from ._queries import PAGE_SIZE, approvals_query, page_size, paged, runs_query
from ._run_json import run_document
from ._views import (
    approval_summary,
    edits_view,
    held_or_stored,
    next_action_here,
    run_summary,
    stop_cause_of,
    stop_words,
)

__all__ = ["Decision", "register_api"]


class Decision(BaseModel):
    """A decision posted to the API. ``answer`` is for questions only. Another field is
    refused, not dropped: ``{"reason": "..."}`` would have decided with no note."""

    model_config = ConfigDict(extra="forbid")

    note: str | None = None
    answer: Any = None


def register_api(app: FastAPI, ctx: WebContext) -> None:
    """The ``/api`` routes (``/api/events`` is ``_live``'s, ``/api/me`` ``_people_views``')."""
    store = ctx.store

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
        runs, nxt, total = runs_query(store, status, stop_reason, project, q, after, limit)
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
        approvals = as_now(store, store.approvals(run_id=rec.run_id))
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
        rows, nxt, total = approvals_query(store, status, run_id, q, after, limit)
        paged(
            response, "/api/approvals", nxt, total, status=status, run_id=run_id, q=q, limit=limit
        )
        return [approval_summary(a) for a in as_now(store, rows)]

    note_body = {
        "type": "object",
        "properties": {"note": {"type": "string"}},
        "additionalProperties": False,
    }
    takes_note = {"requestBody": {"required": False, "content": {JSON_TYPE: {"schema": note_body}}}}

    async def note_of(request: Request) -> str | None:
        """The optional ``{"note": "..."}`` of a cancel, pause or resume; another field, or a
        body that is not such an object, is 400 (a body was dropped unread)."""
        if not (await request.body()).strip():
            return None
        body = await json_body(request, '{"note": "..."}')
        if body is not None and not isinstance(body, dict):
            raise HTTPException(400, 'the body must be a JSON object: {"note": "..."}')
        extra = sorted(set(body or {}) - {"note"})
        if extra:
            raise HTTPException(400, f"unknown field(s) {', '.join(extra)}: give note")
        note = (body or {}).get("note")
        if note is not None and not isinstance(note, str):
            raise HTTPException(400, "note must be text")
        return note

    def acted(request: Request, run_id: str, how: str, note: str | None) -> dict[str, Any]:
        rec, msg = act(ctx, request, run_id, how, note)
        return {"run": run_summary(store.get_run(rec.run_id)), "message": msg}

    async def api_act(request: Request, run_id: str, how: str) -> dict[str, Any]:
        await run_in_threadpool(ctx.require_api_write, request)
        note = await note_of(request)
        return await run_in_threadpool(acted, request, run_id, how, note)

    @app.post("/api/runs/{run_id}/cancel", tags=["runs"], openapi_extra=takes_note)
    async def api_cancel(request: Request, run_id: str) -> dict[str, Any]:
        """Cancel a run (recorded as the dashboard's identity). JSON ``{"note": "..."}``
        (optional): why, kept on its ``cancel_requested`` event with who asked."""
        return await api_act(request, run_id, "cancel")

    @app.post("/api/runs/{run_id}/pause", tags=["runs"], openapi_extra=takes_note)
    async def api_pause(request: Request, run_id: str) -> dict[str, Any]:
        """Pause a run at its next cycle boundary (recorded as the dashboard's identity); it
        goes on once its ``pause`` request is approved. JSON ``{"note": "..."}`` (optional):
        why, shown on the request, as ``loopwright pause --note`` (it was dropped unread)."""
        return await api_act(request, run_id, "pause")

    @app.post("/api/runs/{run_id}/resume", tags=["runs"], openapi_extra=takes_note)
    async def api_resume(request: Request, run_id: str) -> dict[str, Any]:
        """Resume an interrupted run in the background, where its spec file is found. JSON
        ``{"note": "..."}`` (optional): why, kept on its ``resume_requested`` event."""
        return await api_act(request, run_id, "resume")

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
        ctx.require_api_write(request)
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
            edit_part, ctx, request, run_id, ref, body["value"], note, resume
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
        await run_in_threadpool(ctx.require_api_write, request)
        try:
            body = await decision_of(request, required=required)
        except NotText as exc:  # audited, as the engine audits a note it refuses
            await run_in_threadpool(
                refused_decision, ctx, request, approval_id, how, str(exc.detail)
            )
            raise
        done, resumed = await run_in_threadpool(
            decide, ctx, request, approval_id, how, body.note, body.answer
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
