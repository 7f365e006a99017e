"""Hazard counting and stop-contract fitting on hand-made traces."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright import Budget, ConfigError, Contract, MarginalReturn, NoProgress, Success
from loopwright.replay import (
    Call,
    CycleTrace,
    FitResult,
    RunTrace,
    load_contract,
    replay,
    simulate,
)
from loopwright.replay._fit import Grid, fit_stop, split_folds
from loopwright.replay._hazard import fit_hazard


def cyc(
    k: int,
    score: float | None,
    *,
    passed: bool | None = None,
    cost: float = 0.01,
    duplicate: bool = False,
    asked: bool = False,
) -> CycleTrace:
    verdicts = (
        {}
        if score is None
        else {"visible": {"passed": score >= 1.0 if passed is None else passed, "score": score}}
    )
    return CycleTrace(
        cycle=k,
        calls=(Call("actor", cost, 100), Call("verifier:visible")),
        verdicts=verdicts,
        score=score,
        duplicate=duplicate,
        asked=asked,
    )


def run(
    key: str, scores: list[float], *, run_id: str | None = None, cost: float = 0.01
) -> RunTrace:
    cycles = tuple(cyc(k, s, cost=cost) for k, s in enumerate(scores, 1))
    ok = scores[-1] >= 1.0
    return RunTrace(
        run_id=run_id or key,
        task_key=key,
        cycles=cycles,
        required=("visible",),
        recorded={
            "status": "accepted" if ok else "stopped",
            "stop_reason": "success" if ok else "budget_cycles",
            "cycles": len(cycles),
            "cost_usd": cost * len(cycles),
            "tokens": 100 * len(cycles),
        },
    )


def table(
    rows: int, cols: int, cells: dict[tuple[int, int], tuple[int, int]]
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """A hazard table from {(cycle, stall): (successes, trials)}, 1-based cycle."""
    return tuple(tuple(cells.get((k, s), (0, 0)) for s in range(cols)) for k in range(1, rows + 1))


# --- the hazard table ---------------------------------------------------------------------------
def test_hazard_counts_trials_and_successes_by_cycle_and_stall() -> None:
    traces = [
        run("a", [0.5, 0.5, 1.0]),  # (1,0) (2,0) then a plateau: (3,1) succeeds
        run("b", [0.2, 0.6, 0.6, 0.6]),  # (1,0) (2,0) (3,0) (4,1), never succeeds
        run("c", [1.0]),  # (1,0) succeeds
    ]
    got = fit_hazard(traces)
    assert got == table(
        10, 4, {(1, 0): (1, 3), (2, 0): (0, 2), (3, 0): (0, 1), (3, 1): (1, 1), (4, 1): (0, 1)}
    )


def test_hazard_min_delta_and_capping() -> None:
    d = run("d", [0.5, 0.55, 0.58, 0.7, 1.0])
    # Δ 0.1: +0.05 and +0.08 are no material improvement, +0.2 is; rows and stalls capped at 2/1.
    assert fit_hazard([d], min_delta=0.1, max_cycles=2, max_stall=1) == (
        ((0, 1), (0, 0)),
        ((1, 2), (0, 2)),
    )
    # Δ 0: every rise counts, the stall never grows.
    assert fit_hazard([d], min_delta=0.0, max_cycles=2, max_stall=1) == (
        ((0, 1), (0, 0)),
        ((1, 4), (0, 0)),
    )


def test_hazard_duplicates_grow_the_stall_questions_do_not() -> None:
    f = RunTrace("f", "f", (cyc(1, 0.5), cyc(2, 0.9, duplicate=True), cyc(3, 0.9)), ("visible",))
    g = RunTrace("g", "g", (cyc(1, 0.5), cyc(2, None, asked=True), cyc(3, 0.5)), ("visible",))
    assert fit_hazard([f, g], max_cycles=3, max_stall=1) == table(
        3, 2, {(1, 0): (0, 2), (2, 0): (0, 2), (3, 0): (0, 1), (3, 1): (0, 1)}
    )


def test_hazard_check_only_cycles_are_no_trials_and_leave_the_stall() -> None:
    """A cycle that judged a person's edit (``check_only``) is no attempt: the engine keeps the
    stall over it and asks ``marginal_stop`` before none (review48b: it counted a trial and
    grew the stall, so the actor's next cycle was counted at a stall the engine never had, and
    a person's fix counted as the actor's success)."""
    c3 = dataclasses.replace(cyc(3, 0.5), calls=(Call("verifier:visible"),), check_only=True)
    h = RunTrace("h", "h", (cyc(1, 0.5), cyc(2, 0.5), c3, cyc(4, 1.0)), ("visible",))
    assert fit_hazard([h], max_cycles=4, max_stall=2) == table(
        4, 3, {(1, 0): (0, 1), (2, 0): (0, 1), (4, 1): (1, 1)}
    )
    # accepted by the person's edit: no success of the actor's counted
    c2 = dataclasses.replace(cyc(2, 1.0), calls=(Call("verifier:visible"),), check_only=True)
    i = RunTrace("i", "i", (cyc(1, 0.5), c2), ("visible",))
    assert fit_hazard([i], max_cycles=2, max_stall=0) == (((0, 1),), ((0, 0),))


def test_hazard_a_denied_requests_cycle_is_a_trial_never_the_actors_success() -> None:
    """The cycle of a request denied after an edit beside it began as the actor's attempt (a
    trial: its trace is not ``check_only``), but its verdicts judge the person's version, the
    actor's proposal denied: accepted there, the success is the person's. Since review48b
    read that cycle as an attempt, the person's fix counted as the actor's success again, as
    it did for check-only cycles before (review48c). The run ends there either way."""
    denied = dataclasses.replace(cyc(2, 1.0), escalated=True)
    j = RunTrace("j", "j", (cyc(1, 0.5), denied), ("visible",))
    assert fit_hazard([j], max_cycles=3, max_stall=1) == table(
        3, 2, {(1, 0): (0, 1), (2, 0): (0, 1)}
    )
    # reopened by a person (an edit after it ended), the run goes on: its next cycle counts
    k = RunTrace("k", "k", (cyc(1, 0.5), dataclasses.replace(denied, reopened=True), cyc(3, 1.0)))
    assert fit_hazard([k], max_cycles=3, max_stall=1) == table(
        3, 2, {(1, 0): (0, 1), (2, 0): (0, 1), (3, 0): (1, 1)}
    )
    # (the same run's file as a release before stop 48 wrote it, that cycle marked check_only
    # with the actor's call and not escalated, reads alike)
    d = j.to_dict()
    d["cycles"][1] = {**d["cycles"][1], "check_only": True}
    del d["cycles"][1]["escalated"]
    assert fit_hazard([RunTrace.from_dict(d)], max_cycles=3, max_stall=1) == table(
        3, 2, {(1, 0): (0, 1), (2, 0): (0, 1)}
    )


def test_hazard_counts_up_to_the_first_success_under_the_given_rule() -> None:
    # Passed visibly at 0.9 in cycle 1, then 1.0 in cycle 2 (recorded under a stricter rule).
    e = RunTrace("e", "e", (cyc(1, 0.9, passed=True), cyc(2, 1.0)), ("visible",))
    assert fit_hazard([e], success=Success(min_score=0.9), max_cycles=2, max_stall=0) == (
        ((1, 1),),
        ((0, 0),),
    )
    assert fit_hazard([e], max_cycles=2, max_stall=0) == (((0, 1),), ((1, 1),))


def test_hazard_rejects_bad_shapes() -> None:
    with pytest.raises(ConfigError):
        fit_hazard([], max_cycles=0)
    with pytest.raises(ConfigError):
        fit_hazard([], max_stall=-1)
    assert fit_hazard([], max_cycles=1, max_stall=0) == (((0, 0),),)


# --- folds ---------------------------------------------------------------------------------------
def test_folds_are_disjoint_by_task_and_seeded() -> None:
    traces = [run(f"t{i}", [0.5, 1.0], run_id=f"t{i}-{j}") for i in range(23) for j in range(2)]
    folds = split_folds(traces, 5, seed=3)
    by_task: dict[str, set[int]] = {}
    for t, f in zip(traces, folds, strict=True):
        by_task.setdefault(t.task_key, set()).add(f)
    assert all(len(fs) == 1 for fs in by_task.values())  # every task in exactly one fold
    sizes = [sum(1 for fs in by_task.values() if f in fs) for f in range(5)]
    assert sorted(sizes) == [4, 4, 5, 5, 5]  # dealt round robin
    assert split_folds(traces, 5, seed=3) == folds
    assert split_folds(traces, 5, seed=4) != folds
    with pytest.raises(ConfigError, match="distinct tasks"):
        split_folds(traces[:6], 5)
    with pytest.raises(ConfigError, match="--folds"):
        split_folds(traces, 1)


# --- fitting -------------------------------------------------------------------------------------
def known_runs(n_tasks: int = 60) -> list[RunTrace]:
    """Two thirds succeed at cycle 1, 2 or 3, their score rising 0.2 a cycle; a third never
    succeed and plateau for 10 cycles. Every cycle costs $0.01."""
    out = []
    for i in range(n_tasks):
        if i % 3 == 2:
            out.append(run(f"t{i:03d}", [0.3] * 10))
        else:
            s = 1 + (i // 3) % 3
            out.append(run(f"t{i:03d}", [0.3 + 0.2 * j for j in range(s - 1)] + [1.0]))
    return out


@dataclasses.dataclass(frozen=True)
class Fit98:
    traces: list[RunTrace]
    result: FitResult
    progress: list[tuple[int, int]]  # what the fit reported as it went


@pytest.fixture(scope="module")
def fit98() -> Fit98:
    """``fit_stop(known_runs(), keep=0.98)`` (5 folds, seed 0, one-se), computed once: three
    tests read it (a progress callback changes no figure: it is only told how far the fit is)."""
    traces = known_runs()
    calls: list[tuple[int, int]] = []
    r = fit_stop(traces, keep=0.98, folds=5, seed=0, progress=lambda d, t: calls.append((d, t)))
    return Fit98(traces, r, calls)


def test_fit_stops_hopeless_runs_early_and_keeps_the_successes(fit98: Fit98) -> None:
    traces, r, calls = fit98.traces, fit98.result, fit98.progress
    assert r.feasible
    assert r.all_data.kept_share == 1.0  # 39/40 < 0.98: every success must be kept
    for t in traces:
        o = simulate(t, r.contract)
        if t.recorded["status"] == "accepted":
            assert o.accepted
        else:
            assert not o.accepted and o.cycles <= 3, (o.reason, o.cycles)
    # reference: 14, 14 and 12 successes at cycles 1, 2, 3 ($0.78) + 20 × 10 plateau cycles;
    # fitted: the plateaus stop after 2 cycles.
    assert r.all_data.reference_cost_usd == pytest.approx(0.78 + 20 * 0.10)
    assert r.all_data.cost_usd == pytest.approx(0.78 + 20 * 0.02)
    assert r.all_data.spend_saved_share > 0.5
    for f in r.folds:
        assert f.train.kept_share >= 0.98
        assert f.validation.kept_share == 1.0
        assert f.validation.spend_saved_share > 0.3  # a fold holds 2 to 6 plateaus
    assert sum(f.validation.runs for f in r.folds) == len(traces)
    assert sum(f.tasks for f in r.folds) == len(traces)
    assert calls and calls[-1][0] == calls[-1][1] == r.evaluations
    rep = r.report()
    json.dumps(rep)  # JSON-serialisable
    assert rep["all_data"]["kept_share"] == 1.0
    assert len(rep["cross_validation"]["per_fold"]) == 5
    assert any(c.chosen for c in r.candidates) and any(c.frontier for c in r.candidates)


def test_marginal_return_contract_round_trips_through_toml(tmp_path: Path) -> None:
    traces = known_runs()
    # Only the cycle cap and marginal-return values: the fit must pick a marginal rule.
    grid = Grid(
        no_progress_cycles=(), max_cycles=(), cost_quantiles=(), marginal_values=(1.0, 0.2, 0.1)
    )
    r = fit_stop(traces, keep=1.0, grid=grid)
    assert r.params.value_per_success_usd == 0.2  # the most lenient that stops the plateaus
    mr = r.contract.marginal_return
    assert mr is not None and mr.hazard == fit_hazard(traces, success=r.contract.success)
    path = tmp_path / "fitted.toml"
    path.write_text(r.to_toml())
    loaded = load_contract(path)
    assert loaded.to_dict() == r.contract.to_dict()
    totals = replay(traces, {"fitted": loaded}).contracts[0][0]
    assert totals.accepted == r.all_data.accepted == 40
    assert totals.accepted_kept == r.all_data.accepted_kept
    assert totals.cost_usd == r.all_data.cost_usd
    assert totals.stop_reasons == r.all_data.stop_reasons


def test_plain_contract_round_trips_through_toml(tmp_path: Path, fit98: Fit98) -> None:
    r = fit98.result  # fit_stop(known_runs(), keep=0.98)
    path = tmp_path / "fitted.toml"
    path.write_text(r.to_toml())
    assert load_contract(path).to_dict() == r.contract.to_dict()
    assert r.contract.success == Success(required=("visible",))


def test_base_contract_is_the_reference_and_the_template() -> None:
    traces = known_runs()
    base = Contract(
        success=Success(required=("visible",)),
        budget=Budget(max_cycles=5, max_tokens=10_000),
        no_progress=NoProgress(cycles=4, min_delta=0.02),
    )
    r = fit_stop(traces, keep=0.98, base=base)
    assert r.reference == "base"
    # The base stops the plateaus after 5 cycles: $0.05 each.
    assert r.all_data.reference_cost_usd == pytest.approx(0.78 + 20 * 0.05)
    assert r.contract.budget.max_tokens == 10_000
    assert all(c.params.max_cycles is not None and c.params.max_cycles <= 5 for c in r.candidates)
    assert r.all_data.kept_share == 1.0 and r.all_data.cost_usd < r.all_data.reference_cost_usd


def test_bad_input_is_a_config_error() -> None:
    traces = known_runs()
    with pytest.raises(ConfigError, match="--keep"):
        fit_stop(traces, keep=0.0)
    with pytest.raises(ConfigError, match="--keep"):
        fit_stop(traces, keep=1.5)
    with pytest.raises(ConfigError, match="no runs"):
        fit_stop([])
    with pytest.raises(ConfigError, match="distinct tasks"):
        fit_stop(traces[:3], folds=5)


class _SpyMarginal(MarginalReturn):
    """Records what the engine's marginal rule asks: (next cycle, stall)."""

    asked: ClassVar[list[tuple[int, int]]] = []

    def p_success(self, cycle: int, stall: int) -> float:
        _SpyMarginal.asked.append((cycle, stall))
        return 1.0


@given(
    scores=st.lists(
        st.one_of(st.none(), st.sampled_from([0.0, 0.2, 0.25, 0.5, 0.52, 0.9, 1.0])),
        min_size=1,
        max_size=12,
    ),
    dup=st.lists(st.booleans(), min_size=12, max_size=12),
    delta=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_hazard_stall_is_the_stall_the_engine_asks_about(
    scores: list[float | None], dup: list[bool], delta: float
) -> None:
    cycles = tuple(
        cyc(k, s, duplicate=dup[k - 1], asked=s is None) for k, s in enumerate(scores, 1)
    )
    trace = RunTrace("r", "r", cycles, ("visible",))
    _SpyMarginal.asked.clear()
    contract = Contract(
        no_progress=NoProgress(cycles=100, min_delta=delta),
        budget=Budget(max_cycles=100),
        marginal_return=_SpyMarginal(value_per_success_usd=1.0),
    )
    out = simulate(trace, contract)
    asked = {(k, s) for k, s in _SpyMarginal.asked if k <= out.cycles}
    hazard = fit_hazard([trace], min_delta=delta, max_cycles=20, max_stall=20)
    counted = {
        (k, s) for k, row in enumerate(hazard, 1) for s, (_, n) in enumerate(row) if n and k > 1
    }
    assert counted == asked


# --- objectives, the one-SE rule, the fixed-rule comparison -------------------------------------
def with_held_out(t: RunTrace) -> RunTrace:
    """The run with a held-out verdict per cycle: passed when the visible score is 1.0."""
    cycles = tuple(
        dataclasses.replace(c, held_out_passed=c.score is not None and c.score >= 1.0)
        for c in t.cycles
    )
    held = bool(cycles[-1].held_out_passed)
    return dataclasses.replace(t, cycles=cycles, recorded={**t.recorded, "held_out_passed": held})


def test_fit_can_save_attempts_and_keep_held_out_verdicts() -> None:
    traces = [with_held_out(t) for t in known_runs()]
    r = fit_stop(traces, keep=1.0, optimise="attempts", keep_by="held-out")
    a = r.all_data
    assert a.reference_held_out == 40 and a.held_out_kept == 40
    assert a.reference_attempts == 14 * 1 + 14 * 2 + 12 * 3 + 20 * 10
    assert a.attempts == 78 + 20 * 2  # plateaus stop after 2 cycles
    assert a.attempts_saved_share == pytest.approx(1 - 118 / 278)
    assert r.optimise == "attempts" and r.report()["kept_by"] == "held-out"
    with pytest.raises(ConfigError, match="--kept"):  # no held-out verdicts to keep
        fit_stop(known_runs(), keep_by="held-out")


def test_one_se_is_never_more_complex_than_best(fit98: Fit98) -> None:
    best = fit_stop(known_runs(), keep=0.98, choose="best")
    one_se = fit98.result  # fit_stop(known_runs(), keep=0.98, choose="one-se")
    assert one_se.choose == "one-se" and best.choose == "best"
    cx = [
        sum(v is not None for v in (p.no_progress_cycles, p.value_per_success_usd))
        for p in (best.params, one_se.params)
    ]
    assert cx[1] <= cx[0]
    assert (best.all_data.spend_saved_share or 0) >= (one_se.all_data.spend_saved_share or 0) - 0.2


def test_a_fixed_no_progress_rule_as_good_as_the_fit_is_said_plainly() -> None:
    # Plateaus are exactly what "stop after 1 cycle without fewer failing tests" catches.
    r = fit_stop(known_runs(), keep=1.0, optimise="attempts")
    fx = r.fixed
    assert fx is not None and fx.window == 1 and fx.per_fold == (1, 1, 1, 1, 1)
    assert fx.as_good and "A simple rule is as good" in fx.verdict
    assert fx.validation_pooled.attempts == r.validation_pooled.attempts
    assert [w for w, _ in fx.figures] == [1, 2, 3, 4, 5]
    assert [f.attempts for _, f in fx.figures] == [78 + 20 * w for w in (2, 3, 4, 5, 6)]
    rep = r.report()
    json.dumps(rep)
    assert rep["fixed_rule"]["as_good"] is True
    spread = rep["cross_validation"]["spread"]
    assert spread["distinct_families"] == len(set(spread["families"])) >= 1
    assert spread["validation"]["kept"]["min"] == 1.0


def test_the_fit_beating_every_fixed_rule_says_so() -> None:
    # Hopeless runs that keep "improving" a little: no plateau rule stops them, a cycle cap does.
    traces = [run(f"s{i}", [0.5, 1.0]) for i in range(20)] + [
        run(f"h{i}", [0.1 + 0.05 * j for j in range(10)]) for i in range(10)
    ]
    r = fit_stop(traces, keep=1.0, optimise="attempts")
    assert r.all_data.attempts == 20 * 2 + 10 * 2  # a cycle or cost cap at 2 cycles
    assert r.fixed is not None and not r.fixed.as_good
    assert r.fixed.verdict.startswith("The fit beats the best fixed rule")


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"optimise": "money"}, "--optimise"),
        ({"choose": "median"}, "--choose"),
        ({"keep_by": "hidden"}, "--kept"),
        ({"optimise": "time"}, "--optimise"),  # no recorded seconds
    ],
)
def test_bad_objective_is_a_config_error(kw: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        fit_stop(known_runs(), **kw)  # type: ignore[arg-type]


def test_fit_can_save_time_and_search_scale_free_rules_only() -> None:
    # Every cycle took 2 s: time saved is attempts saved.
    traces = [
        dataclasses.replace(t, cycles=tuple(dataclasses.replace(c, seconds=2.0) for c in t.cycles))
        for t in known_runs()
    ]
    r = fit_stop(traces, keep=1.0, optimise="time")
    assert r.all_data.reference_seconds == 2.0 * 278
    assert r.all_data.time_saved_share == pytest.approx(r.all_data.attempts_saved_share)
    free = fit_stop(traces, keep=1.0, grid=Grid(cost_quantiles=(), marginal_multiples=()))
    assert all(
        c.params.max_cost_usd is None and c.params.value_per_success_usd is None
        for c in free.candidates
    )


def test_the_fit_never_proposes_a_marginal_return_alone() -> None:
    # a loop refuses it (its cycles may be free: it would never stop), so it is no candidate
    from loopwright.replay._fit import StopParams, build_contract

    template = Contract(budget=Budget(max_cycles=9))
    assert build_contract(template, StopParams(value_per_success_usd=1.0), ()) is None
    beside = build_contract(template, StopParams(value_per_success_usd=1.0, max_cycles=5), ())
    assert beside is not None and beside.marginal_return is not None
    assert beside.budget.max_cycles == 5


def test_a_folds_template_is_read_off_its_training_runs_only() -> None:
    """Without a base, the template's cycle cap (the longest run) and success rule (the lowest
    score a run was accepted at) are read, for each fold, off the runs it picks on, never off
    the held fold it is judged on: the written contract reads them off all runs. Before, every
    fold's template came from all runs, so a held fold's 12-cycle run set the cap its own
    candidates were judged under, and its run accepted at 0.8 the score they accepted at: its
    validation kept both, as no contract picked without them would have."""
    traces = [run(f"t{i:02d}", [0.5, 1.0][: 1 + i % 2]) for i in range(10)]
    traces.append(run("long", [0.1 * j for j in range(1, 12)] + [1.0]))
    low = run("low", [0.5, 0.8])
    traces.append(
        dataclasses.replace(
            low,
            cycles=(low.cycles[0], cyc(2, 0.8, passed=True)),
            recorded={**low.recorded, "status": "accepted", "stop_reason": "success"},
        )
    )
    grid = Grid(max_cycles=(), no_progress_cycles=(), cost_quantiles=(), marginal_multiples=())
    r = fit_stop(traces, keep=0.5, folds=3, seed=0, grid=grid)
    fold_of = dict(zip((t.task_key for t in traces), split_folds(traces, 3, 0), strict=True))
    assert r.contract.budget.max_cycles == 12 and r.contract.success.min_score == 0.8
    for f in r.folds:
        train = [t for t in traces if fold_of[t.task_key] != f.fold]
        assert f.params.max_cycles == max(len(t.cycles) for t in train)
        held = {t.task_key for t in traces if fold_of[t.task_key] == f.fold}
        # judged under a cap of 2 cycles, or a success rule of 1.0: not accepted
        lost = len(held & {"long", "low"})
        assert f.validation.accepted_kept == f.validation.reference_accepted - lost
    assert r.validation_pooled.accepted_kept == r.validation_pooled.reference_accepted - 2


def test_a_spend_only_candidate_is_scored_as_a_run_would_be_given_it(tmp_path: Path) -> None:
    """A spend-only contract is given the default cycle ceiling (1,000) where a run is given
    it: fit-stop scored such a candidate (and a spend-only base) without it, so runs whose
    cycles cost nothing went on past 1,000 cycles in the fit's figures, not in the runs of the
    contract it wrote (stall50b)."""
    free = [run(f"free{i}", [0.3] * 1200, cost=0.0) for i in range(3)]
    traces = known_runs(12) + free
    base = Contract(success=Success(required=("visible",)), budget=Budget(max_cost_usd=5.0))
    grid = Grid(no_progress_cycles=(), max_cycles=(), cost_quantiles=(), marginal_values=())
    r = fit_stop(traces, keep=0.98, folds=3, base=base, grid=grid, optimise="attempts")
    assert r.contract.budget.max_cycles == 1000 and r.contract.budget.max_cycles_default
    assert r.all_data.stop_reasons.get("budget_cycles") == len(free)
    # the fit's figures are what replay reports for the contract it wrote, once read back
    path = tmp_path / "fitted.toml"
    path.write_text(r.to_toml())
    loaded = load_contract(path)
    assert loaded == r.contract
    [(totals, outs)] = replay(traces, {"fitted": loaded}).contracts
    assert totals.stop_reasons == dict(r.all_data.stop_reasons)
    assert [o.cycles for o in outs[-3:]] == [1000] * 3
    assert r.all_data.reference_attempts == r.all_data.attempts  # (the base, replayed)
