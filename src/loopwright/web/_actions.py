"""Run actions with a confirmation step: cancel, resume, roll back to a cycle, rerun with a
changed contract — on the run page (a confirmation page, then a form with the session's CSRF
token) and in the API (``POST /api/runs/{id}/rollback``, ``/rerun``). Each is recorded as an
event with who (``Auth.who``) and when; a rerun is a fork (``Runtime.fork``) started in the
background, linked both ways (``rerun_requested`` on the origin, ``rerun_of`` on the new run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from .._authority import operate
from .._cancel_rollback import rollback_dropped
from .._compare import contract_changes, merge_contract
from .._contract import TERMINAL_STATUSES, contract_from_snapshot, refuse_engine_marks
from .._engine import Runtime
from .._errors import ConfigError, LoopwrightError, RunNotFoundError
from .._fork_effects import again_names, fork_effects_text
from .._keys import check_key
from .._person_edits import said_dropped
from .._spec import loop_of_run
from ..store import NewEvent, RunRecord, Store
from ..store._records import PAUSE
from ._auth import Auth
from ._http import Flash, http_error, json_body, origin_of
from ._operations import may_act
from ._views import run_summary, timeline, waits_on

__all__ = ["ACTIONS", "BUDGET_FIELDS", "ActionDeps", "merge_contract", "register_actions"]


ACTIONS = ("cancel", "pause", "resume", "rollback", "rerun")
# The budget a person may change on a rerun from the page (any contract key through the API).
BUDGET_FIELDS: dict[str, type] = {
    "max_cycles": int,
    "max_cost_usd": float,
    "max_tokens": int,
    "max_seconds": float,
}


@dataclass(frozen=True)
class ActionDeps:
    """What the actions need from the application (``create_app``'s own helpers)."""

    store: Store
    auth: Auth
    page: Callable[..., HTMLResponse]
    require_form_write: Callable[[Request, str], None]
    require_api_write: Callable[[Request], None]
    resume_later: Callable[[str], str]
    flash: Flash
    # (who, origin, run id or None, action): 503 when the server resumes all it may at once
    room_to_resume: Callable[[str, str, str | None, str], None]


CYCLES_LISTED = 500
"""A run of more cycles is given a cycle number box, not a list of every cycle (20,000
options, and every checkpoint read to make them); a cycle it has not is refused on post."""


def _cycles(store: Store, run_id: str) -> list[int] | None:
    """The cycles a run can be rolled back or forked to: 0 (its start) and each concluded one;
    ``None`` for a run of more than ``CYCLES_LISTED`` cycles (no checkpoint read)."""
    rec = store.get_run(run_id)
    if rec.cycle > CYCLES_LISTED:
        return None
    rows = timeline(store.checkpoints(rec.run_id))
    concluded = (t for t in rows if not t["parked"] and not t.get("unapplied") and t["cycle"])
    return sorted({0, *(int(t["cycle"]) for t in concluded)})


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HTTPException(400, f"{name} must be a cycle number (0 or more)")
    return value


def _form_int(raw: str, name: str) -> int:
    """A cycle number typed in a form: read here, after the role is checked (a field typed
    ``int`` was refused by the framework, 422, before the handler could check who asked)."""
    text = raw.strip()
    if not (text.isascii() and text.isdigit()):
        raise HTTPException(400, f"{name} must be a cycle number (0 or more), not {raw!r}")
    return int(text)


def register_actions(app: FastAPI, deps: ActionDeps) -> None:
    store, auth = deps.store, deps.auth

    def get(run_id: str) -> RunRecord:
        try:
            return store.get_run(run_id)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc

    def rollback(
        run_id: str, to_cycle: int, who: str, origin: str, resume: bool
    ) -> tuple[RunRecord, str]:
        rec = get(run_id)
        if resume:  # refused before the rollback when the server has no room to resume it
            deps.room_to_resume(who, origin, rec.run_id, "resume")
        try:
            loop = loop_of_run(rec)
        except ConfigError:
            loop = None  # compensations are offered only where the loop is known
        try:
            done = Runtime(store).rollback(rec.run_id, to_cycle, by=who, loop=loop, origin=origin)
        except ConfigError as exc:
            raise HTTPException(400, str(exc)) from exc
        except LoopwrightError as exc:  # not permitted (403), executing elsewhere (409)
            raise http_error(exc) from exc
        store.append_events(
            done.run_id,
            [NewEvent(done.cycle, "rollback_requested", {"by": who, "to_cycle": to_cycle})],
        )
        offers = store.approvals(run_id=done.run_id, status="pending")
        msg = f"rolled back to cycle {to_cycle} by {who}, now {done.status.replace('_', ' ')}"
        dropped = rollback_dropped(store, done.run_id)
        if dropped:
            msg += f"; it replaces {said_dropped(dropped)}"
        if offers:
            msg += f"; {len(offers)} compensation request(s) to decide first"
        elif resume:
            try:
                operate(store, who, "resume", f"run {done.run_id}", origin=origin)
            except LoopwrightError as exc:
                raise http_error(exc) from exc
            store.append_events(
                done.run_id, [NewEvent(done.cycle, "resume_requested", {"by": who})]
            )
            msg += f"; {deps.resume_later(done.run_id)}"
        else:
            msg += "; Resume it to go on"
        return store.get_run(done.run_id), msg

    def may(request: Request, run_id: str, action: str) -> None:
        """One who may not operate is refused (403, audited) before anything they sent is
        checked (a budget, contract or cycle that does not validate was a 400 before the
        role's 403). A rerun is checked as the fork it is."""
        may_act(store, auth.who(request), origin_of(request), run_id, action)

    def rerun(
        run_id: str,
        at_cycle: int,
        changes: Mapping[str, Any],
        who: str,
        origin: str,
        task_key: str | None,
        start: bool,
        queue: bool = False,
    ) -> tuple[RunRecord, str, dict[str, Any]]:
        rec = get(run_id)
        if start:  # refused before the fork is made when the server has no room to start it
            deps.room_to_resume(who, origin, None, "resume")
        merged = merge_contract(rec.contract, changes)
        try:
            refuse_engine_marks(changes)  # (the origin's snapshot may carry it; a person not)
            contract = contract_from_snapshot(merged)
        except ConfigError as exc:
            raise HTTPException(400, str(exc)) from exc
        except (TypeError, ValueError) as exc:
            raise HTTPException(400, f"not a contract: {exc}") from exc
        try:
            # A rerun asked to start is the pool's too (``queue``): this server starts it
            # where it has the run's loop; where it has not (a run started from Python, a
            # spec on the workers' hosts only), a fork left to its maker was started by nobody.
            new = Runtime(store).fork(
                rec.run_id,
                at_cycle,
                contract=contract,
                task_key=task_key,
                by=who,
                origin=origin,
                queue=queue or start,
            )
        except ConfigError as exc:
            raise HTTPException(400, str(exc)) from exc
        except LoopwrightError as exc:
            raise http_error(exc) from exc
        # what the fork was given, as stored (a spend-only contract with its default ceiling)
        changed = contract_changes(rec.contract, new.contract)
        what = {"by": who, "at_cycle": at_cycle, "changed": changed}
        try:  # the fork is made: a step that fails from here says which run (a retry made two)
            store.append_events(
                rec.run_id,
                [NewEvent(rec.cycle, "rerun_requested", {**what, "new_run": new.run_id})],
            )
            store.append_events(
                new.run_id, [NewEvent(new.cycle, "rerun_of", {**what, "from_run": rec.run_id})]
            )
            if start:  # audited, as a resume asked alone is (it was the fork's record only)
                operate(store, who, "resume", f"run {new.run_id}", origin=origin)
        except LoopwrightError as exc:
            err = http_error(exc)
            raise HTTPException(
                err.status_code,
                f"{err.detail}; the rerun's run {new.run_id} (of {rec.run_id} from cycle "
                f"{at_cycle}) was made and not started: resume it (a rerun asked again makes "
                "another)",
            ) from exc
        said = ", ".join(f"{k} {v['from']} → {v['to']}" for k, v in changed.items()) or "same"
        msg = f"rerun of {rec.run_id[:12]} from cycle {at_cycle} by {who} (contract: {said})"
        if effects := fork_effects_text(store, rec.run_id, at_cycle):
            msg += f"; {effects}"  # (effects53b: what it inherits, and what it may do again)
        if start:
            msg += f"; {deps.resume_later(new.run_id)}"
        elif queue:
            msg += "; queued: a worker serving the store starts it"
        else:
            msg += "; Resume it to start"
        return store.get_run(new.run_id), msg, changed

    # --- pages -------------------------------------------------------------------------
    @app.get("/runs/{run_id}/confirm", response_class=HTMLResponse, include_in_schema=False)
    def confirm_page(request: Request, run_id: str, action: str = "") -> HTMLResponse:
        if action not in ACTIONS:
            raise HTTPException(400, f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
        rec = get(run_id)
        pending = store.approvals(run_id=rec.run_id, status="pending")
        budget = dict((rec.contract or {}).get("budget") or {})
        # The engine's default ceiling is no cap a person set: shown as a note, its box empty,
        # so the form sent unchanged gives the fork the ceiling again (a 1000 sent back was
        # the person's cap, and beside a time budget they added it had been dropped)
        ceiling = budget.get("max_cycles") if budget.get("max_cycles_default") is True else None
        if isinstance(ceiling, int):
            budget["max_cycles"] = None
        else:
            ceiling = None  # (a damaged snapshot's: shown as it is)
        return deps.page(
            request,
            "confirm.html",
            rec=rec,
            action=action,
            terminal=rec.status in TERMINAL_STATUSES,
            cycles=_cycles(store, rec.run_id),
            budget={k: budget.get(k) for k in BUDGET_FIELDS},
            ceiling=ceiling,
            pending=pending,
            # a person's pause: lifted (Unpause on the run's page), never approved or denied
            paused=[a for a in pending if a.kind == PAUSE],
            waits_on=waits_on(pending) if pending else "",
            # the effects a rerun from before their cycle does again (run-scoped keys)
            # (a bounded read: the first few named, "and more", invariant 8)
            again=again_names(store, rec.run_id, 0) if action == "rerun" else "",
        )

    @app.post("/runs/{run_id}/rollback", include_in_schema=False)
    def rollback_form(
        request: Request,
        run_id: str,
        to_cycle: str = Form(""),
        resume: str = Form(""),
        csrf: str = Form(""),
    ) -> Response:
        deps.require_form_write(request, csrf)
        may(request, run_id, "rollback")
        rec, msg = rollback(
            run_id,
            _form_int(to_cycle, "to_cycle"),
            auth.who(request),
            origin_of(request),
            resume == "yes",
        )
        return RedirectResponse(deps.flash.url(rec.run_id, msg), status_code=303)

    @app.post("/runs/{run_id}/rerun", include_in_schema=False)
    def rerun_form(
        request: Request,
        run_id: str,
        at_cycle: str = Form("0"),
        max_cycles: str = Form(""),
        max_cost_usd: str = Form(""),
        max_tokens: str = Form(""),
        max_seconds: str = Form(""),
        start: str = Form(""),
        csrf: str = Form(""),
    ) -> Response:
        deps.require_form_write(request, csrf)
        may(request, run_id, "fork")
        given = {
            "max_cycles": max_cycles,
            "max_cost_usd": max_cost_usd,
            "max_tokens": max_tokens,
            "max_seconds": max_seconds,
        }
        shown = dict((get(run_id).contract or {}).get("budget") or {})
        if shown.pop("max_cycles_default", False):
            shown["max_cycles"] = None  # the default ceiling is shown as an empty box
        budget: dict[str, Any] = {}
        for name, raw in given.items():
            raw = raw.strip()
            try:
                value = BUDGET_FIELDS[name](raw) if raw else None  # empty: no limit
            except ValueError:
                what = "a whole number" if BUDGET_FIELDS[name] is int else "a number"
                raise HTTPException(400, f"{name} must be {what}, not {raw!r}") from None
            if value != shown.get(name):
                # (a field sent back as the page showed it is no change: the default ceiling
                # shown as max_cycles stays the engine's, not a cap the person set)
                budget[name] = value
        new, msg, _ = rerun(
            run_id,
            _form_int(at_cycle, "at_cycle"),
            {"budget": budget},
            auth.who(request),
            origin_of(request),
            None,
            start == "yes",
        )
        return RedirectResponse(deps.flash.url(new.run_id, msg), status_code=303)

    # --- API ---------------------------------------------------------------------------
    async def body_of(request: Request, shape: str) -> dict[str, Any]:
        body = await json_body(request, shape)
        if not isinstance(body, dict):
            raise HTTPException(400, f"the body must be a JSON object: {shape}")
        return body

    def only(body: Mapping[str, Any], allowed: set[str]) -> None:
        extra = sorted(set(body) - allowed)
        if extra:
            raise HTTPException(
                400, f"unknown field(s) {', '.join(extra)}: give {', '.join(sorted(allowed))}"
            )

    def flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
        value = body.get(name, default)
        if not isinstance(value, bool):
            raise HTTPException(400, f"{name} must be true or false")
        return value

    @app.post("/api/runs/{run_id}/rollback", tags=["runs"])
    async def api_rollback(request: Request, run_id: str) -> dict[str, Any]:
        """Roll a run back to a cycle: JSON ``{"to_cycle": N, "resume": false}``. The
        artifacts of that cycle are restored and the run reopened; compensations of later
        effects are offered as requests. Recorded with who and when."""
        deps.require_api_write(request)
        await run_in_threadpool(may, request, run_id, "rollback")
        body = await body_of(request, '{"to_cycle": N, "resume": false}')
        only(body, {"to_cycle", "resume"})
        if "to_cycle" not in body:
            raise HTTPException(400, 'give "to_cycle": the cycle to roll back to')
        n = _int(body["to_cycle"], "to_cycle")
        resume = flag(body, "resume", False)
        rec, msg = await run_in_threadpool(
            rollback, run_id, n, auth.who(request), origin_of(request), resume
        )
        return {"run": run_summary(rec), "message": msg}

    @app.post("/api/runs/{run_id}/rerun", tags=["runs"])
    async def api_rerun(request: Request, run_id: str) -> dict[str, Any]:
        """Rerun a run with a changed contract: JSON ``{"at_cycle": 0, "contract": {"budget":
        {"max_cycles": 10}}, "task_key": null, "start": true, "queue": false}``. A new run
        forked from ``at_cycle`` (0: the start) under the origin's contract with ``contract``
        laid over it, started in the background unless ``start`` is false, or handed to the
        worker pool with ``queue`` (``Runtime.fork(queue=True)``). Recorded on both runs."""
        deps.require_api_write(request)
        await run_in_threadpool(may, request, run_id, "fork")
        body = await body_of(request, '{"at_cycle": 0, "contract": {...}, "start": true}')
        only(body, {"at_cycle", "contract", "task_key", "start", "queue"})
        n = _int(body.get("at_cycle", 0), "at_cycle")
        changes = body.get("contract") or {}
        if not isinstance(changes, dict):
            raise HTTPException(400, "contract must be a JSON object of contract tables")
        key = body.get("task_key")
        if key is not None:
            try:
                check_key(key)  # the rule of task keys, before anything is looked up
            except ConfigError as exc:
                raise HTTPException(400, str(exc)) from None
        # (a queued rerun is the pool's to start: not started here as well, unless asked)
        queue = flag(body, "queue", False)
        start = flag(body, "start", not queue)
        if start and queue:
            raise HTTPException(
                400,
                'give "start": true or "queue": true, not both: start runs the rerun on this '
                "server, queue leaves it to the workers serving the store",
            )
        new, msg, changed = await run_in_threadpool(
            rerun, run_id, n, changes, auth.who(request), origin_of(request), key, start, queue
        )
        return {"run": run_summary(new), "changed": changed, "message": msg}
