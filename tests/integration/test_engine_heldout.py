"""Invariant 3: nothing a held-out verifier computes reaches the actor — tested with a spy."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_loop import TASK, fields
from support.crash import Crash, phase_hook

import loopwright as lw

CANARY = "CANARY-7f3a9c-held-out-only"


def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """A held-out check that always objects, loudly, with the canary everywhere it can."""
    return lw.Verdict(
        passed=False,
        score=0.0,
        findings=(
            lw.Finding(f"{CANARY} audit failed", "doc", "a", CANARY, evidence={"why": CANARY}),
            lw.Finding(f"{CANARY} run-wide"),
        ),
        evidence={"secret": CANARY},
    )


class Spy:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, ctx: lw.Context) -> lw.Proposal:
        self.seen.append(repr(ctx))
        for f in ctx.findings:
            if f.part and f.dimension == "value":
                return lw.Proposal.edit("doc", {f.part: f.evidence["expected"]})
        return lw.Proposal(note="look")


def _loop(spy: Spy, risk: tuple[lw.RiskRule, ...] = ()) -> lw.Loop:
    return lw.Loop(
        name="spy",
        actor=spy,
        verifiers=[lw.Check(fn=fields), lw.Check(fn=audit, held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=10), risk=risk),
    )


def test_held_out_never_reaches_the_actor_but_is_recorded(tmp_path: Path) -> None:
    spy = Spy()
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_loop(spy), TASK)
        assert r.accepted  # held-out verdicts never block success...
        assert r.held_out_passed is False  # ...but are recorded beside it
        assert len(spy.seen) == 4
        assert all(CANARY not in seen for seen in spy.seen)
        recs = [
            c.record for c in rt.store.checkpoints(r.run_id) if c.record and "held_out" in c.record
        ]
        assert recs
        assert all(CANARY in str(rec["held_out"]["audit"]) for rec in recs)
        assert rt.store.get_run(r.run_id).held_out_passed is False
        # the actor-facing state carries no trace of it either
        assert CANARY not in repr(r.state.findings)


def test_held_out_isolation_survives_park_and_resume(tmp_path: Path) -> None:
    risk = (lw.RiskRule(name="b", touches=("doc/b",)),)  # parks at cycle 3 of 4
    spy = Spy()
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_loop(spy, risk), TASK, task_key="k")
        assert r.status == "awaiting_approval"
        assert len(spy.seen) == 3
        rt.approve(r.run_id, by="x")
    spy2 = Spy()
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        done = rt.resume_sync(r.run_id, _loop(spy2, risk))
        assert done.accepted
        assert len(spy2.seen) == 1  # cycle 4 ran in the new process, from the resumed state
        assert "cycle=4" in spy2.seen[0]
        assert all(CANARY not in seen for seen in spy.seen + spy2.seen)
        cps = rt.store.checkpoints(r.run_id)
        held = [c.record["held_out"] for c in cps if c.record and "proposal" in c.record]
        assert len(held) == 4  # the approved cycle 3 kept the held-out verdicts from its park
        # no checkpointed state, parked or not, ever carries a held-out verdict
        assert all(CANARY not in str(c.state) for c in cps)
        assert all(CANARY in str(h) for h in held)
        assert done.held_out_passed is False


def test_task_held_out_key_never_reaches_the_actor(tmp_path: Path) -> None:
    seen: list[str] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(repr(ctx))
        return lw.Proposal.edit("doc", {"a": 1})

    def hidden(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        # held-out verifiers do read it: that is where hidden tests live
        return lw.Verdict(passed=state.task["held_out"]["answer"] == 1)

    loop = lw.Loop(
        name="hk",
        actor=actor,
        verifiers=[
            lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="ok"),
            lw.Check(fn=hidden, held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    task = {"artifacts": {"doc": {"a": 0}}, "held_out": {"answer": 1, "secret": CANARY}}
    with lw.Runtime(tmp_path / "s.db") as rt:  # a Path is accepted as the store
        r = rt.run_sync(loop, task)
    assert r.accepted
    assert r.held_out_passed is True
    assert seen
    assert all(CANARY not in s for s in seen)


def _alternating(escalate_at: int) -> lw.Loop:
    """A held-out check that passes odd cycles' candidates and fails even ones'; the actor
    asks for a person at cycle ``escalate_at``, before anything is verified."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == escalate_at:
            return lw.Proposal(escalate="a person must look")
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def hidden(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.values()["doc"]["a"] % 2 == 1)

    return lw.Loop(
        name="alternating",
        actor=actor,
        verifiers=[
            lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="never"),
            lw.Check(fn=hidden, name="hidden", held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=20)),
    )


@pytest.mark.parametrize("resumed", [False, True], ids=["in-process", "resumed"])
@pytest.mark.parametrize("escalate_at", [4, 5])
def test_a_run_ended_before_judging_reports_the_last_judged_candidate_reading_no_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resumed: bool, escalate_at: int
) -> None:
    """An end between judged cycles (an escalation) reports the held-out verdict of the last
    judged candidate: cycle ``escalate_at - 1``'s. Invariant 8: it is known from the cycles
    this execution judged, or after a restart from the newest checkpoints' records, never by
    reading the run's whole event log."""
    db = tmp_path / "s.db"
    if resumed:
        with lw.Runtime(db) as rt:
            rt._on_phase = phase_hook(("before_actor", escalate_at))
            with pytest.raises(Crash):
                rt.run_sync(_alternating(escalate_at), TASK, task_key="k")
    with lw.Runtime(db) as rt:
        read: list[str] = []
        events = rt.store.events
        monkeypatch.setattr(
            rt.store, "events", lambda *a, **kw: read.append("x") or events(*a, **kw)
        )
        if resumed:
            [rec] = rt.store.list_runs()
            r = rt.resume_sync(rec.run_id, _alternating(escalate_at))
        else:
            r = rt.run_sync(_alternating(escalate_at), TASK, task_key="k")
        assert read == []
        assert (r.stop_reason, r.cycles) == ("escalated", escalate_at - 1)
        assert r.held_out_passed is ((escalate_at - 1) % 2 == 1)
        assert rt.store.get_run(r.run_id).held_out_passed is r.held_out_passed
        # the packet shows the verdict behind it (it read {} beside held_out_passed)
        assert r.packet is not None
        assert r.packet["held_out"]["hidden"]["passed"] is r.held_out_passed


@pytest.mark.parametrize("resumed", [False, True], ids=["in-process", "resumed"])
def test_a_cycle_ended_after_its_held_out_judged_reports_its_own_verdict(
    tmp_path: Path, resumed: bool
) -> None:
    """Every held-out check judged cycle 2's candidate, then a visible check raised and the
    run escalated in that cycle: the run reports cycle 2's held-out verdict (passed), not
    cycle 1's (failed) — also when cycle 2 ran in a process started after a crash."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def hidden(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.values()["doc"]["a"] == 2)

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        if state.values()["doc"]["a"] == 2:
            raise ValueError("the visible check broke")
        return lw.Verdict(passed=False, score=0.1)

    loop = lw.Loop(
        name="ends-mid-cycle",
        actor=actor,
        verifiers=[
            lw.Check(fn=hidden, name="hidden", held_out=True),
            lw.Check(fn=visible, name="visible"),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=5)),
    )
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        if resumed:
            rt._on_phase = phase_hook(("before_actor", 2))
            with pytest.raises(Crash):
                rt.run_sync(loop, TASK, task_key="k")
            with lw.Runtime(db) as again:
                r = again.resume_sync(rt.store.list_runs()[0].run_id, loop)
        else:
            r = rt.run_sync(loop, TASK, task_key="k")
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.held_out_passed is True
    assert r.packet is not None and r.packet["held_out"]["hidden"]["passed"] is True


def test_a_denied_cycle_shows_its_held_out_verdicts_in_the_packet(tmp_path: Path) -> None:
    """A person denied the parked cycle: the run escalates with held_out_passed false (that
    cycle's held-out verdict, stored with it), and the packet carries the verdict and its
    findings for the person taking over (it had an empty ``held_out``)."""
    risk = (lw.RiskRule(name="any", touches=("doc/*",)),)
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_loop(Spy(), risk), TASK, task_key="k")
        assert r.status == "awaiting_approval"
        rt.deny(r.run_id, by="ann", note="no")
        r = rt.resume_sync(r.run_id, _loop(Spy(), risk))
    assert (r.stop_reason, r.held_out_passed) == ("escalated", False)
    assert r.packet is not None
    assert r.packet["held_out"]["audit"]["passed"] is False
    assert CANARY in r.packet["held_out"]["audit"]["findings"][0]["message"]


def _reviewed(verdicts: list[bool], seen: list[float | None]) -> lw.Loop:
    """A held-out reviewer whose cost follows its verdict (as a model's would: a failing
    review writes more); the actor records the budget it is shown."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(ctx.remaining.cost_usd)
        return lw.Proposal.edit("doc", {"a": ctx.cycle}, usage=lw.Usage(cost_usd=0.01))

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "a"),))

    def reviewer(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        ok = verdicts[state.cycle]
        return lw.Verdict(passed=ok, usage=lw.Usage(cost_usd=0.002 if ok else 0.0123, tokens=9))

    return lw.Loop(
        name="reviewed",
        actor=actor,
        verifiers=[
            lw.Check(fn=visible, name="v"),
            lw.Check(fn=reviewer, name="r", held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=4, max_cost_usd=1.0, max_tokens=1000)),
    )


def test_what_held_out_checks_spend_is_not_shown_to_the_actor(tmp_path: Path) -> None:
    # Invariant 3: the budget the actor is shown must not move with held-out verdicts.
    shown: dict[str, list[float | None]] = {"pass": [], "fail": []}
    spent = {}
    for name, verdicts in (("pass", [True] * 5), ("fail", [False] * 5)):
        with lw.Runtime(tmp_path / f"{name}.db") as rt:
            r = rt.run_sync(_reviewed(verdicts, shown[name]), TASK, task_key="k")
            spent[name] = r.spent
            state = rt.store.latest_checkpoint(r.run_id).task_state()
        assert state.held_out_spent.tokens == 4 * 9  # stored: a resumed run hides it too
    assert shown["pass"] == shown["fail"] == pytest.approx([1.0, 0.99, 0.98, 0.97])
    # the contract still counts every cent and token
    assert spent["pass"].cost_usd == pytest.approx(4 * 0.012)
    assert spent["fail"].cost_usd == pytest.approx(4 * 0.0223)
    assert spent["fail"].tokens == 4 * 9


class _Malformed(ConnectionError):
    """A reply that could not be used: transient, its cost on the exception (as an adapter's)."""


def test_a_held_out_checks_failed_attempts_are_not_shown_to_the_actor(tmp_path: Path) -> None:
    # From a review (helper-51): the cost of a held-out reviewer's malformed first reply,
    # charged when its retry succeeds, reached Context.remaining.
    seen: list[float | None] = []
    tries = [0]

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(ctx.remaining.cost_usd)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "a"),))

    def reviewer(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        tries[0] += 1
        if tries[0] == 1:
            bad = _Malformed("malformed review")
            bad.usage = lw.Usage(cost_usd=0.25, tokens=10)  # type: ignore[attr-defined]
            raise bad
        return lw.Verdict(passed=True, usage=lw.Usage(cost_usd=0.01, tokens=1))

    loop = lw.Loop(
        name="r",
        actor=actor,
        verifiers=[lw.Check(fn=visible, name="v"), lw.Check(fn=reviewer, name="r", held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2, max_cost_usd=1.0)),
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.0, jitter=False),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert seen == [1.0, 1.0]
    assert r.spent.cost_usd == pytest.approx(0.27)  # the contract counts all of it
