"""`loopwright check`'s answers (``cli._check.review``) name every exit the contract has."""

from __future__ import annotations

import loopwright as lw
from loopwright.cli._check import review


def _ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True)


def _stops(budget: lw.Budget) -> str:
    loop = lw.Loop(
        name="r",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[_ok],
        contract=lw.Contract(budget=budget),
    )
    (answer,) = [a for a in review(loop) if a["question"] == "What ends a stalled or unsafe run?"]
    assert answer["status"] == "warn"  # no plateau exit, no risk rule
    return answer["answer"]


def test_money_budgets_are_exits_and_the_answer_starts_with_one() -> None:
    # With only a cost or token budget the answer began "; no plateau exit": neither was named.
    # (a spend-only contract's runs also stop at the default cycle ceiling, said after them:
    # test_spend_only_contract)
    ceiling = "; a stalled run whose cycles spend nothing: only the default ceiling of 1,000"
    assert _stops(lw.Budget(max_cost_usd=2.0)).startswith("$2.00 spent" + ceiling)
    assert _stops(lw.Budget(max_tokens=500)).startswith("500 tokens spent" + ceiling)
    both = _stops(lw.Budget(max_cycles=6, max_cost_usd=3.0, max_seconds=90))
    assert both.startswith("6 cycles; $3.00 spent; 90 s; no plateau exit")


def test_a_tasks_own_cycle_cap_is_named() -> None:
    capped = _stops(lw.Budget(max_cycles=11, max_cycles_key="recorded.max_cycles"))
    assert capped.startswith("the task's own cycle cap (recorded.max_cycles), at most 11 cycles;")
