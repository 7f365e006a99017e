"""User code that builds a wrong shape, end to end on a SQLite file: the run escalates with a
message naming the field (the user's mistake), never accepts by accident, never fails as
loopwright's own error, and a task that cannot be a run leaves no run behind."""

from __future__ import annotations

import contextlib
import datetime
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
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
        # stop 52: an int past every float passed the check, then the cycle's sum raised
        # OverflowError (the run failed, loopwright's own error); costs near the largest float
        # summed to an infinity, which the store writes as null
        (lambda: lw.Usage(cost_usd=10**400), "Usage.cost_usd"),
        (lambda: lw.Usage(cost_usd=1.5e308), "Usage.cost_usd"),
        (lambda: lw.Usage(cost_usd=2**70), "Usage.cost_usd"),
        (lambda: lw.Usage(seconds=10**400), "Usage.seconds"),
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


@pytest.mark.parametrize("project", [["accounts"], 7, "acc\x00ounts"])
def test_a_project_that_is_not_text_leaves_no_run(tmp_path: Path, project: Any) -> None:
    """As ``Loop(project=...)`` is checked: a list failed as sqlite3's ProgrammingError, a
    number was stored as one, a NUL kept by SQLite (PostgreSQL refuses it)."""
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt, pytest.raises(lw.ConfigError) as err:
        rt.run_sync(_loop(_edit, lambda s, p: lw.Verdict(passed=True)), TASK, project=project)
    assert err.value.field == "project"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_a_check_named_by_a_number_is_refused() -> None:
    with pytest.raises(lw.ConfigError) as err:
        lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name=5)  # type: ignore[arg-type]
    assert err.value.field == "verifiers.name"


def test_an_actor_editing_an_unnamed_part_escalates_and_the_run_ends(tmp_path: Path) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"": 1})

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, lambda s, p: lw.Verdict(passed=True)), TASK)
        assert rt.store.get_run(r.run_id).status == "escalated"
    assert r.packet is not None and "ConfigError: Edit.part: must not be empty" in r.packet["cause"]


KEY = datetime.date(2026, 1, 1)  # a mapping key JSON cannot hold, as a ledger keys by day


@pytest.mark.parametrize(
    "verdict",
    [
        lambda s, p: lw.Verdict(passed=False, score=0.2, evidence={KEY: 3}),
        lambda s, p: lw.Verdict(
            passed=False,
            score=0.2,
            findings=(lw.Finding("n is off", "doc", "n", "amount", evidence={KEY: 3}),),
        ),
    ],
)
def test_evidence_keyed_by_a_non_json_key_is_stored_as_its_text(
    tmp_path: Path, verdict: Callable[..., Any]
) -> None:
    """Such evidence failed the run as loopwright's own error, or left it ``running`` with
    every commit refused (a finding's evidence): a ``TypeError`` from ``json``."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(_edit, verdict), TASK)
        assert (r.status, r.stop_reason) == ("stopped", "budget_cycles")
        rec = rt.store.get_run(r.run_id)
    assert rec.status == "stopped"
    assert "2026-01-01" in json.dumps(rec.packet)


def test_an_effect_result_keyed_by_a_non_json_key_is_recorded_done(tmp_path: Path) -> None:
    """The payment is made whatever its result looks like: it is journaled done with the key
    written as text, never left in doubt with the run failed as loopwright's error."""
    paid: list[str] = []

    @lw.effect("book", key=lambda a: str(a["n"]))
    def book(n: int, *, key: str) -> dict[Any, Any]:
        paid.append(key)
        return {KEY: "booked"}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "n", 1),), effects=(book.call(n=1),))

    loop = lw.Loop(
        name="shapes",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[book],
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK)
        assert (r.status, r.stop_reason) == ("accepted", "success")
        (entry,) = [e for e in rt.store.journal(r.run_id) if e.kind == "effect"]
    assert paid == ["book:1"]
    assert entry.status == "done"
    assert entry.data["result"] == {"2026-01-01": "booked"}


class _NoText:
    """A key whose ``__str__`` fails (user code): ``_json`` writes it as ``<_NoText>``."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_evidence_keyed_by_a_key_with_no_text_is_stored_as_its_type(tmp_path: Path) -> None:
    """Redaction's walk read such a key with ``str()`` unguarded: the user's exception
    escaped the engine (out of ``run_sync``, the run left ``running``)."""
    verdict = lw.Verdict(passed=False, score=0.2, evidence={_NoText(): 3})
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(_edit, lambda s, p: verdict), TASK)
        assert (r.status, r.stop_reason) == ("stopped", "budget_cycles")
        assert rt.store.get_run(r.run_id).status == "stopped"


@dataclass(frozen=True, slots=True)
class _Unchecked(lw.Usage):
    """A subclass that skips ``Usage``'s checks (its own ``__post_init__``)."""

    def __post_init__(self) -> None:
        pass


def _actor_reporting(usage: lw.Usage) -> Callable[[lw.Context], lw.Proposal]:
    return lambda ctx: lw.Proposal.edit("doc", {"n": 1}, usage=usage)


def _failing_with(usage: lw.Usage) -> Callable[[lw.Context], lw.Proposal]:
    def actor(ctx: lw.Context) -> lw.Proposal:
        e = lw.TransientError("flaky")
        e.usage = usage  # type: ignore[attr-defined]  # (the documented way to bill a failure)
        raise e

    return actor


@pytest.mark.parametrize("where", ["proposal", "verdict", "failed attempt"])
@pytest.mark.parametrize("cost", [-0.5, float("nan")])
def test_a_usage_subclass_skipping_the_checks_escalates_naming_the_field(
    tmp_path: Path, where: str, cost: float
) -> None:
    # stop 52: the subclass's cost passed (isinstance), then the engine's own sum of it raised
    # ConfigError out of run_sync, outside the user's call: the run was left running, and
    # every resume raised again. It is checked where user code hands it over now.
    bad = _Unchecked(cost_usd=cost)
    if where == "proposal":
        loop = _loop(_actor_reporting(bad), lambda s, p: lw.Verdict(passed=False))
    elif where == "verdict":
        loop = _loop(_edit, lambda s, p: lw.Verdict(passed=False, usage=bad))
    else:
        loop = replace(
            _loop(_failing_with(bad), lambda s, p: lw.Verdict(passed=False)),
            retry=lw.RetryPolicy(attempts=2, backoff_s=0.0),
        )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK)
        rec = rt.store.get_run(r.run_id)
    assert (r.status, rec.status) == ("escalated", "escalated")
    assert r.packet is not None and "ConfigError: Usage.cost_usd" in r.packet["cause"]
    assert r.spent.cost_usd == 0.0


def test_a_usage_subclass_with_good_amounts_is_charged_as_a_usage(tmp_path: Path) -> None:
    loop = _loop(_actor_reporting(_Unchecked(cost_usd=0.4)), lambda s, p: lw.Verdict(passed=False))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK)
    # $0.80 after two cycles: a third, projected at $0.40, would cross the $1 budget
    assert (r.stop_reason, r.cycles) == ("budget_cost", 2)
    assert r.spent.cost_usd == pytest.approx(0.8)


def test_calls_at_the_largest_cost_a_usage_holds_sum_past_it_in_a_cycle(tmp_path: Path) -> None:
    # stop 52: with a call's cost bounded (MAX_AMOUNT), the cycle's sum was checked as one
    # usage's: an actor and a check each at 2**53 raised ConfigError out of run_sync and left
    # the run running. A sum of checked amounts is no user's report: it is recorded.
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"n": ctx.cycle}, usage=lw.Usage(cost_usd=2**53))

    def check(s: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, usage=lw.Usage(cost_usd=2**53))

    loop = replace(_loop(actor, check), contract=lw.Contract(budget=lw.Budget(max_cycles=2)))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK)
        rec = rt.store.get_run(r.run_id)
    assert (r.stop_reason, r.cycles, rec.status) == ("budget_cycles", 2, "stopped")
    assert r.spent.cost_usd == 4.0 * 2**53


def test_an_int_just_past_the_largest_cost_is_refused_as_the_float_past_it_is() -> None:
    # review52a: 2**53 + 1 as a float is 2**53, so the bound, checked on the float, let an
    # int past it through (kept as that int, beyond what ``Usage`` documents it holds)
    for field in ("cost_usd", "seconds"):
        for past in (2**53 + 1, 2**53 + 2, 2**54):
            with pytest.raises(lw.ConfigError, match="at most 2\\*\\*53") as caught:
                lw.Usage(**{field: past})
            assert caught.value.field == f"Usage.{field}"
        assert getattr(lw.Usage(**{field: 2**53}), field) == 2**53
