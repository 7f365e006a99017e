"""The JSON API under ``/api``: runs and approval requests listed a page at a time, a run's
whole document streamed, a part's versions, metrics; and, with the token, cancel, pause,
unpause, resume, a person's version of a part, and a request approved, denied or answered."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar
from urllib.parse import quote

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError
from starlette.concurrency import run_in_threadpool

from .._audit import audit
from .._errors import LoopwrightError, RunNotFoundError
from .._metrics import compute_metrics
from .._reuse_now import as_now
from .._state import TaskState
from .._stored_run_words import over_budget, run_next_action
from ..store import RunRecord
from ._context import WebContext
from ._guard import JSON_TYPE
from ._http import NotText, json_body, origin_of
from ._operations import act, decide, edit_part, may_act, pause_act, refused_decision
from ._queries import PAGE_SIZE, approvals_query, page_size, paged, runs_query
from ._run_json import run_document
from ._settle_routes import api_settle_flow
from ._views import (
    approval_summary,
    edits_view,
    held_or_stored,
    next_action_here,
    run_summary,
    stop_cause_of,
    stop_words,
)

__all__ = ["Decision", "Note", "Settlement", "register_api"]


class _Posted(BaseModel):
    """A body an endpoint reads itself (``body_of``): another field is refused, not dropped."""

    model_config = ConfigDict(extra="forbid")
    SHAPE: ClassVar[str] = "{...}"  # (the body expected, in words: a 400 names it)


class Decision(_Posted):
    """A decision posted to the API. ``answer`` is for questions only. Another field is
    refused, not dropped: ``{"reason": "..."}`` would have decided with no note."""

    SHAPE: ClassVar[str] = '{"note": "...", "answer": ...}'

    note: str | None = None
    answer: Any = None


class Note(_Posted):
    """A cancel, pause, unpause or resume posted to the API: a note, optional."""

    SHAPE: ClassVar[str] = '{"note": "..."}'

    note: str | None = None


class Settlement(_Posted):
    """What a person found out about an effect left in doubt: ``done`` (true or false, not
    1 or "yes"), its ``result`` (``done`` only), a ``note``."""

    SHAPE: ClassVar[str] = '{"done": true, "result": ..., "note": "..."}'

    done: StrictBool
    result: Any = None
    note: str | None = None


_Body = TypeVar("_Body", bound=_Posted)


def body_schema(model: type[BaseModel], required: bool = False) -> dict[str, Any]:
    """The OpenAPI request body of an endpoint that reads its own (after the token, and who
    is asking, are checked: FastAPI reads a declared body before the function runs)."""
    return {
        "requestBody": {
            "required": required,
            "content": {JSON_TYPE: {"schema": model.model_json_schema()}},
        }
    }


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
        run.update(over_budget(rec))  # (0.0 and 0: within its budgets)
        head = {
            "run": run,
            "next_action": run_next_action(rec, state.next_action),
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

    def acted(request: Request, run_id: str, how: str, note: str | None) -> dict[str, Any]:
        rec, msg = act(ctx, request, run_id, how, note)
        return {"run": run_summary(store.get_run(rec.run_id)), "message": msg}

    async def api_act(request: Request, run_id: str, how: str) -> dict[str, Any]:
        # The optional ``{"note": "..."}`` read as a pause's is (another shape: 422), after
        # who is asking: one who may not is refused (403, audited) before the body is read
        rec, body = await role_then_note(request, run_id, how)
        return await run_in_threadpool(acted, request, rec.run_id, how, body.note)

    async def role_then_note(request: Request, run_id: str, how: str) -> tuple[RunRecord, Note]:
        """The run and the posted ``Note`` of a cancel, pause, unpause or resume, once the
        person may do it (404, then 403 audited, before the body is read: they learn nothing
        of what would be accepted); a body that is not text is audited as refused."""
        await run_in_threadpool(ctx.require_api_write, request)
        who, where = ctx.auth.who(request), origin_of(request)
        rec = await run_in_threadpool(may_act, store, who, where, run_id, how)
        try:
            body = await body_of(request, Note, required=False)
        except NotText as exc:  # audited, as the engine audits a note it refuses
            await run_in_threadpool(
                audit, store, who, how, f"run {rec.run_id}", outcome="refused", origin=where,
                reason=str(exc.detail),
            )  # fmt: skip
            raise
        return rec, body

    @app.post("/api/runs/{run_id}/cancel", tags=["runs"], openapi_extra=body_schema(Note))
    async def api_cancel(request: Request, run_id: str) -> dict[str, Any]:
        """Cancel a run (recorded as the dashboard's identity). JSON ``{"note": "..."}``
        (optional): why, kept on its ``cancel_requested`` event with who asked."""
        return await api_act(request, run_id, "cancel")

    @app.post("/api/runs/{run_id}/pause", tags=["runs"], openapi_extra=body_schema(Note))
    async def api_pause(request: Request, run_id: str) -> dict[str, Any]:
        """Pause a run at its next cycle boundary, as the token's person (an operator): JSON
        ``{"note": "..."}`` (optional). It goes on once unpaused
        (``/api/runs/{run_id}/unpause``); returns ``run``, the ``pause`` request as
        ``approval``, ``message``."""
        return await api_pausing(request, run_id, "pause")

    @app.post("/api/runs/{run_id}/unpause", tags=["runs"], openapi_extra=body_schema(Note))
    async def api_unpause(request: Request, run_id: str) -> dict[str, Any]:
        """Lift a run's pause, as the token's person (an operator, as for a pause; not an
        approver): JSON ``{"note": "..."}`` (optional). Its ``pause`` request is approved and
        the run resumes in the background where its spec file is found; returns ``run``, the
        request as ``approval``, ``message``. A run not paused (or ended) is 409."""
        return await api_pausing(request, run_id, "unpause")

    async def api_pausing(request: Request, run_id: str, how: str) -> dict[str, Any]:
        # Who is asking first: one who may not is refused (403, audited) before the body is
        # read, as for a decision
        rec, body = await role_then_note(request, run_id, how)
        done, req, msg = await run_in_threadpool(
            pause_act, ctx, request, rec.run_id, how, body.note
        )
        return {"run": run_summary(done), "approval": req.to_dict(), "message": msg}

    @app.post("/api/runs/{run_id}/resume", tags=["runs"], openapi_extra=body_schema(Note))
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

    # {key:path}: an effect's key holds what its business key holds (a colon, a slash)
    @app.post(
        "/api/runs/{run_id}/effects/{key:path}/settle",
        tags=["runs"],
        openapi_extra=body_schema(Settlement, True),
    )
    async def api_settle(request: Request, run_id: str, key: str) -> dict[str, Any]:
        """Settle an effect of the run left in doubt, as the token's person (an operator),
        as ``loopwright settle`` does: JSON ``{"done": true, "result": ..., "note": "..."}``
        (it happened, returning ``result``: a redo, or another run asking for the action,
        reuses it) or ``{"done": false}`` (it did not: recorded failed, its key kept for the
        next attempt). ``key``: the effect's key as the packet names it, or its name. Returns
        ``run``, the ``effect`` as written, ``message``; then roll the run back to before
        its cycle and resume it. Not in doubt, or another run's: 400 (audited)."""
        return await api_settle_flow(
            ctx, request, run_id, key, lambda: body_of(request, Settlement, required=True)
        )

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
            body = await body_of(request, Decision, required=required)
        except NotText as exc:  # audited, as the engine audits a note it refuses
            await run_in_threadpool(
                refused_decision, ctx, request, approval_id, how, str(exc.detail)
            )
            raise
        done, resumed = await run_in_threadpool(
            decide, ctx, request, approval_id, how, body.note, body.answer
        )
        return {"approval": done.to_dict(), "resume": resumed}

    async def body_of(request: Request, model: type[_Body], *, required: bool) -> _Body:
        """The request's body as ``model`` (empty or ``null``: none given, unless
        ``required``)."""
        raw = await request.body()
        data = await json_body(request, model.SHAPE) if raw.strip() else None
        if data is None:
            if not required:
                return model()
            raise RequestValidationError(
                [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
            )
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise RequestValidationError(
                [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
            ) from None

    @app.post(
        "/api/approvals/{approval_id}/approve",
        tags=["approvals"],
        openapi_extra=body_schema(Decision, False),
    )
    async def api_approve(request: Request, approval_id: str) -> dict[str, Any]:
        """Approve a request as the token's person: JSON ``{"note": "..."}`` (optional)."""
        return await api_decide(request, approval_id, "approve", required=False)

    @app.post(
        "/api/approvals/{approval_id}/deny",
        tags=["approvals"],
        openapi_extra=body_schema(Decision, False),
    )
    async def api_deny(request: Request, approval_id: str) -> dict[str, Any]:
        """Deny a request as the token's person: JSON ``{"note": "..."}`` (optional)."""
        return await api_decide(request, approval_id, "deny", required=False)

    @app.post(
        "/api/approvals/{approval_id}/answer",
        tags=["approvals"],
        openapi_extra=body_schema(Decision, True),
    )
    async def api_answer(request: Request, approval_id: str) -> dict[str, Any]:
        """Answer a question: JSON ``{"answer": ..., "note": "..."}``."""
        return await api_decide(request, approval_id, "answer", required=True)
