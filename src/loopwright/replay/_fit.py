"""Fit a stop contract to recorded runs: the most saved that keeps enough of the outcomes.

``fit_stop`` searches a grid of contract parameters — the no-progress window and delta, the cycle
and cost budgets, the marginal-return value (its hazard table fitted on the training runs only) —
for the contract that saves the most of what the user optimises (``spend``, ``attempts`` or
``time``) while keeping at least ``keep`` of a *reference*'s outcomes (accepted outcomes, or
passed held-out verdicts): the runs as recorded, or the ``base`` contract replayed. Every
candidate is judged by ``simulate``, the engine's own decisions, so the figures are what
``replay`` reports for the written contract. Several sources are fitted as one pool of runs.

Cross-validation is by task: the distinct ``task_key``\\ s are shuffled with ``seed`` and dealt
into ``folds`` folds, so every run of one task lies in one fold. For each fold the search picks a
contract on the other folds (train) and reports it on the held fold (validation). The contract
returned is picked again on all runs, with the hazard table refitted on all of them.

Choosing among candidates (``choose="one-se"``, the default): the feasible ones (kept share ≥
``keep``, pooled over the folds picked on) are scored by the share saved, pooled, and its
standard error across those folds; among those within one standard error of the best, the one
with the fewest rules wins, then the highest kept share, then the most saved. ``choose="best"``
takes the most saved. With nothing feasible, the highest kept share wins (``FitResult.feasible``
is then false).

Beside the fit, the report judges the fixed rules "stop after w cycles without fewer failing
visible tests" (w = 1..5) by the same criterion on the same folds, and says plainly when the
best of them is as good (``FixedRule``).

What a fold picks from is read off its training runs only: the template without a base (its
success rule and cycle cap), the grid values (cycle caps, cost quantiles, marginal values) and
the hazard tables; the contract written reads them off all runs (``_fit_candidates``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from .._contract import Contract
from .._errors import ConfigError, check_choice
from ._fit_candidates import (
    FIXED_WINDOWS,
    Facts,
    build_contract,
    complexity_of,
    family_of,
    fixed_params,
    split_axes,
    template_contract,
)
from ._fit_result import (
    FIT_FORMAT,
    Candidate,
    Figures,
    FitResult,
    FixedRule,
    FoldResult,
    Grid,
    StopParams,
)
from ._fit_score import (
    Eval,
    compare_fixed,
    evaluate_all,
    figures_of,
    frontier,
    reference_sums,
    score,
    select,
)
from ._fit_toml import check_plot, plot_frontier
from ._format import RunTrace
from ._hazard import HazardTable, fit_hazard
from ._report import recorded_outcomes
from ._simulate import Outcome, simulate
from ._spill import SpilledRuns, runs_to_fit

__all__ = [
    "FIT_FORMAT",
    "Candidate",
    "Figures",
    "FitResult",
    "FixedRule",
    "FoldResult",
    "Grid",
    "StopParams",
    "check_plot",
    "fit_stop",
    "plot_frontier",
    "split_folds",
]

Progress = Callable[[int, int], None]


# --- folds ------------------------------------------------------------------------------------
class _Keyed(Protocol):
    @property
    def task_key(self) -> str: ...


def split_folds(traces: Sequence[_Keyed], folds: int, seed: int = 0) -> list[int]:
    """The fold of each trace: distinct task keys, sorted, shuffled with ``seed``, dealt round
    robin into ``folds`` folds (runs of one task always share a fold)."""
    keys = sorted({t.task_key for t in traces})
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ConfigError(f"must be a whole number ≥ 2, got {folds!r}", field="--folds")
    if len(keys) < folds:
        raise ConfigError(
            f"{folds} folds need at least {folds} distinct tasks; the runs have {len(keys)}",
            field="--folds",
        )
    random.Random(seed).shuffle(keys)
    fold_of_key = {k: i % folds for i, k in enumerate(keys)}
    return [fold_of_key[t.task_key] for t in traces]


# --- the search -------------------------------------------------------------------------------------
OPTIMISE = ("spend", "attempts", "time")
CHOOSE = ("one-se", "best")
KEEP_BY = ("accepted", "held-out")


def _read_facts(
    runs: Iterable[RunTrace], base: Contract | None
) -> tuple[list[Facts], list[Outcome]]:
    """Each run's ``Facts`` and its reference outcome (as recorded, or under ``base``)."""
    facts: list[Facts] = []
    ref: list[Outcome] = []
    for t in runs:
        facts.append(Facts.of(t))
        ref += recorded_outcomes((t,)) if base is None else [simulate(t, base)]
    return facts, ref


def _hazards(
    runs: Iterable[RunTrace],
    wanted: Sequence[tuple[int, float]],
    templates: Mapping[int, Contract],
    fold_of: Sequence[int],
    grid: Grid,
) -> dict[tuple[int, float], HazardTable]:
    """The hazard table of each (split, stall delta) ``wanted``, fitted on the split's training
    runs (every run but its fold's; -1: all), the runs read once: each run's counts added to
    the tables it trains (``fit_hazard`` of all of them at once counts the same)."""

    def fit(split: int, delta: float, chosen: Iterable[RunTrace]) -> HazardTable:
        return fit_hazard(
            chosen,
            success=templates[split].success,
            min_delta=delta,
            max_cycles=grid.hazard_cycles,
            max_stall=grid.hazard_stall,
        )

    counts = {key: [[list(cell) for cell in row] for row in fit(*key, ())] for key in wanted}
    if wanted:
        for i, t in enumerate(runs):  # (not ``zip``: see ``evaluate_all``)
            for split, delta in wanted:
                if fold_of[i] == split:
                    continue
                table = counts[(split, delta)]
                for r, row in enumerate(fit(split, delta, (t,))):
                    for c, (won, tried) in enumerate(row):
                        table[r][c][0] += won
                        table[r][c][1] += tried
    return {
        key: tuple(tuple((cell[0], cell[1]) for cell in row) for row in table)
        for key, table in counts.items()
    }


def check_objective(optimise: str, keep_by: str, choose: str) -> None:
    """Refuse an unknown ``optimise``, ``keep_by`` or ``choose`` (the CLI's option names)."""
    for value, allowed, option in (
        (optimise, OPTIMISE, "--optimise"),
        (keep_by, KEEP_BY, "--kept"),
        (choose, CHOOSE, "--choose"),
    ):
        check_choice(value, allowed, option)


def fit_stop(
    traces: Iterable[RunTrace],
    *,
    keep: float = 0.98,
    folds: int = 5,
    seed: int = 0,
    base: Contract | None = None,
    grid: Grid | None = None,
    progress: Progress | None = None,
    optimise: str = "spend",
    choose: str = "one-se",
    keep_by: str = "accepted",
) -> FitResult:
    """Search stop-contract parameters for the one that saves the most of ``optimise`` while
    keeping at least ``keep`` of the reference's outcomes, cross-validated by task.

    Args:
        traces: recorded runs (``load_source``; several sources may be pooled).
        keep: the share of the reference's outcomes to keep, in (0, 1].
        folds: cross-validation folds (by task), at least 2.
        seed: the shuffle of tasks into folds.
        base: the reference contract, and the template of the result (its success rule, token
            and time budgets, escalation, marginal-return prior; its cycle and cost caps are the
            most lenient values tried). A spend-only one, and every spend-only candidate, is
            scored with the default cycle ceiling, as a run is given it. Without it: the runs as recorded, with the success rule
            read off the traces and the longest recorded run as the cycle cap.
        grid: the values searched (``Grid()``).
        progress: called with (done, total) evaluations as the search goes.
        optimise: what to save: ``spend`` (USD), ``attempts`` (cycles judged) or ``time``
            (recorded seconds).
        choose: ``one-se`` (the simplest candidate within one standard error of the best,
            across folds) or ``best`` (the most saved).
        keep_by: what ``keep`` counts: ``accepted`` outcomes, or ``held-out`` verdicts passed
            (the last judged candidate's).
    """
    t0 = time.perf_counter()
    if base is not None and not isinstance(base, Contract):
        raise ConfigError(f"must be a Contract, got {type(base).__name__}", field="base")
    if base is not None:
        base = base.with_default_ceiling()  # replayed as a run is given it, as replay() does
    if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0 < keep <= 1:
        raise ConfigError(f"must be within (0, 1], got {keep!r}", field="--keep")
    check_objective(optimise, keep_by, choose)
    # The runs are read three times, each time in order (a ``SpilledRuns`` one at a time): their
    # figures and reference outcomes, the hazard tables, then every candidate judged on each.
    # A list is read as it is; an iterator (a generator, ``traces_from_store``) is spilled as
    # the CLI's runs are, so the fit holds at most ``HELD_CYCLES`` of its cycles at once.
    with runs_to_fit(traces) as runs:
        if not len(runs):
            raise ConfigError("no runs to fit on", field="SOURCE")
        return _fit(
            runs,
            base,
            grid or Grid(),
            keep=keep,
            folds=folds,
            seed=seed,
            progress=progress,
            optimise=optimise,
            choose=choose,
            keep_by=keep_by,
            t0=t0,
        )


def _fit(
    runs: SpilledRuns | list[RunTrace],
    base: Contract | None,
    grid: Grid,
    *,
    keep: float,
    folds: int,
    seed: int,
    progress: Progress | None,
    optimise: str,
    choose: str,
    keep_by: str,
    t0: float,
) -> FitResult:
    """``fit_stop`` on its runs, checked, read again as often as asked."""
    facts, ref = _read_facts(runs, base)
    fold_of = split_folds(facts, folds, seed)
    k = folds
    n = len(facts)
    # Each split's template (-1: all runs; f: all but fold f), read off its own runs: a fold's
    # success rule and cycle cap never come from the runs it is judged on (before, the runs of
    # every fold set them: the longest run of a held fold, the lowest score it accepted at).
    # ``same[s]``: the first split with an equal template (its evaluations serve both).
    templates: dict[int, Contract] = {}
    same: dict[int, int] = {}
    for split in range(-1, folds):
        templates[split] = template_contract(
            [t for t, f in zip(facts, fold_of, strict=True) if f != split], base
        )
        same[split] = next(s for s in templates if templates[s] == templates[split])
    template = templates[-1]
    if optimise == "time" and sum(o.seconds for o in ref) <= 0:
        raise ConfigError(
            "the runs record no time (LDB files do not); use --optimise attempts or spend",
            field="--optimise",
        )
    if keep_by == "held-out" and not any(o.held_out_passed for o in ref):
        raise ConfigError(
            "no run has a passed held-out verdict to keep; use --kept accepted", field="--kept"
        )
    ref_sums = reference_sums(ref, fold_of, k)
    fold_idx = [[i for i in range(n) if fold_of[i] == f] for f in range(k)]
    all_idx = list(range(n))
    all_folds = list(range(k))

    plain, marginal, own = split_axes(facts, templates, ref, grid, fold_of, k)
    params = plain + marginal
    complexity = {s: [complexity_of(p, templates[s]) for p in params] for s in templates}
    total = (
        sum(len({same[s] for s in own if p in own[s]}) for p in plain)
        + sum(p in own[s] for p in marginal for s in own)
        + len(FIXED_WINDOWS) * len(set(same.values()))
    )

    # Hazard tables: per training split (fold f, or -1 for all runs) and stall delta, those
    # the marginal candidates are built with, counted run by run (a table's cells are counts:
    # summed over the runs, the table of all of them).
    wanted = list(
        dict.fromkeys((s, p.min_delta) for p in marginal for s in range(-1, k) if p in own[s])
    )
    hazards = _hazards(runs, wanted, templates, fold_of, grid)

    def hazard(split: int, delta: float) -> HazardTable:
        return hazards[(split, delta)]

    # Every candidate's contract, then all of them judged run by run (one read of the runs):
    # ``jobs`` the contracts, each judged once; a candidate's split names its job (None: no
    # contract). A plain candidate is judged once for the splits whose templates are equal.
    jobs: list[Contract] = []

    def job(c: Contract | None) -> int | None:
        if c is None:
            return None
        jobs.append(c)
        return len(jobs) - 1

    plan: list[dict[int, int | None]] = []
    for p in plain:
        per: dict[int, int | None] = {}
        built: dict[int, int | None] = {}
        for split in (s for s in range(-1, k) if p in own[s]):
            if same[split] not in built:
                built[same[split]] = job(build_contract(templates[split], p, ()))
            per[split] = built[same[split]]
        plan.append(per)
    for p in marginal:
        per = {}
        for split in (s for s in range(-1, k) if p in own[s]):
            per[split] = job(build_contract(templates[split], p, hazard(split, p.min_delta)))
        plan.append(per)
    fixed_plan: list[dict[int, int | None]] = []
    for w in FIXED_WINDOWS:
        fixed_built: dict[int, int | None] = {}
        for split in range(-1, k):  # each under its split's caps
            if same[split] not in fixed_built:
                tp = templates[split]
                c = build_contract(tp, fixed_params(w, tp), ())
                assert c is not None
                fixed_built[same[split]] = job(c)
        fixed_plan.append({s: fixed_built[same[s]] for s in range(-1, k)})

    def judged(i: int) -> None:  # (run i of n judged: the share of the evaluations done)
        if progress is not None:
            progress(total * (i + 1) // n, total)

    judged_all = evaluate_all(runs, jobs, ref, fold_of, k, judged)
    # evals[j][split]: candidate j's outcomes, built on the split's template; split -1 = all
    # runs
    evals: list[dict[int, Eval]] = [
        {s: judged_all[x] for s, x in per.items() if x is not None} for per in plan
    ]
    usable = [j for j in range(len(params)) if evals[j]]

    def pool(split: int) -> list[int]:  # the candidates read off the split's own runs
        return [j for j in usable if split in evals[j] and params[j] in own[split]]

    def pick(
        pool: Sequence[int],
        table: Sequence[Mapping[int, Eval]],
        split: int,
        on: Sequence[int],
        cx: Mapping[int, Sequence[int]],
    ) -> tuple[int, bool]:
        scores = [
            score(j, table[j][split].fold_sums, ref_sums, on, optimise, keep_by) for j in pool
        ]
        return select(scores, keep, cx[split], choose)

    # Cross-validation: pick on the training folds (their per-fold figures give the standard
    # error), report on the held one.
    fold_results = []
    for f in range(k):
        train_folds = [g for g in all_folds if g != f]
        j, _ = pick(pool(f), evals, f, train_folds, complexity)
        ev = evals[j][f]
        fold_results.append(
            FoldResult(
                fold=f,
                tasks=len({facts[i].task_key for i in fold_idx[f]}),
                params=params[j],
                train=figures_of(ev, [i for i in all_idx if fold_of[i] != f], ref),
                validation=figures_of(ev, fold_idx[f], ref),
            )
        )

    # All runs: pick again, hazard refitted on all of them.
    usable = pool(-1)
    best, feasible = pick(usable, evals, -1, all_folds, complexity)
    p = params[best]
    contract = build_contract(
        template, p, hazard(-1, p.min_delta) if p.value_per_success_usd is not None else ()
    )
    assert contract is not None
    figs = [figures_of(evals[j][-1], all_idx, ref) for j in usable]
    front = frontier(figs)
    candidates = tuple(
        Candidate(params[j], figs[pos], frontier=pos in front, chosen=j == best)
        for pos, j in enumerate(usable)
    )
    chosen_per_fold = [figures_of(evals[best][-1], idx, ref) for idx in fold_idx]

    # The best fixed no-progress rule, chosen by the same criterion on the same folds.
    fixed_evals: list[dict[int, Eval]] = [
        {s: judged_all[x] for s, x in per.items() if x is not None} for per in fixed_plan
    ]
    fixed_pool = list(range(len(FIXED_WINDOWS)))
    fixed_cx = dict.fromkeys(templates, [1] * len(FIXED_WINDOWS))
    fixed_folds = []
    fixed_val: Figures | None = None
    for f in range(k):
        w, _ = pick(fixed_pool, fixed_evals, f, [g for g in all_folds if g != f], fixed_cx)
        fixed_folds.append(FIXED_WINDOWS[w])
        fv = figures_of(fixed_evals[w][f], fold_idx[f], ref)
        fixed_val = fv if fixed_val is None else fixed_val + fv
    assert fixed_val is not None
    w_all, _ = pick(fixed_pool, fixed_evals, -1, all_folds, fixed_cx)
    fixed_figs = tuple(
        (FIXED_WINDOWS[i], figures_of(fixed_evals[i][-1], all_idx, ref)) for i in fixed_pool
    )
    result = FitResult(
        contract=contract,
        params=p,
        all_data=figures_of(evals[best][-1], all_idx, ref),
        folds=tuple(fold_results),
        candidates=candidates,
        keep=float(keep),
        seed=seed,
        reference="recorded" if base is None else "base",
        runs=n,
        tasks=len({t.task_key for t in facts}),
        feasible=feasible,
        seconds=0.0,
        evaluations=total,
        optimise=optimise,
        choose=choose,
        keep_by=keep_by,
        chosen_per_fold=tuple(chosen_per_fold),
        families=tuple(family_of(fr.params, templates[fr.fold]) for fr in fold_results),
    )
    fixed_rule = compare_fixed(
        result, FIXED_WINDOWS[w_all], fixed_figs, tuple(fixed_folds), fixed_val
    )
    return replace(result, fixed=fixed_rule, seconds=time.perf_counter() - t0)
