"""Outcome metrics over synthetic store rows: every expected value is worked out by hand."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.run_rows import run_row

import loopwright as lw
from loopwright._metrics import (
    CRASH_RESUME,
    DEFINITIONS,
    METRIC_NAMES,
    REVIEW_COST_METRIC,
    RunMetrics,
    parse_time,
    run_metrics,
    summarize,
)
from loopwright.store import Approval, Checkpoint, Event, RunRecord


# --- row builders --------------------------------------------------------------------------
def cycle(
    n: int,
    visible: dict[str, bool] | None = None,
    *,
    improved: bool = False,
    decision: str = "revise",
    cost: float = 0.1,
) -> dict[str, Any]:
    return {
        "cycle": n,
        "proposal": {"kind": "edit"},
        "visible": {
            k: {"passed": v, "score": 1.0 if v else 0.0} for k, v in (visible or {}).items()
        },
        "held_out": {},
        "score": None,
        "improved": improved,
        "decision": decision,
        "effects": [],
        "usage": {"cost_usd": cost, "tokens": 0, "seconds": 0.0},
    }


def checkpoints(*items: tuple[dict[str, Any] | None, dict[str, Any]]) -> list[Checkpoint]:
    """(record, state) pairs after the initial checkpoint (seq 0, empty state)."""
    out = [Checkpoint("r1", 0, 0, {"notes": []}, None, 0.0)]
    for i, (rec, state) in enumerate(items, start=1):
        out.append(Checkpoint("r1", i, int((rec or {}).get("cycle", 0)), state, rec, float(i)))
    return out


def spent(cost: float, notes: int = 0) -> dict[str, Any]:
    return {
        "spent": {"cost_usd": cost, "tokens": 0, "seconds": 0.0},
        "notes": [{"kind": "answer"}] * notes,
    }


def events(*kinds: str) -> list[Event]:
    return [Event(i, "r1", 0, k, float(i), {}) for i, k in enumerate(kinds, start=1)]


def approval(status: str, requested: float, decided: float | None) -> Approval:
    return Approval(
        approval_id=f"a{requested}",
        run_id="r1",
        cycle=1,
        kind="risk",
        rule=None,
        what="x",
        why="y",
        evidence={},
        diff=None,
        action_hash="h",
        status=status,
        requested_at=requested,
        expires_at=None,
        decided_by="ann" if decided is not None else None,
        decided_at=decided,
        note=None,
    )


def metrics_of(
    run: RunRecord | None = None, cps: list[Checkpoint] | None = None, **kw: Any
) -> RunMetrics:
    return run_metrics(
        run or run_row(),
        cps if cps is not None else checkpoints(),
        kw.pop("evs", []),
        kw.pop("approvals", []),
        **kw,
    )


# --- spend after the last material improvement ----------------------------------------------
def test_spend_after_last_improvement_reconciles_with_the_run_total() -> None:
    # cycles cost 0.2, 0.3, 0.2 (cumulative 0.2, 0.5, 0.7); the run total 1.0 also holds 0.3
    # of aborted work recorded in no cycle. The last improving cycle is 2: after = 1.0 - 0.5.
    cps = checkpoints(
        (cycle(1, {"a": False}, improved=True, cost=0.2), spent(0.2)),
        (cycle(2, {"a": False}, improved=True, cost=0.3), spent(0.5)),
        (cycle(3, {"a": False}, cost=0.2), spent(0.7)),
    )
    m = metrics_of(run_row(status="stopped", stop_reason="budget_cost", cost_usd=1.0), cps)
    assert m.last_improvement_cycle == 2
    assert m.spend_after_last_improvement_usd == pytest.approx(0.5)
    assert m.spend_after_last_improvement_frac == pytest.approx(0.5)


def test_no_improving_cycle_counts_the_whole_spend_and_mid_cycle_commits_are_skipped() -> None:
    parked = {"cycle": 1, "decision": "parked", "approval_id": "x", "held_out": {}}
    cps = checkpoints((cycle(1, {"a": False}, cost=0.4), spent(0.4)), (parked, spent(0.6)))
    m = metrics_of(run_row(status="awaiting_approval", stop_reason=None, cost_usd=0.6), cps)
    assert m.last_improvement_cycle is None
    assert m.spend_after_last_improvement_usd == pytest.approx(0.6)


def test_states_without_spent_fall_back_to_the_cycles_usage() -> None:
    cps = checkpoints(
        (cycle(1, improved=True, cost=0.25), {}),
        (cycle(2, improved=True, cost=0.25), {}),
        (cycle(3, cost=0.5), {}),
    )
    m = metrics_of(run_row(cost_usd=1.0), cps)
    assert m.spend_after_last_improvement_usd == pytest.approx(0.5)


def test_zero_cost_run_has_no_spend_share() -> None:
    m = metrics_of(run_row(cost_usd=0.0))
    assert m.spend_after_last_improvement_usd == 0.0
    assert m.spend_after_last_improvement_frac is None
    assert m.progress_per_usd is None


# --- regressions ----------------------------------------------------------------------------
def test_regressions_are_checks_that_passed_earlier_and_fail_now() -> None:
    cps = checkpoints(
        (cycle(1, {"a": True, "b": False}), {}),
        (cycle(2, {"a": False, "b": True}), {}),  # a regressed
        (cycle(3, {"a": True, "b": True}), {}),
        (cycle(4, decision="refused"), {}),  # no verdicts: neither checked nor a baseline
        (cycle(5, {"a": True, "b": False}), {}),  # b regressed (it passed in 2 and 3)
    )
    m = metrics_of(cps=cps)
    assert m.verified_cycles == 4
    assert m.regression_checked_cycles == 3
    assert m.regressions == ((2, ("a",)), (5, ("b",)))


def test_a_check_that_stays_broken_regresses_once_in_the_cycle_that_broke_it() -> None:
    # (before: every cycle in which a check that ever passed still failed counted, so cycles
    # 3 and 4 here were regressions too, though they broke nothing that passed before them)
    cps = checkpoints(
        (cycle(1, {"a": True, "b": True}), {}),
        (cycle(2, {"a": False, "b": True}), {}),  # a broken
        (cycle(3, {"a": False, "b": True}), {}),  # a still failing: nothing new broken
        (cycle(4, {"a": False, "b": True}), {}),
        (cycle(5, {"a": True, "b": False}), {}),  # b broken (a repaired)
    )
    m = metrics_of(cps=cps)
    assert (m.verified_cycles, m.regression_checked_cycles) == (5, 4)
    assert m.regressions == ((2, ("a",)), (5, ("b",)))
    assert summarize([m]).basis["regression_rate"] == (2, 4)


def test_a_forks_first_cycle_is_compared_with_the_cycle_it_was_forked_from() -> None:
    # the origin's last verified cycle at the fork point passed a and b; the fork's first
    # cycle fails a (a regression) and its second fails a still (none)
    fork = run_row(run_id="f1", forked_from="r1", forked_at=3)
    cps = checkpoints(
        (cycle(4, {"a": False, "b": True}), {}),
        (cycle(5, {"a": False, "b": True}), {}),
    )
    m = metrics_of(fork, cps, fork_base=(3, ["a", "b"]))
    assert (m.verified_cycles, m.regression_checked_cycles) == (2, 2)
    assert m.regressions == ((4, ("a",)),)
    # without a base (a fork of cycle 0, or of a run with no verified cycle) the first is not
    # checked
    m = metrics_of(fork, cps)
    assert (m.regression_checked_cycles, m.regressions) == (1, ())
    # a rollback to the fork point keeps the origin's cycle as the previous one
    cps = checkpoints(
        (cycle(4, {"a": True, "b": True}), {}),
        ({"decision": "rollback", "to_cycle": 3, "by": "ann"}, {}),
        (cycle(4, {"a": True, "b": False}), {}),  # b broken against origin cycle 3
    )
    m = metrics_of(fork, cps, fork_base=(3, ["b"]))
    assert m.regressions == ((4, ("b",)),)


def test_a_rollback_forgets_what_passed_after_its_target() -> None:
    cps = checkpoints(
        (cycle(1, {"a": False}), {}),
        (cycle(2, {"a": True}), {}),
        ({"decision": "rollback", "to_cycle": 1, "by": "ann"}, {}),
        (cycle(3, {"a": False}), {}),  # a passed only in the undone cycle 2
        (cycle(4, {"a": True}), {}),
        ({"decision": "rollback", "to_cycle": 0, "by": "ann"}, {}),
        (cycle(5, {"a": False}), {}),  # nothing earlier survives: not even checked
    )
    m = metrics_of(cps=cps)
    assert (m.regression_checked_cycles, m.regressions) == (3, ())


def _regressions_by_definition(
    steps: list[tuple[str, int, dict[str, bool]]],
) -> tuple[int, int, list[tuple[int, tuple[str, ...]]]]:
    """The metric as defined, naively: a check regresses in a cycle when it fails there and
    passed in the previous kept verified cycle (rolled-back cycles are forgotten)."""
    kept: list[tuple[int, dict[str, bool]]] = []
    checked = verified = 0
    found: list[tuple[int, tuple[str, ...]]] = []
    for kind, n, visible in steps:
        if kind == "rollback":
            kept = [(m, v) for m, v in kept if m <= n]
            continue
        if kept:
            checked += 1
            before = {k for k, ok in kept[-1][1].items() if ok}
            broken = tuple(sorted(k for k, ok in visible.items() if not ok and k in before))
            if broken:
                found.append((n, broken))
        kept.append((n, visible))
        verified += 1
    return checked, verified, found


@given(
    st.lists(
        st.one_of(
            st.dictionaries(st.sampled_from("abc"), st.booleans(), min_size=1),
            st.integers(min_value=0, max_value=6),  # a rollback to that cycle
        ),
        max_size=14,
    )
)
def test_regressions_in_one_pass_equal_the_definition(script: list[Any]) -> None:
    rows: list[tuple[dict[str, Any], dict[str, Any]]] = []
    steps: list[tuple[str, int, dict[str, bool]]] = []
    n = 0
    for item in script:
        if isinstance(item, int):
            to = min(item, n)
            rows.append(({"decision": "rollback", "to_cycle": to, "by": "ann"}, {}))
            steps.append(("rollback", to, {}))
            n = to
        else:
            n += 1
            rows.append((cycle(n, item), {}))
            steps.append(("cycle", n, item))
    m = metrics_of(cps=checkpoints(*rows))
    checked, verified, found = _regressions_by_definition(steps)
    assert (m.regression_checked_cycles, m.verified_cycles) == (checked, verified)
    assert m.regressions == tuple(found)


# --- context reuse --------------------------------------------------------------------------
def test_context_reuse_counts_cycles_whose_context_held_a_note() -> None:
    parked = {"cycle": 2, "decision": "parked", "approval_id": "q", "held_out": {}}
    cps = checkpoints(
        (cycle(1), spent(0.1, notes=0)),
        (parked, spent(0.2, notes=0)),  # cycle 2's context had no note
        (cycle(2, decision="asked"), spent(0.2, notes=1)),  # the answer arrives
        (cycle(3), spent(0.3, notes=1)),  # cycle 3's context carried it
        (None, spent(0.3, notes=2)),  # a status-only commit adding a note (compensations)
        (cycle(4), spent(0.4, notes=2)),
    )
    m = metrics_of(cps=cps)
    # cycles after the first: 2, 3, 4; with a note at their start: 3, 4
    assert (m.context_cycles, m.context_reuse_cycles) == (3, 2)


# --- revisions ------------------------------------------------------------------------------
def test_revisions_count_versions_before_the_accepted_one_of_parts_the_loop_wrote() -> None:
    def part(name: str, *versions: tuple[int, str]) -> dict[str, Any]:
        return {
            "name": name,
            "versions": [
                {"n": i, "value": i, "cycle": c, "status": s}
                for i, (c, s) in enumerate(versions, start=1)
            ],
        }

    state = {
        "artifacts": [
            {
                "name": "doc",
                "parts": [
                    part("x", (0, "candidate"), (1, "rejected"), (2, "accepted")),  # 2 revisions
                    part("y", (0, "accepted")),  # untouched: left out
                    part("z", (1, "accepted")),  # written once, accepted: 0
                    part("w", (0, "candidate"), (1, "candidate")),  # not accepted: left out
                    part("v", (0, "rejected"), (1, "accepted"), (3, "candidate")),  # 1
                ],
            }
        ]
    }
    m = metrics_of(cps=checkpoints((cycle(3), state)))
    assert (m.accepted_parts, m.part_revisions) == (3, 3)


# --- failures and recovery ------------------------------------------------------------------
def test_crash_resumes_are_resumes_after_an_execution_that_handed_nothing_over() -> None:
    evs = events(
        "run_created",
        "started",
        "cycle_started",
        "decision",
        "resumed",  # 1: nothing handed over since 'started' -> a crash
        "retry",
        "cycle_started",
        "approval_requested",
        "approval_decided",
        "resumed",  # parked and decided: not a crash
        "still_waiting",
        "resumed",  # still waiting last time: not a crash
        "effect_in_doubt",
        "rolled_back",
        "resumed",  # after a rollback: not a crash
        "gave_up",
        "resumed",  # 2: a crash
        "stopped",
    )
    m = metrics_of(evs=evs)
    assert m.failures == {CRASH_RESUME: 2, "retry": 1, "effect_in_doubt": 1, "gave_up": 1}
    assert m.had_failure
    assert m.recovered is True


def _said(*items: tuple[str, dict[str, Any]]) -> list[Event]:
    """Events with their data, in this order."""
    return [Event(i, "r1", 0, k, float(i), d) for i, (k, d) in enumerate(items, start=1)]


def _lease(n: int, **kw: Any) -> dict[str, Any]:
    return {"lease": n, **kw}


def test_an_execution_that_stopped_alive_is_no_crash_resume() -> None:
    """As the crash count reads it (``crashes_at``, crash53b): an execution that said, by its
    lease, that it stopped alive (Ctrl-C, a drain, its lease lost, said late) is no crash."""
    evs = _said(
        ("run_created", {}),
        ("started", _lease(1)),
        ("interrupted", _lease(1, why="KeyboardInterrupt")),  # Ctrl-C
        ("resumed", _lease(2)),  # after lease 1, alive: no crash
        ("drained", _lease(2)),  # a worker's drain
        ("resumed", _lease(3)),  # after lease 2, alive: no crash
        ("cycle_started", {}),
        ("resumed", _lease(4)),  # 1: lease 3 said nothing (killed)
        ("resumed", _lease(6)),  # taken over from lease 4 (frozen, not dead) ...
        ("interrupted", _lease(4, why="lease lost")),  # ... which says so late: no crash
        ("resumed", _lease(7)),  # 2: lease 6 said nothing
        ("stopped", {}),
    )
    assert metrics_of(evs=evs).failures == {CRASH_RESUME: 2}
    # a log from before leases were named: a resume after a silent execution is a crash, one
    # after a drain a handoff
    old = events("started", "resumed", "drained", "resumed", "stopped")
    assert metrics_of(evs=old).failures == {CRASH_RESUME: 1}


def test_recovery_success_rate_counts_no_interruption_as_a_failure() -> None:
    alive = _said(
        ("started", _lease(1)),
        ("interrupted", _lease(1, why="CancelledError")),
        ("resumed", _lease(2)),
        ("drained", _lease(2)),
        ("resumed", _lease(3)),
        ("stopped", {}),
    )
    crashed = _said(("started", _lease(1)), ("resumed", _lease(2)), ("stopped", {}))
    rows = [
        metrics_of(run_row(run_id="a"), evs=alive),  # accepted, interrupted twice: no failure
        metrics_of(run_row(run_id="b"), evs=crashed),  # accepted after a crash
        metrics_of(run_row(run_id="c", status="stopped", stop_reason="no_progress"), evs=alive),
    ]
    assert [r.had_failure for r in rows] == [False, True, False]
    m = summarize(rows)
    # by hand: runs with a failure: b; of those accepted: b -> 1/1; b of the 3 runs
    assert m.recovery_success_rate == pytest.approx(1 / 1)
    assert m.exception_rate == pytest.approx(1 / 3)


def test_a_clean_run_has_no_failures() -> None:
    m = metrics_of(evs=events("run_created", "started", "decision", "stopped"))
    assert m.failures == {}
    assert m.recovered is None


# --- approvals ------------------------------------------------------------------------------
def test_approval_waits_count_only_what_a_person_decided() -> None:
    aps = [
        approval("approved", 10.0, 40.0),  # 30
        approval("denied", 100.0, 110.0),  # 10
        approval("answered", 0.0, 5.0),  # 5
        approval("expired", 0.0, 500.0),  # not a person
        approval("cancelled", 0.0, 50.0),  # closed by a cancel or rollback
        approval("pending", 0.0, None),
    ]
    m = metrics_of(approvals=aps)
    assert m.approvals == 6
    assert sorted(m.approval_waits_s) == [5.0, 10.0, 30.0]
    assert m.reviews == 3


# --- workflow reuse -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "proven_at", "expected"),
    [("v1", 999.0, True), ("v1", 1000.0, False), ("v1", None, False), (None, 1.0, None)],
)
def test_workflow_reuse_needs_an_earlier_accepted_run_of_the_same_version(
    version: str | None, proven_at: float | None, expected: bool | None
) -> None:
    m = metrics_of(run_row(loop_version=version, created_at=1000.0), workflow_proven_at=proven_at)
    assert m.workflow_reused is expected


# --- pooled ---------------------------------------------------------------------------------
def pooled_rows() -> list[RunMetrics]:
    """Four runs whose pooled metrics are worked out in the test below."""
    a = metrics_of(
        run_row(run_id="a", cycle=2, cost_usd=1.0, best_score=1.0, held_out_passed=True),
        checkpoints(
            (cycle(1, {"c": True}, improved=True, cost=0.4), spent(0.4)),
            (cycle(2, {"c": False}, cost=0.6, decision="accepted"), spent(1.0)),  # regression
        ),
        approvals=[approval("approved", 0.0, 20.0)],
        workflow_proven_at=500.0,
    )
    b = metrics_of(
        run_row(
            run_id="b",
            cycle=1,
            cost_usd=0.5,
            best_score=0.9,
            held_out_passed=False,
            created_at=2000.0,
            ended_at=2030.0,
        ),
        checkpoints((cycle(1, {"c": True}, improved=True, cost=0.5), spent(0.5))),
        evs=events("started", "resumed"),  # a crash, then accepted
    )
    c = metrics_of(  # accepted, no held-out checks, unknown loop version, a pending request
        run_row(
            run_id="c",
            cycle=4,
            cost_usd=1.5,
            best_score=1.0,
            held_out_passed=None,
            ended_at=1100.0,
            loop_version=None,
        ),
        checkpoints(),
        approvals=[approval("pending", 0.0, None)],
    )
    d = metrics_of(
        run_row(
            run_id="d",
            status="stopped",
            stop_reason="no_progress",
            cycle=3,
            cost_usd=1.0,
            best_score=0.5,
            ended_at=1500.0,
        ),
        checkpoints(
            (cycle(1, {"c": False}, improved=True, cost=0.2), spent(0.2)),
            (cycle(2, {"c": False}, cost=0.4), spent(0.6)),
            (cycle(3, {"c": False}, cost=0.4), spent(1.0)),
        ),
        evs=events("started", "retry", "stopped"),
    )
    return [a, b, c, d]


def test_pooled_metrics_by_hand() -> None:
    m = summarize(pooled_rows(), review_cost_usd=10.0)
    # accepted: a, b, c; spend 1.0 + 0.5 + 1.5 + 1.0 = 4.0
    assert (m.runs, m.runs_ended, m.accepted, m.spend_usd) == (4, 4, 3, 4.0)
    assert m.time_to_accepted_s == pytest.approx((60 + 30 + 100) / 3)
    assert m.cycles_to_accepted == pytest.approx((2 + 1 + 4) / 3)
    assert m.revisions_per_accepted_part is None  # no artifacts in these states
    assert m.undefined["revisions_per_accepted_part"]
    assert m.cost_per_accepted_usd == pytest.approx(4.0 / 3)
    # after: a 1.0-0.4 = 0.6; b 0; c (no improving cycle) 1.5; d 1.0-0.2 = 0.8 -> 2.9
    assert m.spend_after_last_improvement_usd == pytest.approx(2.9)
    assert m.spend_after_last_improvement_frac == pytest.approx(2.9 / 4.0)
    assert m.progress_per_usd == pytest.approx((1.0 + 0.9 + 1.0 + 0.5) / 4.0)
    assert m.task_completion_rate == pytest.approx(3 / 4)
    assert m.false_success_rate == pytest.approx(1 / 2)  # b of a, b (c has no held-out)
    # checked cycles: a:2, d:2, d:3 -> 3; regressing: a:2
    assert m.regression_rate == pytest.approx(1 / 3)
    assert m.recovery_success_rate == pytest.approx(1 / 2)  # b recovered, d did not
    assert m.exception_rate == pytest.approx(2 / 4)  # b (a crash) and d (a retry) of 4 runs
    # held-out verdicts: a (passed, accepted) and b (failed); c and d have none
    assert m.verified_completion_rate == pytest.approx(1 / 2)
    assert m.basis["verified_completion_rate"] == (1, 2)
    assert m.approvals_per_accepted == pytest.approx(2 / 3)
    assert m.approval_wait_s == pytest.approx(20.0)
    assert m.context_reuse_rate == pytest.approx(0 / 3)
    # versions known: a, b, d; a was created (1000) after v1 was proven (500)
    assert m.workflow_reuse_rate == pytest.approx(1 / 3)
    assert m.human_review_cost_per_accepted_usd == pytest.approx(1 * 10.0 / 3)
    assert m.stop_reasons["success"] == 3
    assert m.stop_reasons["no_progress"] == 1
    assert set(m.stop_reasons) >= set(lw.STOP_REASONS)
    assert m.basis["regression_rate"] == (1, 3)
    assert m.stopped_by == {
        "success": 3,
        "plateau": 1,
        "budget": 0,
        "risk": 0,
        "escalation": 0,
        "cancelled": 0,
        "error": 0,
    }


def _ended(run_id: str, reason: str, packet: dict[str, Any] | None = None, **kw: Any) -> RunMetrics:
    status = {"success": "accepted", "escalated": "escalated", "cancelled": "cancelled"}
    return metrics_of(
        run_row(
            run_id=run_id,
            status=status.get(reason, "failed" if reason == "error" else "stopped"),
            stop_reason=reason,
            packet=packet,
            **kw,
        )
    )


def _escalated_by(kind: str, status: str) -> dict[str, Any]:
    """A handoff packet as ``_finish`` writes it for a denied or expired request."""
    return {"evidence": {"approval": {"kind": kind, "status": status, "what": "x"}}}


def test_stopped_by_groups_the_stop_reasons_and_tells_risk_from_other_escalations() -> None:
    rows = [
        _ended("s", "success"),
        _ended("p1", "no_progress"),
        _ended("p2", "marginal_return"),
        *(_ended(f"b{i}", r) for i, r in enumerate(lw.STOP_REASONS) if r.startswith("budget_")),
        _ended("r1", "escalated", _escalated_by("risk", "denied")),
        _ended("r2", "escalated", _escalated_by("risk", "expired")),
        _ended("e1", "escalated", _escalated_by("effect", "denied")),  # an effect's approval
        _ended("e2", "escalated", _escalated_by("question", "expired")),
        _ended("e3", "escalated", {"evidence": {}}),  # an actor's escalation, an error...
        _ended("e4", "escalated", None),
        _ended("c", "cancelled"),
        _ended("x", "error"),
        metrics_of(run_row(run_id="o", status="running", stop_reason=None, ended_at=None)),
    ]
    assert [r.stopped_by for r in rows][-3:] == ["cancelled", "error", None]
    m = summarize(rows)
    assert m.stopped_by == {
        "success": 1,
        "plateau": 2,
        "budget": 4,
        "risk": 2,
        "escalation": 4,
        "cancelled": 1,
        "error": 1,
    }
    assert sum(m.stopped_by.values()) == m.runs_ended == m.runs - 1
    # the closed vocabulary is unchanged: risk is a breakdown, not a stop reason
    assert m.stop_reasons["escalated"] == 6 and "risk" not in m.stop_reasons
    assert m.to_dict()["stopped_by"] == dict(m.stopped_by)


def test_verified_completion_counts_accepted_runs_that_passed_held_out() -> None:
    rows = [
        _ended("a1", "success", held_out_passed=True),  # verified completion
        _ended("a2", "success", held_out_passed=False),  # a false success
        _ended("a3", "success", held_out_passed=None),  # no held-out checks: left out
        _ended("n1", "no_progress", held_out_passed=True),  # passed held-out, not accepted
        _ended("n2", "escalated", held_out_passed=False),
        _ended("n3", "budget_cost", held_out_passed=None),  # never judged: left out
    ]
    m = summarize(rows)
    assert m.basis["verified_completion_rate"] == (1, 4)
    assert m.verified_completion_rate == pytest.approx(1 / 4)
    assert m.false_success_rate == pytest.approx(1 / 2)  # the same runs' held-out verdicts
    m = summarize(rows[2:3] + rows[5:])
    assert m.verified_completion_rate is None
    assert m.undefined["verified_completion_rate"] == "no run has a held-out verdict"


def test_the_held_out_verdicts_left_out_are_counted_by_kind() -> None:
    """``held_out_self_reported`` is the sum of two kinds, and the JSON says each (stop 56,
    heldout56b: one number, which only the CLI split, from the per-run rows)."""
    rows = [
        _ended("p1", "success", held_out_passed=True, held_out_self_reported=2),  # pass*
        _ended("p2", "no_progress", held_out_passed=True, held_out_self_reported=1),  # pass*
        _ended("f1", "success", held_out_passed=False, held_out_self_reported=1),  # fail*
        _ended("i1", "success", held_out_passed=True, held_out_self_reported=0),  # pass
        _ended("i2", "success", held_out_passed=False, held_out_self_reported=0),  # FAIL
        _ended("u1", "success", held_out_passed=True, held_out_self_reported=None),  # unknown
    ]
    m = summarize(rows)
    assert (m.held_out_pass_self_reported, m.held_out_fail_not_judged) == (2, 1)
    assert m.held_out_self_reported == 3
    d = m.to_dict()
    assert d["held_out_self_reported"] == 3
    assert (d["held_out_pass_self_reported"], d["held_out_fail_not_judged"]) == (2, 1)
    assert m.basis["false_success_rate"] == (1, 3)  # i1, i2, u1 (counted as before stop 55)


def test_exception_rate_is_runs_with_a_failure_over_runs() -> None:
    rows = [
        metrics_of(run_row(run_id="a"), evs=events("started", "retry")),
        metrics_of(run_row(run_id="b"), evs=events("started", "resumed")),  # a crash resume
        metrics_of(run_row(run_id="c"), evs=events("started", "approval_requested", "resumed")),
        metrics_of(run_row(run_id="d", status="stopped", stop_reason="budget_cost")),
    ]
    m = summarize(rows)
    assert m.basis["exception_rate"] == (2, 4)  # c handed over before its resume: no failure
    assert m.recovery_success_rate == pytest.approx(2 / 2)


def test_empty_selection_is_undefined_never_zero() -> None:
    m = summarize([])
    d = m.to_dict()
    for name in METRIC_NAMES:
        assert d[name] is None, name
        assert name in m.undefined
    assert REVIEW_COST_METRIC not in d
    assert (m.runs, m.accepted, m.spend_usd) == (0, 0, 0.0)


def test_to_dict_is_flat_with_the_design_names_and_json_safe() -> None:
    import json

    m = summarize(pooled_rows(), review_cost_usd=2.5, selection={"project": "p"})
    d = m.to_dict(per_run=True)
    assert list(d)[:5] == ["selection", "runs", "runs_ended", "accepted", "spend_usd"]
    assert all(name in d for name in METRIC_NAMES)
    assert d[REVIEW_COST_METRIC] == pytest.approx(2.5 / 3)
    assert [r["run_id"] for r in d["per_run"]] == ["a", "b", "c", "d"]
    assert json.loads(json.dumps(d)) == d
    assert "per_run" not in m.to_dict()
    assert set(DEFINITIONS) == {*METRIC_NAMES, REVIEW_COST_METRIC}
    assert m.value("regression_rate") == m.regression_rate
    with pytest.raises(KeyError):
        m.value("runs")


# --- time arguments -------------------------------------------------------------------------
def test_parse_time_accepts_numbers_datetimes_and_iso_strings() -> None:
    assert parse_time(None) is None
    assert parse_time(12.5) == 12.5
    assert parse_time("2024-06-01T00:00:00Z") == datetime(2024, 6, 1, tzinfo=UTC).timestamp()
    assert parse_time("2024-06-01T02:00:00+02:00") == datetime(2024, 6, 1, tzinfo=UTC).timestamp()
    assert parse_time("2024-06-01") == datetime(2024, 6, 1).timestamp()  # local time
    assert parse_time(datetime(2024, 6, 1, tzinfo=UTC)) == 1717200000.0


@pytest.mark.parametrize("bad", ["yesterday", "2024-13-01", "", True, math.nan, [1]])
def test_parse_time_rejects_anything_else_naming_the_field(bad: Any) -> None:
    with pytest.raises(lw.ConfigError) as err:
        parse_time(bad, field="until")
    assert err.value.field == "until"


# --- the run summary of `loopwright run` ---------------------------------------------------
def _caption(runs: list[RunRecord]) -> str:
    from rich.console import Console

    from loopwright.cli._summary import summary_table

    out = Console(record=True, width=400)
    out.print(summary_table(runs))
    return " ".join(out.export_text().split())


def test_the_run_summary_reports_false_success_rate_on_the_metrics_basis() -> None:
    # a: failed held-out; b: passed held-out; c: a loop without held-out checks
    rows = [
        run_row(run_id="a", held_out_passed=False),
        run_row(run_id="b", held_out_passed=True),
        run_row(run_id="c", held_out_passed=None),
    ]
    m = summarize(run_metrics(r, [], [], []) for r in rows)
    assert m.false_success_rate == pytest.approx(1 / 2)
    # before: 1 / 3, every accepted run counted, held-out verdict or not
    assert "false_success_rate 0.500" in _caption(rows)
    # no held-out verdict at all: the metric is undefined, not 0
    none = [run_row(run_id="c", held_out_passed=None)]
    assert summarize(run_metrics(r, [], [], []) for r in none).false_success_rate is None
    assert "false_success_rate" not in _caption(none)


def test_progress_per_cycle_is_the_seeds_progress_per_cycle() -> None:
    """The essay's operating metrics name "progress per cycle" beside progress per dollar: the
    sum of the runs' progress over their cycles (a fork's own of both), defined when cycles
    cost nothing. By hand: a reaches 0.8 in 2 cycles, b 0.3 in 4 at no cost, a fork of b
    (inherited cycle 2, best 0.3) reaches 0.9 in 2 cycles of its own: (0.8 + 0.3 + 0.6) / 8."""
    a = run_metrics(run_row(run_id="a", cycle=2, best_score=0.8, cost_usd=0.2), [], [], [])
    b = run_metrics(run_row(run_id="b", cycle=4, best_score=0.3, cost_usd=0.0), [], [], [])
    fork = run_row(run_id="f", cycle=4, best_score=0.9, cost_usd=0.1, forked_from="b")
    first = Checkpoint("f", 0, 2, {"cycle": 2, "best_score": 0.3, "spent": {}}, None, 0.0)
    f = run_metrics(fork, [first], [], [])
    assert (f.cycles, f.progress) == (2, pytest.approx(0.6))
    m = summarize([a, b, f])
    assert m.progress_per_cycle == pytest.approx(1.7 / 8)
    assert m.basis["progress_per_cycle"] == (pytest.approx(1.7), 8)
    assert b.progress_per_cycle == pytest.approx(0.3 / 4) and b.progress_per_usd is None
    assert m.to_dict(per_run=True)["per_run"][0]["progress_per_cycle"] == pytest.approx(0.4)
    none = summarize([run_metrics(run_row(cycle=0, best_score=None), [], [], [])])
    assert none.progress_per_cycle is None
    assert none.undefined["progress_per_cycle"] == "no run has a cycle"
    assert summarize([]).undefined["progress_per_cycle"] == "no runs selected"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"review_cost_usd": "5"}, "review_cost_usd"),  # was a TypeError from isfinite
        ({"review_cost_usd": True}, "review_cost_usd"),  # was read as $1 a review
        ({"project": 5}, "project"),  # was no run at all, without a word
        ({"loop": ["a"]}, "loop"),  # was the store's error binding a list
        ({"project": "a\x00b"}, "project"),  # PostgreSQL refuses a NUL in text
        ({"store": 123}, "store"),  # was a TypeError from os.fspath
    ],
)
def test_compute_metrics_refuses_a_wrong_argument_naming_it(
    tmp_path: Any, kw: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {"store": str(tmp_path / "none.db"), **kw}
    with pytest.raises(lw.ConfigError) as err:
        lw.compute_metrics(args.pop("store"), **args)
    assert err.value.field == field


def test_a_date_too_early_for_local_time_is_said_as_such() -> None:
    """`--since 0001-01-01` is an ISO 8601 date, yet was refused as "not an ISO 8601 date"
    (local time at year 1 is before year 1 east of UTC or too early for the C library)."""
    from datetime import datetime

    from loopwright._metrics import parse_time

    try:  # whether this machine's C library counts local year 1 (glibc in UTC: no)
        local: float | None = datetime(1, 1, 1).timestamp()
    except (ValueError, OverflowError, OSError):
        local = None
    if local is None:
        with pytest.raises(lw.ConfigError, match="outside the times this machine can count"):
            parse_time("0001-01-01")
    else:
        assert parse_time("0001-01-01") == local
    assert parse_time("0001-01-01T00:00:00+00:00") == -62135596800.0
    with pytest.raises(lw.ConfigError, match="not an ISO 8601 date"):
        parse_time("2024-13-01")
