"""A check that fails as user code (raises a permanent error, or returns what is not a
``Verdict``) escalates the run; the packet keeps the actor's proposal it was judging, unverified,
beside the verdicts judged before it, as every other end inside a cycle does (a budget reached,
a risk rule's check that raised, an effect that failed): the work paid for is not thrown away.

Found by an outside probe (stop 52): those two ends alone left ``unverified_candidate`` null and
``evidence`` empty, so the $0.10 proposal a person would look at once the check is fixed was in
no packet."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import loopwright as lw

TASK = {"artifacts": {"doc": {"body": "draft"}}}
EDIT = [{"artifact": "doc", "part": "body", "value": "good"}]


def _loop(second: Callable[..., Any]) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": "good"}, usage=lw.Usage(cost_usd=0.10))

    def first(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(cost_usd=0.05))

    return lw.Loop(
        name="probe",
        actor=actor,
        verifiers=[lw.Check(fn=first, name="first"), lw.Check(fn=second, name="second")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3, max_cost_usd=1.0)),
    )


def _raises(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
    raise lw.PermanentError("the schema file is missing")


def _wrong_type(state: lw.TaskState, p: lw.Proposal) -> Any:
    return {"passed": True}


@pytest.mark.parametrize(
    ("second", "said"),
    [
        (_raises, "verifier second raised an exception (PermanentError"),
        (_wrong_type, "verifier second returned the wrong type (returned dict"),
    ],
)
def test_a_failing_check_keeps_the_proposal_and_the_verdicts_so_far(
    url: str, second: Callable[..., Any], said: str
) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(second), TASK, task_key="T")
        again = rt.result(r.run_id)
    assert (r.status, r.stop_reason, r.cycles) == ("escalated", "escalated", 0)
    assert r.spent.cost_usd == pytest.approx(0.15)  # the actor and the first check
    packet = r.packet
    assert packet is not None and said in packet["cause"], packet["cause"]
    assert packet["unverified_candidate"]["edits"] == EDIT
    assert packet["evidence"]["verdicts"]["first"]["passed"] is True
    assert packet["error"]["where"] == "verifier:second"
    # the best candidate is still the task's own values (nothing was judged whole)
    assert packet["best_candidate"]["artifacts"] == {"doc": {"body": "draft"}}
    assert again.packet == packet  # as stored


def test_a_first_check_failing_keeps_the_proposal_with_no_verdicts(url: str) -> None:
    loop = _loop(_raises)
    loop = lw.Loop(
        name="probe",
        actor=loop.actor,
        verifiers=[lw.Check(fn=_wrong_type, name="only")],
        contract=loop.contract,
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None
    assert r.packet["unverified_candidate"]["edits"] == EDIT
    assert r.packet["evidence"] == {}
