"""What a check-only cycle owes the rest of the run (packet48), on SQLite and PostgreSQL.

An answered question's cycle is followed by the cycle its answer was for; when a person
edited the run beside the question, a check-only cycle judges the edit first. It makes no
attempt, so it does not take the cycle the answer was for: the actor still reads the answer
under a cycle cap (before, at ``max_cycles = 2`` the check-only cycle took cycle 2 and the run
stopped on ``budget_cycles``, the answer never read). The packet of a run stopped on its
cycles says which cycles judged a person's edit. Replay decides as the engine does.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from test_edit_judged_first import (
    ACTOR_USD,
    CHECK_USD,
    CHECKED,
    HELD_USD,
    Calls,
    _records,
    _risky_c,
    make_loop,
)

import loopwright as lw
from loopwright import trace
from loopwright.replay import simulate, traces_from_store


def _asking(calls: Calls, answers: list[Any], *, max_cycles: int) -> lw.Loop:
    """``make_loop`` whose actor asks in cycle 1, and the answers it read after it."""
    base = make_loop(calls, max_cycles=max_cycles)

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            calls.actor.append(ctx.cycle)
            return lw.Proposal(question=lw.Question("which b?"), usage=lw.Usage(ACTOR_USD, 100))
        answers.extend(n.get("answer") for n in ctx.notes if n.get("kind") == "answer")
        return base.actor(ctx)  # type: ignore[no-any-return]

    return dataclasses.replace(base, actor=actor)


TASK = {"artifacts": {"doc": {"a": "bad", "b": "bad", "c": "good"}}}


def _answered_and_edited(rt: lw.Runtime, loop: lw.Loop) -> str:
    r = rt.run_sync(loop, TASK, task_key="q")
    assert r.status == "awaiting_approval"
    rt.edit(r.run_id, "doc/a", "good", by="ana")  # b still wrong: the check-only cycle fails
    rt.answer(r.run_id, "the good one", by="ana")
    return r.run_id


def test_the_answer_is_read_though_a_check_only_cycle_came_first(url: str) -> None:
    calls, answers = Calls(), list[Any]()
    loop = _asking(calls, answers, max_cycles=2)
    with lw.Runtime(url) as rt:
        run_id = _answered_and_edited(rt, loop)
        r = rt.resume_sync(run_id, loop)
        records = _records(rt, run_id)
        decisions = [(c["cycle"], c["decision"], c.get("check_only")) for c in records]
        assert decisions[:2] == [(1, "asked", None), (2, "revise", True)]
        # the actor read the answer in the cycle it was for (before: never called again)
        assert calls.actor == [1, 3] and answers == ["the good one"]
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 3)
        assert r.packet is not None
        said = r.packet["stop_cause"]
        assert "after 3 cycles" in said and "the cycle budget of 2" in said, said
        assert "1 of them judged a person's edit" in said, said
        # replay of the run's trace decides as the engine did
        [recorded] = list(traces_from_store(rt.store))
        out = simulate(recorded, loop.contract)
        assert (out.reason, out.cycles) == ("budget_cycles", 3)
        # a fork after that cycle goes on from it: the actor's cycle still owed, replay alike
        fork = rt.fork(run_id, 2)
        f = rt.resume_sync(fork.run_id, loop)
        assert (f.stop_reason, f.cycles) == ("budget_cycles", 3)
        assert calls.actor == [1, 3, 3]
        [forked] = [t for t in traces_from_store(rt.store) if t.run_id == fork.run_id]
        out = simulate(forked, loop.contract)
        assert (out.reason, out.cycles) == ("budget_cycles", 1)


def test_a_run_stopped_on_its_cycles_after_a_check_says_so(url: str) -> None:
    """An edit of a run stopped on its cycles is judged past the cap (edit47); the packet said
    'stopped after 3 cycles: the cycle budget of 2 is used up', as if the cap were broken."""
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls, max_cycles=2), TASK, task_key="t")
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 2)
        rt.edit(r.run_id, "doc/a", "good", by="ana")  # b still wrong
        r = rt.resume_sync(r.run_id, make_loop(calls, max_cycles=2))
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 3)
        assert r.packet is not None
        said = r.packet["stop_cause"]
        assert "after 3 cycles" in said and "1 of them judged a person's edit" in said, said
        assert "the cycle budget of 2" in said, said
        assert "judged a person's edit" in r.packet["summary"], r.packet["summary"]


def _risky_c_capped(calls: Calls, max_cost: float) -> lw.Loop:
    """``_risky_c`` with a cost budget: a change to c waits for a person."""
    base = _risky_c(calls)
    budget = dataclasses.replace(base.contract.budget, max_cost_usd=max_cost)
    return dataclasses.replace(base, contract=dataclasses.replace(base.contract, budget=budget))


def test_an_edit_beside_a_request_says_when_the_budget_keeps_it_unjudged(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The parked cycle used up the cost budget: whether the request is denied (the run
    escalates, ``_judge_denied``) or approved (it stops on the budget, ``_judge_again``), no
    check starts, and the edit beside it is never judged. The edit says so when it is made,
    as one of a run stopped on a used-up budget does (before: not a word until the run
    escalated with '(the person's edit was not judged: budget_cost reached)')."""
    calls = Calls()
    loop = _risky_c_capped(calls, ACTOR_USD + CHECK_USD + HELD_USD)  # used up by cycle 1
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "bad"}}})
        assert r.status == "awaiting_approval"
        with caplog.at_level("WARNING", logger="loopwright.runs"):
            rt.edit(r.run_id, "doc/a", "good", by="ana")
        [ev] = [e for e in rt.store.events(r.run_id) if e.kind == "edit_unjudged"]
        assert ev.data["part"] == "doc/a" and "budget_cost" in ev.data["why"]
        assert "approved or denied" in ev.data["why"], ev.data["why"]
        assert f"loopwright fork {r.run_id[:12]} --at-cycle 0" in ev.data["why"]
        assert ev.data["why"] in caplog.text
        rt.deny(r.run_id, by="bo")
        judged = len(calls.judged)
        r = rt.resume_sync(r.run_id, loop)
        assert r.status == "escalated" and len(calls.judged) == judged  # as it said
        assert r.packet is not None and "was not judged" in str(r.packet["cause"])


def test_an_edit_beside_a_request_the_budget_allows_says_nothing(url: str) -> None:
    calls = Calls()
    loop = _risky_c_capped(calls, 10 * (ACTOR_USD + CHECK_USD + HELD_USD))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "bad"}}})
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        assert not [e for e in rt.store.events(r.run_id) if e.kind == "edit_unjudged"]


def test_the_eval_case_of_a_denied_cycle_holds_the_actors_proposal_then_the_edit(
    url: str,
) -> None:
    """A request denied after an edit beside it: the actor was called, its proposal judged and
    parked, then the person's edit judged check-only. The case said ``check_only`` with the
    empty proposal, as if no actor had been called; the actor's proposal was only in the
    parked checkpoint (and a case replayed as an actor proposed nothing there)."""
    calls = Calls()
    loop = _risky_c(calls)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "bad"}}})
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.deny(r.run_id, by="bo", note="not c")
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.cycles) == ("escalated", 1)
        [cycle] = trace.eval_case(rt.store, r.run_id)["cycles"]
        assert "check_only" not in cycle  # the actor was called in it
        assert cycle["proposal"]["edits"][0]["part"] == "c"  # the actor's, denied
        # its verdicts judged it on the state before the edit: a wrong, c the actor's
        assert [f["part"] for f in cycle["visible"]["check"]["findings"]] == ["a"]
        judged = cycle["edit_judged"]
        assert judged["check_only"] is True and judged["proposal"]["note"] == CHECKED
        # the edit judged: a by hand, the denied c not applied
        assert [f["part"] for f in judged["visible"]["check"]["findings"]] == ["c"]
        assert cycle["calls"][0]["who"] == "actor"
        # replayed as an actor, the case proposes what the actor did in that cycle
        proposal = trace.case_actor(trace.eval_case(rt.store, r.run_id))(SimpleNamespace(cycle=1))  # type: ignore[arg-type]
        assert [e.ref for e in proposal.changes()] == ["doc/c"]


def test_the_cli_edit_beside_a_request_says_it_too(url: str, capsys: Any) -> None:
    from loopwright.cli import main

    loop = _risky_c_capped(Calls(), ACTOR_USD + CHECK_USD + HELD_USD)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "bad"}}})
    args = ["edit", r.run_id, "doc/a", "--value", '"good"', "--by", "ana", "--store", url]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "judged only once the budget allows" in out and "approved or denied" in out, out


def test_a_question_after_a_check_only_cycle_is_asked_while_a_cycle_is_left(url: str) -> None:
    """``max_cycles = 3``: cycle 1 asks, a person answers and edits beside it, cycle 2 judges
    the edit (check-only, not counted: ``answer_checks``), cycle 3's actor reads the answer and
    asks again. Two counted cycles: a cycle is left to read the new answer, and the actor is
    told so (``ctx.remaining.cycles`` 2). ``unanswerable`` counted the check-only cycle (its
    state left ``answer_checks`` out): the question was never put, and the run stopped on
    ``budget_cycles`` saying no cycle could read its answer (review51a)."""
    calls, answers = Calls(), list[Any]()
    base = make_loop(calls, max_cycles=3)
    left: list[int | None] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        left.append(ctx.remaining.cycles)
        if len(left) <= 2:  # cycle 1, then the first actor cycle after the answer
            calls.actor.append(ctx.cycle)
            answers.extend(n.get("answer") for n in ctx.notes if n.get("kind") == "answer")
            return lw.Proposal(question=lw.Question(f"which b? ({ctx.cycle})"))
        return base.actor(ctx)  # type: ignore[no-any-return]

    loop = dataclasses.replace(base, actor=actor)
    with lw.Runtime(url) as rt:
        run_id = _answered_and_edited(rt, loop)
        r = rt.resume_sync(run_id, loop)
        decisions = [(c["cycle"], c["decision"], c.get("check_only")) for c in _records(rt, run_id)]
        assert decisions[:2] == [(1, "asked", None), (2, "revise", True)], decisions
        assert calls.actor == [1, 3] and answers == ["the good one"] and left == [3, 2]
        assert r.status == "awaiting_approval", (r.status, r.stop_reason, r.packet)
        [asked] = rt.store.approvals(run_id=run_id, status="pending")
        assert asked.what == "which b? (3)"
        # the cycle left reads it; replay of the run decides as the engine did
        rt.answer(run_id, "still the good one", by="ana")
        r = rt.resume_sync(run_id, loop)
        assert calls.actor == [1, 3, 4] and left == [3, 2, 1]
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 4)
        [recorded] = list(traces_from_store(rt.store))
        out = simulate(recorded, loop.contract)
        assert (out.reason, out.cycles) == ("budget_cycles", 4)
