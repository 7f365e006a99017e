"""A fenced-out execution's spend is charged once, and its held-out share kept apart, on SQLite
and PostgreSQL (crash55c).

An executor taken over while it called says what it spent in its ``lease lost`` word, charged by
the next resume (crash55b). That word said all its spend no commit charged: a failed, billed
attempt journaled before the takeover was charged by the word and again by the cycle redone
from the journal (``retry:`` entry). And the resume added the word to the spend only, so a
held-out verifier's fenced bill was counted as spend the actor is shown (invariant 3).

Executor ``a`` is held in its call at cycle 2 until ``b`` has taken the run over and is held
in turn; ``a`` let go is fenced out and says its word; ``c`` takes the run over, charges the
word, redoes cycle 2 and ends the run; ``b``, let go after, says nothing to the ended run, but
adds what it was billed to the run's fenced spend (fenced56: crash55b left its stalled call
uncharged). No timing: each step waits on an event."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from support.crash_bound import TASK, Gates, expire, held, start_held

import loopwright as lw

ACTOR = lw.Usage(cost_usd=0.10, tokens=10)
FAILED = lw.Usage(cost_usd=0.05, tokens=5)
AUDIT = lw.Usage(cost_usd=0.01, tokens=1)
FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.01, jitter=False)


def _n(state: lw.TaskState) -> int:
    return int(state.values()["doc"].get("n", 0))


def _gates() -> Gates:
    """Executors ``a`` and ``b`` held (each's first event: it is held; its second: let go)."""
    return {
        "a": (threading.Event(), threading.Event()),
        "b": (threading.Event(), threading.Event()),
    }


def _once(actor: Callable[[lw.Context], lw.Proposal]) -> lw.Loop:
    """``actor``'s loop, accepted once ``doc.n`` is 2 ($5 and ten cycles at most, ``FAST``)."""

    def done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=_n(state) == 2, score=_n(state) / 2)

    budget = lw.Budget(max_cycles=10, max_cost_usd=5.0)
    return lw.Loop(
        name="once", actor=actor, verifiers=[done], retry=FAST, contract=lw.Contract(budget=budget)
    )


def _takeovers(url: str, loop: lw.Loop, gates: Gates) -> tuple[lw.Runtime, str, Any]:
    """``a`` taken over by ``b``, both fenced in turn, ``c`` ending the run: its result."""
    ended: dict[str, Any] = {}

    def drive() -> None:
        name = threading.current_thread().name
        try:
            with lw.Runtime(url) as rt:
                ended[name] = rt.resume_sync(run_id, loop)
        except BaseException as exc:  # (read by the test)
            ended[name] = exc

    def start(name: str) -> threading.Thread:
        return start_held(drive, name, gates, ended)

    rt = lw.Runtime(url)
    run_id = rt.create(loop, TASK, task_key="fenced-once")[0].run_id
    try:
        a = start("a")
        expire(rt, run_id)
        b = start("b")
        gates["a"][1].set()  # a wakes fenced out and says its word
        a.join()
        assert isinstance(ended["a"], lw.StaleLeaseError), ended
        expire(rt, run_id)
        start("c").join()
    finally:
        for _entered, go in gates.values():
            go.set()
    b.join()
    return rt, run_id, ended["c"]


def test_a_failed_attempt_journaled_before_the_takeover_is_charged_once(url: str) -> None:
    gates = _gates()
    tries: dict[str, int] = {}

    def actor(ctx: lw.Context) -> lw.Proposal:
        name = threading.current_thread().name
        if ctx.cycle == 2:
            tries[name] = tries.get(name, 0) + 1
            if name == "a" and tries[name] == 1:
                failed = lw.TransientError("malformed reply")
                failed.usage = FAILED  # type: ignore[attr-defined]
                raise failed  # journaled (billed) before the takeover
            held(gates)
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),), usage=ACTOR)

    rt, run_id, r = _takeovers(url, _once(actor), gates)
    with rt:
        assert isinstance(r, lw.RunResult) and r.status == "accepted", r
        words = [
            e for e in rt.store.events(run_id) if e.kind == "interrupted" and "fenced" in e.data
        ]
        # cycle 1 ($0.10), a's failed attempt ($0.05, from the journal) and answer ($0.10, its
        # word), c's answer ($0.10): each bill once
        assert r.spent.cost_usd == pytest.approx(0.35) and r.spent.tokens == 35
        # and b's stalled call ($0.10), said after the end (before fenced56: never charged)
        assert rt.store.get_run(run_id).cost_usd == pytest.approx(0.45)
        # a's word: its answered call's bill the fence refused, not its failed attempt's, which
        # the journal holds (before: $0.15, the $0.05 charged again by c's redone cycle)
        assert [round(e.data["fenced"]["cost_usd"], 6) for e in words] == [0.10]


def test_a_failed_attempt_the_fence_refused_to_journal_is_charged_by_the_word(url: str) -> None:
    gates = _gates()

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            held(gates)
            if threading.current_thread().name == "a":
                failed = lw.TransientError("malformed reply")
                failed.usage = FAILED  # type: ignore[attr-defined]
                raise failed  # billed after the takeover: its journal entry refused
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),), usage=ACTOR)

    rt, run_id, r = _takeovers(url, _once(actor), gates)
    with rt:
        assert isinstance(r, lw.RunResult) and r.status == "accepted", r
        # cycle 1 ($0.10), a's refused failed attempt ($0.05, its word), c's answer ($0.10)
        # (before: $0.20; a failed attempt's bill is charged when its call ends, never here)
        assert r.spent.cost_usd == pytest.approx(0.25) and r.spent.tokens == 25
        # and b's stalled answer ($0.10), said after the end
        assert rt.store.get_run(run_id).cost_usd == pytest.approx(0.35)


def test_a_held_out_verifiers_fenced_bill_stays_held_out(url: str) -> None:
    gates = _gates()
    shown: list[float | None] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        if threading.current_thread().name == "c":
            shown.append(ctx.remaining.cost_usd)
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),))

    def done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=_n(state) == 3, score=_n(state) / 3)

    def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        if _n(state) == 2:
            held(gates)
        return lw.Verdict(passed=True, score=1.0, usage=AUDIT)

    budget = lw.Budget(max_cycles=10, max_cost_usd=5.0)
    loop = lw.Loop(
        name="held",
        actor=actor,
        verifiers=[lw.Check(fn=done), lw.Check(fn=audit, name="audit", held_out=True)],
        contract=lw.Contract(budget=budget),
    )
    rt, run_id, r = _takeovers(url, loop, gates)
    with rt:
        assert isinstance(r, lw.RunResult) and r.status == "accepted", r
        words = [
            e for e in rt.store.events(run_id) if e.kind == "interrupted" and "fenced" in e.data
        ]
        # every bill is the held-out audit's: cycle 1, a's fenced one, c's cycles 2 and 3
        state = rt.store.latest_checkpoint(run_id).state
        assert r.spent.cost_usd == pytest.approx(4 * AUDIT.cost_usd)
        assert state["held_out_spent"][0] == pytest.approx(4 * AUDIT.cost_usd)
        # the actor is shown none of it (before: c's actor was shown a's $0.01 as spent)
        assert shown == [5.0, 5.0]
        assert [e.data["fenced"]["held_out"]["cost_usd"] for e in words] == [AUDIT.cost_usd]
        # b's fenced audit, said after the end: the run's spend, its held-out share apart
        rec = rt.store.get_run(run_id)
        assert rec.cost_usd == pytest.approx(5 * AUDIT.cost_usd)
        assert rec.fenced is not None
        assert rec.fenced["held_out"]["cost_usd"] == pytest.approx(AUDIT.cost_usd)
