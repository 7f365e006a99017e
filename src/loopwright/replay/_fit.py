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

Grid values (cycle caps, cost quantiles, marginal values) are derived from all runs; the choice
among them is what is cross-validated.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._contract import Budget, Contract, MarginalReturn, NoProgress, Success
from .._errors import ConfigError
from ._format import RunTrace, added_up
from ._hazard import HazardTable, fit_hazard
from ._report import recorded_outcomes
from ._simulate import Outcome, simulate

__all__ = [
    "FIT_FORMAT",
    "Candidate",
    "Figures",
    "FitResult",
    "FixedRule",
    "FoldResult",
    "Grid",
    "StopParams",
    "fit_stop",
    "plot_frontier",
    "split_folds",
]

FIT_FORMAT = "loopwright.fit-stop/1"

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Grid:
    """The values searched (the product of the axes; see ``fit_stop``).

    Attributes:
        no_progress_cycles: plateau windows tried (besides no plateau rule at all).
        min_deltas: material-improvement thresholds tried with each window.
        max_cycles: cycle caps tried below the template's cap (the cap itself is always tried).
        cost_quantiles: cost caps tried, as quantiles of the recorded costs of the runs the
            reference accepted (nearest rank over the runs that cost anything).
        marginal_multiples: marginal-return values tried, as multiples of the median priced
            cycle cost; ``marginal_values`` (USD) replaces them when given.
        hazard_cycles / hazard_stall: the shape of fitted hazard tables (see ``fit_hazard``).
    """

    no_progress_cycles: tuple[int, ...] = (1, 2, 3, 4, 5)
    min_deltas: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1)
    max_cycles: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 50)
    cost_quantiles: tuple[float, ...] = (0.8, 0.9, 0.95, 1.0)
    marginal_multiples: tuple[float, ...] = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
    marginal_values: tuple[float, ...] | None = None
    hazard_cycles: int = 10
    hazard_stall: int = 3


@dataclass(frozen=True, slots=True)
class StopParams:
    """One point of the search: the parameters a candidate contract sets (``None``: unset)."""

    no_progress_cycles: int | None = None
    min_delta: float = 0.0  # the no-progress delta; 0.0 without a no-progress rule (as the engine)
    max_cycles: int | None = None
    max_cost_usd: float | None = None
    value_per_success_usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "no_progress_cycles": self.no_progress_cycles,
            "min_delta": self.min_delta,
            "max_cycles": self.max_cycles,
            "max_cost_usd": self.max_cost_usd,
            "value_per_success_usd": self.value_per_success_usd,
        }

    def describe(self) -> str:
        parts = []
        if self.no_progress_cycles is not None:
            parts.append(f"no_progress {self.no_progress_cycles}×Δ{self.min_delta:g}")
        if self.max_cycles is not None:
            parts.append(f"max_cycles {self.max_cycles}")
        if self.max_cost_usd is not None:
            parts.append(f"max_cost ${self.max_cost_usd:.4g}")
        if self.value_per_success_usd is not None:
            parts.append(f"marginal_return ${self.value_per_success_usd:.4g}")
        return ", ".join(parts) or "(no rule)"


@dataclass(frozen=True, slots=True)
class Figures:
    """A policy's totals over some runs, beside the reference's on the same runs."""

    runs: int
    accepted: int
    accepted_kept: int  # accepted here and by the reference
    reference_accepted: int
    cost_usd: float
    reference_cost_usd: float
    stop_reasons: Mapping[str, int] = field(default_factory=dict)
    attempts: int = 0  # cycles judged (one program each)
    reference_attempts: int = 0
    seconds: float = 0.0
    reference_seconds: float = 0.0
    held_out_kept: int = 0  # held-out verdict passed here and under the reference
    reference_held_out: int = 0

    @property
    def kept_share(self) -> float:
        return self.accepted_kept / self.reference_accepted if self.reference_accepted else 1.0

    @property
    def held_out_kept_share(self) -> float:
        """Of the runs whose last judged candidate passed the held-out checks under the
        reference, the share that still does."""
        return self.held_out_kept / self.reference_held_out if self.reference_held_out else 1.0

    @property
    def spend_saved_share(self) -> float | None:
        """1 − spend / the reference's spend (``None`` when the reference spent nothing)."""
        return _saved(self.cost_usd, self.reference_cost_usd)

    @property
    def attempts_saved_share(self) -> float | None:
        return _saved(self.attempts, self.reference_attempts)

    @property
    def time_saved_share(self) -> float | None:
        return _saved(self.seconds, self.reference_seconds)

    def saved_share(self, optimise: str) -> float | None:
        """The share saved of what ``optimise`` names (``spend``, ``attempts``, ``time``)."""
        return {
            "spend": self.spend_saved_share,
            "attempts": self.attempts_saved_share,
            "time": self.time_saved_share,
        }[optimise]

    def kept(self, keep_by: str) -> float:
        """The kept share that ``keep_by`` names (``accepted`` or ``held-out``)."""
        return self.held_out_kept_share if keep_by == "held-out" else self.kept_share

    @property
    def cost_per_accepted_usd(self) -> float | None:
        return self.cost_usd / self.accepted if self.accepted else None

    @property
    def reference_cost_per_accepted_usd(self) -> float | None:
        return (
            self.reference_cost_usd / self.reference_accepted if self.reference_accepted else None
        )

    def __add__(self, other: Figures) -> Figures:
        reasons = Counter(self.stop_reasons)
        reasons.update(other.stop_reasons)
        return Figures(
            self.runs + other.runs,
            self.accepted + other.accepted,
            self.accepted_kept + other.accepted_kept,
            self.reference_accepted + other.reference_accepted,
            self.cost_usd + other.cost_usd,
            self.reference_cost_usd + other.reference_cost_usd,
            dict(reasons),
            self.attempts + other.attempts,
            self.reference_attempts + other.reference_attempts,
            self.seconds + other.seconds,
            self.reference_seconds + other.reference_seconds,
            self.held_out_kept + other.held_out_kept,
            self.reference_held_out + other.reference_held_out,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "accepted": self.accepted,
            "accepted_kept": self.accepted_kept,
            "reference_accepted": self.reference_accepted,
            "kept_share": self.kept_share,
            "held_out_kept": self.held_out_kept,
            "reference_held_out": self.reference_held_out,
            "held_out_kept_share": self.held_out_kept_share,
            "cost_usd": self.cost_usd,
            "reference_cost_usd": self.reference_cost_usd,
            "spend_saved_share": self.spend_saved_share,
            "attempts": self.attempts,
            "reference_attempts": self.reference_attempts,
            "attempts_saved_share": self.attempts_saved_share,
            "seconds": self.seconds,
            "reference_seconds": self.reference_seconds,
            "time_saved_share": self.time_saved_share,
            "cost_per_accepted_usd": self.cost_per_accepted_usd,
            "reference_cost_per_accepted_usd": self.reference_cost_per_accepted_usd,
            "stop_reasons": dict(self.stop_reasons),
        }


def _saved(used: float, reference: float) -> float | None:
    return None if reference <= 0 else 1.0 - used / reference


@dataclass(frozen=True, slots=True)
class FoldResult:
    fold: int
    tasks: int
    params: StopParams
    train: Figures
    validation: Figures

    def to_dict(self) -> dict[str, Any]:
        return {
            "fold": self.fold,
            "tasks": self.tasks,
            "params": self.params.to_dict(),
            "train": self.train.to_dict(),
            "validation": self.validation.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate's figures on all runs (hazard fitted on all runs); for the plot."""

    params: StopParams
    figures: Figures
    frontier: bool = False
    chosen: bool = False


_MEAN_KEYS = (
    "kept_share",
    "held_out_kept_share",
    "spend_saved_share",
    "attempts_saved_share",
    "time_saved_share",
    "cost_per_accepted_usd",
)


def _mean(figs: Iterable[Figures]) -> dict[str, float | None]:
    figs = list(figs)
    out: dict[str, float | None] = {}
    for key in _MEAN_KEYS:
        vals = [v for f in figs if (v := getattr(f, key)) is not None]
        out[key] = statistics.fmean(vals) if vals else None
    return out


@dataclass(frozen=True, slots=True)
class FixedRule:
    """The best fixed no-progress rule ("stop after ``window`` cycles without fewer failing
    visible tests", w = 1..5) on the same runs, chosen by the same criterion on the same folds."""

    window: int  # chosen on all runs
    figures: tuple[tuple[int, Figures], ...]  # every window's figures on all runs
    per_fold: tuple[int, ...]  # the window each fold picked on its training folds
    validation_pooled: Figures
    as_good: bool  # as good as the fit on held-out folds (within one SE), or better
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "per_fold": list(self.per_fold),
            "all_runs": {str(w): f.to_dict() for w, f in self.figures},
            "validation_pooled": self.validation_pooled.to_dict(),
            "as_good": self.as_good,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class FitResult:
    """What ``fit_stop`` found: the contract, its figures, and how it held up across folds."""

    contract: Contract
    params: StopParams
    all_data: Figures
    folds: tuple[FoldResult, ...]
    candidates: tuple[Candidate, ...]
    keep: float
    seed: int
    reference: str  # "recorded" or "base"
    runs: int
    tasks: int
    feasible: bool
    seconds: float
    evaluations: int
    optimise: str = "spend"
    choose: str = "one-se"
    keep_by: str = "accepted"
    chosen_per_fold: tuple[Figures, ...] = ()  # the contract written, on each fold's runs
    families: tuple[str, ...] = ()  # the rules each fold's pick sets
    fixed: FixedRule | None = None

    def spread(self) -> dict[str, Any]:
        """Fold-to-fold spread: the rules picked per fold, the held-out figures of those picks,
        and the written contract's figures fold by fold (mean, sd, min, max)."""
        o, kb = self.optimise, self.keep_by
        return {
            "rules_picked": [f.params.describe() for f in self.folds],
            "distinct_rules": len({f.params for f in self.folds}),
            "families": list(self.families),
            "distinct_families": len(set(self.families)),
            "validation": {
                "kept": _spread(f.validation.kept(kb) for f in self.folds),
                "saved": _spread(f.validation.saved_share(o) for f in self.folds),
            },
            "chosen_by_fold": {
                "kept": _spread(f.kept(kb) for f in self.chosen_per_fold),
                "saved": _spread(f.saved_share(o) for f in self.chosen_per_fold),
            },
        }

    def mean(self, split: str) -> dict[str, float | None]:
        """Mean over folds of ``train`` or ``validation`` kept share, spend saved, cost per
        accepted."""
        if split not in ("train", "validation"):
            raise ValueError(split)
        return _mean(getattr(f, split) for f in self.folds)

    @property
    def validation_pooled(self) -> Figures:
        """Every run judged once, by the contract picked without its fold."""
        out = self.folds[0].validation
        for f in self.folds[1:]:
            out = out + f.validation
        return out

    def report(self) -> dict[str, Any]:
        return {
            "format": FIT_FORMAT,
            "runs": self.runs,
            "tasks": self.tasks,
            "keep": self.keep,
            "folds": len(self.folds),
            "seed": self.seed,
            "reference": self.reference,
            "optimise": self.optimise,
            "choose": self.choose,
            "kept_by": self.keep_by,
            "feasible": self.feasible,
            "candidates": len(self.candidates),
            "evaluations": self.evaluations,
            "seconds": self.seconds,
            "chosen": {"params": self.params.to_dict(), "describe": self.params.describe()},
            "contract": self.contract.to_dict(),
            "all_data": self.all_data.to_dict(),
            "cross_validation": {
                "per_fold": [f.to_dict() for f in self.folds],
                "mean": {"train": self.mean("train"), "validation": self.mean("validation")},
                "validation_pooled": self.validation_pooled.to_dict(),
                "spread": self.spread(),
            },
            "fixed_rule": None if self.fixed is None else self.fixed.to_dict(),
            "frontier": [
                {**c.params.to_dict(), **_point(c.figures)} for c in self.candidates if c.frontier
            ],
        }

    def to_toml(self) -> str:
        return _to_toml(self)


def _point(f: Figures) -> dict[str, Any]:
    return {
        "accepted": f.accepted,
        "cost_usd": f.cost_usd,
        "kept_share": f.kept_share,
        "cost_per_accepted_usd": f.cost_per_accepted_usd,
    }


# --- folds ------------------------------------------------------------------------------------
def split_folds(traces: Sequence[RunTrace], folds: int, seed: int = 0) -> list[int]:
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
_MEASURE = {"spend": 0, "attempts": 1, "time": 2}

# Per fold: (spend, attempts, seconds, accepted, accepted and kept, held-out kept); the
# reference's: (spend, attempts, seconds, accepted, held-out passed).
_Sums = tuple[float, float, float, float, float, float]


@dataclass(slots=True)
class _Eval:
    """One candidate's outcomes on every run, with sums per fold."""

    outcomes: list[Outcome]
    fold_sums: list[_Sums]


def _evaluate(
    traces: Sequence[RunTrace],
    contract: Contract,
    ref: Sequence[Outcome],
    fold_of: Sequence[int],
    k: int,
) -> _Eval:
    sums = [[0.0] * 6 for _ in range(k)]
    outs: list[Outcome] = []
    for t, r, f in zip(traces, ref, fold_of, strict=True):
        o = simulate(t, contract)
        outs.append(o)
        row = sums[f]
        row[0] += o.cost_usd
        row[1] += o.cycles
        row[2] += o.seconds
        if o.accepted:
            row[3] += 1
            row[4] += r.accepted
        row[5] += bool(o.held_out_passed and r.held_out_passed)
    return _Eval(outs, [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in sums])


def _ref_sums(ref: Sequence[Outcome], fold_of: Sequence[int], k: int) -> list[_Sums]:
    sums = [[0.0] * 6 for _ in range(k)]
    for o, f in zip(ref, fold_of, strict=True):
        row = sums[f]
        row[0] += o.cost_usd
        row[1] += o.cycles
        row[2] += o.seconds
        row[3] += o.accepted
        row[4] += bool(o.held_out_passed)
    return [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in sums]


@dataclass(frozen=True, slots=True)
class _Score:
    """A candidate judged on a set of folds: kept share, saved share (pooled over the folds),
    and the standard error of the saved share across them."""

    index: int
    kept: float
    saved: float
    se: float


def _score(
    index: int,
    sums: Sequence[_Sums],
    ref: Sequence[_Sums],
    folds: Sequence[int],
    optimise: str,
    keep_by: str,
) -> _Score:
    m = _MEASURE[optimise]
    ki, ri = (5, 4) if keep_by == "held-out" else (4, 3)
    # (in order, as on every Python: see added_up)
    ref_m = added_up(ref[g][m] for g in folds)
    ref_k = added_up(ref[g][ri] for g in folds)
    kept = added_up(sums[g][ki] for g in folds) / ref_k if ref_k else 1.0
    saved = 1.0 - added_up(sums[g][m] for g in folds) / ref_m if ref_m > 0 else 0.0
    per = [1.0 - sums[g][m] / ref[g][m] for g in folds if ref[g][m] > 0]
    se = statistics.stdev(per) / math.sqrt(len(per)) if len(per) >= 2 else 0.0
    return _Score(index, kept, saved, se)


def _select(
    scores: Sequence[_Score], keep: float, complexity: Sequence[int], choose: str
) -> tuple[int, bool]:
    """The chosen candidate's index, and whether it keeps enough.

    ``best``: the feasible candidate (kept ≥ ``keep``) that saves the most. ``one-se``: among
    the feasible candidates saving within one standard error (across folds) of the best, the
    one with the fewest rules, then the highest kept share, then the most saved: differences
    smaller than the fold-to-fold noise do not decide, simplicity and safety do.
    """
    feasible = [x for x in scores if x.kept >= keep - 1e-12]
    if not feasible:
        top = max(scores, key=lambda x: (x.kept, x.saved, -complexity[x.index], -x.index))
        return top.index, False
    top = max(feasible, key=lambda x: (x.saved, x.kept, -complexity[x.index], -x.index))
    if choose == "best":
        return top.index, True
    band = [x for x in feasible if x.saved >= top.saved - top.se - 1e-12]
    pick = min(band, key=lambda x: (complexity[x.index], -x.kept, -x.saved, x.index))
    return pick.index, True


def _quantile(sorted_vals: Sequence[float], q: float) -> float:
    idx = max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[idx]


def _infer_success(traces: Sequence[RunTrace]) -> Success:
    """Without a base: the checks the recorded contracts' success rule named
    (``recorded.success_required``), else the traces' ``required`` checks, when all runs share
    them; and the lowest final score among the runs recorded as accepted (1.0 when none)."""
    reqs = {_success_required(t) for t in traces}
    required = next(iter(reqs)) if len(reqs) == 1 and next(iter(reqs)) else None
    finals = [
        t.cycles[-1].score
        for t in traces
        if t.recorded.get("status") == "accepted" and t.cycles and t.cycles[-1].score is not None
    ]
    min_score = min(1.0, max(0.0, min(s for s in finals if s is not None))) if finals else 1.0
    return Success(min_score=min_score, required=required)


def _success_required(t: RunTrace) -> tuple[str, ...]:
    listed = t.recorded.get("success_required")
    if isinstance(listed, list | tuple) and listed:
        return tuple(str(x) for x in listed)
    return t.required


def _build(template: Contract, p: StopParams, hazard: HazardTable) -> Contract | None:
    mr = None
    if p.value_per_success_usd is not None:
        prior = template.marginal_return
        mr = MarginalReturn(
            value_per_success_usd=p.value_per_success_usd,
            hazard=hazard,
            prior_successes=prior.prior_successes if prior else 1.0,
            prior_failures=prior.prior_failures if prior else 3.0,
        )
    try:
        built = Contract(
            success=template.success,
            no_progress=None
            if p.no_progress_cycles is None
            else NoProgress(cycles=p.no_progress_cycles, min_delta=p.min_delta),
            budget=replace(template.budget, max_cycles=p.max_cycles, max_cost_usd=p.max_cost_usd),
            marginal_return=mr,
            escalation=template.escalation,
        )
    except ConfigError:
        return None  # no exit besides success
    return None if built.marginal_return_only else built  # a loop refuses it


def _axes(
    traces: Sequence[RunTrace],
    template: Contract,
    ref: Sequence[Outcome],
    grid: Grid,
) -> tuple[list[StopParams], list[StopParams]]:
    """Plain candidates (no marginal return) and marginal-return ones, lenient first."""
    b = template.budget
    longest = max((len(t.cycles) for t in traces), default=1)
    cap = b.max_cycles
    below = sorted({v for v in grid.max_cycles if v >= 1 and v < (cap or longest)}, reverse=True)
    cycles_axis: list[int | None] = [cap, *below]
    accepted_costs = sorted(o.cost_usd for o in ref if o.accepted and o.cost_usd > 0)
    quants = (
        sorted({_quantile(accepted_costs, q) for q in grid.cost_quantiles}, reverse=True)
        if accepted_costs
        else []
    )
    base_cost = b.max_cost_usd
    cost_axis: list[float | None] = [base_cost] + [
        q for q in quants if base_cost is None or q < base_cost
    ]
    np_axis: list[tuple[int | None, float]] = [(None, 0.0)]
    deltas = sorted(set(grid.min_deltas)) or [0.0]
    for c in sorted(set(grid.no_progress_cycles), reverse=True):
        np_axis += [(c, d) for d in deltas]
    if template.no_progress is not None:
        own = (template.no_progress.cycles, template.no_progress.min_delta)
        if own not in np_axis:
            np_axis.insert(1, own)
    plain = [
        StopParams(npc, d, mc, mcost, None)
        for npc, d in np_axis
        for mc in cycles_axis
        for mcost in cost_axis
    ]
    # Marginal-return values: explicit, or multiples of the median priced cycle cost.
    values: list[float]
    if grid.marginal_values is not None:
        values = [v for v in grid.marginal_values if v > 0]
    else:
        priced = [c.cost_usd for t in traces for c in t.cycles if c.cost_usd > 0]
        median = statistics.median(priced) if priced else 0.0
        values = [median * m for m in grid.marginal_multiples] if median > 0 else []
    if template.marginal_return is not None:
        values.append(template.marginal_return.value_per_success_usd)
    mr_np = [(None, 0.0)] + [
        (c, deltas[0]) for c in sorted(set(grid.no_progress_cycles), reverse=True)
    ]
    marginal = [
        StopParams(npc, d, cap, base_cost, v)
        for v in sorted(set(values), reverse=True)
        for npc, d in mr_np
    ]
    return plain, marginal


def _complexity(p: StopParams, template: Contract) -> int:
    return (
        (p.no_progress_cycles is not None)
        + (p.max_cycles != template.budget.max_cycles)
        + (p.max_cost_usd != template.budget.max_cost_usd)
        + (p.value_per_success_usd is not None)
    )


def _family(p: StopParams, template: Contract) -> str:
    """Which rules a candidate sets (its values aside): what a fold's pick is compared by."""
    names = []
    if p.no_progress_cycles is not None:
        names.append("no_progress")
    if p.max_cycles != template.budget.max_cycles:
        names.append("max_cycles")
    if p.max_cost_usd != template.budget.max_cost_usd:
        names.append("max_cost")
    if p.value_per_success_usd is not None:
        names.append("marginal_return")
    return "+".join(names) or "(template)"


def _figures(ev: _Eval, idx: Sequence[int], ref: Sequence[Outcome]) -> Figures:
    outs = ev.outcomes
    return Figures(
        runs=len(idx),
        accepted=sum(1 for i in idx if outs[i].accepted),
        accepted_kept=sum(1 for i in idx if outs[i].accepted and ref[i].accepted),
        reference_accepted=sum(1 for i in idx if ref[i].accepted),
        cost_usd=added_up(outs[i].cost_usd for i in idx),
        reference_cost_usd=added_up(ref[i].cost_usd for i in idx),
        stop_reasons=dict(Counter(outs[i].reason for i in idx)),
        attempts=sum(outs[i].cycles for i in idx),
        reference_attempts=sum(ref[i].cycles for i in idx),
        seconds=added_up(outs[i].seconds for i in idx),
        reference_seconds=added_up(ref[i].seconds for i in idx),
        held_out_kept=sum(1 for i in idx if outs[i].held_out_passed and ref[i].held_out_passed),
        reference_held_out=sum(1 for i in idx if ref[i].held_out_passed),
    )


def _frontier(points: Sequence[Figures]) -> set[int]:
    """Indices not dominated: no other candidate has as many accepted for less spend or more
    accepted for as little."""
    order = sorted(range(len(points)), key=lambda i: (points[i].cost_usd, -points[i].accepted))
    out: set[int] = set()
    best = -1
    for i in order:
        if points[i].accepted > best:
            out.add(i)
            best = points[i].accepted
    return out


FIXED_WINDOWS = (1, 2, 3, 4, 5)


def _fixed_params(w: int, template: Contract) -> StopParams:
    """The rule "stop after ``w`` cycles without fewer failing visible tests": a plateau rule with
    Δ 0 (any rise of the visible score, or a check passing first, is progress) under the
    template's caps."""
    return StopParams(w, 0.0, template.budget.max_cycles, template.budget.max_cost_usd, None)


def check_objective(optimise: str, keep_by: str, choose: str) -> None:
    """Refuse an unknown ``optimise``, ``keep_by`` or ``choose`` (the CLI's option names)."""
    for value, allowed, option in (
        (optimise, OPTIMISE, "--optimise"),
        (keep_by, KEEP_BY, "--kept"),
        (choose, CHOOSE, "--choose"),
    ):
        if value not in allowed:
            raise ConfigError(f"must be one of {', '.join(allowed)}, got {value!r}", field=option)


def _spread(values: Iterable[float | None]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "sd": None, "min": None, "max": None}
    return {
        "mean": statistics.fmean(vals),
        "sd": statistics.stdev(vals) if len(vals) >= 2 else 0.0,
        "min": min(vals),
        "max": max(vals),
    }


def fit_stop(
    traces: Sequence[RunTrace],
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
            most lenient values tried). Without it: the runs as recorded, with the success rule
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
    traces = list(traces)
    if not traces:
        raise ConfigError("no runs to fit on", field="SOURCE")
    if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0 < keep <= 1:
        raise ConfigError(f"must be within (0, 1], got {keep!r}", field="--keep")
    check_objective(optimise, keep_by, choose)
    grid = grid or Grid()
    fold_of = split_folds(traces, folds, seed)
    k = folds
    n = len(traces)
    if base is None:
        ref = recorded_outcomes(traces)
        longest = max(len(t.cycles) for t in traces)
        template = Contract(
            success=_infer_success(traces), budget=Budget(max_cycles=max(1, longest))
        )
    else:
        ref = [simulate(t, base) for t in traces]
        template = base
    if optimise == "time" and sum(o.seconds for o in ref) <= 0:
        raise ConfigError(
            "the runs record no time (LDB files do not); use --optimise attempts or spend",
            field="--optimise",
        )
    if keep_by == "held-out" and not any(o.held_out_passed for o in ref):
        raise ConfigError(
            "no run has a passed held-out verdict to keep; use --kept accepted", field="--kept"
        )
    ref_sums = _ref_sums(ref, fold_of, k)
    fold_idx = [[i for i in range(n) if fold_of[i] == f] for f in range(k)]
    all_idx = list(range(n))
    all_folds = list(range(k))

    plain, marginal = _axes(traces, template, ref, grid)
    fixed = [_fixed_params(w, template) for w in FIXED_WINDOWS]
    params = plain + marginal
    complexity = [_complexity(p, template) for p in params]
    total = len(plain) + len(marginal) * (k + 1) + len(fixed)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    # Hazard tables: per training split (fold f, or -1 for all runs) and stall delta.
    hazards: dict[tuple[int, float], HazardTable] = {}

    def hazard(split: int, delta: float) -> HazardTable:
        key = (split, delta)
        if key not in hazards:
            chosen = [t for t, f in zip(traces, fold_of, strict=True) if f != split]
            hazards[key] = fit_hazard(
                chosen,
                success=template.success,
                min_delta=delta,
                max_cycles=grid.hazard_cycles,
                max_stall=grid.hazard_stall,
            )
        return hazards[key]

    # evals[j][split]: candidate j's outcomes; split -1 = hazard on all runs (plain: the same
    # for every split).
    evals: list[dict[int, _Eval]] = []
    for p in plain:
        c = _build(template, p, ())
        ev = None if c is None else _evaluate(traces, c, ref, fold_of, k)
        evals.append({} if ev is None else dict.fromkeys(range(-1, k), ev))
        tick()
    for p in marginal:
        per: dict[int, _Eval] = {}
        for split in range(-1, k):
            c = _build(template, p, hazard(split, p.min_delta))
            if c is not None:
                per[split] = _evaluate(traces, c, ref, fold_of, k)
            tick()
        evals.append(per)
    usable = [j for j in range(len(params)) if evals[j]]

    def pick(
        pool: Sequence[int],
        table: Sequence[Mapping[int, _Eval]],
        split: int,
        on: Sequence[int],
        cx: Sequence[int],
    ) -> tuple[int, bool]:
        scores = [
            _score(j, table[j][split].fold_sums, ref_sums, on, optimise, keep_by) for j in pool
        ]
        return _select(scores, keep, cx, choose)

    # Cross-validation: pick on the training folds (their per-fold figures give the standard
    # error), report on the held one.
    fold_results = []
    for f in range(k):
        train_folds = [g for g in all_folds if g != f]
        j, _ = pick(usable, evals, f, train_folds, complexity)
        ev = evals[j][f]
        fold_results.append(
            FoldResult(
                fold=f,
                tasks=len({traces[i].task_key for i in fold_idx[f]}),
                params=params[j],
                train=_figures(ev, [i for i in all_idx if fold_of[i] != f], ref),
                validation=_figures(ev, fold_idx[f], ref),
            )
        )

    # All runs: pick again, hazard refitted on all of them.
    best, feasible = pick(usable, evals, -1, all_folds, complexity)
    p = params[best]
    contract = _build(
        template, p, hazard(-1, p.min_delta) if p.value_per_success_usd is not None else ()
    )
    assert contract is not None
    figs = [_figures(evals[j][-1], all_idx, ref) for j in usable]
    front = _frontier(figs)
    candidates = tuple(
        Candidate(params[j], figs[pos], frontier=pos in front, chosen=j == best)
        for pos, j in enumerate(usable)
    )
    chosen_per_fold = [_figures(evals[best][-1], idx, ref) for idx in fold_idx]

    # The best fixed no-progress rule, chosen by the same criterion on the same folds.
    fixed_evals: list[dict[int, _Eval]] = []
    for fp in fixed:
        c = _build(template, fp, ())
        assert c is not None
        fixed_evals.append(dict.fromkeys(range(-1, k), _evaluate(traces, c, ref, fold_of, k)))
        tick()
    fixed_pool = list(range(len(fixed)))
    fixed_cx = [1] * len(fixed)
    fixed_folds = []
    fixed_val: Figures | None = None
    for f in range(k):
        w, _ = pick(fixed_pool, fixed_evals, f, [g for g in all_folds if g != f], fixed_cx)
        fixed_folds.append(FIXED_WINDOWS[w])
        fv = _figures(fixed_evals[w][f], fold_idx[f], ref)
        fixed_val = fv if fixed_val is None else fixed_val + fv
    assert fixed_val is not None
    w_all, _ = pick(fixed_pool, fixed_evals, -1, all_folds, fixed_cx)
    fixed_figs = tuple(
        (FIXED_WINDOWS[i], _figures(fixed_evals[i][-1], all_idx, ref)) for i in fixed_pool
    )
    result = FitResult(
        contract=contract,
        params=p,
        all_data=_figures(evals[best][-1], all_idx, ref),
        folds=tuple(fold_results),
        candidates=candidates,
        keep=float(keep),
        seed=seed,
        reference="recorded" if base is None else "base",
        runs=n,
        tasks=len({t.task_key for t in traces}),
        feasible=feasible,
        seconds=0.0,
        evaluations=total,
        optimise=optimise,
        choose=choose,
        keep_by=keep_by,
        chosen_per_fold=tuple(chosen_per_fold),
        families=tuple(_family(fr.params, template) for fr in fold_results),
    )
    fixed_rule = _compare_fixed(
        result, FIXED_WINDOWS[w_all], fixed_figs, tuple(fixed_folds), fixed_val
    )
    return replace(result, fixed=fixed_rule, seconds=time.perf_counter() - t0)


def _compare_fixed(
    r: FitResult,
    window: int,
    figures: tuple[tuple[int, Figures], ...],
    per_fold: tuple[int, ...],
    validation: Figures,
) -> FixedRule:
    """The best fixed rule beside the fit, on held-out folds: "as good" when it keeps and
    saves within one standard error (across the fit's validation folds) of the fit, or more."""
    fit = r.validation_pooled
    o, kb = r.optimise, r.keep_by
    kept_se = _se(f.validation.kept(kb) for f in r.folds)
    saved_se = _se(f.validation.saved_share(o) for f in r.folds)
    fk, fs = fit.kept(kb), fit.saved_share(o) or 0.0
    xk, xs = validation.kept(kb), validation.saved_share(o) or 0.0
    as_good = xk >= fk - kept_se - 1e-12 and xs >= fs - saved_se - 1e-12
    rule = f'"stop after {window} cycle(s) without fewer failing visible tests"'
    what = "held-out verdicts" if kb == "held-out" else "accepted outcomes"
    figs = (
        f"on held-out folds it keeps {_pct(xk)} of {what} and saves {_pct(xs)} of {o}; the fit "
        f"keeps {_pct(fk)} and saves {_pct(fs)} (one SE across folds: kept {_pct(kept_se)}, "
        f"saved {_pct(saved_se)})"
    )
    if as_good and (xk > fk + kept_se or xs > fs + saved_se):
        verdict = f"The simple rule {rule} is better than the fit: {figs}. Use the simple rule."
    elif as_good:
        verdict = (
            f"A simple rule is as good: {rule} is within one standard error of the fit: {figs}. "
            "Prefer the simple rule."
        )
    else:
        verdict = f"The fit beats the best fixed rule {rule}: {figs}."
    return FixedRule(window, figures, per_fold, validation, as_good, verdict)


def _se(values: Iterable[float | None]) -> float:
    vals = [v for v in values if v is not None]
    return statistics.stdev(vals) / math.sqrt(len(vals)) if len(vals) >= 2 else 0.0


# --- TOML -------------------------------------------------------------------------------------
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(v)
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:.4g}"


def _to_toml(r: FitResult) -> str:
    c = r.contract
    a = r.all_data
    v = r.mean("validation")
    pooled = r.validation_pooled
    ref = "the runs as recorded" if r.reference == "recorded" else "the base contract"
    o, kb = r.optimise, r.keep_by
    what = "passed held-out verdicts" if kb == "held-out" else "accepted outcomes"
    fx = r.fixed
    lines = [
        f"# Fitted by `loopwright fit-stop` ({FIT_FORMAT}) on {r.runs} run(s) of {r.tasks} "
        f"task(s): the most {o} saved",
        f"# keeping >= {r.keep:g} of the {what} of {ref} (choice: {r.choose}).",
        f"# Chosen: {r.params.describe()}"
        + ("" if r.feasible else "  (NO candidate kept enough; the best kept share is shown)"),
        f"# All runs: kept {_pct(a.kept(kb))}, {o} saved {_pct(a.saved_share(o))}, spend saved "
        f"{_pct(a.spend_saved_share)}, cost per accepted {_usd(a.cost_per_accepted_usd)} "
        f"(reference {_usd(a.reference_cost_per_accepted_usd)}).",
        f"# Validation ({len(r.folds)} folds by task, seed {r.seed}), pooled: kept "
        f"{_pct(pooled.kept(kb))}, {o} saved {_pct(pooled.saved_share(o))}; mean over folds: "
        f"spend saved {_pct(v['spend_saved_share'])}.",
    ]
    if fx is not None:
        lines += ["# " + line for line in textwrap.wrap(fx.verdict, 96)]
    lines += [
        "# Risk rules are not fitted (replay does not replay a person's decisions).",
        "",
        "[contract.success]",
        f"min_score = {_toml_value(float(c.success.min_score))}",
    ]
    if c.success.required is not None:
        lines.append(f"required = {_toml_value(list(c.success.required))}")
    lines.append(f"accept_parts = {_toml_value(c.success.accept_parts)}")
    if c.no_progress is not None:
        lines += [
            "",
            "[contract.no_progress]",
            f"cycles = {c.no_progress.cycles}",
            f"min_delta = {_toml_value(float(c.no_progress.min_delta))}",
        ]
    budget = [
        (name, getattr(c.budget, name))
        for name in ("max_cycles", "max_cost_usd", "max_tokens", "max_seconds")
        if getattr(c.budget, name) is not None
    ]
    if c.budget.max_cycles_key is not None:  # the runs' own caps still apply under the fit's
        budget.append(("max_cycles_key", c.budget.max_cycles_key))
    if budget:
        lines += ["", "[contract.budget]"]
        lines += [f"{name} = {_toml_value(value)}" for name, value in budget]
    mr = c.marginal_return
    if mr is not None:
        lines += [
            "",
            "[contract.marginal_return]",
            f"value_per_success_usd = {_toml_value(float(mr.value_per_success_usd))}",
            f"prior_successes = {_toml_value(float(mr.prior_successes))}",
            f"prior_failures = {_toml_value(float(mr.prior_failures))}",
            "# hazard[k-1][stall] = [successes, trials] at cycle k (the last row: later cycles)",
            "# after `stall` cycles without a material improvement (the last column: more).",
            "hazard = [",
        ]
        lines += ["  [" + ", ".join(f"[{s}, {t}]" for s, t in row) + "]," for row in mr.hazard]
        lines.append("]")
    esc = [
        (name, getattr(c.escalation, name))
        for name in ("owner", "route", "recommended_action")
        if getattr(c.escalation, name) is not None
    ]
    if esc:
        lines += ["", "[contract.escalation]"]
        lines += [f"{name} = {_toml_value(value)}" for name, value in esc]
    return "\n".join(lines) + "\n"


# --- plot -------------------------------------------------------------------------------------
def plot_frontier(result: FitResult, path: str | Path) -> Path:
    """A PNG of accepted outcomes against spend (all runs) for every candidate contract: the
    frontier (most accepted for the spend) highlighted, the chosen contract and the reference
    marked, the ``keep`` line drawn. Needs matplotlib (``pip install 'loopwright[plot]'``)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(
            "the plot needs matplotlib: pip install 'loopwright[plot]'", field="--plot"
        ) from None
    out = Path(path)
    fig = Figure(figsize=(8, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    cands = result.candidates
    others = [c for c in cands if not c.frontier]
    front = sorted((c for c in cands if c.frontier), key=lambda c: c.figures.cost_usd)
    ax.scatter(
        [c.figures.cost_usd for c in others],
        [c.figures.accepted for c in others],
        s=12,
        color="#9aa5b1",
        alpha=0.6,
        label=f"candidates ({len(cands)})",
    )
    ax.plot(
        [c.figures.cost_usd for c in front],
        [c.figures.accepted for c in front],
        "-o",
        color="#1f6feb",
        markersize=4,
        label="frontier",
    )
    a = result.all_data
    ax.scatter(
        [a.reference_cost_usd],
        [a.reference_accepted],
        marker="X",
        s=90,
        color="#444444",
        label="reference (as recorded)" if result.reference == "recorded" else "reference (base)",
        zorder=3,
    )
    ax.scatter(
        [a.cost_usd],
        [a.accepted],
        marker="*",
        s=260,
        color="#d73a49",
        label=f"chosen: {result.params.describe()}",
        zorder=4,
    )
    ax.axhline(
        result.keep * a.reference_accepted,
        linestyle="--",
        color="#d73a49",
        linewidth=0.8,
        label=f"keep {result.keep:g}",
    )
    ax.set_xlabel("spend (USD, all runs)")
    ax.set_ylabel("accepted outcomes")
    ax.set_title(f"fit-stop: {result.runs} run(s), accepted outcomes against spend")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, format="png")
    return out
