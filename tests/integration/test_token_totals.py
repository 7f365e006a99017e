"""Token counts no store can hold end the run ``escalated``, naming the field; they never leave
it ``running`` (stop 52), on SQLite and PostgreSQL.

Each call may report up to ``MAX_TOKENS`` (2**53). A cycle whose calls summed past it raised
``ConfigError`` out of ``run_sync`` and left the run ``running``, raising again on every
resume; a run whose total passed 2**63 - 1 (what a store's integer column holds) failed its
commit with ``OverflowError`` and stayed ``running`` too. A budget past that total was
accepted.
"""

from __future__ import annotations

from typing import Any

import pytest

import loopwright as lw
from loopwright._errors import ConfigError

TASK = {"artifacts": {"doc": {"n": 0}}}


def _loop(actor_tokens: int, check_tokens: int, max_cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"n": ctx.cycle}, usage=lw.Usage(tokens=actor_tokens))

    def check(s: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, usage=lw.Usage(tokens=check_tokens))

    return lw.Loop(
        name="tokens",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=max_cycles)),
    )


def _ended(url: str, loop: lw.Loop) -> tuple[lw.RunResult, Any]:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="t")
        rec = rt.store.get_run(r.run_id)
        again = rt.resume_sync(r.run_id, loop)  # ended: a resume returns it as it is
    assert (again.status, again.cycles) == (r.status, r.cycles)
    return r, rec


def test_a_cycle_summing_past_max_tokens_escalates(url: str) -> None:
    r, rec = _ended(url, _loop(2**53, 2**53, 3))
    assert (r.status, rec.status, r.cycles) == ("escalated", "escalated", 0)
    assert r.packet is not None
    assert r.packet["cause"].startswith("Usage.tokens: the calls of cycle 1 reported ")
    assert str(2**54) in r.packet["cause"]
    evidence = {"field": "Usage.tokens", "cycle_tokens": 2**54, "run_tokens": 2**54}
    assert r.packet["evidence"] == evidence
    assert r.spent.tokens == 2**54  # what the calls reported is charged


def test_a_run_total_past_what_a_store_holds_escalates(url: str) -> None:
    # 2**53 tokens a cycle (the most one cycle may sum): the 1024th takes the total to 2**63,
    # one past the largest integer a store's column holds
    r, rec = _ended(url, _loop(2**52, 2**52, 2000))
    assert (r.status, rec.status) == ("escalated", "escalated")
    assert r.cycles == 1023  # the cycle that would pass the bound is not concluded
    assert r.spent.tokens == 2**63 - 1  # charged, held at what a store holds
    assert r.packet is not None
    assert r.packet["cause"].startswith("Usage.tokens: cycle 1024 took the run's total to ")
    evidence = {"field": "Usage.tokens", "cycle_tokens": 2**53, "run_tokens": 2**63}
    assert r.packet["evidence"] == evidence


@pytest.mark.parametrize("field", ["max_tokens", "max_cycles"])
def test_a_budget_past_what_a_store_holds_is_refused(field: str) -> None:
    with pytest.raises(ConfigError) as err:
        lw.Budget(**{field: 2**70})
    assert err.value.field == f"contract.budget.{field}"
    assert "2**63 - 1" in str(err.value)
    with pytest.raises(ConfigError) as err:
        lw.Contract.from_dict({"budget": {field: 2**63}})
    assert err.value.field == f"contract.budget.{field}"
    assert getattr(lw.Budget(**{field: 2**63 - 1}), field) == 2**63 - 1


@lw.effect("send", name="notify", key=lambda a: f"notify-{a['to']}")
def _notify(to: str) -> dict[str, Any]:
    return {"sent": to}


def test_a_cycle_past_max_tokens_after_its_effects_lists_them(url: str) -> None:
    """The cycle ran its effects (``_apply``) before its tokens were summed: the packet said
    only that the run escalated before its first cycle, not that a message had been sent."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        edits = lw.Proposal.edit("doc", {"n": ctx.cycle}).edits
        return lw.Proposal(
            edits=edits, effects=(_notify.call(to="ann"),), usage=lw.Usage(tokens=2**53)
        )

    def check(s: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(tokens=2**53))

    loop = lw.Loop(
        name="tokens-effects",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        effects=[_notify],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    r, rec = _ended(url, loop)
    assert (r.status, rec.status, r.cycles) == ("escalated", "escalated", 0)
    assert r.packet is not None
    [done] = r.packet["evidence"]["effects_done"]
    assert (done["name"], done["status"], done["result"]) == ("notify", "done", {"sent": "ann"})
    assert r.packet["unverified_candidate"]["effects"] == [
        {"name": "notify", "args": {"to": "ann"}, "key": None}
    ]
