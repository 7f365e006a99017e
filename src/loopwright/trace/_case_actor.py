"""Eval cases replayed: an actor proposing, cycle by cycle, what a case's run proposed, billed
what it was billed (``case_actor``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .._proposal import Context, Proposal
from .._usage import Usage

__all__ = ["case_actor"]


def case_actor(case: dict[str, Any]) -> Callable[[Context], Proposal]:
    """An actor replaying an eval case: cycle ``n`` proposes what the case's cycle ``n``
    proposed (the last occurrence, after a rollback; for a fork, the cycles it inherited
    first); past the recording it escalates."""
    by_cycle = {
        int(c["cycle"]): c
        for c in [*(case.get("inherited_cycles") or ()), *(case.get("cycles") or ())]
    }
    end = case.get("unfinished")

    def actor(ctx: Context) -> Proposal:
        recorded = by_cycle.get(ctx.cycle)
        if recorded is not None:
            return _replayed(recorded)
        if isinstance(end, dict) and end.get("cycle") == ctx.cycle:
            # the cycle the run ended inside: escalated as it was, billed what it cost
            billed = Usage(float(end.get("cost_usd") or 0.0), int(end.get("tokens") or 0))
            return Proposal(escalate=str(end.get("cause")), usage=billed)
        return Proposal(escalate="no more recorded proposals in the eval case")

    return actor


def _replayed(cycle: dict[str, Any]) -> Proposal:
    """A case cycle's proposal, billed what the actor's calls of that cycle were: its failed
    attempts (a model's malformed reply, say) cost too, and a replay that charged the proposal's
    own usage only would meet its budgets later than the run did."""
    p = Proposal.from_dict(cycle["proposal"])
    mine = [c for c in cycle.get("calls") or () if isinstance(c, dict) and c.get("who") == "actor"]
    if len(mine) < 2:  # one call is the proposal's own usage; none: a case from before calls
        return p
    cost = sum(float(c.get("cost_usd") or 0.0) for c in mine)
    tokens = sum(int(c.get("tokens") or 0) for c in mine)
    return replace(p, usage=Usage(cost, tokens, p.usage.seconds if p.usage else 0.0))
