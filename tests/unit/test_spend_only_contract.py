"""A contract whose only exits besides success are spend budgets is said when a loop is built
(stop 49, seed 200615 of the stop-scenario generator: an accepted part proposed again, refused,
$0 a cycle, ran for ever under ``max_cost_usd`` alone). Said, not refused: such contracts end
runs whose cycles cost something."""

from __future__ import annotations

import logging

import pytest

import loopwright as lw


def _loop(contract: lw.Contract) -> lw.Loop:
    return lw.Loop(
        name="money-only",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": "x"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="c")],
        contract=contract,
    )


@pytest.mark.parametrize(
    "budget",
    [
        lw.Budget(max_cost_usd=0.5),
        lw.Budget(max_tokens=1000),
        lw.Budget(max_cost_usd=1, max_tokens=9),
    ],
    ids=["cost", "tokens", "both"],
)
def test_a_spend_only_contract_is_said_when_its_loop_is_built(
    budget: lw.Budget, caplog: pytest.LogCaptureFixture
) -> None:
    contract = lw.Contract(budget=budget)
    assert contract.spend_only
    with caplog.at_level(logging.WARNING, logger="loopwright.runs"):
        _loop(contract)
    said = [r.getMessage() for r in caplog.records if r.name == "loopwright.runs"]
    assert len(said) == 1
    assert "'money-only'" in said[0] and "would never stop" in said[0]
    assert "max_cycles, max_seconds or a no_progress rule" in said[0]


@pytest.mark.parametrize(
    "contract",
    [
        lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_cycles=10)),
        lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_seconds=60)),
        lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_cycles_key="limits.cycles")),
        lw.Contract(budget=lw.Budget(max_cost_usd=0.5), no_progress=lw.NoProgress(cycles=3)),
        lw.Contract(budget=lw.Budget(max_cycles=5)),
    ],
    ids=["cycles", "seconds", "task-cap", "no-progress", "no-money"],
)
def test_a_contract_with_another_exit_is_not_said(
    contract: lw.Contract, caplog: pytest.LogCaptureFixture
) -> None:
    assert not contract.spend_only
    with caplog.at_level(logging.WARNING, logger="loopwright.runs"):
        _loop(contract)
    assert [r for r in caplog.records if r.name == "loopwright.runs"] == []


def test_a_task_cap_alone_is_refused_saying_why() -> None:
    """A contract whose only limit is ``max_cycles_key`` was refused with "set a budget
    (max_cycles, …)", which never said why the key it had was not one (review49b)."""
    with pytest.raises(lw.ConfigError) as err:
        lw.Contract(budget=lw.Budget(max_cycles_key="limits.cycles"))
    said = str(err.value)
    assert "no exit besides success" in said
    assert "max_cycles_key 'limits.cycles' alone is not one" in said
    assert "a task without that key would run without a limit" in said
