"""User code that builds a wrong shape, end to end on a SQLite file: the run escalates with a
message naming the field (the user's mistake), never accepts by accident, never fails as
loopwright's own error, and a task that cannot be a run leaves no run behind."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

TASK = {"artifacts": {"doc": {"n": 0}}}


def _loop(actor: Callable[[lw.Context], Any], verifier: Callable[..., Any]) -> lw.Loop:
    return lw.Loop(
        name="shapes",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3, max_cost_usd=1.0)),
    )


def _edit(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit("doc", {"n": ctx.cycle})


@pytest.mark.parametrize(
    ("verifier", "field"),
    [
        # a verdict parsed from a model's answer: "false" is a truthy string
        (lambda s, p: lw.Verdict(passed="false", score=1.0), "Verdict.passed"),
        (lambda s, p: lw.Verdict(passed=False, findings=("n is wrong",)), "Verdict.findings"),
        (lambda s, p: lw.Verdict(passed=False, findings=lw.Finding("x")), "Verdict.findings"),
        (lambda s, p: lw.Verdict(passed=False, findings=(lw.Finding(None),)), "Finding.message"),
    ],
)
def test_a_verifier_building_a_wrong_verdict_escalates_naming_the_field(
    tmp_path: Path, verifier: Callable[..., Any], field: str
) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(_edit, verifier), TASK)
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.held_out_passed is None and r.cycles == 0
    assert r.packet is not None
    assert f"verifier check raised an exception (ConfigError: {field}" in r.packet["cause"]
    assert r.packet["error"]["where"] == "verifier:check"


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        (lambda: lw.Usage(cost_usd=-1.0), "Usage.cost_usd"),
        (lambda: lw.Usage(tokens=-1000), "Usage.tokens"),
        (lambda: lw.Usage(cost_usd=float("nan")), "Usage.cost_usd"),
        (lambda: lw.Usage(cost_usd="0.5"), "Usage.cost_usd"),
    ],
)
def test_an_actor_reporting_an_impossible_spend_escalates_and_spends_nothing_negative(
    tmp_path: Path, usage: Callable[[], lw.Usage], field: str
) -> None:
    # invariant 7: a negative cost or token count would let the budget never trip; a NaN
    # failed the commit and left the run running
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"n": 1}, usage=usage())

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, lambda s, p: lw.Verdict(passed=False)), TASK)
        rec = rt.store.get_run(r.run_id)
    assert (r.status, rec.status) == ("escalated", "escalated")
    assert r.packet is not None and f"ConfigError: {field}" in r.packet["cause"]
    assert r.spent.cost_usd == 0.0 and r.spent.tokens == 0


@pytest.mark.parametrize(
    "artifacts",
    [{"": {"x": 1}}, {"a/b": {"x": 1}}, {"doc": {"": 1}}],
)
def test_a_task_whose_names_cannot_be_parts_leaves_no_run(
    tmp_path: Path, artifacts: dict[str, Any]
) -> None:
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt, pytest.raises(lw.ConfigError, match=r"task\.artifacts"):
        rt.run_sync(_loop(_edit, lambda s, p: lw.Verdict(passed=True)), {"artifacts": artifacts})
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_an_actor_editing_an_unnamed_part_escalates_and_the_run_ends(tmp_path: Path) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"": 1})

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, lambda s, p: lw.Verdict(passed=True)), TASK)
        assert rt.store.get_run(r.run_id).status == "escalated"
    assert r.packet is not None and "ConfigError: Edit.part: must not be empty" in r.packet["cause"]
