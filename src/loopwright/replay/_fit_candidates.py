"""The candidates ``fit_stop`` (``_fit``) searches: what the fit reads off each run
(``Facts``), the contract a split's candidates are built on (``template_contract``: a base, or the
success rule and cycle cap read off its runs), the grid of stop parameters read off a split's
training runs (``_axes``, ``split_axes``), a candidate built into a contract (``build_contract``),
how many rules it sets and which (``complexity_of``, ``family_of``), and the fixed rules the
report compares the fit with (``FIXED_WINDOWS``).

Moved out of ``_fit`` (which runs the search, the folds and the report) unchanged; ``_fit``
imports every name here that it and its tests use.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from .._contract import Contract
from .._contract_rules import Budget, MarginalReturn, NoProgress, Success, engine_marks
from .._errors import ConfigError
from ._fit_result import Grid, StopParams
from ._format import RunTrace
from ._hazard import HazardTable
from ._simulate import Outcome


def _quantile(sorted_vals: Sequence[float], q: float) -> float:
    idx = max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[idx]


@dataclass(frozen=True, slots=True)
class Facts:
    """What the fit reads off a run besides judging it (``simulate``, ``fit_hazard``): kept for
    every run while the runs themselves are read one at a time (``SpilledRuns``)."""

    task_key: str
    cycles: int  # how many cycles it recorded
    success_required: tuple[str, ...]
    final_accepted: float | None  # recorded accepted: its last cycle's score
    priced: array[float]  # the cost of each cycle that cost anything, in order

    @classmethod
    def of(cls, t: RunTrace) -> Facts:
        last = t.cycles[-1].score if t.cycles else None
        return cls(
            task_key=t.task_key,
            cycles=len(t.cycles),
            success_required=_success_required(t),
            final_accepted=last if t.recorded.get("status") == "accepted" else None,
            priced=array("d", (x for x in (c.cost_usd for c in t.cycles) if x > 0)),
        )


def _infer_success(traces: Sequence[Facts]) -> Success:
    """Without a base: the checks the recorded contracts' success rule named
    (``recorded.success_required``), else the traces' ``required`` checks, when all runs share
    them; and the lowest final score among the runs recorded as accepted (1.0 when none)."""
    reqs = {t.success_required for t in traces}
    required = next(iter(reqs)) if len(reqs) == 1 and next(iter(reqs)) else None
    finals = [t.final_accepted for t in traces if t.final_accepted is not None]
    min_score = min(1.0, max(0.0, min(s for s in finals if s is not None))) if finals else 1.0
    return Success(min_score=min_score, required=required)


def _success_required(t: RunTrace) -> tuple[str, ...]:
    listed = t.recorded.get("success_required")
    if isinstance(listed, list | tuple) and listed:
        return tuple(str(x) for x in listed)
    return t.required


def template_contract(traces: Sequence[Facts], base: Contract | None) -> Contract:
    """The contract candidates are built on, for a split whose runs are ``traces``: ``base``,
    or without one the success rule read off those runs and their longest as the cycle cap."""
    if base is not None:
        return base
    longest = max(t.cycles for t in traces)
    return Contract(success=_infer_success(traces), budget=Budget(max_cycles=max(1, longest)))


def build_contract(template: Contract, p: StopParams, hazard: HazardTable) -> Contract | None:
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
        # (a spend-only base is ceiled: its mark holds while a candidate keeps its 1,000)
        with engine_marks():
            budget = replace(template.budget, max_cycles=p.max_cycles, max_cost_usd=p.max_cost_usd)
        built = Contract(
            success=template.success,
            no_progress=None
            if p.no_progress_cycles is None
            else NoProgress(cycles=p.no_progress_cycles, min_delta=p.min_delta),
            budget=budget,
            marginal_return=mr,
            escalation=template.escalation,
        )
    except ConfigError:
        return None  # no exit besides success
    if built.marginal_return_only:
        return None  # a loop refuses it
    # scored as a run is given it: a spend-only candidate with the default cycle ceiling
    return built.with_default_ceiling()


def _axes(
    traces: Sequence[Facts],
    template: Contract,
    ref: Sequence[Outcome],
    grid: Grid,
) -> tuple[list[StopParams], list[StopParams]]:
    """Plain candidates (no marginal return) and marginal-return ones, lenient first."""
    b = template.budget
    longest = max((t.cycles for t in traces), default=1)
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
        priced = [x for t in traces for x in t.priced]
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


def split_axes(
    traces: Sequence[Facts],
    templates: Mapping[int, Contract],
    ref: Sequence[Outcome],
    grid: Grid,
    fold_of: Sequence[int],
    k: int,
) -> tuple[list[StopParams], list[StopParams], dict[int, set[StopParams]]]:
    """Each split's candidates read off its own runs (-1: all runs; f: all but fold f), so a
    fold's cost caps and marginal values never come from the runs it is judged on: the union
    (all runs' candidates first, in order) and which split may pick which."""
    plain: list[StopParams] = []
    marginal: list[StopParams] = []
    own: dict[int, set[StopParams]] = {}
    for split in range(-1, k):
        idx = [i for i, f in enumerate(fold_of) if f != split]
        pl, mg = _axes([traces[i] for i in idx], templates[split], [ref[i] for i in idx], grid)
        own[split] = {*pl, *mg}
        seen = {*plain, *marginal}
        plain += [p for p in pl if p not in seen]
        marginal += [p for p in mg if p not in seen]
    return plain, marginal, own


def complexity_of(p: StopParams, template: Contract) -> int:
    return (
        (p.no_progress_cycles is not None)
        + (p.max_cycles != template.budget.max_cycles)
        + (p.max_cost_usd != template.budget.max_cost_usd)
        + (p.value_per_success_usd is not None)
    )


def family_of(p: StopParams, template: Contract) -> str:
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


FIXED_WINDOWS = (1, 2, 3, 4, 5)


def fixed_params(w: int, template: Contract) -> StopParams:
    """The rule "stop after ``w`` cycles without fewer failing visible tests": a plateau rule with
    Δ 0 (any rise of the visible score, or a check passing first, is progress) under the
    template's caps."""
    return StopParams(w, 0.0, template.budget.max_cycles, template.budget.max_cost_usd, None)
