"""Settling an effect left in doubt from the dashboard (settle54): the run page's form beside
an effect shown IN DOUBT (``POST /runs/{id}/effects/settle``) and the API's
``POST /api/runs/{id}/effects/{key}/settle``. Both are ``Runtime.settle_effect`` as the
signed-in person, under ``loopwright settle``'s rules and words: an operator only (403,
audited), the run's own effect in doubt only (400, audited by the engine), a note held to a
decision's note's rule (400, audited), a result for a settling as done only."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from .._authority import audit
from .._engine import Runtime
from .._errors import ConfigError, LoopwrightError
from .._json import strict_loads
from .._people import printable_note
from .._settle import settled_words
from .._spec import register_run_secrets
from ..store import JournalEntry
from ._context import WebContext
from ._http import http_error, origin_of, text_field
from ._operations import may_act

__all__ = ["register_settle_routes", "settle_act"]

ACTION = "settle_effect"  # (the engine's and the audit log's name of it)


def settle_act(
    ctx: WebContext,
    request: Request,
    run_id: str,
    key: str,
    done: bool,
    result: Any,
    note: str | None,
    *,
    result_given: bool,
) -> tuple[JournalEntry, str]:
    """Settle run ``run_id``'s effect in doubt ``key`` as the signed-in person, who may
    operate (checked by the caller, ``may_act``). What they sent is checked before the run is
    touched; a refusal of it is audited (the reason, not the text), as a cancel's note's is.
    The entry as written and what happened, in ``loopwright settle``'s words."""
    store = ctx.store
    by, where = ctx.auth.who(request), origin_of(request)
    try:
        if result_given and not done:
            raise ConfigError("a result is for a settling as done only", field="result")
        note = printable_note(text_field(note, "note"))
        note = note.strip() if note and note.strip() else None
    except (ConfigError, HTTPException) as exc:
        why = str(exc.detail if isinstance(exc, HTTPException) else exc)
        _refused(ctx, by, where, run_id, why)
        raise HTTPException(400, why) from None
    try:
        register_run_secrets(store.get_run(run_id))  # the loop's keys masked in the result
        got = Runtime(store).settle_effect(
            run_id, key, done=done, by=by, note=note, result=result, origin=where
        )
    except ConfigError as exc:  # not in doubt, not the run's own, a result that is not JSON
        raise HTTPException(400, str(exc)) from exc
    except LoopwrightError as exc:  # executing elsewhere (409), the store failed (503)
        raise http_error(exc) from exc
    return got, settled_words(store, got, run_id, by)


def _refused(ctx: WebContext, who: str, where: str, run_id: str, why: str) -> None:
    """Audit a settling refused for what was sent (the reason, not the text)."""
    audit(ctx.store, who, ACTION, f"run {run_id}", outcome="refused", origin=where, reason=why)


def register_settle_routes(app: FastAPI, ctx: WebContext) -> None:
    """The run page's settle form (the API's route is ``_api``'s, where bodies are read)."""

    @app.post("/runs/{run_id}/effects/settle", include_in_schema=False)
    def settle_form(
        request: Request,
        run_id: str,
        key: str = Form(""),
        done: str = Form(""),
        result: str = Form(""),
        note: str = Form(""),
        csrf: str = Form(""),
    ) -> Response:
        ctx.require_form_write(request, csrf)
        who, where = ctx.auth.who(request), origin_of(request)
        rec = may_act(ctx.store, who, where, run_id, ACTION)
        value: Any = None
        try:  # (who before what: refused of one who may operate, audited as the API's are)
            if done not in ("yes", "no"):
                raise HTTPException(400, "say what the outside world shows: done or not done")
            if result.strip():
                try:
                    value = strict_loads(result)
                except ValueError as exc:
                    raise HTTPException(400, f"result: is not JSON ({exc})") from None
        except HTTPException as exc:
            _refused(ctx, who, where, rec.run_id, str(exc.detail))
            raise
        _entry, msg = settle_act(
            ctx,
            request,
            rec.run_id,
            key,
            done == "yes",
            value,
            note,
            result_given=bool(result.strip()),
        )
        return RedirectResponse(ctx.flash.url(rec.run_id, msg, "#effects"), status_code=303)


async def api_settle_flow(
    ctx: WebContext, request: Request, run_id: str, key: str, read_body: Any
) -> dict[str, Any]:
    """The API's settling: who first (401, then 404, then 403 audited, before the body is
    read: one who may not learns nothing of what would be accepted), then the body
    (``read_body()``: 422 for another shape), then ``settle_act``."""
    from ._views import journal_view, run_summary

    await run_in_threadpool(ctx.require_api_write, request)
    who, where = ctx.auth.who(request), origin_of(request)
    rec = await run_in_threadpool(may_act, ctx.store, who, where, run_id, ACTION)
    try:
        body = await read_body()
    except HTTPException as exc:
        # a 400 audited, every one (not JSON, nested too deep, not text), as a refusal of a
        # person's action is; another shape (422, a program's mistake) is not, as on every
        # route of the API
        await run_in_threadpool(_refused, ctx, who, where, rec.run_id, str(exc.detail))
        raise
    got, msg = await run_in_threadpool(
        lambda: settle_act(
            ctx,
            request,
            rec.run_id,
            key,
            body.done,
            body.result,
            body.note,
            result_given="result" in body.model_fields_set,
        )
    )
    return {
        "run": run_summary(ctx.store.get_run(rec.run_id)),
        "effect": journal_view([got])[0],
        "message": msg,
    }
