"""What ``fit_stop`` searches and what it returns: the grid, a candidate's parameters, the
figures of a contract on a set of runs (saved shares, kept outcomes), the folds, the fixed
rules beside the fit, and :class:`FitResult` with its report.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._contract import Contract

FIT_FORMAT = "loopwright.fit-stop/1"


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
        from ._fit_toml import to_toml  # the writer imports this module

        return to_toml(self)


def _point(f: Figures) -> dict[str, Any]:
    return {
        "accepted": f.accepted,
        "cost_usd": f.cost_usd,
        "kept_share": f.kept_share,
        "cost_per_accepted_usd": f.cost_per_accepted_usd,
    }


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
