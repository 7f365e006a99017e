"""A budget reached is spent, inside a cycle as before one, and the next cycle is projected at
the mean of the cycles that cost anything (docs/concepts.md, "The stop contract").

Found by an outside probe: a cycle that landed exactly on its $0.30 cost budget after a visible
check still paid its $0.20 held-out check, and the run was accepted at $0.50; and a free first
cycle halved the projection of the next, so a run started a cycle that crossed its budget."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.replay import simulate, traces_from_store

TASK = {"goal": "write the body", "artifacts": {"doc": {"body": ""}}}


def _probe_loop(calls: Counter[str], limit: float) -> lw.Loop:
    """An actor at $0.10, a visible check at $0.20 and a held-out check at $0.20: all pass."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls["actor"] += 1
        return lw.Proposal.edit("doc", {"body": "good"}, usage=lw.Usage(cost_usd=0.10))

    def visible(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        calls["visible"] += 1
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(cost_usd=0.20))

    def held(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        calls["held"] += 1
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(cost_usd=0.20))

    return lw.Loop(
        name="probe",
        actor=actor,
        verifiers=[
            lw.Check(fn=visible, name="visible"),
            lw.Check(fn=held, name="held", held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=5, max_cost_usd=limit)),
    )


@pytest.mark.parametrize("limit", [0.30, 0.25])
def test_a_budget_reached_mid_cycle_starts_no_further_paid_call(url: str, limit: float) -> None:
    """At $0.30 the visible check lands exactly on the budget: the held-out check was still
    called ($0.50 spent, accepted). Reached or crossed ($0.25), it is not called now; the
    candidate that passed the visible check is kept, unverified, with its verdict."""
    calls: Counter[str] = Counter()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_probe_loop(calls, limit), TASK, task_key="T")
        assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 0)
        assert r.spent.cost_usd == pytest.approx(0.30)
        assert dict(calls) == {"actor": 1, "visible": 1}  # no held-out call
        assert r.held_out_passed is None
        packet = r.packet
        assert packet is not None
        assert packet["unverified_candidate"]["edits"] == [
            {"artifact": "doc", "part": "body", "value": "good"}
        ]
        assert packet["evidence"]["verdicts"]["visible"]["passed"] is True
        assert "['held'] not run" in packet["cause"]
        how = "it is used up" if limit == 0.30 else "crossed during verifier visible"
        assert how in packet["stop_cause"], packet["stop_cause"]
        # the summary says what was spent beside the budget
        assert packet["summary"].startswith(
            f"stopped: spent $0.30 of the cost budget (${limit:.2f})"
        ), packet["summary"]
        # nothing was accepted: the part is still open
        assert r.state.part("doc/body") is None or r.state.part("doc/body").status != "accepted"
        # replay of the recording under the same contract ends the same way
        (trace,) = list(traces_from_store(rt.store))
    out = simulate(trace, _probe_loop(Counter(), limit).contract)
    assert (out.reason, out.cycles, out.accepted) == ("budget_cost", 0, False)
    assert out.cost_usd == pytest.approx(0.30)


def _steady_loop(calls: Counter[str], limit: float, *, held_cost: float = 0.0) -> lw.Loop:
    """An actor at $0.10 and a free visible check that never passes."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls["actor"] += 1
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"}, usage=lw.Usage(0.10))

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        calls["check"] += 1
        return lw.Verdict(passed=False, score=0.5)

    return lw.Loop(
        name="steady",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=9, max_cost_usd=limit)),
    )


def test_a_check_known_to_be_free_still_runs_on_a_reached_budget(url: str) -> None:
    """Three $0.10 cycles with a free check fit a $0.30 budget, the third verified: the check
    billed nothing in the cycles before, so it cannot cross the budget."""
    calls: Counter[str] = Counter()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_steady_loop(calls, 0.30), TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 3)
    assert r.spent.cost_usd == pytest.approx(0.30)
    assert dict(calls) == {"actor": 3, "check": 3}
    assert r.state.billed == {"actor": True, "verifier:check": False}


def test_a_check_never_made_is_not_known_to_be_free(url: str) -> None:
    """The first cycle's actor lands on the budget: the check, never called yet, may cost
    anything and is not started."""
    calls: Counter[str] = Counter()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_steady_loop(calls, 0.10), TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 0)
    assert r.spent.cost_usd == pytest.approx(0.10)
    assert dict(calls) == {"actor": 1}
    assert r.packet is not None and r.packet["unverified_candidate"] is not None


def _free_first_loop(calls: Counter[str], contract: lw.Contract) -> lw.Loop:
    """A first cycle that costs nothing (seeds judged from a recording), then $0.10 cycles."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls["actor"] += 1
        cost = 0.0 if ctx.cycle == 1 else 0.10
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"}, usage=lw.Usage(cost))

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    return lw.Loop(name="free-first", actor=actor, verifiers=[check], contract=contract)


def test_a_free_cycle_does_not_lower_the_projection_of_the_next(tmp_path: Path, url: str) -> None:
    """$0.00 then $0.10 under a $0.15 budget: the mean of every cycle ($0.05) let a third cycle
    start, whose actor took the spend to $0.20. The mean of the paid cycles ($0.10) does not."""
    contract = lw.Contract(budget=lw.Budget(max_cycles=9, max_cost_usd=0.15))
    calls: Counter[str] = Counter()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_free_first_loop(calls, contract), TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 2)
    assert r.spent.cost_usd == pytest.approx(0.10)
    assert calls["actor"] == 2
    assert r.state.paid_cycles is not None and r.state.paid_cycles[:2] == [1, 0]
    assert r.packet is not None
    assert "the next cycle would cross it" in r.packet["stop_cause"], r.packet["stop_cause"]

    # Replay equals re-execution: a recording with no cost budget, replayed under this one,
    # stops where the run did.
    free = lw.Contract(budget=lw.Budget(max_cycles=4))
    with lw.Runtime(str(tmp_path / "rec.db")) as rt:
        rt.run_sync(_free_first_loop(Counter(), free), TASK, task_key="T")
        (trace,) = list(traces_from_store(rt.store))
    out = simulate(trace, contract)
    assert (out.reason, out.cycles) == ("budget_cost", 2)
    assert out.cost_usd == pytest.approx(0.10)


def test_a_score_rounded_past_one_is_clamped(url: str) -> None:
    """A ratio computed in floats, ``(0.1 + 0.2) / 0.3``, is 1.0000000000000002: the verdict
    raised ConfigError and the run escalated as if the verifier were broken."""
    rounded = (0.1 + 0.2) / 0.3
    assert rounded > 1.0

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=rounded)

    loop = lw.Loop(
        name="rounded",
        actor=lambda ctx: lw.Proposal.edit("doc", {"body": "done"}),
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles, r.best_score) == ("accepted", "success", 1, 1.0)


def test_a_score_beyond_the_rounding_is_still_refused() -> None:
    assert lw.Verdict(passed=True, score=1.0 + 5e-10).score == 1.0
    assert lw.Verdict(passed=False, score=-5e-10).score == 0.0
    for bad in (1.0 + 1e-6, -1e-6, float("nan"), True):
        with pytest.raises(lw.ConfigError, match=r"must be a number in \[0, 1\]"):
            lw.Verdict(passed=True, score=bad)


def _no_progress_packet(findings: tuple[Any, ...]) -> dict[str, Any]:
    from loopwright._packet import build_packet

    state = lw.TaskState(findings=list(findings))
    contract = lw.Contract(no_progress=lw.NoProgress(cycles=2))
    return build_packet("no_progress", state, contract, run_id="r" * 32)


def test_no_progress_advice_says_something_true_without_findings() -> None:
    """ "Review the open findings" was said of a run with none open."""
    none = _no_progress_packet(())["recommended_action"]
    assert "open findings" not in none and "no finding open" in none, none
    some = _no_progress_packet((lw.Finding("too short", "doc", "body", "length"),))
    assert "Review the open findings" in some["recommended_action"]


def test_no_effect_starts_on_a_budget_reached_by_the_checks(url: str) -> None:
    """The checks of an accepted cycle land exactly on the $0.30 budget: its effect, never
    made in this run (it may bill anything), is not started; the candidate is kept."""
    ran: list[int] = []

    @lw.effect("spend", name="pay")
    def pay(x: int) -> lw.EffectResult:
        ran.append(x)
        return lw.EffectResult({"paid": x}, lw.Usage(cost_usd=0.20))

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=(lw.Edit("doc", "body", "good"),),
            effects=(pay.call(x=1),),
            usage=lw.Usage(cost_usd=0.10),
        )

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(cost_usd=0.20))

    loop = lw.Loop(
        name="pay",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3, max_cost_usd=0.30)),
        effects=[pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 0)
    assert ran == []
    assert r.spent.cost_usd == pytest.approx(0.30)
    assert r.packet is not None and r.packet["unverified_candidate"] is not None
    assert "reached before the effects ['pay'] ran" in r.packet["cause"], r.packet["cause"]
