"""Outcome metrics (docs/metrics.md), computed from the store: per run and over a selection of runs.

The computation is pure. :func:`run_metrics` (in :mod:`._run_metrics`) turns one run's rows
(its record, checkpoints, events and approval requests) into a :class:`RunMetrics`;
:func:`summarize` pools many of them
into a :class:`Metrics`; :func:`compute_metrics` selects runs from a store and does both.

Every pooled metric is a ratio ``numerator / denominator`` (or a sum). A ratio whose denominator
is empty is ``None`` and ``Metrics.undefined`` says why; nothing is ever silently 0. The exact
definitions are in :class:`Metrics` and in ``docs/metrics.md``.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._contract import RUN_STATUSES, STOP_REASONS
from ._errors import ConfigError, check_choice
from ._json import check_given_text
from ._run_metrics import (
    CRASH_RESUME,
    FAILURE_EVENTS,
    PERSON_DECISIONS,
    STOPPED_BY,
    RunMetrics,
    false_successes,
    ratio_or_none,
    run_metrics,
    stream_run_metrics,
)
from .store import Store, existing_store_url, open_store
from .store._base import with_newer

__all__ = [
    "CRASH_RESUME",
    "DEFINITIONS",
    "FAILURE_EVENTS",
    "METRIC_NAMES",
    "PERSON_DECISIONS",
    "REVIEW_COST_METRIC",
    "STOPPED_BY",
    "Metrics",
    "RunMetrics",
    "compute_metrics",
    "false_successes",
    "parse_time",
    "run_metrics",
    "summarize",
]

#: The metrics of docs/concepts.md, in its order (the stop-reason distribution is ``stop_reasons``).
METRIC_NAMES: tuple[str, ...] = (
    "time_to_accepted_s",
    "cycles_to_accepted",
    "revisions_per_accepted_part",
    "edits_per_accepted_part",
    "cost_per_accepted_usd",
    "spend_after_last_improvement_usd",
    "spend_after_last_improvement_frac",
    "progress_per_usd",
    "progress_per_cycle",
    "task_completion_rate",
    "verified_completion_rate",
    "false_success_rate",
    "regression_rate",
    "exception_rate",
    "recovery_success_rate",
    "approvals_per_accepted",
    "approval_wait_s",
    "context_reuse_rate",
    "workflow_reuse_rate",
)
#: Reported only when a cost per human review is configured.
REVIEW_COST_METRIC = "human_review_cost_per_accepted_usd"

#: One line per metric (the CLI's table); the exact definitions are in ``docs/metrics.md``.
DEFINITIONS: dict[str, str] = {
    "time_to_accepted_s": "mean wall-clock seconds from creation to acceptance, accepted runs",
    "cycles_to_accepted": "mean cycles run, accepted runs",
    "revisions_per_accepted_part": "versions before the accepted one, per accepted part the "
    "loop wrote",
    "edits_per_accepted_part": "edits by a person (edited events) / the accepted parts "
    "of revisions_per_accepted_part",
    "cost_per_accepted_usd": "all spend of the selected runs / accepted runs",
    "spend_after_last_improvement_usd": "spend after each run's last materially improving "
    "cycle (whole spend if none), summed",
    "spend_after_last_improvement_frac": "spend after last improvement / all spend",
    "progress_per_usd": "sum of best visible scores (0 if none) / all spend",
    "progress_per_cycle": "sum of best visible scores (0 if none) / all cycles",
    "task_completion_rate": "accepted runs / selected runs",
    "verified_completion_rate": "accepted runs passing held-out / runs with a held-out verdict "
    "(a pass resting on self-reported tests left out)",
    "false_success_rate": "accepted runs failing held-out / accepted runs with a held-out verdict "
    "(a pass resting on self-reported tests left out)",
    "regression_rate": "verified cycles failing a visible check that passed in the previous "
    "verified cycle (rollbacks and forks followed) / verified cycles with a previous one",
    "exception_rate": "runs with a retry, give-up, failed or in-doubt effect, or crash resume "
    "/ selected runs",
    "recovery_success_rate": "accepted / runs with a retry, give-up, failed or in-doubt effect, "
    "or crash resume",
    "approvals_per_accepted": "approval requests (any outcome) / accepted runs",
    "approval_wait_s": "mean seconds from request to a person's decision",
    "context_reuse_rate": "cycles whose context carried a note from earlier (answer, approval, "
    "edit, effect result, rollback, compensation) or remembered feedback / cycles after the "
    "first",
    "workflow_reuse_rate": "runs whose loop name and version had an accepted run before they "
    "were created / runs with a known version",
    REVIEW_COST_METRIC: "reviews decided by a person x cost per review / accepted runs",
}


@dataclass(frozen=True, slots=True)
class Metrics:
    """Outcome metrics over a selection of runs (docs/metrics.md).

    "Selected runs" are all runs the selection matched, whatever their status: a run still
    open (pending, running, awaiting approval) counts as not accepted, and its spend so far
    counts. Filter by status to leave open runs out. Every ratio is None when its
    denominator is 0 (``undefined`` says why), and ``basis`` holds its numerator and
    denominator so that selections can be pooled.

    Attributes:
        runs: selected runs. ``runs_ended``: those in a terminal status. ``accepted``: those
            with status ``accepted``. ``spend_usd``: the sum of their ``cost_usd`` (actor,
            verifier, reviewer and effect spend, aborted work included).
        time_to_accepted_s: mean of ``ended_at − created_at`` over accepted runs (wall clock:
            waits for people included).
        cycles_to_accepted: mean of the cycle counter over accepted runs.
        revisions_per_accepted_part: over the final state of every selected run, the parts
            with an accepted version that the loop wrote (a version from cycle ≥ 1 at or
            before the latest accepted one): the versions that precede the accepted one,
            summed, divided by the number of such parts. A part accepted as first written
            counts 0; parts accepted untouched from the task are left out.
        edits_per_accepted_part: ``edited`` events of the selected runs (each a version of a
            part written by a person, overrides of an accepted version included) / the
            accepted parts counted by ``revisions_per_accepted_part`` (a person's version is
            accepted, so an edited part is one of them once a cycle has run).
        spend_usd: the selected runs' own spend (a fork's ``cost_usd`` less what it
            inherited from its origin: each dollar once).
        cost_per_accepted_usd: ``spend_usd`` / ``accepted`` (the spend of runs that did not
            end accepted is part of the price of those that did).
        spend_after_last_improvement_usd: summed over selected runs: ``cost_usd`` minus the
            cumulative spend checkpointed with the run's last concluded cycle whose record has
            ``improved: true`` (the engine's material improvement: the best visible score rose
            by at least ``no_progress.min_delta``, or a required check passed for the first
            time). A run with no improving cycle counts its whole spend. Work charged after
            that cycle but recorded in no cycle (an aborted or parked cycle) counts as after,
            so each run's figure plus its spend through the cycle equals its ``cost_usd``.
            None when no run is selected.
        spend_after_last_improvement_frac: ``spend_after_last_improvement_usd`` / ``spend_usd``.
        progress_per_usd: the sum over selected runs of the best visible score (in [0, 1]; 0
            when none was scored; the initial state is never scored, so the baseline is 0),
            divided by ``spend_usd``.
        progress_per_cycle: the same sum of best visible scores divided by the selected runs'
            cycles (each run's cycle counter; a fork's own): score points per cycle, the
            engineer's "progress per cycle" beside the CFO's per dollar.
        task_completion_rate: ``accepted`` / ``runs``.
        verified_completion_rate: accepted runs whose held-out verdict passed / selected runs
            with a held-out verdict (``held_out_passed`` set: held-out checks judged one of
            its candidates). Runs of loops without held-out checks are left out, as for
            ``false_success_rate``; so are runs that ended before any candidate was judged,
            and runs whose held-out pass rests on self-reported tests (below).
        false_success_rate: accepted runs whose held-out verdict failed / accepted runs with a
            held-out verdict (runs of loops without held-out checks are left out). A held-out
            pass that rests on a test the candidate's own process decided (a sandbox check's
            self-reported test: ``RunMetrics.held_out_self_reported``) is not an independent
            verdict: it is in neither basis, and counted in ``held_out_self_reported``; so is a
            held-out failure resting on tests ``judged_only`` refused (nothing decided them).
        held_out_self_reported: selected runs whose held-out pass rests on self-reported tests,
            or whose failure on tests ``judged_only`` refused (left out of the two rates
            above; a count, not a metric): the sum of the next two.
        held_out_pass_self_reported: those of them whose held-out verdict passed (``pass*``,
            ``held_out_verdict`` ``pass_self_reported``).
        held_out_fail_not_judged: those whose held-out verdict failed, resting only on refused
            tests (``fail*``, ``fail_not_judged``).
        regression_rate: regressing cycles / checked cycles. A checked cycle is a concluded
            cycle with visible verdicts that has a previous such cycle in its run's kept
            lineage (a rollback to cycle k leaves the last one at or before k; a fork's first
            is compared with its origin's last one at the fork point); it regresses when a
            visible check that passed in that previous cycle fails in it. A check that stays
            failing is one regression, in the cycle that broke it.
        exception_rate: runs with at least one failure (as for ``recovery_success_rate``) /
            ``runs``.
        recovery_success_rate: accepted runs / runs with at least one failure: a ``retry``,
            ``effect_retry``, ``gave_up``, ``effect_failed`` or ``effect_in_doubt`` event, or a
            ``resumed`` event whose previous execution ended without handing the run over
            (no ``approval_requested``, ``approval_decided``, ``still_waiting``,
            ``rolled_back`` or ``stopped`` event since its ``started``/``resumed``) and never
            said, by its lease, that it stopped alive (``interrupted``: Ctrl-C, a lost lease;
            ``drained``) — a crash or a kill, as ``budget.max_crashes`` counts them.
        approvals_per_accepted: approval requests of selected runs (any kind and outcome,
            pending included) / ``accepted``.
        approval_wait_s: mean of ``decided_at − requested_at`` over requests a person decided
            (approved, denied or answered; expired, cancelled and pending ones are left out).
        context_reuse_rate: concluded cycles whose context carried at least one note from
            before the cycle started (a person's answer, approval decision or edit, an
            effect's result, a rollback or compensation record: ``_run_metrics.REUSED_NOTES``; not a fork's
            own note) / concluded cycles that are not their run's first. Findings and cycle history, which every later cycle carries, do not
            count. Feedback memory, once it exists, will add its notes here.
        workflow_reuse_rate: selected runs whose (loop name, loop version) had an accepted run
            (any project) that ended before the run was created / selected runs with a loop
            version.
        human_review_cost_per_accepted_usd: reviews (requests a person decided) × the
            configured cost per review / ``accepted``; absent unless a cost is configured.
        stop_reasons: the number of selected runs per stop reason (every reason of the closed
            vocabulary, 0 included); open runs have none.
        stopped_by: the same runs grouped by what stopped them (``STOPPED_BY``, 0 included):
            success; plateau (``no_progress``, ``marginal_return``); budget (``budget_*``);
            risk (escalated because a risk rule's approval was denied or expired);
            escalation (any other escalation); cancelled; error.
    """

    runs: int
    runs_ended: int
    accepted: int
    spend_usd: float
    time_to_accepted_s: float | None
    cycles_to_accepted: float | None
    revisions_per_accepted_part: float | None
    edits_per_accepted_part: float | None
    cost_per_accepted_usd: float | None
    spend_after_last_improvement_usd: float | None
    spend_after_last_improvement_frac: float | None
    progress_per_usd: float | None
    progress_per_cycle: float | None
    task_completion_rate: float | None
    verified_completion_rate: float | None
    false_success_rate: float | None
    regression_rate: float | None
    exception_rate: float | None
    recovery_success_rate: float | None
    approvals_per_accepted: float | None
    approval_wait_s: float | None
    context_reuse_rate: float | None
    workflow_reuse_rate: float | None
    stop_reasons: Mapping[str, int]
    stopped_by: Mapping[str, int] = field(default_factory=dict)
    held_out_self_reported: int = 0
    held_out_pass_self_reported: int = 0
    held_out_fail_not_judged: int = 0
    human_review_cost_per_accepted_usd: float | None = None
    review_cost_usd: float | None = None
    basis: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    undefined: Mapping[str, str] = field(default_factory=dict)
    selection: Mapping[str, Any] = field(default_factory=dict)
    per_run: tuple[RunMetrics, ...] = ()

    def value(self, name: str) -> float | None:
        """A metric by its name in ``METRIC_NAMES`` (or ``human_review_cost_per_accepted_usd``)."""
        if name not in (*METRIC_NAMES, REVIEW_COST_METRIC):
            raise KeyError(name)
        result: float | None = getattr(self, name)
        return result

    def to_dict(self, *, per_run: bool = False) -> dict[str, Any]:
        """Flat: counts, then every metric by its name, then the stop reasons."""
        out: dict[str, Any] = {
            "selection": dict(self.selection),
            "runs": self.runs,
            "runs_ended": self.runs_ended,
            "accepted": self.accepted,
            "spend_usd": self.spend_usd,
            "held_out_self_reported": self.held_out_self_reported,
            "held_out_pass_self_reported": self.held_out_pass_self_reported,
            "held_out_fail_not_judged": self.held_out_fail_not_judged,
        }
        out.update({name: getattr(self, name) for name in METRIC_NAMES})
        if self.review_cost_usd is not None:
            out["review_cost_usd"] = self.review_cost_usd
            out[REVIEW_COST_METRIC] = self.human_review_cost_per_accepted_usd
        out["stop_reasons"] = dict(self.stop_reasons)
        out["stopped_by"] = dict(self.stopped_by)
        out["basis"] = {k: list(v) for k, v in self.basis.items()}
        out["undefined"] = dict(self.undefined)
        if per_run:
            out["per_run"] = [r.to_dict() for r in self.per_run]
        return out


def summarize(
    per_run: Iterable[RunMetrics],
    *,
    review_cost_usd: float | None = None,
    selection: Mapping[str, Any] | None = None,
) -> Metrics:
    """Pool runs' metrics into :class:`Metrics` (definitions there)."""
    rows = tuple(per_run)
    acc = [r for r in rows if r.accepted]
    failed = [r for r in rows if r.had_failure]
    versioned = [r for r in rows if r.workflow_reused is not None]
    waits = [w for r in rows for w in r.approval_waits_s]
    timed = [t for r in acc if (t := r.time_to_accepted_s) is not None]
    spend = math.fsum(r.cost_usd for r in rows)
    progress = math.fsum(r.progress for r in rows)
    reviews = sum(r.reviews for r in rows)
    why_acc = "no accepted runs"
    why_spend = "no spend recorded" if rows else "no runs selected"
    ratios: dict[str, tuple[float, float, str]] = {
        "time_to_accepted_s": (math.fsum(timed), len(timed), why_acc),
        "cycles_to_accepted": (sum(r.cycles for r in acc), len(acc), why_acc),
        "revisions_per_accepted_part": (
            sum(r.part_revisions for r in rows),
            sum(r.accepted_parts for r in rows),
            "no accepted part was written by a loop",
        ),
        "edits_per_accepted_part": (
            sum(r.edits for r in rows),
            sum(r.accepted_parts for r in rows),
            "no accepted part was written by a loop",
        ),
        "cost_per_accepted_usd": (spend, len(acc), why_acc),
        "spend_after_last_improvement_frac": (
            math.fsum(r.spend_after_last_improvement_usd for r in rows),
            spend,
            why_spend,
        ),
        "progress_per_usd": (progress, spend, why_spend),
        "progress_per_cycle": (
            progress,
            sum(r.cycles for r in rows),
            "no run has a cycle" if rows else "no runs selected",
        ),
        "task_completion_rate": (len(acc), len(rows), "no runs selected"),
        "verified_completion_rate": (
            sum(1 for r in acc if r.held_out_independent is True),
            sum(1 for r in rows if r.held_out_independent is not None),
            "no run has a held-out verdict",
        ),
        "false_success_rate": (
            *false_successes(r.held_out_independent for r in acc),
            "no accepted run has a held-out verdict",
        ),
        "regression_rate": (
            sum(len(r.regressions) for r in rows),
            sum(r.regression_checked_cycles for r in rows),
            "no verified cycle has a previous one",
        ),
        "exception_rate": (len(failed), len(rows), "no runs selected"),
        "recovery_success_rate": (
            sum(1 for r in failed if r.accepted),
            len(failed),
            "no run had a failure to recover from",
        ),
        "approvals_per_accepted": (sum(r.approvals for r in rows), len(acc), why_acc),
        "approval_wait_s": (math.fsum(waits), len(waits), "no request was decided by a person"),
        "context_reuse_rate": (
            sum(r.context_reuse_cycles for r in rows),
            sum(r.context_cycles for r in rows),
            "no run has a cycle after its first",
        ),
        "workflow_reuse_rate": (
            sum(1 for r in versioned if r.workflow_reused),
            len(versioned),
            "no run has a known loop version",
        ),
    }
    if review_cost_usd is not None:
        ratios[REVIEW_COST_METRIC] = (reviews * review_cost_usd, len(acc), why_acc)
    values: dict[str, Any] = {}
    undefined: dict[str, str] = {}
    basis: dict[str, tuple[float, float]] = {}
    for name, (num, den, why) in ratios.items():
        basis[name] = (num, den)
        values[name] = ratio_or_none(num, den)
        if values[name] is None:
            undefined[name] = why
    values["spend_after_last_improvement_usd"] = basis["spend_after_last_improvement_frac"][0]
    if not rows:
        values["spend_after_last_improvement_usd"] = None
        undefined["spend_after_last_improvement_usd"] = "no runs selected"
    # held-out verdicts that are not independent ones (``_verdict.independent``), by kind
    marked = [
        r.held_out_passed
        for r in rows
        if r.held_out_passed is not None and r.held_out_independent is None
    ]
    reasons = Counter(r.stop_reason for r in rows if r.stop_reason)
    groups = Counter(r.stopped_by for r in rows if r.stopped_by)
    return Metrics(
        runs=len(rows),
        runs_ended=sum(1 for r in rows if r.ended),
        accepted=len(acc),
        spend_usd=spend,
        stop_reasons={k: reasons.get(k, 0) for k in (*STOP_REASONS, *sorted(reasons))},
        stopped_by={k: groups.get(k, 0) for k in (*STOPPED_BY, *sorted(groups))},
        held_out_self_reported=len(marked),
        held_out_pass_self_reported=sum(1 for passed in marked if passed),
        held_out_fail_not_judged=sum(1 for passed in marked if not passed),
        review_cost_usd=review_cost_usd,
        basis=basis,
        undefined={k: undefined[k] for k in (*METRIC_NAMES, REVIEW_COST_METRIC) if k in undefined},
        selection=dict(selection or {}),
        per_run=rows,
        **values,
    )


def parse_time(value: float | datetime | str | None, *, field: str = "since") -> float | None:
    """A point in time as epoch seconds: a number, a ``datetime``, or an ISO 8601 string
    (``2024-06-01``, ``2024-06-01T09:30``, ``…Z`` or ``…+02:00``; local time when it names no
    zone). Raises ``ConfigError`` naming ``field`` for anything else."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(f"{value!r} is not a point in time", field=field)
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ConfigError(
                f"{value!r} is not an ISO 8601 date or time (e.g. 2024-06-01 or "
                "2024-06-01T09:30:00+00:00)",
                field=field,
            ) from None
        try:
            return when.timestamp()
        except (ValueError, OverflowError, OSError):  # a date, but not as epoch seconds here
            raise ConfigError(
                f"{value!r} is a date outside the times this machine can count (in its time "
                "zone); give a later one, or one with its zone (…+00:00)",
                field=field,
            ) from None
    raise ConfigError(f"{value!r} is not a point in time", field=field)


def compute_metrics(
    store: Store | str | os.PathLike[str] | None,
    *,
    project: str | None = None,
    loop: str | None = None,
    since: float | datetime | str | None = None,
    until: float | datetime | str | None = None,
    status: str | None = None,
    review_cost_usd: float | None = None,
) -> Metrics:
    """Outcome metrics over the runs of ``store`` (a ``Store``, or a path or URL to open)
    selected by project, loop name, status and creation time (``since ≤ created_at ≤ until``,
    both optional). ``review_cost_usd`` (the cost of one human review) adds
    ``human_review_cost_per_accepted_usd``. Raises ``ConfigError`` for a bad argument."""
    t0 = parse_time(since, field="since")
    t1 = parse_time(until, field="until")
    if t0 is not None and t1 is not None and t0 > t1:
        raise ConfigError("the window starts after it ends", field="since")
    if status is not None:
        check_choice(status, RUN_STATUSES, "status")
    # what a caller gives is checked here, not failed on deep inside (a TypeError of isfinite,
    # a list bound as a column, a store URL that is a number)
    check_given_text(project, field="project")
    check_given_text(loop, field="loop")
    if review_cost_usd is not None and (
        isinstance(review_cost_usd, bool)
        or not isinstance(review_cost_usd, int | float)
        or not (math.isfinite(review_cost_usd) and review_cost_usd >= 0)
    ):
        raise ConfigError("must be a non-negative amount", field="review_cost_usd")
    if store is not None and not isinstance(store, Store | str | os.PathLike):
        raise ConfigError(
            f"must be a Store, a path or a store URL, got {type(store).__name__}", field="store"
        )
    st = store if isinstance(store, Store) else open_store(_url(store))
    try:
        # The selection, window included, is the database's: a window reads only its runs.
        # (a store whose list_runs predates since/until: its runs are windowed here)
        flt: dict[str, Any] = {"status": status, "project": project, "loop_name": loop}
        runs = with_newer(st.list_runs, flt, {"since": t0, "until": t1})
        if runs is None:
            runs = [
                r
                for r in st.list_runs(**flt)
                if (t0 is None or r.created_at >= t0) and (t1 is None or r.created_at <= t1)
            ]
        proven = st.first_accepted(sorted({r.loop_name for r in runs}))
        rows = [
            stream_run_metrics(
                st,
                r,
                workflow_proven_at=None
                if r.loop_version is None
                else proven.get((r.loop_name, r.loop_version)),
            )
            for r in runs
        ]
    finally:
        if st is not store:
            st.close()
    selection = {"project": project, "loop": loop, "since": t0, "until": t1, "status": status}
    return summarize(rows, review_cost_usd=review_cost_usd, selection=selection)


def _url(store: str | os.PathLike[str] | None) -> str:
    """The store to read, which must exist: opening an SQLite file that does not would create
    an empty store there, and a mistyped path reported 0 runs (leaving that file behind)."""
    return existing_store_url(store, reads="metrics")
