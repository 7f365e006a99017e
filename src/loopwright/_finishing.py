"""Finishing: ``_finish`` ends a run (status, stop reason, the packet for a person) in its
last commit. Reflecting on a cycle is in ``_reflection``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import _decide as rules
from ._call_billing import settle_owed
from ._contract import TERMINAL_STATUSES, status_for
from ._exec import NO_LOOP
from ._exec import Execution as _Exec
from ._host import RuntimeHost
from ._memory import FeedbackMemory
from ._packet import build_packet, stop_cause
from ._usage import Usage
from ._verdict import held_out_mark, stored_mark
from .store import ClosedApproval, NewApproval, NewEvent

if TYPE_CHECKING:
    from .store import RunRecord, Store

__all__ = ["Finishing", "ended_in", "ended_inside"]


def ended_inside(store: Store, rec: RunRecord) -> dict[str, Any] | None:
    """The cycle an ended run ended inside, with no record of its own, as a timeline row's
    record: ``{"cycle", "ended_inside": True, "decision", "cause", "usage"}`` (None: the run
    ended between cycles, has not ended, or ended before stopped events said it). Reads the
    run's newest ``stopped`` event."""
    if rec.status not in TERMINAL_STATUSES:
        return None
    last = store.events_of_kinds(rec.run_id, ("stopped",), limit=1)
    if last and "ended_in" not in last[0].data and len(last) == 1:
        # Stopped between cycles: a person's edit reopened a run a budget had stopped inside
        # a cycle, and the resume stopped again before judging it (that budget used up). The
        # cycle it ended inside is still the one after its last: its spend is the newest
        # stop's that says where it ended (review49b: it was left out, show's rows $0.10 short
        # of the run's spend). A stopped event a resume writes: a run has few.
        last = [e for e in store.events_of_kinds(rec.run_id, ("stopped",)) if "ended_in" in e.data]
    info = last[-1].data.get("ended_in") if last else None
    if not isinstance(info, dict) or info.get("cycle") != rec.cycle + 1:
        return None  # (reopened and run on since: that stop is no longer the run's end)
    return {
        "cycle": info["cycle"],
        "ended_inside": True,
        "decision": last[-1].data.get("reason") or rec.stop_reason,
        "cause": last[-1].data.get("cause") or "",
        "usage": dict(info.get("usage") or {}),
    }


def ended_in(cycle: int, before: Usage, after: Usage) -> dict[str, Any]:
    """A ``stopped`` event's ``ended_in``: the cycle the run ended inside and what it spent."""
    return {
        "cycle": cycle,
        "usage": {
            "cost_usd": max(0.0, after.cost_usd - before.cost_usd),
            "tokens": max(0, after.tokens - before.tokens),
            "seconds": max(0.0, after.seconds - before.seconds),
        },
    }


# How many of the newest checkpoints a run ended without a judged candidate in this execution
# looks at for its last held-out verdicts before reading its events.
_RECENT = 16


class Finishing(RuntimeHost):
    """Ending a run (mixed into ``Runtime``)."""

    def _finish(
        self,
        ex: _Exec,
        reason: str,
        *,
        record: dict[str, Any] | None = None,
        cause: str | None = None,
        error: dict[str, Any] | None = None,
        held_out: dict[str, Any] | None = None,
        evidence: dict[str, Any] | None = None,
        unverified: dict[str, Any] | None = None,
        approvals: Sequence[NewApproval] = (),
        closes: Sequence[ClosedApproval] = (),
    ) -> None:
        status = status_for(reason)
        if record is None:
            # ended inside (or before) a cycle never recorded: what its calls were billed
            # before a restart is charged though they were not asked again (invariant 7)
            settle_owed(self.store, ex, ex.state.cycle + 1)
        if record is not None:
            # the cycle ended the run: nothing is owed it after a restart (_reflection), even
            # once a person's edit or rollback reopens the run
            record = {**record, "ended": True}
        packet = None
        # A run ended before its cycle was judged (an escalation, a denial, a budget checked
        # before the next cycle) reports the held-out verdicts of its last judged candidate:
        # held_out_passed means that, whatever the stop, and the packet shows the verdicts
        # behind it (they read {} beside held_out_passed false).
        last, last_verdicts, last_mine = (None, None, None) if held_out else self._last_held_out(ex)
        if status != "accepted":
            packet = build_packet(
                reason,
                ex.state,
                ex.contract,
                run_id=ex.run_id,
                cause=cause,
                error=error,
                evidence=evidence,
                held_out=held_out or last_verdicts,
                unverified=unverified,
                # (a loop built in Python: `loopwright resume` has no spec to load it from)
                from_python=self._from_python(ex),
            )
        if packet is not None and ex.effects_behind:
            # a person's edit, judged and not accepted: its effects ran with what it replaced
            packet["effects_not_rerun"] = ex.effects_behind
        ex.state.next_action = (
            "" if status == "accepted" else (packet or {}).get("recommended_action", "")
        )
        # An accepted run has no packet: its sentence is derived from the record when shown
        # (run_stop_cause), and written here into the stopped event.
        said = (packet or {}).get("stop_cause") or stop_cause(
            reason,
            ex.contract,
            cycle=ex.state.cycle,
            best_score=ex.state.best_score,
            max_cycles=rules.cycle_cap(ex.contract, ex.state),
            at_default=rules.at_default_ceiling(ex.contract, ex.state.task),
            cause=cause,
            error=error,
        )
        stopped: dict[str, Any] = {
            "reason": reason,
            "status": status,
            "cause": cause,
            "stop_cause": said,
        }
        if record is None and ex.cycle_from is not None and ex.cycle_at == ex.state.cycle + 1:
            # The run ended inside a cycle that has no record (the actor asked for a person, a
            # verifier gave up, a budget crossed mid-cycle): what that cycle cost, for the
            # timelines (``loopwright show``, the run page), which list records.
            stopped["ended_in"] = ended_in(ex.cycle_at, ex.cycle_from, ex.state.spent)
        ex.events.append(NewEvent(ex.state.cycle, "stopped", stopped))
        run: dict[str, Any] = {
            "status": status,
            "stop_reason": reason,
            "packet": packet,
            "ended_at": time.time(),
        }
        if held_out:
            run["held_out_passed"] = int(all(v.get("passed") for v in held_out.values()))
            run["held_out_self_reported"] = _mine(held_out)
        elif last is not None:
            run["held_out_passed"] = int(last)
            run["held_out_self_reported"] = last_mine
        self._commit(ex, record, run, approvals=approvals, closes=closes)

    def _from_python(self, ex: _Exec) -> bool:
        """Whether ``ex``'s run was started from Python (its loop built there, no spec to load
        it from): its loop says, else (a cancel, rollback or edit without the loop) the run
        record's ``spec_ref`` does, which `loopwright resume` loads it from (polish52: a
        cancel without the loop told a Python run to `loopwright resume`, which refuses it)."""
        if ex.loop is not NO_LOOP:
            return ex.loop.spec_ref is None
        return self.store.get_run(ex.run_id).spec_ref is None

    def _last_held_out(self, ex: _Exec) -> tuple[bool | None, dict[str, Any] | None, int | None]:
        """Whether the last candidate every held-out check judged passed them all (``None``:
        none was judged), with those verdicts when they are at hand, and how many of their
        tests were self-reported: known from this execution's cycles, else read from the
        newest checkpoints' records, else from the run's ``verdict`` events (a run whose
        recent commits judged nothing: the pass and the count alone). Invariant 8: the common
        ends read nothing of a long run's past."""
        names = {c.name for c in getattr(ex.loop, "verifiers", ()) if c.held_out}
        if not names:
            return None, None, None
        if ex.held_out_known:
            verdicts = ex.held_out_verdicts
            return ex.held_out_last, verdicts, None if verdicts is None else _mine(verdicts)
        for ck in reversed(self.store.checkpoints_after(ex.run_id, ex.seq - _RECENT)):
            held = (ck.record or {}).get("held_out") or {}
            if names <= set(held):
                verdicts = {k: held[k] for k in sorted(names)}
                return all(bool(held[k].get("passed")) for k in names), verdicts, _mine(verdicts)
        by_cycle: dict[int, dict[str, tuple[bool, int | None, int]]] = {}
        events: list[tuple[int, str, Mapping[str, Any]]] = [
            (e.cycle, e.kind, e.data) for e in self.store.events(ex.run_id)
        ]
        events += [(e.cycle, e.kind, e.data) for e in ex.events]
        for cycle, kind, data in events:
            if kind == "verdict" and data.get("held_out") and data.get("verifier") in names:
                # (a verdict event written before stop 55 carries no count: unknown, not 0)
                n, r = data.get("self_reported"), data.get("not_judged")
                by_cycle.setdefault(cycle, {})[str(data["verifier"])] = (
                    bool(data.get("passed")),
                    n if type(n) is int else None,
                    r if type(r) is int else 0,
                )
        for cycle in sorted(by_cycle, reverse=True):
            if set(by_cycle[cycle]) == names:
                seen = by_cycle[cycle].values()
                passed = all(p for p, _n, _r in seen)
                if any(n is None for _p, n, _r in seen):
                    return passed, None, None
                return passed, None, held_out_mark((p, n or 0, r) for p, n, r in seen)
        return None, None, None

    @property
    def memory(self) -> FeedbackMemory:
        """Feedback memory in this runtime's store (learning outside the weights)."""
        if self._memory is None:
            self._memory = FeedbackMemory(self.store)
        return self._memory


def _mine(verdicts: Mapping[str, Any]) -> int:
    """How many tests behind held-out ``verdicts`` (stored form, by check) were not decided
    independently of the candidate (``held_out_mark``: a pass's self-reported tests, a
    failure's tests ``judged_only`` refused when it rests on them alone)."""
    return held_out_mark(stored_mark(v) for v in verdicts.values() if isinstance(v, Mapping))
