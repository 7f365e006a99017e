"""What an executor taken over spent is charged, though its commit is refused (invariant 7),
on SQLite and PostgreSQL (crash55b).

An executor stalled past its lease is taken over; it wakes, finds its lease taken at its commit
(``StaleLeaseError``) and says so (``lease lost``), no crash (crash54). Its cycle's calls were
never charged: ten such stalls at cycle 2 of an actor billing $0.10 a call under
``max_cost_usd = 0.55`` ended ``accepted`` with $0.30 spent, and a stall repeated for ever at
one cycle was ended neither by the crash bound nor by the budgets. Its word now carries what it
spent and never committed; the next resume charges it (once: the state keeps the last word it
charged), so the cost budget ends the stalls. Each executor is held in its actor until the test
has let the next take the run over (no timing)."""

from __future__ import annotations

import threading

import pytest
from support.crash_bound import TASK, Gates, expire, held, resumer, stall_gates

import loopwright as lw

TIMES = 10
COST = 0.10


def _billing_loop(stalls: Gates) -> lw.Loop:
    """``doc.n`` edited to the cycle (accepted at 3), each actor call billed $0.10; in a
    stalling thread, held at cycle 2 before it answers."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            held(stalls)
        edits = (lw.Edit("doc", "n", ctx.cycle),)
        return lw.Proposal(edits=edits, usage=lw.Usage(cost_usd=COST, tokens=10))

    def done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        n = int(state.values()["doc"].get("n", 0))
        return lw.Verdict(passed=n == 3, score=n / 3)

    budget = lw.Budget(max_cycles=10, max_cost_usd=0.55)
    return lw.Loop(
        name="fenced", actor=actor, verifiers=[done], contract=lw.Contract(budget=budget)
    )


def test_stalls_taken_over_are_charged_and_end_at_the_cost_budget(url: str) -> None:
    stalls = stall_gates(TIMES)
    loop = _billing_loop(stalls)
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, TASK, task_key="fenced")[0].run_id
        drive, ended = resumer(url, run_id, loop)
        before: threading.Thread | None = None
        last = ""
        try:
            for name, (entered, _go) in stalls.items():
                if before is not None:
                    expire(rt, run_id)
                t = threading.Thread(target=drive, name=name, daemon=True)
                t.start()
                while not entered.wait(0.05) and t.is_alive():
                    pass  # held in its actor, or ended
                if before is not None:
                    stalls[before.name][1].set()  # the one taken over wakes, fenced out
                    before.join()
                    assert isinstance(ended[before.name], lw.StaleLeaseError), ended
                last, before = name, t
                if not entered.is_set():
                    t.join()
                    break
        finally:
            for _entered, go in stalls.values():
                go.set()  # (a failing test leaves no executor held)
            if before is not None:
                before.join()  # (before: the last stall, never taken over, ends the run)
        r = ended[last]
        # (before: no resume stopped; each stalled, and the last, let go, ended the run
        # accepted with $0.30 spent, though the ten stalled calls were billed too)
        assert isinstance(r, lw.RunResult), r
        assert (r.status, r.stop_reason) == ("stopped", "budget_cost"), r.packet
        events = rt.store.events(run_id)
        charged = [e for e in events if e.kind == "interrupted" and "fenced" in e.data]
        assert [e.data["why"] for e in charged] == ["lease lost"] * 2
        # stall-3's resume charged the words of stall-0 and stall-1 (stall-2 still held): $0.30
        # with cycle 1's call, a next cycle projected at that mean past $0.55
        assert last == "stall-3"
        assert r.spent.cost_usd == pytest.approx(3 * COST) and r.spent.tokens == 30
        # stall-2, woken after the stop, says nothing to the ended run, but what it was billed
        # is the run's spend all the same (before fenced56: $0.30, its call never charged)
        rec = rt.store.get_run(run_id)
        assert rec.cost_usd == pytest.approx(4 * COST) and rec.tokens == 40
        assert rec.fenced is not None and rec.fenced["cost_usd"] == pytest.approx(COST)
        assert rt.store.latest_checkpoint(run_id).state["spent"]["cost_usd"] == pytest.approx(
            3 * COST
        )
        # the outcome metrics count it: all of it after cycle 1, the last improvement
        m = lw.compute_metrics(rt.store)
        assert m.value("spend_after_last_improvement_usd") == pytest.approx(3 * COST)
        assert m.spend_usd == pytest.approx(4 * COST)
