"""A person's pause: ``Runtime.pause`` files a request of kind ``pause`` against an open run;
the run parks at its next cycle boundary (``awaiting_approval``, its state as that boundary left
it) and goes on, where it stopped, once a person approves the request (``Runtime.unpause``, or
``approve`` naming it). No worker claims a run with a request pending (``open_requests``).

How an executing run learns of it without a statement more a cycle: the fencing read each
commit does anyway reports ``cancel_requested OR open_requests > 0`` (``ASKED``); only when it
is set is the run's row read to tell a cancel from a pause (``_stop_asked``). A cancel acts at
any commit (as before); a pause only at a cycle boundary: never mid-cycle, never between an
effect's intent and its result. Paused time is no run time: a run's seconds are counted
inside its cycles only (DESIGN §7).
"""

from __future__ import annotations

import time
import uuid

from ._audit import audit_entry, takes_audit
from ._authority import may_operate, refused
from ._contract import TERMINAL_STATUSES, contract_from_snapshot
from ._errors import ApprovalError, ConfigError, ConflictError
from ._exec import Execution as _Exec
from ._exec import held_execution
from ._host import RuntimeHost
from ._json import check_given_text
from ._people import printable_note
from ._person_turn import person_op
from ._redact import redact_text
from .store import Approval, NewApproval, NewEvent
from .store._records import PAUSE

__all__ = ["PAUSE", "Pausing"]

# What a paused run is waiting on says itself, in ``status``/``show`` (its ``next_action``).
# (the run named: `unpause RUN`, typed as printed, was refused as no run; polish55)
_NEXT = "paused by {by} (request {id}): `loopwright unpause {run}` to let it go on"


def _checked_note(
    host: RuntimeHost, who: str, action: str, on: str, origin: str, note: str | None
) -> str | None:
    """A person's note as stored (masked, invariant 9), or a ``ConfigError`` audited as the
    refusal it is (with the reason, not the text: an escape sequence must not reach the log)."""
    try:
        check_given_text(note, field="note")
        note = printable_note(note)
    except ConfigError as exc:
        refused(host.store, who, action, on, origin=origin, why=exc)
        raise
    return redact_text(note) if note else note


class Pausing(RuntimeHost):
    """A person's pause and its lifting (mixed into ``Runtime``)."""

    @person_op(leased=True)
    def pause(
        self, run_id: str, *, by: str, note: str | None = None, origin: str = "python"
    ) -> Approval:
        """Pause an open run: a request of kind ``pause`` is filed now (``loopwright
        approvals`` lists it); a run executing elsewhere parks at its next cycle boundary, one
        not executing (not started, parked, interrupted) parks now. ``unpause`` (approving the
        request) lets it go on where it stopped. A run that ended, or one paused already, is a
        ``ConflictError``. Who may pause is who may cancel (the operate permission); both the
        pause and a refusal are audited."""
        if not isinstance(by, str) or not by.strip():
            raise ConfigError("a pause needs the name of who asked for it", field="by")
        rec = self.store.get_run(run_id)
        on = f"run {rec.run_id}"
        # who first: one who may not pause is refused (403 over HTTP) whatever they sent
        who = may_operate(self.store, by, "pause", on, origin=origin)
        note = _checked_note(self, who, "pause", on, origin, note)
        if rec.status in TERMINAL_STATUSES:
            ended = ConflictError(
                f"run {rec.run_id} already ended ({rec.status}); nothing to pause"
            )
            refused(self.store, who, "pause", on, origin=origin, why=ended)
            raise ended
        approval_id = uuid.uuid4().hex[:12]
        request = NewApproval(
            approval_id=approval_id,
            cycle=rec.cycle,
            kind=PAUSE,
            rule=None,
            what=f"paused by {who}: approve to let the run go on where it stopped",
            why=note or f"{who} paused the run",
            evidence={"by": who, "note": note},
            diff=None,
            action_hash=approval_id,
            expires_at=None,
        )
        # The record of the pause is written in the transaction that files it: one filed
        # always has it, one refused or failed has none (it was written after: a process
        # gone between the two left a pause no record said was made)
        entry = audit_entry(who, "pause", on, origin=origin, request=approval_id, note=note)
        in_tx = takes_audit(self.store.request_pause)
        try:
            filed = self.store.request_pause(
                rec.run_id, request, by=who, now=time.time(), **({"audit": entry} if in_tx else {})
            )
        except ConflictError as exc:  # ended meanwhile, or paused already
            refused(self.store, who, "pause", on, origin=origin, why=exc)
            raise
        if not in_tx:  # a store of one's own written before ``audit=``: after, as it was
            self.store.audit_put(**entry)
        if self._on_phase is not None:  # (set by the crash tests only: a kill here)
            self._on_phase("pause_filed")
        try:
            token = self._take_lease(rec.run_id)
        except ConflictError:
            return filed  # executing elsewhere: it parks at its next cycle boundary
        with self._holding(rec.run_id, token):
            rec = self.store.get_run(rec.run_id)  # read again under the lease
            if rec.status not in TERMINAL_STATUSES:  # (one ended meanwhile closed the request)
                contract = contract_from_snapshot(rec.contract)
                ex = held_execution(self.store, rec.run_id, contract, token, phase=self._on_phase)
                # A cycle stopped in its effects (or refunds under way) finishes them first,
                # when it is resumed, and parks at the boundary after.
                if (ex.state.pending or {}).get("stage") is None:
                    self._park_paused(ex, rec.status, filed)
        return filed

    @person_op(leased=False)
    def unpause(
        self, run_id: str, *, by: str, note: str | None = None, origin: str = "python"
    ) -> Approval:
        """Lift a run's pause: its pending ``pause`` request approved (as ``approve`` naming
        it does). A worker then claims the run (or ``resume`` continues it) where it stopped:
        no cycle repeated or lost. ``ApprovalError`` when the run is not paused (or ended).
        Who may is who may pause; the lift is audited as an ``unpause`` of the run (the
        request's id in its detail; ``approve`` naming the request is recorded the same), in
        the transaction that records it, and so is a refusal (the role, a run not paused)."""
        if not isinstance(by, str) or not by.strip():
            raise ConfigError("an unpause needs the name of who lifts the pause", field="by")
        rec = self.store.get_run(run_id)
        on = f"run {rec.run_id}"
        who = may_operate(self.store, by, "unpause", on, origin=origin)
        pause = self._pause_pending(rec.run_id)
        if pause is None:
            ended = rec.status in TERMINAL_STATUSES
            no = ApprovalError(
                f"run {rec.run_id} already ended ({rec.status}); nothing to unpause"
                if ended
                else f"run {rec.run_id} is not paused"
            )
            refused(self.store, who, "unpause", on, origin=origin, why=no)
            raise no
        return self.approve(
            rec.run_id, by=who, note=note, approval_id=pause.approval_id, origin=origin
        )

    # --- the engine's side ----------------------------------------------------------------
    def _pause_pending(self, run_id: str) -> Approval | None:
        """The run's pending pause request, if any (an indexed read of its pending requests;
        asked when an execution starts and when a commit reported a request pending)."""
        for a in self.store.approvals(run_id=run_id, status="pending"):
            if a.kind == PAUSE:
                return a
        return None

    def _stop_asked(self, ex: _Exec, cause: str, *, boundary: bool) -> bool:
        """A commit reported that a person asked the run to stop (``ASKED``): a cancel ends it
        (``cause``), a pause parks it if this is a cycle boundary. True when the run stopped
        here (the caller returns); False when it goes on (a pause waits for the boundary, or
        was lifted meanwhile)."""
        rec = self.store.get_run(ex.run_id)
        if rec.cancel_requested:
            self._cancel_now(ex, cause)
            return True
        if not boundary:
            return False
        pause = self._pause_pending(ex.run_id)
        if pause is None:
            return False
        self._park_paused(ex, rec.status, pause)
        return True

    def _pause_if_asked(self, ex: _Exec, status: str) -> bool:
        """At an execution's start (a boundary: nothing of a cycle under way): park it if a
        pause is pending, whatever claimed or resumed it. True when it parked."""
        pause = self._pause_pending(ex.run_id)
        if pause is None:
            return False
        self._park_paused(ex, status, pause)
        return True

    def _park_paused(self, ex: _Exec, status: str, pause: Approval) -> None:
        """Park the run for ``pause`` at a cycle boundary: its state as it is (nothing pending
        is added: the cycle to come starts afresh once the pause is lifted), status
        ``awaiting_approval``. One parked already (for another request) stays as it is."""
        s = ex.state
        by = (pause.evidence or {}).get("by") or "a person"
        parked = status == "awaiting_approval"
        kind = "still_waiting" if parked else "paused"
        ex.events.append(NewEvent(s.cycle, kind, {"approval_id": pause.approval_id, "by": by}))
        if parked:
            self.store.append_events(ex.run_id, ex.events)
            ex.events = []
            return
        s.next_action = _NEXT.format(by=by, id=pause.approval_id, run=ex.run_id[:12])
        # (a cancel filed while it parked, which found the lease held: done now; one reported
        # with a group commit's durability is the caller's, ``Runtime.resume``)
        if self._commit(ex, None, {"status": "awaiting_approval"}):
            self._stop_asked(ex, "cancellation requested while it paused", boundary=False)
