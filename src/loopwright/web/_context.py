"""What the dashboard's route modules share (``create_app``'s own, made once): the store,
who is signed in, a page drawn, a write's sign-in and CSRF checks, who may approve, and a run
resumed in the background."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from .._authority import require, why_not_approve
from .._contract import TERMINAL_STATUSES
from .._engine import Runtime
from .._errors import ConfigError, NotPermittedError
from .._redact_logs import masked_logger
from .._spec import loop_of_run
from ..store import Approval, RunRecord, Store
from ._auth import Auth
from ._http import Flash, origin_of

__all__ = [
    "ALREADY_RESUMING",
    "MAX_RESUMES",
    "RESUME_REFUSED_COUNTED",
    "RESUME_RETRY_AFTER_S",
    "RESUMING",
    "WebContext",
    "check_max_resumes",
]

log = masked_logger("loopwright.web")
RESUMING = "the run is resuming"
ALREADY_RESUMING = "the run is already resuming on this server (no other resume started)"
_RESUMES_LOCK = threading.Lock()  # app.state.resumes, pruned and added to from request threads
MAX_RESUMES = 16
"""Runs this server resumes at once (``create_app(max_resumes=)``), each a thread running its
loop: a resume, a rerun started at once, a rollback or edit that resumes beyond them is refused
503 with ``Retry-After``; a decision is made, and its run not resumed (the answer says so)."""
RESUME_RETRY_AFTER_S = 30
RESUME_REFUSED_COUNTED = "resumes refused (the server full) counted since the last record from here"


def check_max_resumes(n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{n!r} is not a number of runs (1 or more)", field="max_resumes")


def _full(n: int) -> str:
    return (
        f"this server resumes as many runs as it may at once ({n}, max_resumes): "
        "try again when one has stopped"
    )


@dataclass
class WebContext:
    """The application's shared parts, handed to each module's ``register_*``."""

    app: FastAPI
    store: Store
    store_url: str | None
    auth: Auth
    templates: Jinja2Templates
    flash: Flash = field(default_factory=Flash)

    def page(self, request: Request, name: str, **ctx: Any) -> HTMLResponse:
        ctx.update(
            request=request,
            signed_in=self.auth.signed_in(request),
            csrf=self.auth.csrf_for(request) or "",
            flash=self.flash.of(request),  # a form's outcome, when this server signed it
            identity=self.auth.who(request) if self.auth.signed_in(request) else self.auth.identity,
            users_mode=self.auth.users_mode,
            can_decide=self.auth.may(request, "decide"),
            can_operate=self.auth.may(request, "operate"),
            can_admin=self.auth.may(request, "admin"),
            pending_count=self.store.count_approvals(status="pending"),
            # The live stream's position when the request began (``guard``): live.js asks for
            # the changes after it, so one found while the page is drawn is not lost.
            live_after=getattr(request.state, "live_after", self.app.state.messages.last_seq),
        )
        return self.templates.TemplateResponse(request, name, ctx)

    def refused_csrf(self, request: Request) -> None:
        """A signed-in person's write without the page's CSRF token: a forged request (or a
        stale page); audited where people are, through the refused sign-ins' count per
        source. A page on the same site (another port of 127.0.0.1, a sibling subdomain) has
        the browser send the session cookie with its posts: one record each let it fill the
        append-only log, under the name of whoever's browser it was."""
        self.app.state.sign_ins.refused(
            origin_of(request),
            "missing or wrong CSRF token",
            (request.method, request.url.path[:200]),
            self.auth.who(request),
        )

    def require_write(self, request: Request) -> None:
        if not self.auth.signed_in(request):
            raise HTTPException(401, "token required", headers={"WWW-Authenticate": "Bearer"})

    def require_form_write(self, request: Request, csrf: str) -> None:
        """A page's form: signed in, with the page's CSRF token."""
        self.require_write(request)
        if not self.auth.csrf_ok(request, csrf):
            self.refused_csrf(request)
            raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")

    def require_api_write(self, request: Request) -> None:
        """An API call: the bearer token, or a session cookie with its X-CSRF-Token."""
        self.require_write(request)
        if not self.auth.bearer_ok(request) and not self.auth.csrf_ok(
            request, request.headers.get("x-csrf-token")
        ):
            self.refused_csrf(request)
            raise HTTPException(403, "cookie-authenticated API calls need X-CSRF-Token")

    def blocked(
        self, request: Request, pending: list[Approval], runs: dict[str, RunRecord]
    ) -> dict[str, str]:
        """Why the signed-in person may not approve each request they could otherwise decide
        (their limits, the rule's role, separation of duties, a vote given): the card then
        offers Deny only and says why. Only where people are; the engine checks again."""
        if not self.auth.users_mode or not self.auth.may(request, "decide"):
            return {}
        who = self.auth.who(request)
        out = {}
        for a in pending:
            if a.kind == "question":
                continue
            why = why_not_approve(self.store, a, runs[a.run_id], who)
            if why:
                out[a.approval_id] = why
        return out

    def voters(self, a: Approval) -> list[str]:
        """Who approved a request that needs several approvers, so far."""
        return [v.by for v in self.store.votes(a.approval_id)]

    def room_to_resume(self, who: str, origin: str, run_id: str | None, action: str) -> None:
        """Refuse (503 with ``Retry-After``) a resume this server has no room for: as many
        runs resume in its threads as ``max_resumes`` allows, ``run_id`` (None: a run not made
        yet, a rerun's) not among them. Checked before the action's change and its record; the
        refusal is audited once per person and source in a window, the rest counted."""
        resuming: dict[str, list[bool]] = self.app.state.resuming
        most: int = self.app.state.max_resumes
        with _RESUMES_LOCK:
            if (run_id is not None and run_id in resuming) or len(resuming) < most:
                return
        target = f"run {run_id}" if run_id is not None else "a rerun's new run"
        try:  # one who may not resume is refused (403, audited) by the action's own check
            require(self.store, who, "operate", action=action, target=target, origin=origin,
                    record=False)  # fmt: skip
        except NotPermittedError:
            return
        self.app.state.resumes_refused.refused(origin, "the server is full", (action, target), who)
        raise HTTPException(503, _full(most), headers={"Retry-After": str(RESUME_RETRY_AFTER_S)})

    def resume_later(self, run_id: str) -> str:
        """Resume the run in a thread of this server; where one of its threads already resumes
        it, none is started (a burst of resumes or decisions started one each, all but one
        then refused the lease): that one goes round once more when it ends, should the run
        then still wait to go on, so a decision made as it finished is not left unresumed."""
        try:
            loop = loop_of_run(self.store.get_run(run_id))
        except ConfigError:
            return "the run has no spec file here: resume it where its loop is defined"
        resuming: dict[str, list[bool]] = self.app.state.resuming
        with _RESUMES_LOCK:
            if run_id in resuming:
                resuming[run_id][0] = True  # asked again while it runs
                return ALREADY_RESUMING
            most: int = self.app.state.max_resumes
            if len(resuming) >= most:
                # No room (a decision's resume, or a resume that found room before another
                # took it): no thread. Each resume was one, so a signed-in operator could start
                # as many loops as they liked; ``room_to_resume`` refuses those asked alone.
                log.warning("run %s not resumed: %d runs resume on this server", run_id, most)
                return f"not resumed: {_full(most)}"
            resuming[run_id] = [False]

        def wanted() -> bool:  # whether the run still waits to go on
            rec = self.store.get_run(run_id)
            if rec.status == "awaiting_approval":
                return not self.store.approvals(run_id=run_id, status="pending")
            return rec.status not in TERMINAL_STATUSES

        def again() -> bool:
            while True:
                with _RESUMES_LOCK:
                    if not resuming[run_id][0]:
                        del resuming[run_id]  # ends: the next ask starts a thread
                        return False
                    resuming[run_id][0] = False
                if wanted():
                    return True

        def work() -> None:
            try:
                while True:
                    try:
                        with Runtime(self.store_url) as rt:
                            rt.resume_sync(run_id, loop)
                    except Exception:
                        log.exception("resuming run %s failed", run_id)
                    if not again():
                        return
            except BaseException:
                with _RESUMES_LOCK:  # (its store read failed) the next ask starts a thread
                    resuming.pop(run_id, None)
                raise

        t = threading.Thread(target=work, name=f"resume-{run_id[:12]}", daemon=True)
        with _RESUMES_LOCK:
            # The resumes under way, not every one ever started: a finished thread's object
            # (2 KB) was kept for the server's life, one per decision, resume and rerun.
            resumes = self.app.state.resumes
            resumes[:] = [x for x in resumes if x.is_alive()]
            resumes.append(t)
            t.start()
        return RESUMING
