"""What ends or rewinds a run at a person's word: cancel and roll back, with what both do to
the effects in flight, the retry bounds spent and the requests left open.

Kept apart from the decisions on requests in ``_people``; ``Runtime`` inherits these methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._authority import audit, may_operate, operate, refused
from ._call_billing import owes
from ._concluded import concluded_in, refuse_rewritten
from ._contract import TERMINAL_STATUSES, contract_from_snapshot
from ._errors import ConfigError, ConflictError
from ._exec import NO_LOOP as _NO_LOOP
from ._exec import Execution as _Exec
from ._exec import held_execution
from ._host import RuntimeHost
from ._loop import Loop, check_loop
from ._person_edits import edits_dropped, said_dropped
from ._person_turn import person_op
from ._redact_logs import masked_logger
from ._state import TaskState
from .store import Checkpoint, ClosedApproval, NewEvent, RunRecord, Store

__all__ = ["CancelRollback", "retire_failures", "rollback_dropped"]


class CancelRollback(RuntimeHost):
    """Cancellation and rollback (mixed into ``Runtime``)."""

    @person_op(leased=True)
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

    @person_op(leased=True)
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
