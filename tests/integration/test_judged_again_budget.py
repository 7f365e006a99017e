"""A parked cycle judged again after a person's edit (its request then approved) starts no
check on a budget used up (review48b).

``judge`` starts at the checks; the check before the first one is its caller's (an actor's
cycle makes it after the actor call, a check-only cycle before it starts, a denied request's
cycle before judging the edit). The approved request's cycle made none: its checks ran again
on a cost budget its parked cycle had reached exactly, and the run spent past it on a call
that should not have started (invariant 7: the overshoot is the one call in flight).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from support.doc_verdicts import parts_good

import loopwright as lw
from loopwright._contract import contract_from_snapshot
from loopwright.replay import simulate, trace_of_run

PARTS = ("a", "b", "c")


def _loop(judged: list[dict[str, str]]) -> lw.Loop:
    """The actor writes c, a change that waits for a person; each check costs."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"c": "good"}, usage=lw.Usage(0.10, 100))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        judged.append(dict(state.artifacts["doc"].values()))
        return parts_good(state, PARTS, usage=lw.Usage(0.01, 10))

    def hidden(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, usage=lw.Usage(0.02, 20))

    return lw.Loop(
        name="judged-again",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check"), lw.Check(fn=hidden, name="h", held_out=True)],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0),
            budget=lw.Budget(max_cost_usd=0.13),  # the parked cycle's cost, exactly
            risk=(lw.RiskRule(name="c", touches=("doc/c",)),),
        ),
        retry=lw.RetryPolicy(attempts=1),
    )


def test_an_approved_edited_cycle_starts_no_check_on_a_budget_reached(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    judged: list[dict[str, str]] = []
    loop = _loop(judged)
    with lw.Runtime(str(path)) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "bad"}}})
        assert (r.status, r.cycles) == ("awaiting_approval", 0)
        assert r.spent.cost_usd == pytest.approx(0.13)  # the budget reached, not crossed
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.approve(r.run_id, by="bo")
        before = len(judged)
        r = rt.resume_sync(r.run_id, loop)
        # no check ran again (before: the visible check did, $0.14 of $0.13, then it stopped)
        assert len(judged) == before
        assert (r.status, r.stop_reason) == ("stopped", "budget_cost")
        assert r.spent.cost_usd == pytest.approx(0.13)
        # the approved proposal is kept, unverified, for a person; the edit stays
        assert r.packet is not None and r.packet["unverified_candidate"]["edits"][0]["part"] == "c"
        assert "judged again" in r.packet["cause"]
        assert r.state.values()["doc"]["a"] == "good"
    with lw.store.open_store(str(path)) as st:
        rec = st.get_run(r.run_id)
        trace = trace_of_run(st, rec)
    assert trace is not None
    contract = dataclasses.replace(contract_from_snapshot(rec.contract), risk=())
    o = simulate(trace, contract)
    assert (o.reason, o.cost_usd) == ("budget_cost", pytest.approx(0.13))
