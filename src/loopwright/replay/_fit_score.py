"""How a fit judges its candidates: outcomes summed per fold, a candidate scored on a set of
folds and the choice among them (the most saved, or the simplest within one standard error), the
figures a report shows and the frontier; the best fixed rule compared with the fit."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .._contract import Contract
from ._fit_result import Figures, FitResult, FixedRule
from ._fit_toml import pct
from ._format import RunTrace, added_up
from ._simulate import Outcome, simulate

_MEASURE = {"spend": 0, "attempts": 1, "time": 2}

# Per fold: (spend, attempts, seconds, accepted, accepted and kept, held-out kept); the
# reference's: (spend, attempts, seconds, accepted, held-out passed).
_Sums = tuple[float, float, float, float, float, float]


@dataclass(slots=True)
class Eval:
    """One candidate's outcomes on every run, with sums per fold."""

    outcomes: list[Outcome]
    fold_sums: list[_Sums]


def evaluate_all(
    traces: Iterable[RunTrace],
    contracts: Sequence[Contract],
    ref: Sequence[Outcome],
    fold_of: Sequence[int],
    k: int,
    judged: Callable[[int], None] | None = None,
) -> list[Eval]:
    """Each contract's ``Eval``, the runs read once, in order: every contract judged on a run
    before the next run is read (a fit holds one run's cycles, not all: ``SpilledRuns``); the
    sums added up run by run, as one contract's alone."""
    sums = [[[0.0] * 6 for _ in range(k)] for _ in contracts]
    outs: list[list[Outcome]] = [[] for _ in contracts]
    # (not ``zip``: its result tuple, kept to be reused, held the run before this one)
    n = 0
    for i, t in enumerate(traces):
        r, f = ref[i], fold_of[i]
        n += 1
        for j, contract in enumerate(contracts):
            o = simulate(t, contract)
            outs[j].append(o)
            row = sums[j][f]
            row[0] += o.cost_usd
            row[1] += o.cycles
            row[2] += o.seconds
            if o.accepted:
                row[3] += 1
                row[4] += r.accepted
            row[5] += bool(o.held_out_passed and r.held_out_passed)
        if judged is not None:
            judged(i)
    if n != len(ref):
        raise ValueError(f"read {n} runs of {len(ref)}")
    return [
        Eval(outs[j], [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in sums[j]])
        for j in range(len(contracts))
    ]


def reference_sums(ref: Sequence[Outcome], fold_of: Sequence[int], k: int) -> list[_Sums]:
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


def score(
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


def select(
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


def figures_of(ev: Eval, idx: Sequence[int], ref: Sequence[Outcome]) -> Figures:
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


def frontier(points: Sequence[Figures]) -> set[int]:
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


def compare_fixed(
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
        f"on held-out folds it keeps {pct(xk)} of {what} and saves {pct(xs)} of {o}; the fit "
        f"keeps {pct(fk)} and saves {pct(fs)} (one SE across folds: kept {pct(kept_se)}, "
        f"saved {pct(saved_se)})"
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
