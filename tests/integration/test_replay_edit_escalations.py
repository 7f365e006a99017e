"""Replay of runs a person's edit ended in escalation at a cycle's end (review48b): replayed
under the run's own contract they end as the run did, and a tighter contract stops before a
denied request's cycle, which the actor's attempt began.

The engine decides a cycle's end in this order: success, then a person's call (a request
denied after an edit beside it, judged check-only; a person's version failing a visible check),
then the plateau and the budgets. Replay read such a cycle as any other: at the run's last
allowed cycle it said ``budget_cycles`` where the run had escalated. And it read the denied
request's cycle as a check-only one, which no cycle cap stops: a contract with a lower cap
accepted the run at a cycle the engine would never have started. ``context_reuse_rate`` left
that cycle out as one that showed no actor a context, though it did.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from support.doc_verdicts import parts_good

import loopwright as lw
from loopwright._contract import contract_from_snapshot
from loopwright.replay import read_traces, simulate, trace_of_run, write_traces

PARTS = ("a", "b", "c")


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return parts_good(state, PARTS, checked=True)  # (not d: never accepted, always writable)


def _loop(max_cycles: int, *, risky_from: int | None = None) -> lw.Loop:
    """The actor writes ``try N`` to a, b (never right); from cycle ``risky_from`` on it
    writes d only, a change that waits for a person."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        edits = {p: f"try {ctx.cycle}" for p in ("a", "b") if not ctx.is_accepted("doc", p)}
        if risky_from is not None and ctx.cycle >= risky_from:
            edits = {"d": f"note {ctx.cycle}"}
        return lw.Proposal.edit("doc", edits or {"c": "good"}, usage=lw.Usage(0.1, 100))

    risk = () if risky_from is None else (lw.RiskRule(name="d", touches=("doc/d",)),)
    return lw.Loop(
        name="edit-escalations",
        actor=actor,
        verifiers=[lw.Check(fn=_check, name="check")],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=max_cycles), risk=risk
        ),
        retry=lw.RetryPolicy(attempts=1),
    )


TASK = {"artifacts": {"doc": {"a": "bad", "b": "bad", "c": "good", "d": ""}}}


def edited_past_the_cap(path: Path) -> lw.RunResult:
    """A run stopped on its cycle cap (2), edited with a version its check refuses, resumed:
    its cycle 3 judges the edit check-only (no actor call) and escalates."""
    with lw.Runtime(str(path)) as rt:
        r = rt.run_sync(_loop(2), TASK, task_key="t")
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 2)
        rt.edit(r.run_id, "doc/c", "worse", by="ana")
        r = rt.resume_sync(r.run_id, _loop(2))
    assert (r.status, r.stop_reason, r.cycles) == ("escalated", "escalated", 3)
    return r


def denied_beside_an_edit(path: Path) -> lw.RunResult:
    """The run's only cycle parks on a request (the actor called, paid); a person edits beside
    it and denies it: the cycle judges the edit and the run escalates on the denial."""
    loop = _loop(1, risky_from=1)
    with lw.Runtime(str(path)) as rt:
        r = rt.run_sync(loop, TASK, task_key="t")
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.deny(r.run_id, by="bo")
        r = rt.resume_sync(r.run_id, loop)
    assert (r.status, r.stop_reason, r.cycles) == ("escalated", "escalated", 1)
    return r


def _replayed(path: Path, run_id: str, contract: lw.Contract | None = None) -> lw.RunRecord:
    with lw.store.open_store(str(path)) as st:
        rec = st.get_run(run_id)
        trace = trace_of_run(st, rec)
    assert trace is not None
    # (through the trace file too: what a file says is replayed alike)
    out = path.with_suffix(".jsonl")
    write_traces([trace], out)
    [again] = read_traces(out)
    assert again == trace
    o = simulate(trace, contract or contract_from_snapshot(rec.contract))
    return rec, o


def test_a_persons_failing_version_at_the_cycle_cap_replays_to_its_escalation(
    tmp_path: Path,
) -> None:
    """Stopped on its cycle cap, edited with a version its check refuses, resumed: the
    check-only cycle past the cap escalates the run to the person. Replay said budget_cycles."""
    path = tmp_path / "s.db"
    r = edited_past_the_cap(path)
    rec, o = _replayed(path, r.run_id)
    assert (o.reason, o.cycles, o.accepted) == ("escalated", 3, False)
    assert o.cost_usd == rec.cost_usd


def test_a_denied_request_at_the_cycle_cap_replays_to_its_escalation(tmp_path: Path) -> None:
    """The run's only cycle parks on a request; a person edits beside it and denies it: the
    cycle judges the edit and the run escalates on the denial. Replay said budget_cycles."""
    path = tmp_path / "s.db"
    r = denied_beside_an_edit(path)
    rec, o = _replayed(path, r.run_id)
    assert (o.reason, o.cycles) == ("escalated", 1)
    assert o.cost_usd == rec.cost_usd
    assert o.seconds == pytest.approx(rec.seconds)  # (its time after the cycle too)


def test_a_denied_requests_cycle_is_stopped_by_a_lower_cycle_cap(tmp_path: Path) -> None:
    """The denied request's cycle began as the actor's attempt (the actor was paid): a
    contract whose cycle cap forbids that cycle stops the run before it, as the engine would.
    Replay read it as a check-only cycle, which no cap stops: a fork whose first cycle it was
    (nothing before it to stop the run at its end) was accepted at cycle 2 under a cap of 1."""
    path = tmp_path / "s.db"
    loop = _loop(5, risky_from=2)
    with lw.Runtime(str(path)) as rt:
        first = rt.run_sync(_loop(1), TASK, task_key="t")
        assert (first.stop_reason, first.cycles) == ("budget_cycles", 1)
        fork = rt.fork(first.run_id, 1, contract=loop.contract)
        r = rt.resume_sync(fork.run_id, loop)
        assert (r.status, r.cycles) == ("awaiting_approval", 1)
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.edit(r.run_id, "doc/b", "good", by="ana")
        rt.deny(r.run_id, by="bo")
        r = rt.resume_sync(r.run_id, loop)
        # the person's version meets the contract, the denied d not applied
        assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 2)
    _, same = _replayed(path, r.run_id)
    assert (same.reason, same.cycles, same.accepted) == ("success", 1, True)
    capped = dataclasses.replace(loop.contract, budget=lw.Budget(max_cycles=1))
    _, o = _replayed(path, r.run_id, capped)
    assert (o.reason, o.cycles, o.accepted) == ("budget_cycles", 0, False)
    # The cycle ends the run whatever it finds: accepted if the person's version meets the
    # contract, else escalated on the denial (``_judge_denied``), never left to the plateau or
    # the budgets. Recorded accepted, its trace did not say so: under a contract it falls short
    # of, replay went on past it (censored) where the engine escalates there (review48c).
    stricter = dataclasses.replace(loop.contract, success=lw.Success(required=("check", "other")))
    _, o = _replayed(path, r.run_id, stricter)
    assert (o.reason, o.cycles, o.accepted) == ("escalated", 1, False)


def test_a_denied_requests_cycle_counts_as_a_cycle_with_a_context(tmp_path: Path) -> None:
    """``context_reuse_rate`` counts the cycles that showed an actor a context: the denied
    request's cycle did (the actor was asked, and paid, before it parked), though it judged
    the edit check-only once denied. It was left out as a check-only cycle."""
    path = tmp_path / "s.db"
    loop = _loop(5, risky_from=2)
    with lw.Runtime(str(path)) as rt:
        r = rt.run_sync(loop, TASK, task_key="t")
        assert (r.status, r.cycles) == ("awaiting_approval", 1)
        rt.edit(r.run_id, "doc/a", "good", by="ana")  # b still wrong
        rt.deny(r.run_id, by="bo")
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.cycles) == ("escalated", 2)
        m = lw.compute_metrics(rt.store)
    [row] = m.per_run
    assert row.context_cycles == 1  # cycle 2, the actor's (cycle 1 is the run's first)


def _older_trace(tmp_path: Path, second: tuple[str, ...]) -> Path:
    """A trace file as a release before stop 48 wrote it: cycle 2 marked ``check_only``
    whatever its calls (the cycle of a request denied after an edit beside it, which the
    actor's call began, was marked so too), and no ``escalated``. ``second``: cycle 2's calls."""
    line = {
        "format": "loopwright.run-trace/1",
        "run_id": "older",
        "task_key": "t",
        "source": "file",
        "required": ["check"],
        "recorded": {"status": "accepted", "stop_reason": "success", "cycles": 2},
        "cycles": [
            {
                "cycle": 1,
                "calls": [{"who": "actor", "cost_usd": 0.1}, {"who": "verifier:check"}],
                "verdicts": {"check": {"passed": False, "score": 0.5}},
                "score": 0.5,
                "reopened": True,  # (ended on its cap of 1, a person had the run go on)
            },
            {
                "cycle": 2,
                "calls": [{"who": w, "cost_usd": 0.1} for w in second],
                "verdicts": {"check": {"passed": True, "score": 1.0}},
                "score": 1.0,
                "check_only": True,
            },
        ],
        "tail": {"kind": "none"},
    }
    path = tmp_path / "older.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("second", "check_only", "reason"),
    [
        # the denied request's cycle: the actor was called, the cap of 1 forbids the attempt
        (("actor", "verifier:check"), False, "budget_cycles"),
        # a person's edit judged, no actor call: no attempt, which no cycle cap stops
        (("verifier:check",), True, "success"),
    ],
)
def test_an_older_trace_marks_a_denied_requests_cycle_check_only_and_is_read_as_the_engine(
    tmp_path: Path, second: tuple[str, ...], check_only: bool, reason: str
) -> None:
    """A trace file written before stop 48 marked the cycle of a request denied after an edit
    beside it ``check_only`` though its calls list the actor's: read back, it replayed as no
    attempt (past a cycle cap, left out of the projection's paid cycles, no trial for
    ``fit_hazard``) where the same run read from the store is the actor's attempt. The one rule
    (``_decide.no_attempt``) reads the file as the store: a cycle that called the actor made
    an attempt, whatever its flag."""
    [trace] = read_traces(_older_trace(tmp_path, second))
    assert trace.cycles[1].check_only is check_only
    # (the denied request's cycle: short of success, it escalates on the denial)
    assert trace.cycles[1].escalated is not check_only
    capped = lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=1))
    o = simulate(trace, capped)
    assert (o.reason, o.cycles) == (reason, 1 if reason == "budget_cycles" else 2)
    # (and so the store's trace of such a cycle, written again and read back, reads the same)
    again = tmp_path / "again.jsonl"
    write_traces([trace], again)
    assert list(read_traces(again)) == [trace]


def test_a_run_still_open_counts_its_held_out_pass_in_both_columns() -> None:
    """Outside probe (leftovers48): a run awaiting approval has no held-out verdict recorded
    on the run yet (it is written when the run ends); the contract's column counted its last
    cycle's pass (censored, it would go on) and the recorded column did not: "held-out passed
    2" beside 1 accepted. Both count the last concluded cycle's verdict of a run still open."""
    from loopwright.replay import Call, CycleTrace, RunTrace, recorded_outcomes, replay

    def trace(run_id: str, status: str, reason: str | None, held: bool | None) -> RunTrace:
        return RunTrace(
            run_id=run_id,
            task_key=run_id,
            cycles=(
                CycleTrace(
                    cycle=1,
                    calls=(Call("actor", 0.1, 10),),
                    verdicts={"v": {"passed": reason == "success", "score": 0.5}},
                    score=0.5,
                    seconds=1.0,
                    held_out_passed=held is not False,
                ),
            ),
            required=("v",),
            recorded={
                "status": status,
                "stop_reason": reason,
                "cycles": 1,
                "cost_usd": 0.1,
                "tokens": 10,
                "held_out_passed": held,
            },
            tail={"kind": "none"},
        )

    traces = [
        trace("open", "awaiting_approval", None, None),
        trace("done", "stopped", "budget_cycles", False),  # recorded on the run: kept
    ]
    report = replay(traces, {"same": lw.Contract(budget=lw.Budget(max_cycles=9))})
    totals, outs = report.contracts[0]
    assert outs[0].reason == "censored" and outs[0].held_out_passed is True
    rec = recorded_outcomes(traces)
    assert [o.held_out_passed for o in rec] == [True, False]
    assert report.recorded.held_out_passed == totals.held_out_passed == 1
