"""Invariant 3 judged from outside, by difference (trust53): two runs alike but for what their
held-out check answers (passes quietly, or fails loudly with a canary in every field it has,
spending money and tokens, or raises) show their actor, their reflector and a fork's actor
the same contexts. Whatever differs between them would tell the actor the held-out verdict."""

from __future__ import annotations

import re
from typing import Any

import pytest

import loopwright as lw

CANARY = "CANARY-trust53-held-out"
TASK: dict[str, Any] = {
    "goal": "fix doc",
    "artifacts": {"doc": {"a": 0, "b": 0}},
    "plan": [
        {"id": "s1", "title": "a", "parts": ["doc/a"]},
        {"id": "s2", "title": "b", "depends_on": ["s1"], "parts": ["doc/b"]},
    ],
    "held_out": {"tests": [CANARY]},
}


def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    vals = state.values()["doc"]
    found = tuple(
        lw.Finding(f"{k} should be {want}", "doc", k, "value", evidence={"expected": want})
        for k, want in (("a", 1), ("b", 2))
        if vals.get(k) != want
    )
    return lw.Verdict(passed=not found, score=1 - len(found) / 2, findings=found)


def held_out(mode: str) -> Any:
    calls = [0]

    def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        assert CANARY in repr(state.task)  # the held-out check does read the hidden tests
        calls[0] += 1
        if mode == "pass" or (mode == "raise" and calls[0] != 2):
            return lw.Verdict(passed=True, score=1.0)
        if mode == "raise":  # the second judgement only: the run escalates at its cycle 2
            raise RuntimeError(f"{CANARY} raised")
        return lw.Verdict(
            passed=False,
            score=0.0,
            findings=(
                lw.Finding(f"{CANARY} a", "doc", "a", CANARY, evidence={"why": CANARY}),
                lw.Finding(f"{CANARY} b", "doc", "b", CANARY, severity="error"),
                lw.Finding(f"{CANARY} run-wide"),
            ),
            evidence={"secret": CANARY},
            usage=lw.Usage(cost_usd=0.25, tokens=4000),
        )

    audit.__name__ = "audit"
    return audit


class Spy:
    """An actor that fixes one finding a cycle (``b`` first: slow on purpose) and records
    everything it is shown, as data and as a model would read it."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, ctx: lw.Context) -> lw.Proposal:
        from loopwright.adapters._prompt import render_context

        self.seen.append(_norm(repr(ctx)) + "\n" + _norm(render_context(ctx)))
        for f in sorted(ctx.findings, key=lambda f: f.part or "", reverse=True):
            if f.dimension == "value" and f.part:
                return lw.Proposal.edit("doc", {f.part: f.evidence["expected"]})
        return lw.Proposal(note="nothing to do")

    def reflect(self, ctx: lw.Context, verdicts: dict[str, lw.Verdict]) -> str:
        self.seen.append("reflect " + _norm(repr(ctx)) + _norm(repr(verdicts)))
        return f"reflected on cycle {ctx.cycle}"


def _norm(text: str) -> str:
    """What differs between two runs whatever their verdicts: ids, and the wall clock."""
    text = re.sub(r"\b[0-9a-f]{16}\b", "ID", text)
    text = re.sub(r"seconds=[0-9.e+-]+", "seconds=S", text)
    return re.sub(r"'(started_at|at|ts)': [^,}]+", r"'\1': T", text)


def _loop(spy: Spy, mode: str, risk: tuple[lw.RiskRule, ...] = ()) -> lw.Loop:
    return lw.Loop(
        name="spy53",
        actor=spy,
        verifiers=[lw.Check(fn=visible), lw.Check(fn=held_out(mode), held_out=True)],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=8, max_cost_usd=100.0, max_tokens=10**6), risk=risk
        ),
        reflector=spy.reflect,
    )


def _seen(url: str, mode: str) -> list[str]:
    spy = Spy()
    loop = _loop(spy, mode)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key=f"t53-{mode}")
        spy.seen.append(f"end {r.status} {r.stop_reason} {r.cycles}")
        for at in range(r.cycles + 1):
            f = rt.fork(r.run_id, at)
            spy.seen.append(f"fork at {at}")
            done = rt.resume_sync(f.run_id, loop)
            spy.seen.append(f"fork end {done.status} {done.stop_reason} {done.cycles}")
    return spy.seen


@pytest.mark.parametrize("mode", ["fail", "raise"])
def test_the_actor_sees_the_same_whatever_the_held_out_check_answers(url: str, mode: str) -> None:
    quiet = _seen(url, "pass")
    loud = _seen(url, mode)
    assert not [s for s in loud if CANARY in s]
    if mode == "raise":
        # the run escalates at cycle 2; its forks (at 0 and 1) go on: every context any actor
        # or reflector was shown is one the quiet runs showed too
        assert loud[-1].startswith("fork end") and len(loud) > 4
        shown = [s for s in loud if not s.startswith(("end", "fork"))]
        assert set(shown) <= set(quiet)
        return
    assert loud == quiet


def _seen_by_people(url: str, mode: str) -> list[str]:
    """Parked on a risk rule, a person's edit beside the request, approval, resume; then the
    same run edited after it ended, and resumed again."""
    spy = Spy()
    loop = _loop(spy, mode, (lw.RiskRule(name="on_a", touches=("doc/a",)),))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key=f"p53-{mode}")
        spy.seen.append(f"parked {r.status} {r.cycles}")
        rt.edit(r.run_id, "doc/b", 5, by="pat", note="b is 5 now")
        rt.approve(r.run_id, by="pat", note="ok")
        done = rt.resume_sync(r.run_id, loop)
        spy.seen.append(f"end {done.status} {done.stop_reason} {done.cycles}")
        rt.edit(r.run_id, "doc/a", 7, by="pat")
        again = rt.resume_sync(r.run_id, loop)
        spy.seen.append(f"end {again.status} {again.stop_reason} {again.cycles}")
    return spy.seen


def test_people_and_edits_tell_the_actor_nothing_held_out(url: str) -> None:
    quiet = _seen_by_people(url, "pass")
    loud = _seen_by_people(url, "fail")
    assert not [s for s in loud if CANARY in s]
    assert loud == quiet
    assert any(s.startswith("parked awaiting_approval") for s in loud)
