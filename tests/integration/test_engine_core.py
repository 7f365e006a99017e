"""The engine end to end over a real SQLite store: stops, budgets, repair, plan, failures."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields

import loopwright as lw


def fixer(ctx: lw.Context) -> lw.Proposal:
    """Repairs one finding per cycle; the first cycle (no findings yet) only looks."""
    for f in ctx.findings:
        if f.dimension == "value" and f.part and not ctx.is_accepted("doc", f.part):
            return lw.Proposal.edit(
                "doc", {f.part: f.evidence["expected"]}, usage=lw.Usage(0.1, 10)
            )
    return lw.Proposal(note="look", usage=lw.Usage(0.1, 10))


def make_loop(
    actor: Callable[..., Any] = fixer,
    verifiers: Any = (fields,),
    *,
    risk: tuple[lw.RiskRule, ...] = (),
    no_progress: lw.NoProgress | None = None,
    success: lw.Success | None = None,
    actor_timeout_s: float | None = None,
    **budget: Any,
) -> lw.Loop:
    contract = lw.Contract(
        success=success or lw.Success(),
        no_progress=no_progress,
        budget=lw.Budget(**(budget or {"max_cycles": 10})),
        risk=risk,
    )
    return lw.Loop(
        name="t",
        actor=actor,
        verifiers=list(verifiers),
        contract=contract,
        actor_timeout_s=actor_timeout_s,
    )


PACKET_KEYS = {
    "best_candidate",
    "unresolved_findings",
    "recommended_action",
    "trace",
    "accepted",
    "stop_reason",
    "evidence",
    "spent",
}


def assert_packet(r: lw.RunResult) -> dict[str, Any]:
    assert r.status != "accepted"
    assert r.packet is not None
    assert set(r.packet) >= PACKET_KEYS
    assert r.packet["stop_reason"] == r.stop_reason
    assert r.packet["trace"]["run_id"] == r.run_id
    assert r.packet["recommended_action"]
    assert "artifacts" in r.packet["best_candidate"]
    return r.packet


def records(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [c.record for c in rt.store.checkpoints(run_id) if c.record and "proposal" in c.record]


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event hanging actors wait on; set at teardown so no thread outlives the test."""
    ev = threading.Event()
    yield ev
    ev.set()


# --- success and local repair ---------------------------------------------------------------
def test_success_repairs_part_by_part(rt: lw.Runtime) -> None:
    r = rt.run_sync(make_loop(), TASK, task_key="k")
    assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 4)
    assert r.packet is None
    assert r.state.values() == {"doc": TARGET}
    assert {ref: p.status for ref, p in r.state.iter_parts()} == dict.fromkeys(
        ("doc/a", "doc/b", "doc/c"), "accepted"
    )
    assert r.spent.cost_usd == pytest.approx(0.4)
    assert r.spent.tokens == 40
    cks = rt.store.checkpoints(r.run_id)
    assert [c.seq for c in cks] == list(range(len(cks)))
    # accept_parts="when_clean": after cycle 2, doc/a is accepted while b and c are still repaired
    at2 = next(c.task_state() for c in cks if c.cycle == 2)
    assert {ref: p.status for ref, p in at2.iter_parts()} == {
        "doc/a": "accepted",
        "doc/b": "rejected",
        "doc/c": "rejected",
    }
    kinds = [e.kind for e in rt.store.events(r.run_id)]
    assert kinds[0] == "run_created"
    assert kinds[-1] == "stopped"


def test_on_success_accepts_nothing_until_the_end(rt: lw.Runtime) -> None:
    loop = make_loop(success=lw.Success(accept_parts="on_success"))
    r = rt.run_sync(loop, TASK)
    assert r.accepted
    cks = rt.store.checkpoints(r.run_id)
    at2 = next(c.task_state() for c in cks if c.cycle == 2)
    assert not any(p.status == "accepted" for _, p in at2.iter_parts())
    # ...and every part at the end, in the state returned and the last checkpoint alike
    for state in (r.state, cks[-1].task_state()):
        assert {p.status for _, p in state.iter_parts()} == {"accepted"}


def test_async_actor_and_verifier(rt: lw.Runtime) -> None:
    async def actor(ctx: lw.Context) -> lw.Proposal:
        await asyncio.sleep(0)
        return fixer(ctx)

    async def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return fields(state, proposal)

    # (timeouts set: an async call bounded by one takes another path; 60 s only a hang reaches)
    checks = [lw.Check(fn=check, name="fields", timeout_s=60)]
    r = rt.run_sync(make_loop(actor, checks, actor_timeout_s=60), TASK)
    # as the same loop of plain functions ends
    same = rt.run_sync(make_loop(fixer, [lw.Check(fn=fields, name="fields")]), TASK, task_key="s")
    assert r.accepted
    assert (r.cycles, r.state.values(), r.best_score) == (
        same.cycles,
        same.state.values(),
        same.best_score,
    )


def test_idempotent_creation_by_task_key(rt: lw.Runtime) -> None:
    calls: list[int] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        return fixer(ctx)

    r1 = rt.run_sync(make_loop(actor), TASK, task_key="same")
    n = len(calls)
    r2 = rt.run_sync(make_loop(actor), TASK, task_key="same")
    assert r2.run_id == r1.run_id
    assert len(calls) == n  # an ended run is not run again
    assert len(rt.store.list_runs()) == 1
    rec, created = rt.create(make_loop(actor), TASK, task_key="same")
    assert (rec.run_id, created) == (r1.run_id, False)


# --- no progress -----------------------------------------------------------------------------
def test_identical_rejected_proposal_counts_as_no_progress(rt: lw.Runtime) -> None:
    def stubborn(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": 1})  # one field of three right: 1/3, then again

    r = rt.run_sync(make_loop(stubborn, no_progress=lw.NoProgress(cycles=2)), TASK)
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "no_progress", 3)
    recs = records(rt, r.run_id)
    assert [rec["duplicate"] for rec in recs] == [False, True, True]
    assert [rec["improved"] for rec in recs] == [True, False, False]
    assert_packet(r)


def test_a_rejected_proposal_sent_again_dressed_differently_is_no_progress(
    rt: lw.Runtime,
) -> None:
    """An actor oscillating between two rejected versions, each sent again with a cosmetic
    change: an unchanged part written too, the artifact replaced by the same values. Each was
    judged as a new proposal, so a reviewer whose score of the same content drifts up (a
    model's) credited it as an improvement and the plateau rule never fired (the run went on
    to its cycle budget); now each is a duplicate, as the identical proposal is."""
    judged = [0]

    def drifting(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        judged[0] += 1  # the same content scores a little higher each time it is judged
        return lw.Verdict(passed=False, score=min(0.9, 0.3 + 0.05 * judged[0]))

    def oscillating(ctx: lw.Context) -> lw.Proposal:
        a = 1 if ctx.cycle % 2 else 2
        if ctx.cycle <= 2:
            return lw.Proposal.edit("doc", {"a": a})
        if ctx.cycle % 2:
            return lw.Proposal.edit("doc", {"a": a, "b": 0})  # b is 0 already
        return lw.Proposal(replace={"doc": {"a": a, "b": 0, "c": 0}})

    loop = make_loop(oscillating, (drifting,), no_progress=lw.NoProgress(cycles=2), max_cycles=9)
    r = rt.run_sync(loop, TASK)
    assert (r.stop_reason, r.cycles) == ("no_progress", 4)
    recs = records(rt, r.run_id)
    assert [(rec["duplicate"], rec["improved"]) for rec in recs] == [
        (False, True),
        (False, True),
        (True, False),
        (True, False),
    ]
    assert (r.best_score, assert_packet(r)["best_candidate"]["cycle"]) == (0.4, 2)


def test_stall_counts_cycles_without_enough_improvement(rt: lw.Runtime) -> None:
    # cycle 1 only looks (score 0, the baseline: no rise), then each cycle fixes one part:
    # +1/3 score, below a min_delta of 0.7
    r = rt.run_sync(make_loop(no_progress=lw.NoProgress(cycles=2, min_delta=0.7)), TASK)
    assert r.stop_reason == "no_progress"
    assert r.cycles == 2
    assert [rec["improved"] for rec in records(rt, r.run_id)] == [False, False]
    # with a small min_delta the same loop succeeds
    r2 = rt.run_sync(make_loop(no_progress=lw.NoProgress(cycles=2, min_delta=0.1)), TASK)
    assert r2.accepted


def test_different_but_useless_proposals_stall(rt: lw.Runtime) -> None:
    def wander(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": 100 + ctx.cycle})

    r = rt.run_sync(make_loop(wander, no_progress=lw.NoProgress(cycles=2)), TASK)
    assert r.stop_reason == "no_progress"
    # every cycle scores 0, the baseline: none improves, though none repeats another
    recs = records(rt, r.run_id)
    assert [(rec["duplicate"], rec["improved"]) for rec in recs] == [(False, False)] * 2


# --- budgets ---------------------------------------------------------------------------------
def test_budget_cycles(rt: lw.Runtime) -> None:
    r = rt.run_sync(make_loop(max_cycles=2), TASK)
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cycles", 2)
    p = assert_packet(r)
    assert p["best_candidate"]["artifacts"]["doc"]["a"] == 1  # work is never thrown away
    assert p["accepted"] == {"doc": {"a": 1}}


@pytest.mark.parametrize("cap", [0, -1, "3", True, 2.5])
def test_a_bad_per_task_cycle_budget_is_refused_before_the_run_exists(
    rt: lw.Runtime, cap: Any
) -> None:
    """A task whose ``budget.max_cycles_key`` value is not a whole number >= 1 raised a
    ConfigError at the run's first cycle, leaving the run created and ``running`` for ever
    (every resume raised again). It is refused as ``create`` refuses a bad task: before the
    run exists. A fork under such a contract is refused the same way."""
    loop = make_loop(max_cycles=5, max_cycles_key="recorded.max_cycles")
    task = {**TASK, "recorded": {"max_cycles": cap}}
    with pytest.raises(lw.ConfigError, match=r"recorded\.max_cycles"):
        rt.run_sync(loop, task, task_key="bad-cap")
    assert rt.store.list_runs() == []
    origin = rt.run_sync(make_loop(max_cycles=1), task, task_key="origin")
    with pytest.raises(lw.ConfigError, match=r"recorded\.max_cycles"):
        rt.fork(origin.run_id, 1, contract=loop.contract)
    assert [r.task_key for r in rt.store.list_runs()] == ["origin"]
    fine = rt.run_sync(loop, {**TASK, "recorded": {"max_cycles": 2}}, task_key="fine")
    assert (fine.stop_reason, fine.cycles) == ("budget_cycles", 2)


def test_the_per_task_cycle_budget_is_checked_on_the_task_the_run_reads(rt: lw.Runtime) -> None:
    """``create`` read the task's cycle budget from the task in the state a loop's ``init``
    made, the run from the task as stored (every loaded state's: a head holds none). An
    ``init`` that dropped a bad budget passed ``create``; the run then raised at its first
    cycle, left ``running`` for ever. One that put a budget only in its state was refused
    for a value the run never reads. Both read the stored task now."""

    def dropping(task: Mapping[str, Any]) -> lw.TaskState:
        kept = {k: v for k, v in task.items() if k not in ("recorded", "budget")}
        return lw.TaskState.from_task({**kept, "recorded": {"max_cycles": task.get("budget")}})

    loop = dataclasses.replace(
        make_loop(max_cycles=5, max_cycles_key="recorded.max_cycles"), init=dropping
    )
    with pytest.raises(lw.ConfigError, match=r"recorded\.max_cycles.*got 0"):
        rt.create(loop, {**TASK, "recorded": {"max_cycles": 0}, "budget": 3}, task_key="bad")
    assert rt.store.list_runs() == []
    r = rt.run_sync(loop, {**TASK, "budget": 0}, task_key="only-in-init")
    assert r.status != "running" and r.cycles >= 1


@pytest.mark.parametrize(("limit", "cycles"), [(0.25, 2), (0.3, 3), (0.35, 3)])
def test_budget_cost_never_starts_a_cycle_that_would_cross(
    rt: lw.Runtime, limit: float, cycles: int
) -> None:
    r = rt.run_sync(make_loop(max_cost_usd=limit), TASK)
    assert (r.stop_reason, r.cycles) == ("budget_cost", cycles)
    assert r.spent.cost_usd <= limit + 1e-9


def test_budget_tokens(rt: lw.Runtime) -> None:
    r = rt.run_sync(make_loop(max_tokens=25), TASK)
    assert (r.stop_reason, r.cycles) == ("budget_tokens", 2)
    assert r.spent.tokens == 20


def test_overshoot_is_at_most_the_call_in_flight(rt: lw.Runtime) -> None:
    def pricey(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            return lw.Proposal.edit("doc", {"a": 1}, usage=lw.Usage(0.1, 5))
        return lw.Proposal.edit("doc", {"b": 2}, usage=lw.Usage(1.0, 5))

    r = rt.run_sync(make_loop(pricey, max_cost_usd=0.5), TASK)
    assert (r.stop_reason, r.cycles) == ("budget_cost", 1)
    assert r.spent.cost_usd == pytest.approx(1.1)  # the one call in flight, recorded honestly
    p = assert_packet(r)
    assert p["unverified_candidate"]["edits"] == [{"artifact": "doc", "part": "b", "value": 2}]
    assert r.state.values()["doc"]["b"] == 0  # the unverified proposal was not applied


def test_verifier_spend_counts_and_stops_between_calls(rt: lw.Runtime) -> None:
    seen: list[str] = []

    def costly(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        seen.append("costly")
        return lw.Verdict(passed=True, usage=lw.Usage(2.0, 0))

    def after(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        seen.append("after")
        return lw.Verdict(passed=True)

    r = rt.run_sync(make_loop(verifiers=[costly, after], max_cost_usd=1.0), TASK)
    assert r.stop_reason == "budget_cost"
    assert seen == ["costly"]
    assert r.spent.cost_usd == pytest.approx(2.1)


def test_budget_time_with_a_hanging_actor(rt: lw.Runtime, gate: threading.Event) -> None:
    def hang(ctx: lw.Context) -> lw.Proposal:
        gate.wait(30)
        return lw.Proposal()

    r = rt.run_sync(make_loop(hang, max_seconds=0.3), TASK)
    assert (r.status, r.stop_reason) == ("stopped", "budget_time")
    assert "time budget" in r.packet["summary"]  # type: ignore[index]
    assert_packet(r)


# --- accepted work is protected -----------------------------------------------------------
def test_proposal_touching_accepted_part_is_refused_and_recorded(rt: lw.Runtime) -> None:
    contexts: list[lw.Context] = []

    def meddle(ctx: lw.Context) -> lw.Proposal:
        contexts.append(ctx)
        if ctx.cycle <= 2:
            return fixer(ctx)
        return lw.Proposal.edit("doc", {"a": 5, "b": 2})

    r = rt.run_sync(make_loop(meddle, no_progress=lw.NoProgress(cycles=2)), TASK)
    assert r.stop_reason == "no_progress"
    a = r.state.part("doc/a")
    assert a is not None
    assert (a.value, a.status) == (1, "accepted")
    assert r.state.values()["doc"]["b"] == 0  # the whole proposal was refused
    recs = records(rt, r.run_id)
    assert [rec["decision"] for rec in recs[2:]] == ["refused", "refused"]
    refused = [e for e in rt.store.events(r.run_id) if e.kind == "proposal_refused"]
    assert refused
    assert refused[0].data["parts"] == ["doc/a"]
    # the actor is told why, as a located finding
    assert any(f.dimension == "protected" and f.part == "a" for f in contexts[-1].findings)
    assert assert_packet(r)["accepted"]["doc"]["a"] == 1


# --- plan ------------------------------------------------------------------------------------
class Crash(BaseException):
    """Stands in for a process dying mid-cycle."""


PLAN_TASK: dict[str, Any] = {
    **TASK,
    "plan": [
        {"id": "s1", "parts": ["doc/a"]},
        {"id": "s2", "parts": ["doc/b"], "depends_on": ["s1"]},
        {"id": "s3", "parts": ["doc/c"], "depends_on": ["s2"]},
    ],
}


def test_plan_steps_done_when_parts_accepted_and_resume_never_redoes_them(store_path: Path) -> None:
    seen: list[tuple[int, str | None]] = []
    crash_at = {3}

    def stepper(ctx: lw.Context) -> lw.Proposal:
        step = ctx.next_step
        seen.append((ctx.cycle, step.id if step else None))
        if ctx.cycle in crash_at:
            crash_at.clear()
            raise Crash
        assert step is not None
        ref = step.parts[0]
        part = ref.split("/")[1]
        return lw.Proposal.edit("doc", {part: TARGET[part]})

    with lw.Runtime(str(store_path)) as rt1, pytest.raises(Crash):
        rt1.run_sync(make_loop(stepper), PLAN_TASK, task_key="plan")
    with lw.Runtime(str(store_path)) as rt2:
        rec = rt2.store.get_run("plan")
        assert rec.status == "running"  # interrupted, not ended
        mid = rt2.store.latest_checkpoint(rec.run_id).task_state()
        assert mid.completed_steps == ["s1", "s2"]
        r = rt2.resume_sync(rec.run_id, make_loop(stepper))
    assert r.accepted
    assert seen == [(1, "s1"), (2, "s2"), (3, "s3"), (3, "s3")]
    assert r.state.completed_steps == ["s1", "s2", "s3"]


def test_actor_can_update_the_plan(rt: lw.Runtime) -> None:
    def planner(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            return lw.Proposal(
                new_steps=(lw.PlanStep(id="extra", title="more"),), plan={"s1": "in_progress"}
            )
        return fixer(ctx)

    r = rt.run_sync(make_loop(planner), PLAN_TASK)
    # the new step is added (pending: it lists no part), the status set is kept until the
    # step's parts are accepted
    assert [(s.id, s.title, s.status) for s in r.state.plan] == [
        ("s1", "", "done"),
        ("s2", "", "done"),
        ("s3", "", "done"),
        ("extra", "more", "pending"),
    ]
    at1 = next(c.task_state() for c in rt.store.checkpoints(r.run_id) if c.cycle == 1)
    assert [(s.id, s.status) for s in at1.plan][:2] == [("s1", "in_progress"), ("s2", "pending")]


@pytest.mark.parametrize(
    ("step", "field"),
    [
        (lw.PlanStep(id="extra", depends_on=(1,)), "depends_on"),  # (a model's JSON number)
        (lw.PlanStep(id="extra", parts=("qty",)), "parts"),  # no artifact/part
        (lw.PlanStep(id="extra", status="nope"), "status"),  # type: ignore[arg-type]
        (lw.PlanStep(id=""), "id"),
    ],
)
def test_a_new_step_the_state_cannot_hold_escalates(
    rt: lw.Runtime, step: lw.PlanStep, field: str
) -> None:
    """An actor's new plan step the state cannot hold ends the cycle as any value of the
    actor's that cannot be stored does: escalated, naming the step. Before, it was refused
    (or not, for a dependency named by a number) only as the candidate was built: a
    ConfigError out of ``run_sync``, the run left ``running`` (review47b)."""

    def planner(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(new_steps=(step,), note=field)

    r = rt.run_sync(make_loop(planner), PLAN_TASK)
    assert r.status == "escalated"
    assert rt.store.get_run(r.run_id).status == "escalated"
    cause = str(r.packet["cause"])
    assert cause.startswith("the actor returned a value that cannot be stored")
    assert (
        f"Proposal.new_steps[0]{'.' + field if field in ('parts', 'depends_on') else ''}:" in cause
    )
    assert r.state.plan == rt.store.latest_checkpoint(r.run_id).task_state().plan
    assert "extra" not in [s.id for s in r.state.plan]


# --- user code failing ---------------------------------------------------------------------
def _raises(ctx: lw.Context) -> lw.Proposal:
    raise RuntimeError("model exploded")


def _wrong_type(ctx: lw.Context) -> Any:
    return {"edits": []}


@pytest.mark.parametrize(
    ("actor", "etype", "text"),
    [
        (_raises, "RuntimeError", "model exploded"),
        (_wrong_type, "TypeError", "dict"),
    ],
)
def test_actor_failure_escalates_with_error_in_packet(
    rt: lw.Runtime, actor: Any, etype: str, text: str
) -> None:
    r = rt.run_sync(make_loop(actor), TASK)
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    p = assert_packet(r)
    assert p["error"]["type"] == etype
    assert text in p["error"]["message"]
    assert p["error"]["where"] == "actor"


def test_hanging_actor_times_out_and_escalates(rt: lw.Runtime, gate: threading.Event) -> None:
    def hang(ctx: lw.Context) -> lw.Proposal:
        gate.wait(30)
        return lw.Proposal()

    r = rt.run_sync(make_loop(hang, actor_timeout_s=0.2), TASK)
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert assert_packet(r)["error"]["type"] == "Timeout"


def test_hanging_async_actor_times_out(rt: lw.Runtime) -> None:
    async def hang(ctx: lw.Context) -> lw.Proposal:
        await asyncio.Event().wait()
        raise AssertionError

    r = rt.run_sync(make_loop(hang, actor_timeout_s=0.2), TASK)
    assert r.stop_reason == "escalated"
    assert assert_packet(r)["error"]["type"] == "Timeout"


def test_actor_asking_for_a_person_escalates(rt: lw.Runtime) -> None:
    r = rt.run_sync(make_loop(lambda ctx: lw.Proposal(escalate="duplicate invoice")), TASK)
    assert r.stop_reason == "escalated"
    assert "duplicate invoice" in assert_packet(r)["cause"]


def test_verifier_failures_escalate(rt: lw.Runtime, gate: threading.Event) -> None:
    def boom(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        raise ValueError("checker bug")

    def hang(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        gate.wait(30)
        return lw.Verdict(passed=True)

    def wrong(state: lw.TaskState, proposal: lw.Proposal) -> Any:
        return True

    for check, etype in (
        (lw.Check(fn=boom), "ValueError"),
        (lw.Check(fn=hang, timeout_s=0.2), "Timeout"),
        (lw.Check(fn=wrong, held_out=True), "TypeError"),
    ):
        r = rt.run_sync(make_loop(verifiers=[fields, check]), TASK)
        assert (r.status, r.stop_reason) == ("escalated", "escalated"), check.name
        p = assert_packet(r)
        assert p["error"]["type"] == etype
        assert check.name in p["error"]["where"]


# --- approvals -----------------------------------------------------------------------------
RISK = (lw.RiskRule(name="touch_c", touches=("doc/c",), reason="c moves money"),)


def _park(rt: lw.Runtime, key: str = "r") -> lw.RunResult:
    r = rt.run_sync(make_loop(risk=RISK), TASK, task_key=key)
    assert (r.status, r.stop_reason, r.packet) == ("awaiting_approval", None, None)
    return r


def test_risk_rule_parks_with_a_persisted_request(rt: lw.Runtime) -> None:
    r = _park(rt)
    [req] = rt.store.approvals(run_id=r.run_id)
    assert req.status == "pending"
    assert req.rule == "touch_c"
    assert "doc/c" in req.what
    assert req.why == "c moves money"
    assert "scores" in req.evidence
    assert "- doc/c: 0" in (req.diff or "")
    assert "+ doc/c: 3" in (req.diff or "")
    assert r.state.values()["doc"]["c"] == 0  # nothing applied while parked
    # resuming before a decision keeps it parked
    assert rt.resume_sync(r.run_id, make_loop(risk=RISK)).status == "awaiting_approval"


def test_approve_then_resume_finishes(store_path: Path) -> None:
    with lw.Runtime(str(store_path)) as rt:
        r = _park(rt)
        rt.approve(r.run_id, by="alice", note="ok")
    with lw.Runtime(str(store_path)) as rt2:  # the deciding process may be another one
        done = rt2.resume_sync(r.run_id, make_loop(risk=RISK))
        assert (done.status, done.stop_reason) == ("accepted", "success")
        assert done.state.values() == {"doc": TARGET}
        assert done.state.notes[-1]["decision"] == "approved"
        assert done.state.notes[-1]["by"] == "alice"
        with pytest.raises(lw.ApprovalError):
            rt2.approve(r.run_id, by="bob")


def test_deny_escalates(rt: lw.Runtime) -> None:
    r = _park(rt)
    rt.deny(r.run_id, by="carol", note="no")
    with pytest.raises(lw.ApprovalError):
        rt.approve(r.run_id, by="dave")  # decided twice
    done = rt.resume_sync(r.run_id, make_loop(risk=RISK))
    assert (done.status, done.stop_reason) == ("escalated", "escalated")
    p = assert_packet(done)
    assert "denied by carol" in p["cause"]
    assert done.state.values()["doc"]["c"] == 0


def test_decision_needs_a_name(rt: lw.Runtime) -> None:
    r = _park(rt)
    with pytest.raises(lw.ConfigError):
        rt.approve(r.run_id, by="  ")


def test_cancel_a_parked_run(rt: lw.Runtime) -> None:
    r = _park(rt)
    rec = rt.cancel(r.run_id, by="erin")
    assert (rec.status, rec.stop_reason) == ("cancelled", "cancelled")
    res = rt.result(r.run_id)
    p = assert_packet(res)
    assert "erin" in p["cause"]
    assert p["accepted"] == {"doc": {"a": 1, "b": 2}}
    assert rt.store.approvals(status="pending") == []  # nothing left waiting for a decision
    assert rt.cancel(r.run_id).status == "cancelled"  # idempotent


def test_a_cancel_closes_the_request_in_the_commit_that_cancels(
    rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No write after the cancel's commit is needed to close what was waiting: a process that
    dies right after it (any later decision write raises here) leaves no request open, and
    the commit carries the request's ``approval_decided`` event."""
    r = _park(rt)
    seq = rt.store.get_run(r.run_id).last_seq

    def dies(*a: Any, **kw: Any) -> Any:
        raise Crash("the process died after the cancel's commit")

    monkeypatch.setattr(rt.store, "decide_approval", dies)
    assert rt.cancel(r.run_id, by="erin").status == "cancelled"
    [req] = rt.store.approvals(run_id=r.run_id)
    assert (req.status, req.decided_by, req.note) == ("cancelled", "erin", "the run was cancelled")
    last = rt.store.latest_checkpoint(r.run_id)
    assert last.seq == seq + 1  # one commit: the cancel's
    decided = [e for e in rt.store.events(r.run_id) if e.kind == "approval_decided"]
    assert [(e.data["approval_id"], e.data["status"]) for e in decided] == [
        (req.approval_id, "cancelled")
    ]


def test_cancel_a_pending_run_before_it_starts(rt: lw.Runtime) -> None:
    rec, _ = rt.create(make_loop(), TASK, task_key="never")
    assert rt.cancel(rec.run_id).status == "cancelled"
    r = rt.run_sync(make_loop(), TASK, task_key="never")
    assert r.status == "cancelled"
    assert r.cycles == 0


# --- every end ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["no_progress", "budget_cycles", "budget_cost", "escalated"])
def test_every_non_accepted_end_has_a_packet(rt: lw.Runtime, case: str) -> None:
    loops = {
        "no_progress": make_loop(lambda c: lw.Proposal(), no_progress=lw.NoProgress(cycles=1)),
        "budget_cycles": make_loop(max_cycles=1),
        "budget_cost": make_loop(max_cost_usd=0.15),
        "escalated": make_loop(_raises),
    }
    r = rt.run_sync(loops[case], TASK)
    assert r.stop_reason == case
    assert r.stop_reason in lw.STOP_REASONS
    assert rt.store.get_run(r.run_id).packet == r.packet
    assert_packet(r)


def test_a_run_holds_the_retry_entries_of_its_current_cycle_only(rt: lw.Runtime) -> None:
    """Each cycle's first actor call fails once (transient): what the execution holds of the
    retry journal is that cycle's entry, not one more per earlier cycle (a long run with
    flaky calls would otherwise grow it by one entry a cycle)."""
    import gc

    from loopwright._exec import Execution

    held: list[list[str]] = []
    calls: dict[int, int] = {}

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls[ctx.cycle] = calls.get(ctx.cycle, 0) + 1
        if calls[ctx.cycle] == 1:
            raise lw.TransientError("503 from the model server")
        [ex] = [o for o in gc.get_objects() if isinstance(o, Execution) and o.run_id == ctx.run_id]
        held.append(sorted(ex.retries))
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def never(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, findings=(lw.Finding("no", "doc", "a", "v"),))

    loop = lw.Loop(
        name="flaky",
        actor=actor,
        verifiers=[lw.Check(fn=never, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.0, jitter=False),
    )
    r = rt.run_sync(loop, {"goal": "g", "artifacts": {"doc": {"a": 0}}})
    assert (r.stop_reason, r.cycles) == ("budget_cycles", 6)
    assert held == [[f"retry:actor:{n}"] for n in range(1, 7)]


def test_a_task_key_of_another_loop_or_project_is_refused(rt: lw.Runtime) -> None:
    # From an outside probe (helper-54): a run of another loop in another project with the same
    # task key silently returned that project's ended run (and would have driven it with this
    # loop's actor): the key names one task store-wide.
    first = rt.run_sync(make_loop(fixer), {**TASK, "project": "A"}, task_key="T-1")
    other = lw.Loop(
        name="other",
        actor=fixer,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    with pytest.raises(lw.ConfigError, match="task key 'T-1' is run"):
        rt.run_sync(other, {**TASK, "project": "B"}, task_key="T-1")
    with pytest.raises(lw.ConfigError, match="in project 'A'"):
        rt.run_sync(make_loop(fixer), {**TASK, "project": "B"}, task_key="T-1")
    again = rt.run_sync(make_loop(fixer), {**TASK, "project": "A"}, task_key="T-1")
    assert again.run_id == first.run_id  # the same loop and project: the same run, as before
    # no project named (run_many, a worker, the CLI take none): the key's run, as before
    # (review, helper-55: a run started with project= could no longer be continued)
    assert rt.run_sync(make_loop(fixer), TASK, task_key="T-1").run_id == first.run_id
    named = rt.run_sync(make_loop(fixer), TASK, task_key="T-2", project="acme")
    [many] = asyncio.run(rt.run_many(make_loop(fixer), [TASK], key_of=lambda t, i: "T-2"))
    assert many.run_id == named.run_id


def test_run_many_records_who_started_its_runs(rt: lw.Runtime) -> None:
    # people43b's finding: run_many had no by=, so its runs had no requester and separation of
    # duties had no one to keep from approving them
    done = asyncio.run(
        rt.run_many(make_loop(fixer), [TASK, TASK], key_of=lambda t, i: f"M-{i}", by=" rita ")
    )
    assert [rt.store.get_run(r.run_id).created_by for r in done] == ["rita", "rita"]
    with pytest.raises(lw.ConfigError, match="by"):
        asyncio.run(rt.run_many(make_loop(fixer), [TASK], by=3))  # type: ignore[arg-type]


def test_run_many_builds_each_runs_first_head_once(
    rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task of a batch is checked before any run is written, then made when its turn
    comes: the check encoded the run's first head (and its versions) too, which ``create``
    encoded again. Counted by task key: the heads of cycle 0 built from nothing, by the time
    each run is written (one: the head written), and in all (as many as a lone run builds:
    its first commit's snapshot is the other)."""
    from loopwright import _state_codec as codec

    built: list[str | None] = []
    at_create: dict[str, int] = {}
    head, create_run = codec.head, rt.store.create_run

    def counting(state: lw.TaskState, prev: Any = None, *a: Any, **k: Any) -> dict[str, Any]:
        if prev is None and state.cycle == 0:
            built.append(state.task_key)
        return head(state, prev, *a, **k)

    def creating(**new: Any) -> Any:
        at_create[new["task_key"]] = built.count(new["task_key"])
        return create_run(**new)

    monkeypatch.setattr(codec, "head", counting)
    monkeypatch.setattr(rt.store, "create_run", creating)
    rt.run_sync(make_loop(fixer), TASK, task_key="H-lone")
    lone = built.count("H-lone")
    done = asyncio.run(
        rt.run_many(make_loop(fixer), [TASK, TASK, TASK], key_of=lambda t, i: f"H-{i}")
    )
    assert [r.status for r in done] == ["accepted"] * 3
    assert at_create == {"H-lone": 1, "H-0": 1, "H-1": 1, "H-2": 1}
    assert [built.count(f"H-{i}") for i in range(3)] == [lone] * 3
