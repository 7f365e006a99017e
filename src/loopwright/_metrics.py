"""Outcome metrics (docs/metrics.md), computed from the store: per run and over a selection of runs.

The computation is pure. :func:`run_metrics` turns one run's rows (its record, checkpoints,
events and approval requests) into a :class:`RunMetrics`; :func:`summarize` pools many of them
into a :class:`Metrics`; :func:`compute_metrics` selects runs from a store and does both.

Every pooled metric is a ratio ``numerator / denominator`` (or a sum). A ratio whose denominator
is empty is ``None`` and ``Metrics.undefined`` says why; nothing is ever silently 0. The exact
definitions are in :class:`Metrics` and in ``docs/metrics.md``.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from ._contract import RUN_STATUSES, STOP_REASONS, TERMINAL_STATUSES
from ._errors import ConfigError
from ._inherited import inherited
from ._json import check_given_text
from .store import Approval, Checkpoint, Event, RunRecord, Store, open_store
from .store._base import with_newer

__all__ = [
    "CRASH_RESUME",
    "DEFINITIONS",
    "FAILURE_EVENTS",
    "METRIC_NAMES",
    "PERSON_DECISIONS",
    "REVIEW_COST_METRIC",
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
    "false_success_rate",
    "regression_rate",
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
    "false_success_rate": "accepted runs failing held-out / accepted runs with a held-out verdict",
    "regression_rate": "verified cycles failing a visible check that passed in an earlier cycle "
    "/ verified cycles after the first",
    "recovery_success_rate": "accepted / runs with a retry, give-up, failed or in-doubt effect, "
    "or crash resume",
    "approvals_per_accepted": "approval requests (any outcome) / accepted runs",
    "approval_wait_s": "mean seconds from request to a person's decision",
    "context_reuse_rate": "cycles whose context carried a note from earlier (answer, approval, "
    "edit, effect result, rollback, compensation) / cycles after the first",
    "workflow_reuse_rate": "runs whose loop name and version had an accepted run before they "
    "were created / runs with a known version",
    REVIEW_COST_METRIC: "reviews decided by a person x cost per review / accepted runs",
}

#: Event kinds that mark a failure the run had to get over.
FAILURE_EVENTS = frozenset({"retry", "effect_retry", "gave_up", "effect_failed", "effect_in_doubt"})
#: The failure kind counted for a ``resumed`` event that follows an interrupted execution.
CRASH_RESUME = "crash_resume"
#: Approval outcomes that a person decided (the others are expiry and cancellation).
PERSON_DECISIONS = frozenset({"approved", "denied", "answered"})
# An execution that ends with one of these handed the run over cleanly (parked, waiting,
# rolled back, ended); a later ``resumed`` without one of them followed an interruption.
_HANDOFF_EVENTS = frozenset(
    {"approval_requested", "approval_decided", "still_waiting", "rolled_back", "stopped"}
)
# Decisions of a concluded cycle (the others are mid-cycle commits: parked, effects, rollback).
_CONCLUDED = frozenset({"accepted", "revise", "refused", "asked"})


def _concluded(record: Mapping[str, Any] | None) -> bool:
    """Whether a checkpoint's record concludes a cycle (not a mid-cycle commit or rollback)."""
    return record is not None and record.get("decision") in _CONCLUDED and "cycle" in record


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """One run's contribution to the metrics (definitions: :class:`Metrics`).

    Attributes:
        cycles: the run's cycle counter (cycles started and concluded, asked and refused ones
            included; a rollback does not lower it); a fork's own: less the cycle it was forked
            at (``inherited_cycles``).
        cost_usd: the run's own spend: its ``cost_usd``, less for a fork what it inherited
            (``inherited_usd``, counted in the run it was forked from), so that each dollar
            counts once across runs.
        last_improvement_cycle: the last concluded cycle whose record says ``improved``; None
            when no cycle improved (a fork: none of its own).
        spend_after_last_improvement_usd: the run's own spend after that cycle (the whole of
            its own spend when no cycle of its own improved).
        verified_cycles: concluded cycles with at least one visible verdict.
        regression_checked_cycles: verified cycles with an earlier verified cycle that was not
            undone by a rollback.
        regressions: ``(cycle, checks)`` for each checked cycle in which visible checks that
            passed in an earlier cycle fail.
        accepted_parts: parts of the final state with an accepted version that the loop wrote
            (a version from cycle ≥ 1 at or before the accepted one).
        part_revisions: over those parts, the versions that precede the accepted one.
        edits: person edits of the run (``edited`` events, ``Runtime.edit``), overrides of an
            accepted version included.
        approvals: approval requests of the run, whatever their outcome.
        approval_waits_s: decided_at − requested_at of each request a person decided.
        failures: failure events by kind (``FAILURE_EVENTS`` and ``CRASH_RESUME``).
        context_cycles: concluded cycles other than the run's first.
        context_reuse_cycles: of those, cycles whose context carried at least one note.
        workflow_reused: whether an accepted run of the same loop name and version ended
            before this run was created; None when the run's loop version is unknown.
        inherited_usd, inherited_cycles, inherited_best_score: what a fork started from (its
            origin's spend, cycle counter and best score at the fork point; 0, 0 and None for
            a run that is not a fork).
    """

    run_id: str
    task_key: str
    project: str
    loop_name: str
    loop_version: str | None
    status: str
    stop_reason: str | None
    created_at: float
    ended_at: float | None
    cycles: int
    cost_usd: float
    best_score: float | None
    held_out_passed: bool | None
    last_improvement_cycle: int | None
    spend_after_last_improvement_usd: float
    verified_cycles: int
    regression_checked_cycles: int
    regressions: tuple[tuple[int, tuple[str, ...]], ...]
    accepted_parts: int
    part_revisions: int
    approvals: int
    approval_waits_s: tuple[float, ...]
    failures: Mapping[str, int]
    context_cycles: int
    context_reuse_cycles: int
    workflow_reused: bool | None
    edits: int = 0
    inherited_usd: float = 0.0
    inherited_cycles: int = 0
    inherited_best_score: float | None = None

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def time_to_accepted_s(self) -> float | None:
        if not self.accepted or self.ended_at is None:
            return None
        return self.ended_at - self.created_at

    @property
    def spend_after_last_improvement_frac(self) -> float | None:
        return _div(self.spend_after_last_improvement_usd, self.cost_usd)

    @property
    def progress(self) -> float:
        """The best visible score reached (0 when no cycle was scored); a fork's rise above
        the best score it inherited (0 when it reached no higher)."""
        best = self.best_score if self.best_score is not None else 0.0
        base = self.inherited_best_score if self.inherited_best_score is not None else 0.0
        return max(0.0, best - base)

    @property
    def progress_per_usd(self) -> float | None:
        return _div(self.progress, self.cost_usd)

    @property
    def progress_per_cycle(self) -> float | None:
        return _div(self.progress, self.cycles)

    @property
    def false_success(self) -> bool | None:
        """Accepted on the visible checks and failed held-out; None when not applicable."""
        if not self.accepted or self.held_out_passed is None:
            return None
        return not self.held_out_passed

    @property
    def had_failure(self) -> bool:
        return any(self.failures.values())

    @property
    def recovered(self) -> bool | None:
        """Accepted after a failure; None when the run had none."""
        return self.accepted if self.had_failure else None

    @property
    def reviews(self) -> int:
        return len(self.approval_waits_s)

    def to_dict(self) -> dict[str, Any]:
        """Every field and derived figure, JSON-ready."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["regressions"] = [{"cycle": c, "checks": list(k)} for c, k in self.regressions]
        out["approval_waits_s"] = list(self.approval_waits_s)
        out["failures"] = dict(self.failures)
        out.update({name: getattr(self, name) for name in _DERIVED})
        return out


_DERIVED = (
    "time_to_accepted_s",
    "spend_after_last_improvement_frac",
    "progress_per_usd",
    "progress_per_cycle",
    "false_success",
    "recovered",
)


def _div(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def false_successes(held_out_passed: Iterable[bool | None]) -> tuple[int, int]:
    """``false_success_rate``'s basis over the ``held_out_passed`` of accepted runs: (those
    that failed held-out, those with a held-out verdict). A run of a loop without held-out
    checks (``None``) is in neither."""
    failed = judged = 0
    for passed in held_out_passed:
        if passed is not None:
            judged += 1
            failed += not passed
    return failed, judged


def run_metrics(
    run: RunRecord,
    checkpoints: Sequence[Checkpoint],
    events: Sequence[Event],
    approvals: Sequence[Approval],
    *,
    workflow_proven_at: float | None = None,
) -> RunMetrics:
    """One run's metrics from its rows in the store.

    ``workflow_proven_at`` is the earliest ``ended_at`` of an accepted run with the same loop
    name and version (any project, any time; :func:`compute_metrics` looks it up).
    """
    cps = sorted(checkpoints, key=lambda c: c.seq)
    fold = _RunFold(run)
    for c in cps:
        fold.checkpoint(c.seq, c.record, c.fields)
    for e in sorted(events, key=lambda e: e.id):
        fold.event(e)
    return fold.result(
        cps[-1].state if cps else {}, approvals, workflow_proven_at=workflow_proven_at
    )


def _stream_run_metrics(
    st: Store, run: RunRecord, *, workflow_proven_at: float | None
) -> RunMetrics:
    """:func:`run_metrics` over the store's rows of ``run`` in one pass, a page at a time:
    what it holds is the fold's accumulators and the final state, not the run's every
    checkpoint and event (a 20,000-cycle run read whole held 376 MB)."""
    fold = _RunFold(run)
    last = -1
    for seq, _cycle, record, own in st.iter_fields(run.run_id):
        fold.checkpoint(seq, record, own)
        last = seq
    for e in st.iter_events(run.run_id):
        fold.event(e)
    state: Mapping[str, Any] = {}
    if last >= 0:
        state = st.latest_checkpoint(run.run_id).state
    return fold.result(
        state, st.approvals(run_id=run.run_id), workflow_proven_at=workflow_proven_at
    )


class _RunFold:
    """One run's metrics folded over its checkpoints (in ``seq`` order) and its events (in
    ``id`` order): accumulators only, so a reader of a long run holds neither list."""

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        self.inh = inherited(run, None)
        self.started = False
        # last improvement: the last improving cycle and the spend checkpointed with it
        self.last_cycle: int | None = None
        self.through = 0.0
        self.summed = 0.0  # fallback for states without ``spent``: the cycles' own usage
        # regressions: each check's first passing cycle among the cycles kept (not rolled
        # back): a check passed before this cycle iff it is here (invariant 8 for readers: the
        # union of every earlier cycle's checks, taken afresh per cycle, was O(cycles²)).
        self.first: dict[str, int] = {}
        self.earlier: list[int] = []  # the kept verified cycles so far
        self.checked = self.verified = 0
        self.found: list[tuple[int, tuple[str, ...]]] = []
        # context reuse
        self.notes_at_start: dict[int, int] = {}
        self.previous = 0  # notes in the state the next cycle's context is built from
        self.context_cycles = self.reuse = 0
        self.seen_first = False
        # events
        self.failures: Counter[str] = Counter()
        self.running = self.handed_off = False
        self.edits = 0

    def checkpoint(
        self, seq: int, record: Mapping[str, Any] | None, fields: Mapping[str, Any]
    ) -> None:
        if not self.started:
            # A fork's row counts on from its origin's spend and cycle; its own figures are
            # its row's less what it inherited (its first checkpoint's state: docs/metrics.md,
            # Forks).
            self.started = True
            self.inh = inherited(self.run, fields if seq == 0 else None)
            self.through = self.summed = self.inh.cost_usd
        rec: Mapping[str, Any] = record or {}
        concluded = _concluded(record)
        self._improvement(rec, concluded, fields)
        self._regression(rec, concluded)
        self._context(rec, concluded, fields)

    def _improvement(
        self, rec: Mapping[str, Any], concluded: bool, fields: Mapping[str, Any]
    ) -> None:
        if not concluded:
            return
        self.summed += float((rec.get("usage") or {}).get("cost_usd") or 0.0)
        if rec.get("improved"):
            self.last_cycle = int(rec["cycle"])
            spent = fields.get("spent")
            self.through = float(spent["cost_usd"]) if isinstance(spent, Mapping) else self.summed

    def _regression(self, rec: Mapping[str, Any], concluded: bool) -> None:
        if rec.get("decision") == "rollback":
            to = int(rec.get("to_cycle") or 0)
            self.earlier = [n for n in self.earlier if n <= to]
            self.first = {k: n for k, n in self.first.items() if n <= to}
            return
        visible = rec.get("visible") or {}
        if not concluded or not visible:
            return
        n = int(rec["cycle"])
        passed = [k for k, v in visible.items() if (v or {}).get("passed")]
        if self.earlier:
            self.checked += 1
            broken = tuple(sorted(k for k in visible if k in self.first and k not in passed))
            if broken:
                self.found.append((n, broken))
        for k in passed:
            self.first.setdefault(k, n)
        self.earlier.append(n)
        self.verified += 1

    def _context(self, rec: Mapping[str, Any], concluded: bool, fields: Mapping[str, Any]) -> None:
        """Cycles after the first concluded one, and those whose context carried a note or an
        item of feedback memory."""
        n = rec.get("cycle")
        if rec.get("decision") == "rollback":
            # The cycles after the one rolled back to are done again, under the same numbers:
            # each redone cycle's context is the state before its own first commit.
            to = int(rec.get("to_cycle") or 0)
            self.notes_at_start = {k: v for k, v in self.notes_at_start.items() if k <= to}
        elif isinstance(n, int) and n not in self.notes_at_start:
            self.notes_at_start[n] = self.previous  # the cycle's first commit: context before
        if concluded:
            if self.seen_first:
                self.context_cycles += 1
                start = self.notes_at_start.get(int(rec["cycle"]), 0)
                self.reuse += start > 0 or bool(rec.get("memory"))
            self.seen_first = True
        self.previous = _reused_notes(fields)

    def event(self, e: Event) -> None:
        if e.kind == "edited":
            self.edits += 1
        if e.kind in FAILURE_EVENTS:
            # an answer lost with a killed cycle (its bill carried to the redone one) is the
            # crash's, counted once as such below
            if not (e.kind == "retry" and e.data.get("interrupted")):
                self.failures[e.kind] += 1
        elif e.kind in ("started", "resumed"):
            if e.kind == "resumed" and self.running and not self.handed_off:
                self.failures[CRASH_RESUME] += 1
            self.running, self.handed_off = True, False
        elif e.kind in _HANDOFF_EVENTS:
            self.handed_off = True

    def result(
        self,
        final_state: Mapping[str, Any],
        approvals: Sequence[Approval],
        *,
        workflow_proven_at: float | None,
    ) -> RunMetrics:
        run, inh = self.run, self.inh
        parts, revisions = _revisions(final_state)
        waits = tuple(
            a.decided_at - a.requested_at
            for a in approvals
            if a.status in PERSON_DECISIONS and a.decided_at is not None
        )
        reused: bool | None = None
        if run.loop_version is not None:
            reused = workflow_proven_at is not None and workflow_proven_at < run.created_at
        return RunMetrics(
            run_id=run.run_id,
            task_key=run.task_key,
            project=run.project,
            loop_name=run.loop_name,
            loop_version=run.loop_version,
            status=run.status,
            stop_reason=run.stop_reason,
            created_at=run.created_at,
            ended_at=run.ended_at,
            cycles=max(0, run.cycle - inh.cycle),
            cost_usd=max(0.0, run.cost_usd - inh.cost_usd),
            best_score=run.best_score,
            held_out_passed=run.held_out_passed,
            last_improvement_cycle=self.last_cycle,
            spend_after_last_improvement_usd=max(0.0, run.cost_usd - self.through),
            verified_cycles=self.verified,
            regression_checked_cycles=self.checked,
            regressions=tuple(self.found),
            accepted_parts=parts,
            part_revisions=revisions,
            approvals=len(approvals),
            approval_waits_s=waits,
            failures=dict(self.failures),
            context_cycles=self.context_cycles,
            context_reuse_cycles=self.reuse,
            workflow_reused=reused,
            edits=self.edits,
            inherited_usd=inh.cost_usd,
            inherited_cycles=inh.cycle,
            inherited_best_score=inh.best_score,
        )


#: The notes that count as context reused (docs/metrics.md): a person's answer, approval
#: decision or edit, an effect's result, a rollback or a compensation. Bookkeeping notes (a
#: fork's ``{"kind": "fork"}``) do not.
REUSED_NOTES = frozenset({"answer", "approval", "edit", "effect", "rollback", "compensation"})


def _reused_notes(fields: Mapping[str, Any]) -> int:
    return sum(
        1
        for n in fields.get("notes") or ()
        if isinstance(n, Mapping) and n.get("kind") in REUSED_NOTES
    )


def _revisions(state: Mapping[str, Any]) -> tuple[int, int]:
    """(accepted parts the loop wrote, versions preceding their accepted versions). Reads a
    part's latest accepted version only: a stored state need not list the others."""
    parts = revisions = 0
    for artifact in state.get("artifacts") or ():
        for part in artifact.get("parts") or ():
            accepted = [v for v in part.get("versions") or () if v.get("status") == "accepted"]
            if not accepted:
                continue
            v = max(accepted, key=lambda v: int(v["n"]))
            if int(v.get("cycle") or 0) >= 1:  # earlier versions have earlier cycles
                parts += 1
                revisions += int(v["n"]) - 1
    return parts, revisions


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
        false_success_rate: accepted runs whose held-out verdict failed / accepted runs with a
            held-out verdict (runs of loops without held-out checks are left out).
        regression_rate: regressing cycles / checked cycles. A checked cycle is a concluded
            cycle with visible verdicts that has an earlier such cycle in its run (not undone
            by a rollback); it regresses when a visible check that passed in one of those
            earlier cycles fails in it.
        recovery_success_rate: accepted runs / runs with at least one failure: a ``retry``,
            ``effect_retry``, ``gave_up``, ``effect_failed`` or ``effect_in_doubt`` event, or a
            ``resumed`` event whose previous execution ended without handing the run over
            (no ``approval_requested``, ``approval_decided``, ``still_waiting``,
            ``rolled_back`` or ``stopped`` event since its ``started``/``resumed``) — a crash,
            a kill or a lost lease.
        approvals_per_accepted: approval requests of selected runs (any kind and outcome,
            pending included) / ``accepted``.
        approval_wait_s: mean of ``decided_at − requested_at`` over requests a person decided
            (approved, denied or answered; expired, cancelled and pending ones are left out).
        context_reuse_rate: concluded cycles whose context carried at least one note from
            before the cycle started (a person's answer, approval decision or edit, an
            effect's result, a rollback or compensation record: ``REUSED_NOTES``; not a fork's
            own note) / concluded cycles that are not their run's first. Findings and cycle history, which every later cycle carries, do not
            count. Feedback memory, once it exists, will add its notes here.
        workflow_reuse_rate: selected runs whose (loop name, loop version) had an accepted run
            (any project) that ended before the run was created / selected runs with a loop
            version.
        human_review_cost_per_accepted_usd: reviews (requests a person decided) × the
            configured cost per review / ``accepted``; absent unless a cost is configured.
        stop_reasons: the number of selected runs per stop reason (every reason of the closed
            vocabulary, 0 included); open runs have none.
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
    false_success_rate: float | None
    regression_rate: float | None
    recovery_success_rate: float | None
    approvals_per_accepted: float | None
    approval_wait_s: float | None
    context_reuse_rate: float | None
    workflow_reuse_rate: float | None
    stop_reasons: Mapping[str, int]
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
        }
        out.update({name: getattr(self, name) for name in METRIC_NAMES})
        if self.review_cost_usd is not None:
            out["review_cost_usd"] = self.review_cost_usd
            out[REVIEW_COST_METRIC] = self.human_review_cost_per_accepted_usd
        out["stop_reasons"] = dict(self.stop_reasons)
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
        "false_success_rate": (
            *false_successes(r.held_out_passed for r in acc),
            "no accepted run has a held-out verdict",
        ),
        "regression_rate": (
            sum(len(r.regressions) for r in rows),
            sum(r.regression_checked_cycles for r in rows),
            "no run has two verified cycles",
        ),
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
        values[name] = _div(num, den)
        if values[name] is None:
            undefined[name] = why
    values["spend_after_last_improvement_usd"] = basis["spend_after_last_improvement_frac"][0]
    if not rows:
        values["spend_after_last_improvement_usd"] = None
        undefined["spend_after_last_improvement_usd"] = "no runs selected"
    reasons = Counter(r.stop_reason for r in rows if r.stop_reason)
    return Metrics(
        runs=len(rows),
        runs_ended=sum(1 for r in rows if r.ended),
        accepted=len(acc),
        spend_usd=spend,
        stop_reasons={k: reasons.get(k, 0) for k in (*STOP_REASONS, *sorted(reasons))},
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
    if status is not None and status not in RUN_STATUSES:
        raise ConfigError(
            f"unknown status {status!r}; one of {', '.join(RUN_STATUSES)}", field="status"
        )
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
            _stream_run_metrics(
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


def _url(store: str | os.PathLike[str] | None) -> str | None:
    return os.fspath(store) if store is not None else None
