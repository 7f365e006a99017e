"""What people do to runs: decide requests (approve, deny, answer), cancel, roll back.

Kept apart from the cycle machinery in ``_engine``; ``Runtime`` inherits these methods.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._audit import audit_entry, takes_audit
from ._authority import (
    audit,
    check_decision,
    check_person,
    expire,
    may_operate,
    operate,
    refused,
    same_person,
)
from ._call_billing import owes
from ._concluded import concluded_at, concluded_in, refuse_rewritten
from ._contract import TERMINAL_STATUSES, contract_from_snapshot
from ._errors import ApprovalError, ConfigError, ConflictError, already_decided
from ._exec import NO_LOOP as _NO_LOOP
from ._exec import Execution as _Exec
from ._exec import held_execution
from ._host import RuntimeHost
from ._json import check_given_text, check_text
from ._keys import unprintable
from ._loop import Loop, check_loop
from ._question import Question
from ._redact import redact, redact_text
from ._redact_logs import masked_logger
from ._state import TaskState, edits_dropped, said_dropped
from .store import Approval, Checkpoint, ClosedApproval, NewEvent, RunRecord, Store, Vote
from .store._records import PAUSE, past_expiry

# (``concluded_at``, ``concluded_in`` and ``refuse_rewritten`` moved to ``_concluded``; the
# names stay importable from here)
__all__ = ["Decisions", "concluded_at", "concluded_in", "refuse_rewritten"]


class Decisions(RuntimeHost):
    """Requests, cancellation and rollback (mixed into ``Runtime``)."""

    # --- decisions by people ---------------------------------------------------------------
    def pending_approval(self, run_id: str, approval_id: str | None = None) -> Approval:
        """The run's pending request (``approval_id`` picks one when several are pending)."""
        rec = self.store.get_run(run_id)
        if approval_id is not None:
            if not isinstance(approval_id, str) or not approval_id.strip():
                raise ConfigError("must name a request (its id or a prefix)", field="request")
            exact = self.store.approval(approval_id.strip())
            found = (
                [exact]
                if exact is not None and exact.run_id == rec.run_id
                # a prefix (people type a few characters): two of the run's requests with it
                # tell one from several (invariant 8: not the run's every request)
                else self.store.approvals_by_prefix(rec.run_id, approval_id.strip(), limit=2)
            )
            if not found:
                raise ApprovalError(f"run {rec.run_id} has no request {approval_id!r}")
            if len(found) > 1:
                raise ApprovalError(f"{approval_id!r} matches several requests; give more of it")
            req = found[0]
            if req.status != "pending":
                raise already_decided(rec.run_id, req.approval_id, req.status, req.decided_by)
            return req
        # (invariant 8: a run asked something every cycle has thousands of decided requests)
        pending = self.store.approvals(run_id=rec.run_id, status="pending")
        if not pending:
            # only to say why (an error): the run's last request, newest first, one row
            every = self.store.page_approvals(run_id=rec.run_id, limit=1)
            if every:
                last = every[0]
                raise already_decided(rec.run_id, last.approval_id, last.status, last.decided_by)
            raise ApprovalError(f"run {rec.run_id} has no pending request")
        if len(pending) > 1:
            ids = ", ".join(f"{a.approval_id} ({a.kind}: {a.what})" for a in pending)
            raise ApprovalError(
                f"run {rec.run_id} has {len(pending)} pending requests: {ids}; name one "
                "(--request ID)"
            )
        return pending[0]

    def approve(
        self,
        run_id: str,
        *,
        by: str,
        note: str | None = None,
        approval_id: str | None = None,
        origin: str = "python",
    ) -> Approval:
        """Approve the run's pending request; ``resume`` then continues where it parked.

        When the request's rule needs several approvers, this records ``by``'s vote and
        returns the request still ``pending`` until enough distinct people have approved.
        In a store with users, ``by`` must be a user allowed to decide it
        (``NotPermittedError`` otherwise; docs/permissions.md). ``origin`` says from where,
        for the audit log."""
        return self._decide(
            run_id, "approved", by=by, note=note, approval_id=approval_id, origin=origin
        )

    def deny(
        self,
        run_id: str,
        *,
        by: str,
        note: str | None = None,
        approval_id: str | None = None,
        origin: str = "python",
    ) -> Approval:
        """Deny the run's pending request (or decline its question); on ``resume`` the run
        escalates. One denial is final, whatever number of approvers the rule needs."""
        return self._decide(
            run_id, "denied", by=by, note=note, approval_id=approval_id, origin=origin
        )

    def answer(
        self,
        run_id: str,
        answer: Any,
        *,
        by: str,
        note: str | None = None,
        approval_id: str | None = None,
        origin: str = "python",
    ) -> Approval:
        """Answer the run's pending question; the answer is validated against the question
        and reaches the next cycle's context when the run resumes."""
        return self._decide(
            run_id,
            "answered",
            by=by,
            note=note,
            approval_id=approval_id,
            answer=answer,
            origin=origin,
        )

    def _decide(
        self,
        run_id: str,
        status: str,
        *,
        by: str,
        note: str | None,
        approval_id: str | None,
        answer: Any = None,
        origin: str = "python",
    ) -> Approval:
        if not isinstance(by, str) or not by.strip():
            raise ConfigError("a decision needs the name of who made it", field="by")
        check_text(by, field="by")  # before anything is recorded: the audit log keeps both
        check_person(by)
        who = by.strip()
        verb = {"approved": "approve", "denied": "deny", "answered": "answer"}[status]
        try:
            check_given_text(note, field="note")
            note = _printable_note(note)
            if isinstance(answer, str):
                check_text(answer, field="answer")
        except ConfigError as exc:
            # Every refusal is audited: this one with its reason (the character and where it
            # is), not the text, which holds what the log must not carry (an escape sequence
            # would reach the terminal of whoever reads `loopwright audit`).
            audit(self.store, who, verb, f"run {run_id}", outcome="refused", origin=origin,
                  reason=str(exc))  # fmt: skip
            raise
        try:
            req = self.pending_approval(run_id, approval_id)
        except ApprovalError as exc:
            audit(
                self.store,
                who,
                verb,
                f"run {run_id}",
                outcome="refused",
                origin=origin,
                reason=str(exc),
            )
            raise
        run = self.store.get_run(req.run_id)
        if req.kind == PAUSE:
            rule = self._lift_check(req, who, status, origin)
        else:
            rule = check_decision(self.store, req, run, who, status, origin=origin)
        if past_expiry(req.expires_at, self.store.clock()):
            expire(self.store, req)
            raise ApprovalError(
                f"request {req.approval_id} expired at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(req.expires_at))}; "
                "the run escalates when it resumes"
            )
        question = (req.evidence or {}).get("question")
        if status == "answered":
            if not question:
                raise ApprovalError(
                    f"request {req.approval_id} is a yes/no approval, not a question: "
                    "approve or deny it"
                )
            answer = Question.from_dict(question).validate(answer)
        elif status == "approved" and question:
            raise ApprovalError(
                f"request {req.approval_id} is a question ({question.get('text')}): answer it "
                "(loopwright answer RUN ANSWER), or deny it to escalate"
            )
        # Invariant 9: what a person types is stored (the request, its event, the audit log, the
        # run's notes, the actor's next context) masked like everything else.
        if note:
            note = redact_text(note)
        if answer is not None:
            answer = redact(answer)
        target = f"request {req.approval_id}"
        detail: dict[str, Any] = {"run": req.run_id, "kind": req.kind, "what": req.what}
        detail["note"] = note
        if req.kind == PAUSE:
            # A lift is the run's ``unpause`` (whether asked as that or as the approval of the
            # pause request), where its refusals and the pause itself are: found by the run.
            verb, target = "unpause", f"run {req.run_id}"
            detail = {"request": req.approval_id, "note": note}
        needed = int(rule.get("approvers") or 1)
        me = who
        # The record of a decision made now (not of one vote of several: that is written
        # before the decision, as the permission it is) is written in the transaction that
        # records the decision: a decision always has its record (it was written after, so a
        # process gone between the two, or a failed audit write, left a decision unrecorded).
        entry = audit_entry(me, verb, target, origin=origin, **detail)
        in_tx = takes_audit(self.store.decide_approval)
        try:
            if status == "approved" and needed > 1:
                # "Ben" after "ben" is the same person twice, not a second pair of eyes (the
                # store tells apart names as given: an open store takes any spelling)
                for v in self.store.votes(req.approval_id):
                    if same_person(me, [v.by]):
                        raise ConflictError(
                            f"{me} already approved request {req.approval_id} (as {v.by}); "
                            "it needs another person"
                        )

                # the vote's record, which says how many of how many, written in the vote's
                # transaction (it was written after: a failed audit write left a vote that
                # counts with no record of who cast it)
                def record(votes: Sequence[Vote]) -> dict[str, Any]:
                    said = f"{len(votes)} of {needed}"
                    return audit_entry(me, verb, target, origin=origin, **detail, votes=said)

                if takes_audit(self.store.add_vote):
                    votes = self.store.add_vote(
                        req.approval_id, me, note=note, now=time.time(), audit=record
                    )
                else:  # a store of one's own written before ``audit=``: after, as it was
                    votes = self.store.add_vote(req.approval_id, me, note=note, now=time.time())
                    self.store.audit_put(**record(votes))
                names = [v.by for v in votes]
                if len(names) < needed:
                    return self.pending_approval(req.run_id, req.approval_id)
                who = ", ".join(names)
            once = needed <= 1 or status != "approved"  # (else the last vote's record says it)
            decided = self.store.decide_approval(
                req.approval_id,
                status=status,
                by=who,
                note=note,
                now=time.time(),
                answer=answer,
                **({"audit": entry} if in_tx and once else {}),
            )
        except (ApprovalError, ConflictError) as exc:
            # Decided by someone else since it was read (two people at once), or a second vote
            # of the same person: a refused attempt. A vote of several was recorded as allowed
            # before the decision was tried, though it never took effect.
            audit(self.store, me, verb, target, outcome="refused", origin=origin, reason=str(exc))
            raise
        if once and not in_tx:  # a store of one's own written before ``audit=``: after
            self.store.audit_put(**entry)
        return decided

    def _lift_check(self, req: Approval, who: str, status: str, origin: str) -> dict[str, Any]:
        """Whether ``who`` may decide ``req``, a person's pause: lifting it is an operator's
        action, as pausing and cancelling are (not an approver's: no rule asked for it); it has
        no denial (a run is stopped by ``cancel``)."""
        if status != "approved":
            verb = {"denied": "deny", "answered": "answer"}[status]
            no = ApprovalError(
                f"request {req.approval_id} is a person's pause, not a question or an action to "
                f"allow: approve it to let run {req.run_id[:12]} go on (loopwright unpause "
                "RUN), or cancel the run"
            )
            refused(self.store, who, verb, f"request {req.approval_id}", origin=origin, why=no)
            raise no
        may_operate(self.store, who, "unpause", f"run {req.run_id}", origin=origin)
        return {}

    def cancel(
        self,
        run_id: str,
        *,
        by: str | None = None,
        loop: Loop | None = None,
        origin: str = "python",
    ) -> RunRecord:
        """Cancel a run. A run executing elsewhere stops at its next cycle boundary; a parked or
        interrupted one is ended now, with its packet. With the ``loop``, the compensations of
        the run's completed effects are offered through the approval policy (they run on the
        next ``resume``)."""
        check_loop(loop, optional=True)
        rec = self.store.get_run(run_id)
        if rec.status in TERMINAL_STATUSES:
            return rec
        operate(self.store, by, "cancel", f"run {rec.run_id}", origin=origin)
        self.store.request_cancel(rec.run_id)
        try:
            token = self._take_lease(rec.run_id)
        except ConflictError:
            return self.store.get_run(rec.run_id)  # it is running elsewhere; it will stop itself
        # Handed back whatever failed (a store read before the cancel was, too): held to its
        # TTL, it kept every other executor from the run (review48).
        with self._holding(rec.run_id, token):
            # Read again under the lease: a run that ended since the read above (its worker
            # released the lease) keeps its end; it was cancelled over it (attack47).
            rec = self.store.get_run(rec.run_id)
            if rec.status not in TERMINAL_STATUSES:
                contract = contract_from_snapshot(rec.contract)
                ex = held_execution(self.store, rec.run_id, contract, token, loop)
                self._cancel_now(ex, f"cancelled by {by}" if by else "cancelled", by=by)
                self._warn_not_offered(rec.run_id, loop, origin, "cancel")
        return self.store.get_run(rec.run_id)

    def _in_flight(self, ex: _Exec, why: str) -> list[dict[str, Any]]:
        """Effects started and never finished (a crash mid-effects), marked in doubt: what
        ends or rewinds the run must say so, never drop them silently."""
        out = []
        # (read by status: a long run's done effects are not read to find the few in flight)
        for e in self.store.journal_where(ex.run_id, kind="effect", statuses=_IN_FLIGHT):
            # named by the key the effect was handed (a redo's ``~n``): what a person checks
            shown = e.data.get("call_key") or e.key.removeprefix("effect:")
            cause = f"{e.data.get('name')} ({shown}) {why}"
            self.store.journal_put(
                ex.run_id,
                ex.token,
                key=e.key,
                kind="effect",
                cycle=e.cycle,
                status="in_doubt",
                data={**e.data, "cause": cause},
                events=[NewEvent(e.cycle, "effect_in_doubt", {"key": e.key, "cause": cause})],
            )
            out.append(
                {
                    "key": e.key.removeprefix("effect:"),
                    "effect": e.data.get("name"),
                    "args": e.data.get("args"),
                    "cause": cause,
                }
            )
        return out

    def _retire_failures(self, ex: _Exec) -> None:
        retire_failures(self.store, ex, effects=True)

    def _cancel_now(self, ex: _Exec, cause: str, *, by: str | None = None) -> None:
        pend0 = ex.state.pending or {}
        # Offers already made (by a rollback) are kept with their decisions; others close.
        kept = list(pend0.get("offers") or ()) if pend0.get("stage") == "compensations" else []
        keep_ids = {str(o.get("approval_id")) for o in kept}
        stale = [a for a in _open_requests(ex.state.pending) if a not in keep_ids]
        doubt = self._in_flight(
            ex, "was in flight when the run was cancelled: check whether it happened"
        )
        ex.state.pending = None
        loop = None if ex.loop is _NO_LOOP else ex.loop
        from ._reversal import offer_compensations  # (not at the engine's import)

        pend, reqs = offer_compensations(
            self.store,
            ex.run_id,
            after_cycle=-1,
            loop=loop,
            cycle=ex.state.cycle,
            why="the run was cancelled",
            keep=kept,
        )
        ex.state.pending = pend
        self._note_not_offered(ex, loop)
        # Close what was waiting, in the commit that cancels: a cancelled run must not leave a
        # decision open (offers of compensation are made afresh above).
        self._finish(
            ex,
            "cancelled",
            cause=cause,
            approvals=reqs,
            evidence={"effects_in_doubt": doubt} if doubt else None,
            closes=_closing(stale, by=by or "loopwright", note="the run was cancelled"),
        )

    def _note_not_offered(self, ex: _Exec, loop: Loop | None) -> None:
        # whether there is one: the first row found (journal_where's limit=1 is the oldest,
        # which the database found by sorting every done effect: 44 ms at 20,000)
        if loop is None and self.store.count_journal(
            ex.run_id, kind="effect", statuses=("done",), limit=1
        ):
            ex.events.append(
                NewEvent(
                    ex.state.cycle,
                    "compensations_not_offered",
                    {"why": "no loop was given, so the effects' compensations are unknown"},
                )
            )

    def _warn_not_offered(self, run_id: str, loop: Loop | None, origin: str, action: str) -> None:
        """Tell the Python API's caller what ``_note_not_offered`` recorded (the CLI prints
        it itself): a refund they may expect was not offered."""
        if loop is not None or origin == "cli":
            return
        if self.store.count_journal(run_id, kind="effect", statuses=("done",), limit=1):
            masked_logger("loopwright.runs").warning(
                "run %s: no compensation of its done effects was offered, as no loop was "
                "given: nothing they did is undone; pass loop= to Runtime.%s to offer them",
                run_id[:12],
                action,
            )

    def rollback(
        self,
        run_id: str,
        to_cycle: int,
        *,
        by: str,
        loop: Loop | None = None,
        origin: str = "python",
    ) -> RunRecord:
        """Restore the artifacts (and findings, plan, best score) of cycle ``to_cycle``'s
        checkpoint and reopen the run; accounting, notes and history are kept; what the
        cycles after it rejected is forgotten (they may be tried again). The
        compensations of effects completed after that cycle are offered through the approval
        policy (``loop`` names them) and run on the next ``resume``."""
        if not isinstance(by, str) or not by.strip():
            raise ConfigError("a rollback needs the name of who asked for it", field="by")
        if isinstance(to_cycle, bool) or not isinstance(to_cycle, int):
            # (a number out of range is refused below, naming the run's cycles)
            raise ConfigError(
                f"must be a cycle number, got {type(to_cycle).__name__}", field="to_cycle"
            )
        check_loop(loop, optional=True)
        rec = self.store.get_run(run_id)
        on = f"run {rec.run_id}"
        # Audited once it is known to happen: a rollback refused for its cycle, or for a run
        # executing elsewhere, was recorded "allowed" first (and its author then counted as
        # a requester of the run's refunds), though nothing was rolled back.
        who = may_operate(self.store, by, "rollback", on, origin=origin)
        busy = f"run {rec.run_id} is executing elsewhere; cancel it or let it park first"
        token = self._lease_or_refused(rec.run_id, who, "rollback", origin=origin, busy=busy)
        with self._holding(rec.run_id, token):
            try:
                target = concluded_in(self.store, rec.run_id, to_cycle, "to_cycle")
                refuse_rewritten(self.store, rec.run_id, target, "to_cycle")
            except ConfigError as exc:
                refused(self.store, who, "rollback", on, origin=origin, why=exc)
                raise
            audit(self.store, who, "rollback", on, origin=origin, to_cycle=to_cycle)
            self._rollback(rec, token, target, to_cycle, by=by.strip(), loop=loop)
            self._warn_not_offered(rec.run_id, loop, origin, "rollback")
        return self.store.get_run(rec.run_id)

    def _rollback(
        self,
        rec: RunRecord,
        token: int,
        target: Checkpoint,
        to_cycle: int,
        *,
        by: str,
        loop: Loop | None,
    ) -> None:
        old = TaskState.from_dict(target.state)
        latest = self.store.latest_checkpoint(rec.run_id)
        cur = TaskState.from_dict(latest.state)
        stale = _open_requests(cur.pending)
        ex = _Exec(
            rec.run_id,
            loop or _NO_LOOP,
            contract_from_snapshot(rec.contract),
            token,
            latest.seq,
            cur,
        )
        doubt = self._in_flight(
            ex, "was in flight when the run was rolled back: check whether it happened"
        )
        self._retire_failures(ex)
        ex.adopt(self.store, latest.state)
        # A person's version the restored artifacts replace is said (the event, the note, a
        # warning; the CLI prints it): the rollback dropped it unsaid, a part a person had
        # approved by writing it put back to the loop's older version (effects53).
        dropped = edits_dropped(cur, old)
        cur.artifacts = old.artifacts
        cur.reindex()
        cur.attach(lambda ref: self.store.versions(rec.run_id, ref))
        ex.written = {}  # the restored versions are written again, as they were then
        cur.findings = old.findings
        cur.plan = old.plan
        cur.score = old.score
        cur.best_score = old.best_score
        cur.best_cycle = old.best_cycle
        cur.best_parts = old.best_parts
        cur.progress_score = old.progress_score
        cur.passed_checks = old.passed_checks
        # Approvals granted after the checkpoint go with it: redoing an undone action needs a
        # person again.
        cur.approved = old.approved
        # What the cycles after it rejected is forgotten with them: the cycles redone may try
        # it again (the commit deletes those rows; a fork at that cycle copies none of them).
        ex.forget_rejected_after = to_cycle
        cur.stall = 0
        cur.notes.append(
            {"kind": "rollback", "to_cycle": to_cycle, "from_cycle": cur.cycle, "by": by}
            | ({"edits_dropped": dropped} if dropped else {})
        )
        from ._reversal import offer_compensations  # (not at the engine's import)

        pend, reqs = offer_compensations(
            self.store,
            rec.run_id,
            after_cycle=to_cycle,
            loop=loop,
            cycle=cur.cycle,
            why=f"{by} rolled the run back to cycle {to_cycle}",
            redo=True,
        )
        cur.pending = pend
        self._note_not_offered(ex, loop)
        cur.next_action = (
            f"decide {len(reqs)} compensation request(s), then resume" if reqs else "resume"
        )
        ex.events.append(
            NewEvent(
                cur.cycle,
                "rolled_back",
                {
                    "to_cycle": to_cycle,
                    "by": by,
                    "offers": len((pend or {}).get("offers") or ()),
                    "irreversible": (pend or {}).get("irreversible") or [],
                    "in_doubt": doubt,
                }
                | ({"edits_dropped": dropped} if dropped else {}),
            )
        )
        if dropped:
            masked_logger("loopwright.runs").warning(
                "run %s: the rollback to cycle %d by %s replaces %s",
                rec.run_id[:12],
                to_cycle,
                by,
                said_dropped(dropped),
            )
        self._commit(
            ex,
            {"decision": "rollback", "to_cycle": to_cycle, "by": by},
            {
                "status": "awaiting_approval" if reqs else "pending",
                "stop_reason": None,
                "packet": None,
                "ended_at": None,
                "held_out_passed": None,
                "cancel_requested": 0,  # a cancelled run rolled back is open again
            },
            approvals=reqs,
            closes=_closing(stale, by=by, note="rolled back"),
        )


def rollback_dropped(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The people's versions the run's latest rollback replaced (its ``rolled_back`` event's
    ``edits_dropped``), for what the CLI and the dashboard say after one."""
    for e in store.events_tail(run_id, before_id=None, limit=20):
        if e.kind == "rolled_back":
            return [dict(d) for d in e.data.get("edits_dropped") or ()]
    return []


# An effect started and not finished (a crash mid-effects): what ends or rewinds a run marks.
_IN_FLIGHT = ("intent", "waiting")
# What a retry entry kept for its billing forgets of its bound: a fresh start, as retired.
_FRESH = frozenset({"first_at", "next_at", "budget", "class", "error"})


def retire_failures(store: Store, ex: _Exec, *, effects: bool) -> None:
    """A person's rollback or edit gives the cycle to come a fresh start: the spent retry
    bounds of the cycles from it no longer count, nor (``effects``: a rollback, whose person
    chose to redo them) failed effects. A run that gave up on its actor and was reopened by an
    edit would otherwise give up again at once, without a call."""
    nxt = ex.state.cycle + 1
    # A run that did not end (killed mid-cycle, then rolled back) may still owe what the
    # killed cycle's calls were billed (a billed answer, failed attempts in their backoff or
    # given up on before the stop's commit):
    # that entry keeps its billing, with a fresh bound, for the cycle redone to charge. A run
    # that ended was charged by the commit that ended it.
    ended = store.get_run(ex.run_id).status in TERMINAL_STATUSES
    # The retry entries of the cycles from ``nxt`` (the journal's index by cycle) and the
    # failed effects, not the run's every entry: a long run's done effects are not read.
    found = store.journal_where(ex.run_id, kind="retry", after_cycle=nxt - 1)
    if effects:
        found += store.journal_where(ex.run_id, kind="effect", statuses=("failed",))
        found.sort(key=lambda e: (e.created_at, e.key))
    for e in found:
        retry = e.kind == "retry" and e.cycle >= nxt and e.status != "retired"
        owed = (
            retry
            and not ended
            and e.status in ("settled", "waiting", "gave_up")
            and owes(store, ex, e)
        )
        if owed:  # a fresh bound, the billing kept: the cycle redone charges it
            status, data = "settled", {k: v for k, v in e.data.items() if k not in _FRESH}
        elif retry or (effects and e.kind == "effect" and e.status == "failed"):
            status, data = "retired", {**e.data, "retired_from": e.status}
        else:
            continue
        store.journal_put(
            ex.run_id,
            ex.token,
            key=e.key,
            kind=e.kind,
            cycle=e.cycle,
            status=status,
            data=data,
            attempts=0 if retry else None,
        )


def _open_requests(pending: Mapping[str, Any] | None) -> list[str]:
    """Ids of the requests a pending entry waits on (a parked cycle's, or offers')."""
    pending = pending or {}
    ids = [str(pending["approval_id"])] if pending.get("approval_id") else []
    ids += [str(o["approval_id"]) for o in pending.get("offers") or () if o.get("approval_id")]
    return ids


def _closing(ids: list[str], *, by: str, note: str) -> list[ClosedApproval]:
    """The requests ``ids`` closed (``cancelled``) by the commit that ends or rewinds a run."""
    return [ClosedApproval(aid, by, note) for aid in ids]


_PROSE_MARKS = str.maketrans("\u200e\u200f\u061c", "   ")


def _printable_note(note: str | None) -> str | None:
    """A decision's note as it will be printed (``audit``, ``show``, the inbox): a form's CRLF
    read as a line break; otherwise the character rule of task keys and names
    (``unprintable``: a control character, a line separator, a bidirectional control),
    newline and tab apart, refused (``ConfigError``). An ESC went into the append-only log as
    typed and ``loopwright audit`` wrote it raw to the reader's terminal, where an escape
    sequence can clear the screen or rewrite the lines above it."""
    if note is None:
        return None
    note = note.replace("\r\n", "\n")
    # (one space for one character: the position the rule names is the note's own). The marks
    # LRM, RLM and ALM, which right-to-left keyboards put into prose, are let through in a note
    # (a name, a key and --by refuse them): every display writes them out (cli/_table,
    # web/_values), so they reorder nothing a person reads.
    bad = unprintable(note.replace("\n", " ").replace("\t", " ").translate(_PROSE_MARKS))
    if bad is not None:
        raise ConfigError(bad, field="note")
    return note
