"""What a page's form and the API both do, as the signed-in person: decide a request, cancel or
resume a run, write a person's version of a part."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request

from .._authority import audit, may_operate, operate, require
from .._contract import TERMINAL_STATUSES
from .._engine import Runtime
from .._errors import (
    ConfigError,
    ConflictError,
    LoopwrightError,
    NotPermittedError,
    RunNotFoundError,
)
from .._people import printable_note
from .._redact import redact_text
from .._spec import loop_of_run, register_run_secrets
from ..store import Approval, NewEvent, RunRecord, Store
from ._context import RESUMING, WebContext
from ._http import http_error, origin_of, text_field
from ._views import edits_view, waits_on

__all__ = [
    "RUN_ACTIONS",
    "act",
    "decide",
    "edit_part",
    "find_approval",
    "may_act",
    "pause_act",
    "permitted_unrecorded",
    "refused_decision",
]


RUN_ACTIONS = (
    "cancel",
    "pause",
    "unpause",
    "resume",
)  # what ``act`` does (the run page's form, the API)


def person_note(note: str | None) -> str | None:
    """A note typed with a cancel, pause or resume, held to a decision's note's rule (no
    control character, escape sequence or bidirectional override: 400), stored masked
    (invariant 9); ``None`` for none or an empty one."""
    try:
        note = printable_note(text_field(note, "note"))
    except ConfigError as exc:
        raise HTTPException(400, str(exc)) from None  # (it names the field: "note: ...")
    return redact_text(note.strip()) if note and note.strip() else None


def find_approval(store: Store, approval_id: str) -> Approval:
    found = store.approval(approval_id)
    if found is None:
        raise HTTPException(404, f"no approval request {approval_id}")
    return found


def decide(
    ctx: WebContext, request: Request, approval_id: str, how: str, note: str | None, answer: Any
) -> tuple[Approval, str]:
    """A decision by the signed-in person (the engine checks what they may decide)."""
    store, auth = ctx.store, ctx.auth
    a = find_approval(store, approval_id)
    # A note or answer the store cannot keep (a NUL, a lone surrogate) is refused by the engine,
    # which audits the refusal as it does an escape character's (it was refused here first,
    # with a 400 and no record)
    note = (note or "").strip() or None
    rt = Runtime(store)
    by, where = auth.who(request), origin_of(request)
    try:
        # the loop's keys masked in the note and the answer: its spec built (user code
        # imported) for one who may decide only (review53c: a viewer's refused one built it)
        if permitted_unrecorded(store, by, how, a.run_id, where, "decide"):
            register_run_secrets(store.get_run(a.run_id))
        if how == "approve":
            done = rt.approve(a.run_id, by=by, note=note, approval_id=a.approval_id, origin=where)
        elif how == "deny":
            done = rt.deny(a.run_id, by=by, note=note, approval_id=a.approval_id, origin=where)
        elif how == "answer":
            done = rt.answer(
                a.run_id, answer, by=by, note=note, approval_id=a.approval_id, origin=where
            )
        else:
            raise HTTPException(400, f"unknown decision {how!r}")
    except ConfigError as exc:
        # What was sent, not the request's state: a note holding an escape sequence or a
        # bidirectional control, an answer that is not text (a 409 before, as if the request
        # had moved on)
        raise HTTPException(400, str(exc)) from exc
    except LoopwrightError as exc:
        raise http_error(exc) from exc
    if done.status == "pending":  # one of several approvers
        need = int((done.evidence.get("who") or {}).get("approvers") or 1)
        votes = len(store.votes(done.approval_id))
        return done, f"{votes} of {need} approvers so far: it waits for another person"
    resumed = ctx.resume_later(a.run_id)
    if how == "deny" and resumed == RESUMING:  # a denial ends the run: say so
        resumed = "the run ends escalated to a person, as a denied request does"
    return done, resumed


def refused_decision(
    ctx: WebContext, request: Request, approval_id: str, how: str, why: str
) -> None:
    """Audit a decision refused before the engine saw it (a body holding a lone surrogate,
    which is not read at all), as the engine audits one refused for its note: by whom, on the
    request's run, with the reason and not the text."""
    a = ctx.store.approval(approval_id)
    if a is None:
        return  # no such request: answered 404 as any decision on it is, not a decision
    audit(ctx.store, ctx.auth.who(request), how, f"run {a.run_id}", outcome="refused",
          origin=origin_of(request), reason=why)  # fmt: skip


def permitted_unrecorded(
    store: Store, by: str, action: str, run_id: str, where: str, permission: str = "operate"
) -> bool:
    """Whether ``by`` may do ``action`` on the run (``permission``), asked without recording
    anything (the action itself is checked and audited where it is done). Not
    ``_authority.may_operate``, which refuses (raising, audited) and answers who acts."""
    try:
        require(store, by, permission, action=action, target=f"run {run_id}", origin=where,
                record=False)  # fmt: skip
    except NotPermittedError:
        return False
    return True


def may_act(store: Store, who: str, where: str, run_id: str, action: str) -> RunRecord:
    """The run, once ``who`` may do ``action`` on it: 404 for no such run, 403 (audited, as
    the engine's own check does) for one who may not operate, before anything they sent is
    read, so that they get the right status and learn nothing of what would be accepted.
    Nothing is recorded when they may: the action records itself."""
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    try:
        may_operate(store, who, action, f"run {rec.run_id}", origin=where)
    except LoopwrightError as exc:
        raise http_error(exc) from exc
    return rec


def pause_act(
    ctx: WebContext, request: Request, run_id: str, how: str, note: str | None = None
) -> tuple[RunRecord, Approval, str]:
    """Pause a run, or lift its pause (``how``: ``pause`` / ``unpause``), as the signed-in
    person: checked, filed (or approved) and audited by the engine (``Runtime.pause`` /
    ``unpause``), refusals included: an ended run is refused there, after the role, and
    audited (it was a 409 here first, unaudited, to an approver too). The run, the request,
    and what happened in words."""
    store = ctx.store
    by, where = ctx.auth.who(request), origin_of(request)
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    rt = Runtime(store)
    try:
        if how == "pause":
            req = rt.pause(rec.run_id, by=by, note=note, origin=where)
        else:
            req = rt.unpause(rec.run_id, by=by, note=note, origin=where)
    except ConfigError as exc:  # what was sent (a note holding an escape sequence)
        raise HTTPException(400, str(exc)) from exc
    except LoopwrightError as exc:
        raise http_error(exc) from exc
    done = store.get_run(rec.run_id)
    if how == "pause":
        said = "paused" if done.status == "awaiting_approval" else "pause requested"
        return done, req, f"{said} by {by} (request {req.approval_id}): unpause it to go on"
    msg = f"unpaused by {by} (request {req.approval_id})"
    left = store.approvals(run_id=rec.run_id, status="pending")
    if left:  # (a risk request it was parked on when paused: the pause held it after)
        msg += f"; it still waits on {len(left)} request(s): decide them first"
    elif done.maker_starts:
        # A fork nobody has started stays its maker's: lifting a pause is not starting it
        # (resumed here, it was started before its maker's edit; the CLI's unpause resumes
        # only with --resume)
        msg += "; a fork not started: Resume it to start it (no worker takes it until then)"
    else:
        msg += f"; {ctx.resume_later(rec.run_id)}"
    return done, req, msg


def act(
    ctx: WebContext, request: Request, run_id: str, how: str, note: str | None = None
) -> tuple[RunRecord, str]:
    """Cancel, pause, unpause or resume a run as the signed-in person; the event log keeps
    who and when (``cancel_requested`` / ``pause_requested`` / ``resume_requested``, beside
    the engine's own). ``note``: why (a pause's, on its request, as ``Runtime.pause`` keeps
    it; a cancel's or resume's, on its ``*_requested`` event). The action is checked first,
    then who asks (404, 403 audited), then the note (400, audited), then the run's state: a
    mistake is 400 whatever state the run is in, and a refusal names the role first."""
    if how not in RUN_ACTIONS:
        raise HTTPException(400, f"unknown action {how!r}: one of {', '.join(RUN_ACTIONS)}")
    if how in ("pause", "unpause"):
        done, _req, msg = pause_act(ctx, request, run_id, how, person_note(note))
        return done, msg
    store, auth = ctx.store, ctx.auth
    by, where = auth.who(request), origin_of(request)
    # who first, as for a pause: one who may not is refused (403, audited), not told the run
    # ended (a 409 with no record, to a viewer too); then the note, a refusal audited as the
    # engine audits a pause's (the reason, not the text); then the run's state
    rec = may_act(store, by, where, run_id, how)
    try:
        note = person_note(note)
    except HTTPException as exc:
        audit(store, by, how, f"run {rec.run_id}", outcome="refused", origin=where,
              reason=str(exc.detail))  # fmt: skip
        raise
    if rec.status in TERMINAL_STATUSES:
        raise HTTPException(409, f"run {rec.run_id[:12]} already ended ({rec.status})")
    if how == "resume":  # cancel is checked (and audited) by the engine
        ctx.room_to_resume(by, where, rec.run_id, "resume")  # 503: as many resume as may
        try:
            operate(store, by, "resume", f"run {rec.run_id}", origin=where)
        except LoopwrightError as exc:
            raise http_error(exc) from exc
    who = {"by": by, **({"note": note} if note else {})}
    if how == "cancel":
        # The request is written only when it may be made: a refused cancel leaves the run's
        # log as it was, and is audited once, by the engine (below), as every refusal is.
        if permitted_unrecorded(store, by, "cancel", rec.run_id, where):
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
    # resume
    parked = rec.status == "awaiting_approval"
    pending = store.approvals(run_id=rec.run_id, status="pending") if parked else []
    if pending:
        raise HTTPException(409, waits_on(pending))
    store.append_events(rec.run_id, [NewEvent(rec.cycle, "resume_requested", who)])
    return rec, f"resume requested by {by}: {ctx.resume_later(rec.run_id)}"


def edit_part(
    ctx: WebContext,
    request: Request,
    run_id: str,
    ref: str,
    value: Any,
    note: str | None,
    resume: bool,
) -> tuple[RunRecord, str]:
    """A person's version of part ``ref``, as the signed-in person (``Runtime.edit``);
    ``resume``: then resume the run in the background, where its spec file is found."""
    store, auth = ctx.store, ctx.auth
    by = auth.who(request)
    note = text_field((note or "").strip() or None, "note")
    if resume:  # refused before the edit when the server has no room to resume the run
        ctx.room_to_resume(by, origin_of(request), run_id, "resume")
    try:
        # the loop's API keys and URL credentials masked in the value, as in an actor's edit
        # (its spec built once per spec file as it is; a run without one: what is registered),
        # for one who may edit only (review53c: a viewer's refused edit built it)
        if permitted_unrecorded(store, by, "edit", run_id, origin_of(request)):
            register_run_secrets(store.get_run(run_id))
        # (and why a resume will not judge the edit, as the edit found it)
        done, blocked = Runtime(store)._edit(
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
    # A budget its check may spend used up: a resume stops again before judging the edit
    # (the CLI's edit says so; this said "Resume the run to go on from it")
    if blocked is not None:
        msg += f"; {blocked}"
    elif resume and done.status not in TERMINAL_STATUSES and done.status != "awaiting_approval":
        # audited, as a resume alone and a rollback's resume are (it was the edit's record only)
        try:
            operate(store, by, "resume", f"run {done.run_id}", origin=origin_of(request))
        except LoopwrightError as exc:
            raise http_error(exc) from exc
        who = {"by": by}
        store.append_events(done.run_id, [NewEvent(done.cycle, "resume_requested", who)])
        msg += f"; {ctx.resume_later(done.run_id)}"
    elif done.status not in ("running", "awaiting_approval"):
        msg += "; Resume the run to go on from it"
    return done, msg
