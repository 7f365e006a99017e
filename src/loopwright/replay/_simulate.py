"""Replay one recorded run under another contract: where would it have stopped, and how?

The simulation walks the recorded cycles and takes the engine's decisions in the engine's
order, with the engine's own rules (``loopwright._decide``): before a cycle, the budgets and
the marginal-return rule; inside it, a budget crossed between priced calls; at its end,
success, then no progress, then the budgets again. It can only stop *earlier* than the record
or at the same cycle; a contract that would have gone on past the recorded end is reported as
``censored`` (the record does not say what the next cycle would have brought), never guessed,
and counted at its whole recorded cost (it would have spent all of it, and more).

Not replayed: risk pauses and approvals (a person's decision; the recorded continuation is
assumed), the time an approval took, and whether an effect would have run under a different
success rule (effect calls are charged as recorded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .. import _decide as rules
from .._contract import Contract
from .._contract_rules import engine_marks
from .._errors import ConfigError
from .._inherited import NOTHING, Inherited
from .._state import TaskState
from .._usage import Usage
from ._format import ABORTED, CycleTrace, RunTrace

__all__ = ["Outcome", "simulate"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ends under a contract (``reason`` is a stop reason or ``censored``)."""

    run_id: str
    task_key: str
    reason: str
    cycles: int
    cost_usd: float
    tokens: int
    seconds: float
    accepted: bool
    held_out_passed: bool | None
    best_score: float | None
    last_improvement_cycle: int
    spend_after_last_improvement_usd: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "task_key": self.task_key,
            "reason": self.reason,
            "cycles": self.cycles,
            "cost_usd": self.cost_usd,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "accepted": self.accepted,
            "held_out_passed": self.held_out_passed,
            "best_score": self.best_score,
            "last_improvement_cycle": self.last_improvement_cycle,
            "spend_after_last_improvement_usd": self.spend_after_last_improvement_usd,
            "note": self.note,
        }


def succeeded(contract: Contract, trace: RunTrace, c: CycleTrace) -> bool:
    """``_decide.success`` on recorded verdicts (the aggregate score is the recorded one)."""
    if not c.verdicts or c.score is None or c.refused or c.asked:
        return False
    names = set(contract.success.required or trace.required or c.verdicts)
    if any(n not in c.verdicts or not c.verdicts[n].get("passed") for n in names):
        return False
    if not contract.success.allow_vacuous and any(c.verdicts[n].get("vacuous") for n in names):
        return False
    return rules.reaches(c.score, contract.success.min_score)


def _own_budget(trace: RunTrace, contract: Contract) -> Contract:
    """The contract with the run's own cycle cap (``budget.max_cycles_key``, capped by
    ``max_cycles`` unless that is the default ceiling, the cap of a run without one), which
    the trace carries as ``recorded["max_cycles"]``."""
    b = contract.budget
    own = trace.recorded.get("max_cycles")
    if b.max_cycles_key is None:
        return contract
    cap = own if isinstance(own, int) and not isinstance(own, bool) and own >= 1 else None
    if cap is None:
        with engine_marks():  # (the default ceiling's mark, if any, kept)
            return replace(contract, budget=replace(b, max_cycles_key=None))
    if b.max_cycles is not None and not b.max_cycles_default:
        cap = min(cap, b.max_cycles)  # (the default ceiling is the cap of a task without one)
    mine = replace(b, max_cycles=cap, max_cycles_key=None, max_cycles_default=False)
    return replace(contract, budget=mine)


def simulate(trace: RunTrace, contract: Contract) -> Outcome:
    if not isinstance(trace, RunTrace):
        raise ConfigError(f"must be a RunTrace, got {type(trace).__name__}", field="trace")
    if not isinstance(contract, Contract):
        raise ConfigError(f"must be a Contract, got {type(contract).__name__}", field="contract")
    contract = _own_budget(trace, contract)
    # A fork goes on from the accounting it inherited, as the engine does (budgets, plateau
    # and marginal return count it), and reports its own figures (what it inherited counts in
    # its origin's trace, once).
    inh = Inherited.from_dict(trace.start) if trace.start else NOTHING
    s = TaskState(
        cycle=inh.cycle,
        spent=Usage._stored(inh.cost_usd, inh.tokens, inh.seconds),
        best_score=inh.best_score,
        progress_score=inh.progress_score,
        stall=inh.stall,
        passed_checks=list(inh.passed_checks),
        billed=dict(inh.billed),
        paid_cycles=None if inh.paid_cycles is None else list(inh.paid_cycles),
        answer_checks=inh.answer_checks,
    )
    improved_at = 0
    spent_at_improvement = inh.cost_usd
    held: bool | None = None
    required = set(trace.required or ())
    delta = contract.no_progress.min_delta if contract.no_progress else 0.0

    def end(reason: str, *, accepted: bool = False, note: str = "") -> Outcome:
        return Outcome(
            run_id=trace.run_id,
            task_key=trace.task_key,
            reason=reason,
            cycles=s.cycle - inh.cycle,
            cost_usd=max(0.0, s.spent.cost_usd - inh.cost_usd),
            tokens=max(0, s.spent.tokens - inh.tokens),
            seconds=max(0.0, s.spent.seconds - inh.seconds),
            accepted=accepted,
            held_out_passed=held,
            best_score=s.best_score,
            last_improvement_cycle=improved_at,
            spend_after_last_improvement_usd=max(0.0, s.spent.cost_usd - spent_at_improvement),
            note=note,
        )

    prev: CycleTrace | None = None  # the cycle before this one
    for c in trace.cycles:
        if c.check_only and (
            (prev is not None and prev.asked and not prev.reopened)
            or (prev is None and inh.answer_owed)
        ):
            # it takes the place of the cycle an answered question was for: not counted
            # against the cycle cap (``_decide.counted_cycles``, ``_edit_check.answer_owed``);
            # a fork's first, forked at the asked cycle (the answer in its state), alike
            s.answer_checks += 1
        prev = c
        # (a check-only cycle, judging a person's edit, is no attempt: as the engine, only a
        # budget used up stops it, not the cycle cap, a projection or marginal return)
        ahead = rules.check_stop if c.check_only else rules.stop_before_cycle
        reason = ahead(contract, s)
        if reason is not None:
            return end(reason)
        if c.calls and c.calls[0].who == ABORTED:
            # A cycle that ended the recording mid-way, which a person reopened: its spend
            # counts (the same calls, in the same state), a budget it crosses stops the run
            # there; else the person had the run go on, as recorded, and the checks before the
            # next cycle apply, as they did to the engine when the run was resumed.
            gone, c = c.calls[0], replace(c, calls=c.calls[1:])
            s.spent = s.spent + Usage._stored(gone.cost_usd, gone.tokens, 0.0)
            crossed = rules.budget_exhausted(contract, s.spent)
            if crossed:
                return end(crossed, note="crossed in a cycle that ended mid-way, as recorded")
            reason = ahead(contract, s)
            if reason is not None:
                return end(reason)
        # Priced calls in order, with the engine's checks before each after the first: before
        # another call, ``call_stop`` (a budget crossed, or reached unless the call is known to
        # bill nothing); before another attempt of the same call, a budget the attempt before
        # used up, when it billed anything (``_call_billing.crossed_with``).
        # ``rows``: what the calls tell of who bills (``_exec.call_rows``: a call of unknown
        # cost tells nothing; after one, the next is checked as another call is).
        rows: list[rules.CallRow] = []
        for i, call in enumerate(c.calls):
            if i:
                before = c.calls[i - 1]
                if call.who != before.who or before.unknown_cost:
                    crossed = rules.call_stop(contract, s.spent, s.billed, rows, call.who)
                elif before.cost_usd or before.tokens:
                    crossed = rules.budget_exhausted(contract, s.spent)
                else:
                    crossed = rules.budget_crossed(contract, s.spent)
                if crossed:
                    return end(crossed, note=f"used up before {call.who}")
            s.spent = s.spent + Usage._stored(call.cost_usd, call.tokens, 0.0)  # as recorded
            if not call.unknown_cost:
                rows.append((call.who, call.cost_usd, call.tokens))
        ok = succeeded(contract, trace, c)
        decided = not (c.refused or c.asked)
        newly = {
            k
            for k, v in c.verdicts.items()
            if v.get("passed") and k in (required or c.verdicts) and k not in s.passed_checks
        }
        better = (
            not c.duplicate
            and decided
            and rules.improved(s.progress_score, c.score, delta, bool(newly))
        )
        if not c.duplicate and decided and rules.better(s.best_score, c.score):
            s.best_score = c.score  # the best by score, as the engine keeps it
        if better:
            if c.score is not None and (s.progress_score is None or c.score > s.progress_score):
                s.progress_score = c.score
            s.stall = 0
        elif c.asked or c.check_only:
            pass  # waiting for an answer, or judging a person's edit: no attempt was made
        else:
            s.stall += 1
        s.passed_checks = sorted(set(s.passed_checks) | newly)
        s.cycle += 1
        s.spent = s.spent + Usage._stored(0.0, 0, c.seconds)
        # what the engine counts at a cycle's commit (``_conclude``)
        s.billed = rules.noted_calls(s.billed, rows)
        if not c.check_only:  # (no attempt, no paid cycle: as ``_conclude``)
            s.paid_cycles = rules.counted_cycle(
                s.paid_cycles,
                Usage._stored(sum(r[1] for r in rows), sum(r[2] for r in rows), c.seconds),
            )
        held = c.held_out_passed
        if better:
            improved_at = s.cycle
            spent_at_improvement = s.spent.cost_usd
        if c.reopened:
            # The recording ended here and a person had it go on (an edit): whatever this
            # contract decides at this cycle's end, it goes on too; the checks before the next
            # cycle still apply, as they do to the engine after the edit.
            continue
        if ok:
            return end("success", accepted=True)
        if c.escalated:
            # a person's call at this cycle's end (a denial, their version failing a check),
            # which the engine makes before the plateau and the budgets: they said
            # budget_cycles where the run escalated on a denial at its last allowed cycle
            if c is trace.cycles[-1] and trace.tail.get("kind") == "escalated":
                s.spent = s.spent + _tail_spend(trace)  # (its time after the cycle, as recorded)
            return end("escalated", note="escalated at this cycle's end, as recorded")
        if (
            contract.no_progress is not None
            and s.stall >= contract.no_progress.cycles
            and not c.check_only
        ):
            return end("no_progress")
        reason = rules.stop_before_cycle(contract, s)
        if reason is not None:
            return end(reason)
    if not trace.cycles:
        # No cycle recorded: the engine still asked before its first one. A fork starts from
        # its origin's accounting, which a contract given to it may already stop (before,
        # such a fork, stopped before its first cycle, replayed as censored). One a person
        # edited first owes a check-only cycle, which only a budget used up stops.
        first = rules.check_stop if trace.tail.get("edited") else rules.stop_before_cycle
        reason = first(contract, s)
        if reason is not None:
            return end(reason)
    if trace.cycles and trace.cycles[-1].reopened:
        # reopened after its last recorded cycle: the checks before the next cycle, which the
        # engine made when the run was resumed (a budget spent stops it there again); that
        # cycle judges the person's edit, check-only (``rules.check_stop``)
        reason = rules.check_stop(contract, s)
        if reason is not None:
            return end(reason)
    tail = str(trace.tail.get("kind", "none"))
    if tail != "none":
        # What the recording spent after its last concluded cycle, in a cycle it never
        # concluded: whatever ends the run now, that much was spent (the same calls, in the
        # same state), and a contract that would go on spends it too.
        s.spent = s.spent + _tail_spend(trace)
    if tail == "escalated":
        return end("escalated", note="escalated mid-cycle, as recorded")
    if tail == "crossed":
        # The recording stopped by a budget mid-cycle after spending this much: the same calls
        # cross this contract's budget too, or its time runs out as soon, or what came next is
        # unknown.
        crossed = rules.budget_exhausted(contract, s.spent) or _out_of_time(contract, trace)
        if crossed:
            how = "out of time" if crossed == "budget_time" else "crossed"
            return end(crossed, note=f"{how} mid-cycle, as recorded")
    if tail == "cancelled":
        return end("cancelled", note="cancelled, as recorded")
    if tail == "reopened":
        # A cycle ended the recording mid-way, a person reopened it and the resumed run
        # stopped before another cycle: as in a cycle's head (above).
        crossed = rules.budget_exhausted(contract, s.spent)
        if crossed:
            return end(crossed, note="crossed in a cycle that ended mid-way, as recorded")
        reason = rules.check_stop(contract, s)  # (the next cycle judges the person's edit)
        if reason is not None:
            return end(reason)
    # Censored: counted as not accepted, at no less than its recorded spend — this contract
    # would have spent all of it, and more on cycles the recording does not have.
    s.spent = s.spent + Usage._stored(  # recorded figures are the run's own: compare alike
        max(0.0, _number(trace.recorded.get("cost_usd")) - (s.spent.cost_usd - inh.cost_usd)),
        max(0, int(_number(trace.recorded.get("tokens"))) - (s.spent.tokens - inh.tokens)),
        0.0,
    )
    recorded = trace.recorded.get("stop_reason") or trace.recorded.get("status") or "its end"
    return end(
        "censored",
        note=f"the recording ends after cycle {s.cycle} ({recorded}); this contract would go on",
    )


def _tail_spend(trace: RunTrace) -> Usage:
    """What the recording spent after its last concluded cycle (``tail``)."""
    return Usage._stored(
        _number(trace.tail.get("cost_usd")),
        int(_number(trace.tail.get("tokens"))),
        _number(trace.tail.get("seconds")),
    )


def _number(value: Any) -> float:
    """A recorded amount (0.0 when absent or not a number)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def _out_of_time(contract: Contract, trace: RunTrace) -> str | None:
    """``budget_time`` when the recording ran out of time mid-cycle and this contract allows
    no more time than the recorded one did: the spend before that cycle is the same, so its
    deadline comes no later (the recorded seconds alone cannot tell: the engine stops at a
    deadline, or before a backoff that would pass it, not when a sum crosses the limit)."""
    if trace.tail.get("reason") != "budget_time":
        return None
    mine, theirs = contract.budget.max_seconds, trace.tail.get("max_seconds")
    if mine is None or isinstance(theirs, bool) or not isinstance(theirs, int | float):
        return None
    return "budget_time" if mine <= theirs else None
