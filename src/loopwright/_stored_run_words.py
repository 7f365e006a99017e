"""A stored run's words, read back: why it stopped (the packet's own cause, or derived from
the record for runs stored before the field) and what a person does next (an ended run's
packet advice, which a settle rewrites, else its last checkpoint's). Used by every reader:
``show``, ``runs``, the dashboard, the API and notifications."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._contract import TERMINAL_STATUSES, contract_from_snapshot
from ._decide import at_default_ceiling, crosses
from ._money_text import usd
from ._packet import clip, stop_cause

if TYPE_CHECKING:
    from .store import Approval, RunRecord

__all__ = [
    "OVER_BUDGET_LEGEND",
    "cost_over_budget",
    "over_budget",
    "over_budget_words",
    "run_next_action",
    "run_stop_cause",
    "tokens_over_budget",
    "waits_only_to_start",
]


class _RunLike(Protocol):
    @property
    def stop_reason(self) -> str | None: ...
    @property
    def cycle(self) -> int: ...
    @property
    def best_score(self) -> float | None: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def tokens(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def contract(self) -> dict[str, Any]: ...
    @property
    def packet(self) -> dict[str, Any] | None: ...
    @property
    def held_out_passed(self) -> bool | None: ...


def run_stop_cause(rec: _RunLike, packet: Mapping[str, Any] | None = None) -> str:
    """The stop cause of a stored run: the packet's own when it carries one, else derived from
    the record and packet (runs stored before the field existed). ``""`` for a run not ended."""
    p = rec.packet if packet is None else packet
    p = p or {}
    if p.get("stop_cause"):
        return str(p["stop_cause"])
    if not rec.stop_reason:
        return ""
    best = p.get("best_candidate") or {}
    try:
        contract = contract_from_snapshot(rec.contract)
    except Exception:  # an older contract shape must not hide why the run stopped
        return clip(f"{rec.stop_reason}: {p.get('cause') or p.get('summary') or ''}".rstrip(": "))
    cycle = int(p.get("cycles", rec.cycle) or 0)
    # A per-task cap (budget.max_cycles_key) is the cycle count the run stopped at.
    own_cap = rec.stop_reason == "budget_cycles" and contract.budget.max_cycles_key is not None
    return stop_cause(
        rec.stop_reason,
        contract,
        cycle=cycle,
        max_cycles=cycle if own_cap else None,
        # (a row without its task, a list's: the contract alone tells, not a per-task cap)
        at_default=at_default_ceiling(contract, task)
        if (task := getattr(rec, "task", None))
        else None,
        best_score=rec.best_score,
        best_cycle=best.get("cycle"),
        spent=p.get("spent")
        or {"cost_usd": rec.cost_usd, "tokens": rec.tokens, "seconds": rec.seconds},
        cause=p.get("cause"),
        error=p.get("error"),
        evidence=p.get("evidence"),
        held_out_passed=rec.held_out_passed,
        held_out_mark=getattr(rec, "held_out_self_reported", None),
    )


class _SpendLike(Protocol):
    @property
    def cost_usd(self) -> float: ...
    @property
    def tokens(self) -> int: ...
    @property
    def contract(self) -> dict[str, Any]: ...


def cost_over_budget(rec: _SpendLike) -> float:
    """How far a stored run's spend (its row's, a fenced-out execution's bills included) is
    past its contract's cost budget; 0.0 within it, or with none. The budgets judge a cycle
    by what its execution has charged: a fenced-out execution's bills, added to the row as
    its word is said (fenced56), are charged by the next resume only, and a word said while
    the taker drives the run's last cycle can take it past its budget with no stop to say so
    (fenced56b): every reader says it from here."""
    try:
        limit = contract_from_snapshot(rec.contract).budget.max_cost_usd
    except Exception:  # (an older contract shape: no budget to judge by)
        return 0.0
    if limit is None or not crosses(rec.cost_usd, limit):
        return 0.0
    return rec.cost_usd - limit


#: What a starred spend cell means, under a list of runs (``loopwright runs``, the dashboard's).
OVER_BUDGET_LEGEND = (
    "a starred cost (0.30*): spent past its budget (cost or tokens), a call's bill charged "
    "after its last budget check (a call in flight, or an execution fenced out); show RUN "
    "says how far"
)


def tokens_over_budget(rec: _SpendLike) -> int:
    """How many tokens a stored run used past its contract's token budget; 0 within it, or
    with none (``cost_over_budget``'s reading of tokens)."""
    try:
        limit = contract_from_snapshot(rec.contract).budget.max_tokens
    except Exception:  # (an older contract shape: no budget to judge by)
        return 0
    if limit is None or not crosses(rec.tokens, limit, whole=True):
        return 0
    return rec.tokens - limit


def over_budget(rec: _SpendLike) -> dict[str, float | int]:
    """A stored run's overshoot as its JSON documents say it (``runs --json``, ``show --json``,
    ``/api/runs`` and ``/api/runs/{id}``, ``diff --json``, ``/api/compare``): how far its
    spend is past its cost budget (``over_budget_usd``, 0.0 within it) and how many tokens
    past its token budget (``over_budget_tokens``, 0 within it) (over56b)."""
    return {"over_budget_usd": cost_over_budget(rec), "over_budget_tokens": tokens_over_budget(rec)}


def over_budget_words(rec: _SpendLike) -> str | None:
    """What ``show`` and the API say of a run past its cost or token budget
    (``cost_over_budget``); None within them."""
    try:
        b = contract_from_snapshot(rec.contract).budget
    except Exception:
        return None
    said = []
    over = cost_over_budget(rec)
    if over and b.max_cost_usd is not None:
        said.append(f"spent {usd(rec.cost_usd)} of its {usd(b.max_cost_usd)} cost budget")
        said[-1] += f" ({usd(over)} over)"
    if b.max_tokens is not None and tokens_over_budget(rec):
        said.append(f"used {rec.tokens} of its {b.max_tokens} tokens")
    if not said:
        return None
    return (
        "over budget: "
        + "; ".join(said)
        + " (a call's bill charged after its last budget check: a call in flight, or an "
        "execution fenced out)"
    )


class _EndedLike(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def packet(self) -> dict[str, Any] | None: ...


def run_next_action(rec: _EndedLike, next_action: str) -> str:
    """What a person does next with a stored run: an ended run's packet advice when it holds
    one, else its last checkpoint's ``next_action``. A settling rewrites the ended run's
    packet (who settled what, what is left), not its checkpoints: `show` and the API read the
    checkpoint's copy, and kept saying to settle what was settled (settle54c)."""
    advice = (rec.packet or {}).get("recommended_action")
    if rec.status in TERMINAL_STATUSES and isinstance(advice, str) and advice:
        return advice
    return next_action


def waits_only_to_start(rec: RunRecord, approvals: list[Approval] | None = None) -> bool:
    """Whether a fork nobody has started (``maker_starts``) waits only for its maker to start
    it: pending, or parked on no pending request (``approvals`` when given, else the row's
    count). A held fork parked on a request waits for a person first. One rule for ``runs``,
    ``show`` and the dashboard (they had two)."""
    if not rec.maker_starts:
        return False
    if rec.status == "pending":
        return True
    if rec.status != "awaiting_approval":
        return False  # (a cancelled fork is ended, not waiting to start)
    if approvals is not None:
        return not any(a.status == "pending" for a in approvals)
    return rec.open_requests == 0
