"""The best candidate and material progress, kept apart (from an outside probe, helper-44).

The packet's best candidate is the best by visible score — every rise is kept, ties keep the
earlier — while the no-progress rule measures rises against what the last *material*
improvement reached (``progress_score``), from a baseline of 0, a rise of exactly
``min_delta`` counting despite float rounding."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright import ConfigError

TASK: dict[str, Any] = {"goal": "score", "artifacts": {"doc": {"v": 0}}}


def _scripted(
    scores: Sequence[float],
    *,
    passes: Sequence[bool] | None = None,
    no_progress: lw.NoProgress | None = None,
    min_score: float = 1.0,
) -> lw.Loop:
    """Cycle k writes v=k; its check scores ``scores[k-1]`` (and passes as ``passes`` says)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"v": ctx.cycle}, usage=lw.Usage(cost_usd=0.1))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        k = state.values()["doc"]["v"]
        ok = bool(passes[k - 1]) if passes else False
        found = () if ok else (lw.Finding("not yet", "doc", "v"),)
        return lw.Verdict(passed=ok, score=scores[k - 1], findings=found)

    return lw.Loop(
        name="scripted",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        contract=lw.Contract(
            success=lw.Success(min_score=min_score),
            no_progress=no_progress,
            budget=lw.Budget(max_cycles=len(scores)),
        ),
    )


def _improved(rt: lw.Runtime, run_id: str) -> list[bool]:
    return [bool(ck.record["improved"]) for ck in rt.store.checkpoints(run_id) if ck.record]


def test_a_rise_under_min_delta_is_still_the_best_candidate(tmp_path: Path) -> None:
    loop = _scripted([0.5, 0.58, 0.3], no_progress=lw.NoProgress(cycles=5, min_delta=0.1))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert _improved(rt, r.run_id) == [True, False, False]  # 0.58 is not material
    assert r.stop_reason == "budget_cycles" and r.best_score == 0.58
    best = r.packet["best_candidate"]
    assert (best["cycle"], best["score"], best["artifacts"]["doc"]["v"]) == (2, 0.58, 2)


def test_a_check_passing_at_a_lower_score_does_not_take_the_best_label(tmp_path: Path) -> None:
    # cycle 2 passes the (required) check for the first time — material progress — at a lower
    # score than cycle 1's; the best candidate stays cycle 1's, with its own score
    loop = _scripted([0.9, 0.6, 0.1], passes=[False, True, False], min_score=0.95)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert _improved(rt, r.run_id) == [True, True, False]
    best = r.packet["best_candidate"]
    assert (best["cycle"], best["score"], best["artifacts"]["doc"]["v"]) == (1, 0.9, 1)
    assert r.best_score == 0.9


def test_ties_keep_the_earlier_candidate(tmp_path: Path) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_scripted([0.4, 0.7, 0.7, 0.2]), TASK, task_key="k")
    assert r.packet["best_candidate"]["cycle"] == 2


def test_a_rise_of_exactly_min_delta_is_progress(tmp_path: Path) -> None:
    # 0.7 - 0.6 is 0.09999999999999998 in floats
    loop = _scripted([0.6, 0.7, 0.7, 0.7], no_progress=lw.NoProgress(cycles=2, min_delta=0.1))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert _improved(rt, r.run_id) == [True, True, False, False]
    assert (r.stop_reason, r.cycles) == ("no_progress", 4)


def test_the_baseline_is_zero_a_first_score_of_zero_is_no_progress(tmp_path: Path) -> None:
    loop = _scripted([0.0, 0.0, 0.0, 0.0], no_progress=lw.NoProgress(cycles=2))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert _improved(rt, r.run_id) == [False, False]
        m = lw.compute_metrics(rt.store)
    assert (r.stop_reason, r.cycles) == ("no_progress", 2)
    # there is still a best candidate to hand over (the first, at 0)
    assert r.packet["best_candidate"]["cycle"] == 1 and r.best_score == 0.0
    # "a run with no improving cycle counts its whole spend" (docs/metrics.md)
    assert m.value("spend_after_last_improvement_usd") == pytest.approx(0.2)
    assert m.value("spend_after_last_improvement_frac") == pytest.approx(1.0)


def test_creeping_rises_are_material_once_they_add_up(tmp_path: Path) -> None:
    # measured from the last material level (0.5), not from the best: 0.55 then 0.6 adds up
    loop = _scripted([0.5, 0.55, 0.6, 0.6], no_progress=lw.NoProgress(cycles=2, min_delta=0.1))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert _improved(rt, r.run_id) == [True, False, True, False]
    assert r.best_score == 0.6 and r.stop_reason == "budget_cycles"


def test_visible_checks_weighing_nothing_are_refused() -> None:
    with pytest.raises(ConfigError, match="weights add up to 0"):
        lw.Loop(
            name="w",
            actor=lambda ctx: lw.Proposal(),
            verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="c", weight=0)],
            contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        )
    # one of two at 0 is an unscored check beside a scored one: allowed
    lw.Loop(
        name="w",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[
            lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="c", weight=0),
            lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="d"),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


def _ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


def test_a_marginal_return_rule_alone_is_refused_where_a_loop_is_built() -> None:
    mr = lw.MarginalReturn(value_per_success_usd=2.0)
    contract = lw.Contract(marginal_return=mr)  # a contract (a stored snapshot) still builds
    assert lw.Contract.from_dict({"marginal_return": {"value_per_success_usd": 2.0}}) == contract
    with pytest.raises(ConfigError, match="only exit besides success") as e:
        lw.Loop(name="m", actor=lambda ctx: lw.Proposal(), verifiers=[_ok], contract=contract)
    assert e.value.field == "contract.marginal_return"
    lw.Loop(
        name="m",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[_ok],
        contract=lw.Contract(marginal_return=mr, budget=lw.Budget(max_cycles=50)),
    )


def test_a_state_stored_before_progress_score_reads_its_best_score() -> None:
    # the best score of such a state moved at material rises only: the same level as before
    s = lw.TaskState.from_dict({"best_score": 0.5, "best_cycle": 2})
    assert s.progress_score == 0.5
    assert lw.TaskState.from_dict({**s.to_dict(), "best_score": 0.7}).progress_score == 0.5


def test_with_no_check_flagged_required_every_visible_check_counts(tmp_path: Path) -> None:
    # Success then needs every visible check to pass, and so a check passing for the first
    # time is progress (it was none; replay counted it: the two disagreed on such loops).
    from loopwright.replay import simulate, traces_from_store

    def a(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.cycle >= 1, score=0.5)  # passes from cycle 2

    def b(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("no", "doc", "v"),))

    contract = lw.Contract(
        no_progress=lw.NoProgress(cycles=1, min_delta=0.0), budget=lw.Budget(max_cycles=5)
    )
    loop = lw.Loop(
        name="optional",
        actor=lambda ctx: lw.Proposal.edit("doc", {"v": ctx.cycle}),
        verifiers=[
            lw.Check(fn=a, name="a", required=False),
            lw.Check(fn=b, name="b", required=False),
        ],
        contract=contract,
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert _improved(rt, r.run_id) == [True, True, False]
        (trace,) = list(traces_from_store(rt.store))
    assert (r.stop_reason, r.cycles) == ("no_progress", 3)
    o = simulate(trace, contract)
    assert (o.reason, o.cycles) == ("no_progress", 3)


@pytest.mark.parametrize("name", ["max_cost_usd", "max_tokens", "max_seconds"])
def test_a_budget_of_zero_is_refused_where_a_loop_is_built(name: str) -> None:
    # A spend that has reached its limit stops the run before a cycle, so a run under a
    # budget of 0 ended before its first cycle (0 actor calls, budget_cost and the like),
    # and `loopwright check` called it "ok"; max_cycles = 0 was already refused.
    zero = lw.Contract(budget=lw.Budget(max_cycles=5, **{name: 0}))  # a snapshot still loads
    assert lw.Contract.from_dict(zero.to_dict()) == zero
    with pytest.raises(ConfigError, match="more than 0") as e:
        lw.Loop(name="z", actor=lambda ctx: lw.Proposal(), verifiers=[_ok], contract=zero)
    assert e.value.field == f"contract.budget.{name}"
    tiny = lw.Contract(budget=lw.Budget(max_cycles=5, **{name: 1}))
    lw.Loop(name="z", actor=lambda ctx: lw.Proposal(), verifiers=[_ok], contract=tiny)


@pytest.mark.parametrize("name", ["max_cost_usd", "max_seconds"])
@pytest.mark.parametrize("limit", [1e-300, 1e-12, 1e-9])
def test_a_budget_within_the_float_slack_of_zero_is_refused_as_zero_is(
    tmp_path: Path, name: str, limit: float
) -> None:
    # stop 52: a spend is compared past the float slack of a sum, so a budget this small is
    # reached at 0 spent: every run ended before its first cycle (budget_time, 0 cycles),
    # the case a budget of 0 is refused for
    small = lw.Contract(budget=lw.Budget(max_cycles=2, **{name: limit}))
    with pytest.raises(ConfigError, match=r"more than 1e-09, got") as e:
        lw.Loop(name="z", actor=lambda ctx: lw.Proposal(), verifiers=[_ok], contract=small)
    assert e.value.field == f"contract.budget.{name}"
    # just past the slack it is a budget: a run's first (free, instant) cycle starts under it
    above = lw.Contract(budget=lw.Budget(max_cycles=1, **{name: 1e-9 * 2}))
    if name == "max_cost_usd":
        loop = lw.Loop(
            name="z",
            actor=lambda ctx: lw.Proposal.edit("a", {"x": 1}),
            verifiers=[_ok],
            contract=above,
        )
        with lw.Runtime(tmp_path / "s.db") as rt:
            r = rt.run_sync(loop, {"artifacts": {"a": {"x": 0}}}, task_key="k")
        assert r.cycles == 1
    else:
        lw.Loop(name="z", actor=lambda ctx: lw.Proposal(), verifiers=[_ok], contract=above)


def test_checks_averaging_exactly_min_score_succeed_and_replay_agrees(tmp_path: Path) -> None:
    """Two checks scoring 0.85 and 0.95 under min_score 0.9 average 0.8999999999999999 in
    floats: the run was refused success and spent its whole budget; replay agreed with that."""
    from loopwright.replay import simulate, traces_from_store

    calls: list[int] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"x": ctx.cycle}, usage=lw.Usage(cost_usd=0.1))

    contract = lw.Contract(success=lw.Success(min_score=0.9), budget=lw.Budget(max_cycles=4))
    loop = lw.Loop(
        name="avg",
        actor=actor,
        verifiers=[
            lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=0.85), name="a"),
            lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=0.95), name="b"),
        ],
        contract=contract,
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"x": 0}}}, task_key="avg")
        (trace,) = list(traces_from_store(rt.store))
    assert (r.status, r.stop_reason, r.cycles, calls) == ("accepted", "success", 1, [1])
    out = simulate(trace, contract)
    assert (out.reason, out.cycles, out.accepted) == ("success", 1, True)
