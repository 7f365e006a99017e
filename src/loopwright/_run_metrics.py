"""One run's outcome metrics (docs/metrics.md): :class:`RunMetrics`, and the fold that builds
it from the run's rows in the store (its record, checkpoints, events and approval requests),
in one pass and holding accumulators only. :mod:`._metrics` pools them over many runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ._contract import TERMINAL_STATUSES
from ._crash_bound import LEFT_ALIVE, event_lease
from ._decide import record_no_attempt
from ._inherited import inherited
from ._stored_run_words import cost_over_budget, tokens_over_budget
from ._verdict import independent
from ._verified_lineage import Verified, VerifiedLineage, concludes_cycle, fork_base
from .store import Approval, Checkpoint, Event, RunRecord, Store
from .store._records import PAUSE

__all__ = [
    "CRASH_RESUME",
    "FAILURE_EVENTS",
    "PERSON_DECISIONS",
    "REUSED_NOTES",
    "STOPPED_BY",
    "RunMetrics",
    "false_successes",
    "fork_base",
    "run_metrics",
    "stopped_by",
    "stream_run_metrics",
]

#: Event kinds that mark a failure the run had to get over.
FAILURE_EVENTS = frozenset({"retry", "effect_retry", "gave_up", "effect_failed", "effect_in_doubt"})
#: The failure kind counted for a ``resumed`` event that follows an interrupted execution.
CRASH_RESUME = "crash_resume"
#: What stopped a run, coarser than its stop reason (docs/metrics.md, "Stop reasons"): the
#: seeds' "runs stopped by success, plateau, budget, risk, or escalation", and the rest.
STOPPED_BY = ("success", "plateau", "budget", "risk", "escalation", "cancelled", "error")
_STOP_GROUP = {
    "success": "success",
    "no_progress": "plateau",
    "marginal_return": "plateau",
    "budget_cycles": "budget",
    "budget_cost": "budget",
    "budget_tokens": "budget",
    "budget_time": "budget",
    "escalated": "escalation",
    "cancelled": "cancelled",
    "error": "error",
}
#: Approval outcomes that a person decided (the others are expiry and cancellation).
PERSON_DECISIONS = frozenset({"approved", "denied", "answered"})
# An execution that ends with one of these handed the run over cleanly (parked, waiting,
# rolled back, ended); a later ``resumed`` without one of them followed a crash, unless the
# execution said it stopped alive (``_RunFold.event``).
_HANDOFF_EVENTS = frozenset(
    {"approval_requested", "approval_decided", "still_waiting", "rolled_back", "stopped", "paused"}
)


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
        regression_checked_cycles: verified cycles that have a previous verified cycle in the
            run's kept lineage (not undone by a rollback; a fork's first one is its origin's
            last at the fork point).
        regressions: ``(cycle, checks)`` for each checked cycle in which visible checks that
            passed in that previous verified cycle fail.
        accepted_parts: parts of the final state with an accepted version that the loop wrote
            (a version from cycle ≥ 1 at or before the accepted one).
        part_revisions: over those parts, the versions that precede the accepted one.
        stopped_by: the stop reason grouped (``STOPPED_BY``; ``risk``: an escalation because
            a risk rule's approval was denied or expired); None while the run is open.
        edits: person edits of the run (``edited`` events, ``Runtime.edit``), overrides of an
            accepted version included.
        approvals: approval requests of the run, whatever their outcome.
        approval_waits_s: decided_at − requested_at of each request a person decided.
        failures: failure events by kind (``FAILURE_EVENTS`` and ``CRASH_RESUME``).
        context_cycles: concluded cycles other than the run's first.
        context_reuse_cycles: of those, cycles whose context carried at least one note.
        workflow_reused: whether an accepted run of the same loop name and version ended
            before this run was created; None when the run's loop version is unknown.
        held_out_self_reported: how many tests behind ``held_out_passed`` the candidate's own
            process decided (the run's column; None when unknown): a held-out pass with any
            is not an independent one (``held_out_independent``).
        over_budget_usd: how far the run's spend is past its cost budget (0.0: within it),
            bills charged after its last check (``cost_over_budget``; fenced56b).
        over_budget_tokens: how many tokens it used past its token budget (0: within it;
            ``tokens_over_budget``; over56b).
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
    stopped_by: str | None = None
    inherited_usd: float = 0.0
    inherited_cycles: int = 0
    inherited_best_score: float | None = None
    held_out_self_reported: int | None = None
    over_budget_usd: float = 0.0
    over_budget_tokens: int = 0

    @property
    def held_out_independent(self) -> bool | None:
        """``held_out_passed`` as an independent verdict: ``None`` for a held-out pass that
        rests on a test the candidate's own process decided (``held_out_self_reported``), or
        a failure resting only on tests ``judged_only`` refused: neither a pass nor a failure
        of the held-out checks (``_verdict.independent``, the one rule)."""
        return independent(self.held_out_passed, self.held_out_self_reported)

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
        return ratio_or_none(self.spend_after_last_improvement_usd, self.cost_usd)

    @property
    def progress(self) -> float:
        """The best visible score reached (0 when no cycle was scored); a fork's rise above
        the best score it inherited (0 when it reached no higher)."""
        best = self.best_score if self.best_score is not None else 0.0
        base = self.inherited_best_score if self.inherited_best_score is not None else 0.0
        return max(0.0, best - base)

    @property
    def progress_per_usd(self) -> float | None:
        return ratio_or_none(self.progress, self.cost_usd)

    @property
    def progress_per_cycle(self) -> float | None:
        return ratio_or_none(self.progress, self.cycles)

    @property
    def false_success(self) -> bool | None:
        """Accepted on the visible checks and failed held-out; None when not applicable (no
        held-out verdict, or a held-out pass resting on self-reported tests)."""
        held = self.held_out_independent
        if not self.accepted or held is None:
            return None
        return not held

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


def stopped_by(stop_reason: str | None, packet: Mapping[str, Any] | None) -> str | None:
    """The run's stop reason in ``STOPPED_BY``'s terms (None for an open run; a reason outside
    the vocabulary, from a newer release, as it is). An escalation is ``risk`` when the run
    stopped because a person denied, or let expire, the approval a contract's risk rule asked
    for: its handoff packet's evidence is that request (kind ``risk``)."""
    if stop_reason is None:
        return None
    group = _STOP_GROUP.get(stop_reason, stop_reason)
    if group == "escalation":
        appr = ((packet or {}).get("evidence") or {}).get("approval")
        if not isinstance(appr, Mapping):
            return group
        if appr.get("kind") == "risk" and appr.get("status") in ("denied", "expired"):
            return "risk"
    return group


def ratio_or_none(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def false_successes(held_out_passed: Iterable[bool | None]) -> tuple[int, int]:
    """``false_success_rate``'s basis over the independent held-out verdicts of accepted runs
    (``held_out_independent``): (those that failed held-out, those with such a verdict). A run
    of a loop without held-out checks, or whose held-out pass rests on self-reported tests
    (``None``), is in neither."""
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
    fork_base: tuple[int, Iterable[str]] | None = None,
) -> RunMetrics:
    """One run's metrics from its rows in the store.

    ``workflow_proven_at`` is the earliest ``ended_at`` of an accepted run with the same loop
    name and version (any project, any time; :func:`compute_metrics` looks it up).
    ``fork_base``, for a fork: its origin's last verified cycle at the fork point and the
    visible checks that passed in it (:func:`fork_base` reads it from a store).
    """
    cps = sorted(checkpoints, key=lambda c: c.seq)
    base = None if fork_base is None else (int(fork_base[0]), frozenset(fork_base[1]))
    fold = _RunFold(run, base)
    for c in cps:
        fold.checkpoint(c.seq, c.record, c.fields)
    for e in sorted(events, key=lambda e: e.id):
        fold.event(e)
    return fold.result(
        cps[-1].state if cps else {}, approvals, workflow_proven_at=workflow_proven_at
    )


def stream_run_metrics(
    st: Store, run: RunRecord, *, workflow_proven_at: float | None
) -> RunMetrics:
    """:func:`run_metrics` over the store's rows of ``run`` in one pass, a page at a time:
    what it holds is the fold's accumulators and the final state, not the run's every
    checkpoint and event (a 20,000-cycle run read whole held 376 MB)."""
    fold = _RunFold(run, fork_base(st, run))
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

    def __init__(self, run: RunRecord, fork_base: Verified | None = None) -> None:
        self.run = run
        self.inh = inherited(run, None)
        self.started = False
        # last improvement: the last improving cycle and the spend checkpointed with it
        self.last_cycle: int | None = None
        self.through = 0.0
        self.summed = 0.0  # fallback for states without ``spent``: the cycles' own usage
        # regressions: the kept verified cycles (a fork's starting from its origin's)
        self.lineage = VerifiedLineage(fork_base)
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
        # Crash resumes as the crash count reads them (``_crash_bound.crashes_at``): the
        # executions (their leases) a ``resumed`` followed without a handoff, each a crash
        # unless it said, by its lease, that it stopped alive (``interrupted``: Ctrl-C, the
        # store failing, its lease lost; ``drained``), maybe late (a lost lease is said after
        # its successor started). Judged once the whole log is read (``result``).
        self.lease: int | None = None  # the lease of the execution whose events these are
        self.left: list[int | None] = []  # (None: a log from before leases were named)
        self.alive: set[int] = set()
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
        concluded = concludes_cycle(record)
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
        seen = self.lineage.record(rec, concluded)
        if seen is None:
            return
        self.verified += 1
        checked, broken = seen
        self.checked += checked
        if broken:
            self.found.append((int(rec["cycle"]), broken))

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
            if self.seen_first and not _no_actor(rec):  # (no actor: no context)
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
                self.left.append(self.lease)
            self.running, self.handed_off = True, False
            self.lease = event_lease(e)
        elif e.kind in _HANDOFF_EVENTS:
            self.handed_off = True
        elif e.kind in LEFT_ALIVE:
            lease = event_lease(e)
            if lease is None:  # (written before leases were named: read as a handoff then)
                self.handed_off = True
            else:
                self.alive.add(lease)

    def _failures(self) -> dict[str, int]:
        """The failures met, with a crash resume for each execution left without a handoff
        that never said it stopped alive."""
        out = dict(self.failures)
        crashes = sum(1 for lease in self.left if lease is None or lease not in self.alive)
        if crashes:
            out[CRASH_RESUME] = crashes
        return out

    def result(
        self,
        final_state: Mapping[str, Any],
        approvals: Sequence[Approval],
        *,
        workflow_proven_at: float | None,
    ) -> RunMetrics:
        run, inh = self.run, self.inh
        # A person's pause is their control over the run, not a request the loop made: it is
        # no approval (``approvals_per_accepted``), nor a review or a wait for one.
        approvals = [a for a in approvals if a.kind != PAUSE]
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
            held_out_self_reported=run.held_out_self_reported,
            last_improvement_cycle=self.last_cycle,
            spend_after_last_improvement_usd=max(0.0, run.cost_usd - self.through),
            verified_cycles=self.verified,
            regression_checked_cycles=self.checked,
            regressions=tuple(self.found),
            accepted_parts=parts,
            part_revisions=revisions,
            approvals=len(approvals),
            approval_waits_s=waits,
            failures=self._failures(),
            context_cycles=self.context_cycles,
            context_reuse_cycles=self.reuse,
            workflow_reused=reused,
            edits=self.edits,
            stopped_by=stopped_by(run.stop_reason, run.packet),
            inherited_usd=inh.cost_usd,
            inherited_cycles=inh.cycle,
            inherited_best_score=inh.best_score,
            over_budget_usd=cost_over_budget(run),
            over_budget_tokens=tokens_over_budget(run),
        )


#: The notes that count as context reused (docs/metrics.md): a person's answer, approval
#: decision or edit, an effect's result, a rollback or a compensation. Bookkeeping notes (a
#: fork's ``{"kind": "fork"}``) do not.
REUSED_NOTES = frozenset({"answer", "approval", "edit", "effect", "rollback", "compensation"})


def _no_actor(rec: Mapping[str, Any]) -> bool:
    """Whether a concluded cycle showed no actor a context: one that made no attempt
    (``_decide.no_attempt``: the cycle of a request denied after a person's edit beside it
    judged the edit check-only once the actor had been shown its context and paid)."""
    return record_no_attempt(rec)


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
