"""What a call's attempts were billed and when it is charged: owed calls of a cycle killed before
its commit charged once (``settle_owed``, ``owes``, ``charge``), the budget they cross, and the
bills read back from the journal."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._decide import budget_crossed, budget_exhausted
from ._exec import Execution, held_out_scope
from ._usage import Usage
from .store import JournalEntry, NewEvent, Store

__all__ = ["charge", "fenced_bill", "owes", "settle_owed"]


def settle_owed(store: Store, ex: Execution, cycle: int) -> None:
    """Charge what calls of ``cycle`` were billed before a restart when this execution did
    not ask them again (invariant 7): a redone cycle that stopped before a verifier killed
    after its answer (a budget crossed by the actor's owed calls), or skipped it (a proposal
    refused or repeated), still owes that verifier's calls; the entry then goes with the
    commit like any other (before: never charged, and left in the journal)."""
    for key, e in list(ex.retries.items()):
        if e.cycle != cycle or key in ex.asked or e.status == "retired":
            continue
        billed = billed_attempts(e.data)
        if not billed or (e.status == "settled" and cycle_charged(store, ex, e)):
            continue
        ex.asked.add(key)
        scope = key.removeprefix("retry:").rpartition(":")[0]
        ex.events.extend(lost_events(cycle, scope, e))  # the trace adds them up too
        charge(ex, scope, billed)


def paid_usage(got: Any) -> Usage | None:
    """What a call that succeeded was billed (an actor's proposal, a verifier's verdict), if
    anything."""
    usage = getattr(got, "usage", None)
    if isinstance(usage, Usage) and (usage.cost_usd or usage.tokens):
        return usage
    return None


def lost_answers(data: Mapping[str, Any]) -> list[Any]:
    """The answers of earlier killed attempts of a call, as journaled: ``lost`` and ``ok``."""
    lost = data.get("lost")
    ok = data.get("ok")
    return [*(lost if isinstance(lost, list) else ()), *([ok] if isinstance(ok, list) else ())]


def lost_events(cycle: int, scope: str, entry: JournalEntry) -> list[NewEvent]:
    """A ``retry`` event for each answer of ``scope``'s call a killed cycle lost (billed,
    charged again by the redone cycle), with its usage."""
    return [
        NewEvent(
            cycle,
            "retry",
            {
                "scope": scope,
                "attempt": entry.attempts,
                "class": "transient",
                "error": "the process stopped before the cycle committed its answer",
                "delay_s": 0.0,
                "interrupted": True,
                "usage": {"cost_usd": float(c or 0.0), "tokens": int(t or 0)},
            },
        )
        for c, t in lost_answers(entry.data)
    ]


def owed_message(who: str, reason: str) -> str:
    return (
        f"what {who} was billed in this cycle before the process stopped (a restart) crossed "
        f"the {_budget_word(reason)} budget"
    )


def crossed_with(ex: Execution, billed: Iterable[Usage]) -> str | None:
    """The budget the run's spend uses up once ``billed`` is charged too, if any (checked
    before another attempt of the call starts): reached or crossed, when ``billed`` is
    anything (the call bills: the next attempt would cross it); crossed only, when it is
    nothing (a call allowed to start on a reached budget, known to bill nothing,
    ``call_stop``, is tried again)."""
    spent, paid = ex.state.spent, False
    for u in billed:
        if u.cost_usd or u.tokens:
            spent, paid = spent + Usage(u.cost_usd, u.tokens, 0.0), True
    return (budget_exhausted if paid else budget_crossed)(ex.contract, spent)


def cycle_charged(store: Store, ex: Execution, entry: JournalEntry) -> bool:
    """Whether a checkpoint after a settled retry entry's ``base_seq`` recorded its cycle (the
    spend of the call's failed attempts committed with it). Read only for a settled entry
    asked for again: a few checkpoints, those since the settle."""
    base = int(entry.data.get("base_seq", -1))
    if ex.seq <= base:
        return False
    return any(
        ck.record is not None and ck.record.get("cycle") == entry.cycle
        for ck in store.checkpoints_after(ex.run_id, base)
    )


def owes(store: Store, ex: Execution, entry: JournalEntry) -> bool:
    """Whether a retry entry holds billing its cycle has not been charged: a billed answer or
    failed attempts of a cycle not yet recorded (a ``settled`` or ``gave_up`` one's cycle
    not committed since; a ``waiting`` one's call not ended)."""
    if not billed_attempts(entry.data):
        return False
    return entry.status == "waiting" or (
        entry.status in ("settled", "gave_up") and not cycle_charged(store, ex, entry)
    )


def charge(ex: Execution, who: str, billed: Iterable[Usage]) -> None:
    """Charge ``who``'s failed attempts (what each was billed) to the run (invariant 7): the
    spend, the held-out share the actor is not shown (invariant 3), the cycle's priced calls
    (one a billed attempt, in order: the budget was checked after each, and replay checks the
    cycle's calls one by one)."""
    held = held_out_scope(ex.loop, who)
    for usage in billed:
        if usage.cost_usd or usage.tokens:
            priced = Usage(usage.cost_usd, usage.tokens, 0.0)
            ex.state.spent = ex.state.spent + priced
            if held:
                ex.state.held_out_spent = ex.state.held_out_spent + priced
            ex.calls.append({"who": who, "cost_usd": usage.cost_usd, "tokens": usage.tokens})


def fenced_bill(ex: Execution, who: str, usage: Usage) -> None:
    """A bill of ``who``'s the fence refused to journal (this execution taken over while it
    called): billed all the same, said by its word and added to the run's fenced spend
    (``_lease_life``; crash55b, fenced56), its held-out share kept apart there, as ``charge``
    keeps it (invariant 3). A bill
    journaled before the takeover is not one: the cycle redone charges it (crash55c)."""
    if not (usage.cost_usd or usage.tokens):
        return
    priced = Usage(usage.cost_usd, usage.tokens, 0.0)
    every, held = ex.refused or (_NONE, _NONE)
    ex.refused = (every + priced, held + priced if held_out_scope(ex.loop, who) else held)


_NONE = Usage()


def over_message(who: str, reason: str) -> str:
    return (
        f"what the failed attempts of {who} were billed crossed the {_budget_word(reason)} budget"
    )


def _budget_word(reason: str) -> str:
    return "cost" if reason == "budget_cost" else "token" if reason == "budget_tokens" else "time"


def billed_attempts(data: Mapping[str, Any]) -> tuple[Usage, ...]:
    """What each earlier attempt was billed, as journaled: ``each`` (and ``ok``, the attempt
    that succeeded in a cycle that was never committed), or the total ``billed`` as one (an
    entry written before attempts were listed), or none (before either was)."""
    each = data.get("each")
    ok = data.get("ok")
    if isinstance(each, list):
        rows = [*each, ok] if isinstance(ok, list) else each
        return tuple(Usage._stored(float(c or 0.0), int(t or 0), 0.0) for c, t in rows)
    total = data.get("billed")
    if not isinstance(total, Mapping):
        return ()
    u = Usage._stored(float(total.get("cost_usd") or 0.0), int(total.get("tokens") or 0), 0.0)
    return (u,) if u.cost_usd or u.tokens else ()
