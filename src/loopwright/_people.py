"""What people do to runs: decide requests (approve, deny, answer); cancel and roll back are in
``_cancel_rollback``.

Kept apart from the cycle machinery in ``_engine``; ``Runtime`` inherits these methods.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ._audit import audit_entry, takes_audit
from ._authority import (
    audit,
    check_decision,
    check_person,
    expire,
    may_operate,
    refused,
    same_person,
)
from ._concluded import concluded_at, concluded_in, refuse_rewritten
from ._errors import ApprovalError, ConfigError, ConflictError, already_decided
from ._host import RuntimeHost
from ._json import check_given_text, check_text
from ._keys import unprintable
from ._person_turn import person_op
from ._question import Question
from ._redact import redact, redact_text
from .store import Approval, Vote
from .store._records import PAUSE, past_expiry

# (``concluded_at``, ``concluded_in`` and ``refuse_rewritten`` moved to ``_concluded``; the
# names stay importable from here)
__all__ = ["Decisions", "concluded_at", "concluded_in", "refuse_rewritten"]


class Decisions(RuntimeHost):
    """Requests: approve, deny, answer (mixed into ``Runtime``)."""

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

    @person_op(leased=False)
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

    @person_op(leased=False)
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

    @person_op(leased=False)
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
            note = printable_note(note)
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
                f"(loopwright answer {req.run_id[:12]} ANSWER --request {req.approval_id}), "
                "ANSWER being your answer, quoted; or deny it to escalate"
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


_PROSE_MARKS = str.maketrans("\u200e\u200f\u061c", "   ")


def printable_note(note: str | None) -> str | None:
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
