"""The drive of one run: what ``resume`` does between its start event and its wind-down.

Before the first cycle, what the checkpoint left owed: compensations a cancel or a denial
started (``_reversal``), a cancel or a pause asked meanwhile, a parked cycle's decision
(``_parking._settle_pending``), the contract's crash bound. Then the loop of cycles: at each
boundary the last cycle's commit made durable (``_checkpoint._settle``), its reflection
(``_reflection``), a drain honoured, the stop rules asked (``_decide``), and the next cycle run
(``_cycle``, or ``_edit_check``'s check-only one after a person's edit).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from . import _decide as rules
from ._contract import TERMINAL_STATUSES
from ._crash_bound import crash_bound, crash_cause, crashes_and_alive
from ._edit_check import owed_after, owes_check
from ._exec import Execution as _Exec
from ._host import RuntimeHost
from ._redact import redact
from ._settle_refund import compensation_advice
from ._store_threads import written
from ._usage import Usage
from .store import NewEvent, RunRecord, Store

__all__ = ["Driving"]


class Driving(RuntimeHost):
    """``Runtime._drive``, the loop of cycles (a mixin of ``Runtime``)."""

    if TYPE_CHECKING:
        _draining: bool  # (``Runtime.drain``)

        def _commit_status(self, ex: _Exec, status: str) -> None: ...  # _checkpoint

        async def _settle_pending(self, ex: _Exec) -> bool: ...  # _parking

        def _owed_reflection(self, ex: _Exec) -> bool: ...  # _reflection

        async def _reflect(self, ex: _Exec) -> None: ...  # _reflection

        async def _check_edit(self, ex: _Exec) -> bool: ...  # _edit_check

        async def _cycle(self, ex: _Exec) -> bool: ...  # _cycle

    async def _drive(self, ex: _Exec, rec: RunRecord) -> None:
        # An effect renews this lease before it starts and names its holder in the intent.
        ex.lease_ttl_s, ex.owner = self.lease_ttl_s, self.owner
        pend = ex.state.pending or {}
        # Whether the last concluded cycle may be owed its reflection (a process that died
        # between a cycle's commit and its reflection, or a cycle concluded just now by
        # _settle_pending): asked once its commits are durable, at the first cycle boundary.
        owed = False
        if pend.get("stage") == "compensations":
            from ._reversal import Reparked, run_compensations  # (rare: not at import)

            notes = await run_compensations(self.store, ex, pend)
            if isinstance(notes, Reparked):
                # a refund other runs' acceptance stands on: a person decides, told of them
                # (a cancelled run stays cancelled; its request is open)
                ex.events.append(
                    NewEvent(
                        ex.state.cycle,
                        "compensation_reused",
                        {"requests": [a.approval_id for a in notes.requests]},
                    )
                )
                parked = {} if rec.status in TERMINAL_STATUSES else {"status": "awaiting_approval"}
                self._commit(ex, None, parked, approvals=notes.requests)
                return
            if notes is None:
                ex.events.append(NewEvent(ex.state.cycle, "still_waiting", {}))
                if rec.status in ("pending", "running"):
                    # waiting for a person: parked, so no worker claims it again until they
                    # decide (a run left claimable was taken by every worker's poll; attack47)
                    self._commit(ex, None, {"status": "awaiting_approval"})
                    return
                said, ex.events = ex.events, []
                await written(self.store, self.store.append_events, ex.run_id, said)
                return
            ex.state.notes.extend(notes)
            # a person's edit made while they waited is judged next (``_edit_check``)
            ex.state.pending = owed_after(pend)
            bad = [n for n in notes if n["status"] in ("failed", "in_doubt")]
            if rec.status in TERMINAL_STATUSES:
                # A cancelled run stays cancelled; its packet says what was undone and what
                # could not be.
                packet = dict(rec.packet or {})
                packet["compensations"] = notes
                # (they ran: the cancel's word that they wait is taken out of the advice)
                waiting = str(packet.pop("compensations_waiting", "") or "")
                if waiting:
                    advice = str(packet.get("recommended_action", ""))
                    packet["recommended_action"] = advice.replace(waiting, "").strip()
                    ex.state.next_action = ex.state.next_action.replace(waiting, "").strip()
                if bad:  # (a settling rewrites it: ``_settle_refund.settled_packet``)
                    packet["recommended_action"] = (
                        compensation_advice(self.store, ex.run_id, notes)
                        + " "
                        + str(packet.get("recommended_action", ""))
                    ).strip()
                self._commit(ex, None, {"packet": packet})
                return
            if bad:
                self._finish(
                    ex,
                    "escalated",
                    cause="compensation failed: " + "; ".join(str(n["cause"]) for n in bad),
                    evidence={"compensations": notes},
                )
                return
            if rec.cancel_requested:
                self._cancel_now(ex, "cancelled before it resumed")
                return
            if self._pause_if_asked(ex, "running"):  # (its refunds' notes committed with it)
                return
            self._commit_status(ex, "running")
        elif rec.cancel_requested:
            self._cancel_now(ex, "cancelled before it resumed")
            return
        elif pend.get("stage") != "effects" and self._pause_if_asked(ex, rec.status):
            # A person paused it: it parks before anything of a cycle starts (a cycle stopped
            # in its effects finishes them first, and parks at the boundary after).
            return
        elif ex.state.pending is not None and not owes_check(ex.state.pending):
            if pend.get("stage") == "effects" and rec.status == "running":
                # Its executor died in the cycle's effects or after them, before the cycle's
                # commit: a crash at that cycle as any other (an effect's call or the commit
                # that kills the process every time ended only by the spend budgets; crash55).
                # A parked cycle is judged so once it is decided (``_settle_pending``).
                if await self._past_crash_bound(ex):
                    return
                await self._say_started(ex)
            done = await self._settle_pending(ex)
            if done:
                return
            owed = True
        else:
            if rec.status == "running" and await self._past_crash_bound(ex):
                return
            owed = True
            self._commit_status(ex, "running")
        reflect = False
        # A cycle that goes on has been through _conclude, which asked stop_before_cycle of
        # this same state: asked again only after a reflection (it spends time).
        decided = False
        while True:
            # A cycle boundary: let other runs, heartbeats and signal handlers in; the last
            # cycle must be durable before the next starts (or its reflection is written).
            await asyncio.sleep(0)
            # (``_settle`` and ``_reflect`` return at once, with nothing done, without a
            # commit in flight or a reflector: no coroutine of theirs a cycle then)
            if (
                ex.pending_commit is not None
                and await self._settle(ex)
                and self._stop_asked(ex, "cancellation requested", boundary=True)
            ):
                return
            if owed:
                owed, reflect = False, self._owed_reflection(ex)
            if reflect:
                reflect = False
                decided = decided and ex.loop.reflector is None
                if ex.loop.reflector is not None:
                    await self._reflect(ex)
            if self._draining:
                # Shutting down: the run stays resumable from this checkpoint; the lease is
                # released on the way out, so another worker can take it at once.
                # (from a thread on PostgreSQL: waiting on the run's row held by another
                # session, it held every run of the event loop; pgloop54)
                said, ex.events = ex.events, []
                drained = NewEvent(ex.state.cycle, "drained", {"lease": ex.token})
                await written(self.store, self.store.append_events, ex.run_id, [*said, drained])
                return
            # (the first cycle after a person's edit only judges it: ``_edit_check``; no
            # attempt, so a cycle cap reached does not stop it, a budget used up does)
            check = ex.state.pending is not None
            before = rules.check_stop if check else rules.stop_before_cycle
            reason = None if decided else before(ex.contract, ex.state)
            if reason is not None:
                self._finish(ex, reason)
                return
            if await (self._check_edit(ex) if check else self._cycle(ex)):
                return
            reflect = decided = True

    async def _past_crash_bound(self, ex: _Exec) -> bool:
        """Whether the run, its executor dead mid-cycle (resumed while ``running``, or a parked
        cycle resumed once decided: the executions since the park), is past the contract's
        crash bound at this cycle: then ended ``escalated`` instead of driven again.
        A cycle stopped in its effects keeps what its journal holds of them: each one done is
        kept, and charged (its cost was never committed), and the packet names them and those
        whose outcome is unknown; none is called, nor its reconcile hook (what may kill)."""
        s = ex.state
        read = crashes_and_alive(self.store, ex.run_id, s.cycle, ex.token, s.fenced_upto)
        crashes, ex.alive = read.crashes, read.alive
        if read.upto > s.fenced_upto:
            # the spend of executions fenced out since (their commits refused), charged now:
            # the budgets see it before the cycle is driven again (crash55b; an earlier
            # release's words: the row holds those said since, charged at ``_prepared``)
            s.spent, s.fenced_upto = s.spent + read.fenced, read.upto
            if read.held.cost_usd or read.held.tokens:  # (not shown to the actor: crash55c)
                s.held_out_spent = s.held_out_spent + read.held
            ex.charged = s.spent.to_dict()  # (its word, fenced out in turn, leaves theirs out)
        bound = crash_bound(ex.contract)
        if crashes <= bound:
            return False
        at = ex.state.cycle + 1
        evidence: dict[str, Any] = {"crashes": crashes, "cycle": at, "max_crashes": bound}
        pend = ex.state.pending
        if pend is not None and (pend.get("stage") == "effects" or "approval_id" in pend):
            # (an ended run owes no effects nor a decided cycle: a fork or an edit goes on)
            ex.state.pending = None
            if pend.get("stage") == "effects":
                evidence["effects"] = await _effects_kept(self.store, ex, at)
        kept = evidence.get("effects")
        cause = crash_cause(crashes, at, bound, effects=kept, run_id=ex.run_id)
        self._finish(ex, "escalated", cause=cause, evidence=evidence)
        return True

    async def _say_started(self, ex: _Exec) -> None:
        """Write this execution's start event (naming its lease) before anything of the cycle
        runs, where no commit comes first (a cycle's effects finished): a death in them is then
        counted by the next resume (``crashes_at``), and a stop alive said by its lease. Not a
        checkpoint: an effect done before the crash is known recovered by the checkpoint its
        write-ahead made (``base_seq``). Fenced by the lease, renewed just before it."""
        said, ex.events = ex.events, []
        try:
            await written(self.store, self.store.renew_lease, ex.run_id, ex.token, self.lease_ttl_s)
            await written(self.store, self.store.append_events, ex.run_id, said)
        except BaseException:
            ex.events = [*said, *ex.events]  # (not written: with the next commit, if any)
            raise
        ex.started_said = True


async def _effects_kept(store: Store, ex: _Exec, cycle: int) -> dict[str, list[str]]:
    """The effects of ``cycle`` (its write-ahead's) as the journal holds them, for a run ended
    by its crash bound in them: ``done`` (their cost charged now, as a resume that finished
    them would have: never committed) and ``unknown`` (started, their outcome not recorded:
    a person checks them). Nothing is called. Each one left ``intent`` is written in doubt
    off the event loop where that write can wait on the run's row lock (``written``: another
    session holding it held every run of the process; fenced56)."""
    kept: dict[str, list[str]] = {"done": [], "unknown": []}
    for e in store.journal(ex.run_id, kind="effect", cycle=cycle):
        key = e.key.removeprefix("effect:")
        if e.status == "done":
            kept["done"].append(key)
            usage = e.data.get("usage")
            if usage:
                u = Usage.from_dict(usage)
                ex.calls.append(
                    {
                        "who": f"effect:{e.data.get('name')}",
                        "cost_usd": u.cost_usd,
                        "tokens": u.tokens,
                    }
                )
                ex.state.spent = ex.state.spent + Usage(u.cost_usd, u.tokens, 0.0)
        elif e.status in ("intent", "waiting", "in_doubt"):
            kept["unknown"].append(key)
            if e.status == "intent":
                # left for a person, in doubt as a resume would have marked it: ``settle``
                # takes an entry in doubt only, and an ended run is resumed no more (crash55b)
                cause = (
                    f"{e.data.get('name')} ({key}) started in a process that died, and the run "
                    "ended at its crash bound before its outcome was known — check whether it "
                    "happened"
                )
                event = {"effect": e.data.get("name"), "key": key, "status": "in_doubt"}
                await written(
                    store,
                    store.journal_put,
                    ex.run_id,
                    ex.token,
                    key=e.key,
                    kind="effect",
                    cycle=e.cycle,
                    status="in_doubt",
                    data=redact({**e.data, "cause": cause}),
                    attempts=e.attempts,
                    expect_status="intent",
                    events=[NewEvent(e.cycle, "effect_in_doubt", event)],
                )
    return kept
