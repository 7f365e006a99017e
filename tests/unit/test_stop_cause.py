"""The stop cause of a budget stop says what the numbers were and how the budget stands."""

from __future__ import annotations

import loopwright as lw
from loopwright._packet import explain, stop_cause


def _cause(
    reason: str, budget: lw.Budget, spent: dict[str, float], cause: str | None = None
) -> str:
    return stop_cause(reason, lw.Contract(budget=budget), cycle=2, spent=spent, cause=cause)


def test_a_small_budget_keeps_its_digits() -> None:
    """A $0.004 budget read "$0.00" beside the $0.0030 spent, and a 0.05 s run "ran 0.0 s"."""
    text = _cause("budget_cost", lw.Budget(max_cost_usd=0.004), {"cost_usd": 0.003})
    assert "spent $0.003 of the $0.004 cost budget, the next cycle would cross it" in text
    text = _cause("budget_time", lw.Budget(max_seconds=0.05), {"seconds": 0.0317})
    assert "ran 0.0317 s of the 0.05 s time budget" in text
    assert "$0.004" in explain("budget_cost", lw.Contract(budget=lw.Budget(max_cost_usd=0.004)))
    # whole cents and long runs read as before
    assert "of the $3.00 cost budget" in _cause(
        "budget_cost", lw.Budget(max_cost_usd=3), {"cost_usd": 2.5}
    )
    assert "ran 95.2 s of the 90.0 s" in _cause(
        "budget_time", lw.Budget(max_seconds=90), {"seconds": 95.24}
    )


def test_a_crossed_or_reached_budget_is_not_called_a_projection() -> None:
    """Every budget stop read "the next cycle would cross it", also when a call in flight had
    crossed the budget (the cause said which) or the spend had reached it."""
    crossed = _cause(
        "budget_cost",
        lw.Budget(max_cost_usd=0.05),
        {"cost_usd": 0.1},
        cause="crossed during the actor call",
    )
    assert "spent $0.10 of the $0.05 cost budget, crossed during the actor call" in crossed
    assert "would cross" not in crossed
    reached = _cause("budget_tokens", lw.Budget(max_tokens=30), {"tokens": 30})
    assert "used 30 of 30 tokens, it is used up" in reached
    # 0.1 + 0.1 + 0.1 reaches $0.30, it does not cross it
    exact = _cause("budget_cost", lw.Budget(max_cost_usd=0.3), {"cost_usd": 0.1 + 0.1 + 0.1})
    assert "it is used up" in exact
    ahead = _cause("budget_tokens", lw.Budget(max_tokens=29), {"tokens": 20})
    assert "used 20 of 29 tokens, the next cycle would cross it" in ahead


def test_a_large_budget_not_in_whole_cents_reads_as_itself() -> None:
    """A budget that is not whole cents read with six significant digits: $2500.125 as
    "$2500.12" (less than it is) and $1,000,000.001 as "$1e+06"."""
    for budget, shown in ((2500.125, "$2500.125"), (1e6 + 0.001, "$1000000.001")):
        text = explain("budget_cost", lw.Contract(budget=lw.Budget(max_cost_usd=budget)))
        assert shown in text, text
    assert "$0.0025" in explain("budget_cost", lw.Contract(budget=lw.Budget(max_cost_usd=0.0025)))


def test_a_run_that_concluded_no_cycle_does_not_read_after_0_cycles() -> None:
    """A run denied or cancelled in its first cycle read "escalated after 0 cycles: ... (cycle
    1: ...)" (newuser46): the count is of concluded cycles, which the sentence did not say."""
    contract = lw.Contract(budget=lw.Budget(max_cycles=3))
    first = stop_cause("escalated", contract, cycle=0, cause="bea denied pay")
    assert first == "escalated before its first cycle concluded: bea denied pay"
    assert (
        stop_cause("cancelled", contract, cycle=0) == "cancelled before its first cycle concluded"
    )
    assert stop_cause("cancelled", contract, cycle=1) == "cancelled after 1 cycle"
    assert stop_cause("cancelled", contract, cycle=2) == "cancelled after 2 cycles"
