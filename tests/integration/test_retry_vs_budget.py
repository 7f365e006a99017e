"""What counts as a call's attempt, and which wins when a retry meets a budget (crash53), as
docs/effects.md ("Retries and budgets") says it.

* A failed attempt is one whose call raised (an error, its own timeout). An attempt cut off by
  its process stopping is none: Ctrl-C (below), a store failing under the run, a crash (that
  one counts toward ``budget.max_crashes``). The redone call has every attempt left.
* A budget wins over a retry: another attempt starts only while no budget is reached, what
  the failed attempts billed counted first; the run then stops by that budget, not
  ``escalated`` for retries. A retry is not projected (an attempt's cost is not known before
  it answers): one made under the budget may overshoot it by itself, the one call in flight.
* Under the budget, the retry bound wins: the attempts spent, the run escalates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

TASK: dict[str, Any] = {"artifacts": {"doc": {"n": 0}}}


class Busy(lw.TransientError):
    pass


def _busy(cost: float) -> Busy:
    e = Busy("busy")
    e.usage = lw.Usage(cost_usd=cost)  # type: ignore[attr-defined]  # (what it was billed)
    return e


def _loop(script: list[BaseException | None], budget: lw.Budget, attempts: int) -> lw.Loop:
    """The actor's calls raise ``script``'s exceptions in turn (``None``: it answers, billed
    0.1); once the script is spent, it answers."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        step = script.pop(0) if script else None
        if step is not None:
            raise step
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),), usage=lw.Usage(cost_usd=0.1))

    return lw.Loop(
        name="retry-budget",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=False, score=0.5)],
        contract=lw.Contract(budget=budget),
        retry=lw.RetryPolicy(attempts=attempts, backoff_s=0.0, jitter=False),
    )


def _attempts(rt: lw.Runtime, run_id: str) -> list[tuple[str, int]]:
    return [
        (e.kind, int(e.data["attempt"]))
        for e in rt.store.events(run_id)
        if e.kind in ("retry", "gave_up")
    ]


def test_an_attempt_cut_off_by_ctrl_c_is_no_failed_attempt(tmp_path: Path) -> None:
    # attempts=2: the first call is interrupted, then the redone call fails twice and gives
    # up at its second failed attempt (the interrupted one was not the first of them)
    script: list[BaseException | None] = [KeyboardInterrupt(), _busy(0.0), _busy(0.0)]
    loop = _loop(script, lw.Budget(max_cycles=3), attempts=2)
    with lw.Runtime(tmp_path / "s.db") as rt:
        with pytest.raises(KeyboardInterrupt):
            rt.run_sync(loop, TASK, task_key="k")
        run_id = rt.store.get_run("k").run_id
        assert rt.store.journal(run_id, kind="retry") == []  # nothing counted for it
        r = rt.run_sync(loop, TASK, task_key="k")
        assert (r.status, r.stop_reason) == ("escalated", "escalated")
        assert _attempts(rt, run_id) == [("retry", 1), ("gave_up", 2)]
        assert script == []


def test_a_budget_reached_by_failed_attempts_wins_over_the_retry(tmp_path: Path) -> None:
    # attempts=5, $0.25: cycle 1 answers ($0.1); cycle 2 fails billed $0.1 (0.2: under, a
    # retry), then $0.1 again (0.3: reached): no third attempt, the run stops by the budget
    script: list[BaseException | None] = [None, _busy(0.1), _busy(0.1), _busy(0.1)]
    loop = _loop(script, lw.Budget(max_cycles=5, max_cost_usd=0.25), attempts=5)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK)
        assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 1)
        assert _attempts(rt, r.run_id) == [("retry", 1), ("gave_up", 2)]
        assert r.spent.cost_usd == pytest.approx(0.3)  # overshot by the one call in flight
        assert len(script) == 1  # the third attempt never made


def test_a_retry_under_the_budget_may_overshoot_it_by_itself_only(tmp_path: Path) -> None:
    # $0.25: cycle 1 $0.1; cycle 2 fails billed $0.05 (0.15: a retry), the retry answers
    # billed $0.1 (0.25, reached): the run stops there, before cycle 3, over by nothing more
    script: list[BaseException | None] = [None, _busy(0.05)]
    loop = _loop(script, lw.Budget(max_cycles=5, max_cost_usd=0.25), attempts=5)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK)
        assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 2)
        assert r.spent.cost_usd == pytest.approx(0.25)


def test_under_the_budget_the_retry_bound_wins(tmp_path: Path) -> None:
    script: list[BaseException | None] = [None, _busy(0.01), _busy(0.01), _busy(0.01)]
    loop = _loop(script, lw.Budget(max_cycles=5, max_cost_usd=10.0), attempts=3)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK)
        assert (r.status, r.stop_reason, r.cycles) == ("escalated", "escalated", 1)
        assert _attempts(rt, r.run_id) == [("retry", 1), ("retry", 2), ("gave_up", 3)]
        assert r.spent.cost_usd == pytest.approx(0.13)  # every failed attempt charged
