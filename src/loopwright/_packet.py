"""The escalation packet: what a person needs to take over a run that did not succeed.

Hitting a limit never throws work away: the packet carries the best candidate so far and
everything accepted, beside the unresolved findings, the evidence and where the trace is.
"""

from __future__ import annotations

from typing import Any

from ._contract import Contract
from ._decide import cycle_cap
from ._state import TaskState

__all__ = ["build_packet", "explain"]

_ADVICE = {
    "no_progress": (
        "The actor stopped improving. Review the open findings: fix the remaining parts by hand, "
        "give the actor a note, or strengthen its tools before running again."
    ),
    "budget_cycles": "The cycle budget is spent. Review the best candidate; accept it by hand or "
    "raise contract.budget.max_cycles if the score was still rising.",
    "budget_cost": "The cost budget is spent. Review the best candidate; raise "
    "contract.budget.max_cost_usd only if the last cycles still improved the score.",
    "budget_tokens": "The token budget is spent. Review the best candidate; raise "
    "contract.budget.max_tokens only if the last cycles still improved the score.",
    "budget_time": "The time budget is spent. Review the best candidate; raise "
    "contract.budget.max_seconds or make the actor faster.",
    "marginal_return": "Another cycle was not worth its expected cost. Review the best candidate.",
    "escalated": "A person must decide: read the reason and evidence, then fix the input, "
    "answer the question or resolve the conflict, and start a new run.",
    "cancelled": "The run was cancelled. Resume work from the best candidate if it is still needed.",
    "error": "loopwright itself failed. Report the error with the trace; the last checkpoint "
    "is intact and the run can be inspected with `loopwright show`.",
}

_WORDS = {
    "success": "accepted: every required visible check passed",
    "no_progress": "stopped: no measurable improvement for {n} cycles",
    "budget_cycles": "stopped: the cycle budget ({max_cycles}) is spent",
    "budget_cost": "stopped: the cost budget (${max_cost_usd}) would be crossed",
    "budget_tokens": "stopped: the token budget ({max_tokens}) would be crossed",
    "budget_time": "stopped: the time budget ({max_seconds} s) would be crossed",
    "marginal_return": "stopped: another cycle was not worth its expected cost",
    "escalated": "escalated to a person",
    "cancelled": "cancelled",
    "error": "failed: loopwright itself raised an error",
}


def explain(reason: str, contract: Contract, *, max_cycles: int | None = None) -> str:
    """A stop reason in plain words, with the contract's numbers (``max_cycles``: the run's
    own cycle cap, when the task carried one)."""
    b = contract.budget
    n = contract.no_progress.cycles if contract.no_progress else 0
    return _WORDS.get(reason, reason).format(
        n=n,
        max_cycles=max_cycles if max_cycles is not None else b.max_cycles,
        max_cost_usd=b.max_cost_usd,
        max_tokens=b.max_tokens,
        max_seconds=b.max_seconds,
    )


def build_packet(
    reason: str,
    state: TaskState,
    contract: Contract,
    *,
    run_id: str,
    cause: str | None = None,
    error: dict[str, Any] | None = None,
    evidence: dict[str, Any] | None = None,
    held_out: dict[str, Any] | None = None,
    unverified: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The escalation packet for a run that ends without being accepted."""
    esc = contract.escalation
    # The contract's own action comes first; the reason-specific advice follows it.
    builtin = _ADVICE.get(reason, "Review the run.")
    advice = f"{esc.recommended_action} {builtin}" if esc.recommended_action else builtin
    if error is not None and reason == "escalated":
        advice = (
            f"Fix the {error.get('where', 'user code')} error ({error.get('type')}: "
            f"{error.get('message')}) and resume or rerun."
        )
    return {
        "stop_reason": reason,
        "summary": explain(reason, contract, max_cycles=cycle_cap(contract, state))
        + (f" — {cause}" if cause else ""),
        "cause": cause,
        "owner": esc.owner,
        "route": esc.route,
        "recommended_action": advice,
        "best_candidate": {
            "cycle": state.best_cycle,
            "score": state.best_score,
            "artifacts": state.best_values(),
        },
        "accepted": state.accepted_values(),
        "unresolved_findings": [f.to_dict() for f in state.findings],
        "plan": {
            "done": state.completed_steps,
            "open": [s.id for s in state.plan if s.status != "done"],
        },
        "evidence": evidence or {},
        "held_out": held_out or {},
        "unverified_candidate": unverified,
        "error": error,
        "spent": state.spent.to_dict(),
        "cycles": state.cycle,
        "trace": {"run_id": run_id, "show": f"loopwright show {run_id}"},
    }
