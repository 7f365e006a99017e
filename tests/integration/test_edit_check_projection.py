"""The check-only cycle that judges a person's edit is no attempt, so the actor's next cycle
is not projected at its cost (review48b).

A budget projects the next cycle at the mean of the paid cycles so far (``_decide._mean_paid``).
A check-only cycle of paid checks was one of them: its $0.10 of checks, beside two $1.00 actor
cycles, made the next actor cycle look like $0.70, and a run its $2.85 budget had stopped at
$2.00 (it could tell the next $1.00 cycle would cross) started one once the edit was judged:
the actor was paid and the budget crossed mid-cycle, the proposal never verified. Replay
decides alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.doc_verdicts import parts_good

import loopwright as lw
from loopwright._contract import contract_from_snapshot
from loopwright.replay import simulate, trace_of_run

PARTS = ("a", "b", "c")


def _loop(actor_calls: list[int]) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        actor_calls.append(ctx.cycle)
        edits = {p: f"try {ctx.cycle}" for p in ("a", "b") if not ctx.is_accepted("doc", p)}
        return lw.Proposal.edit("doc", edits, usage=lw.Usage(0.90, 900))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return parts_good(state, PARTS, usage=lw.Usage(0.05, 50))

    def hidden(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, usage=lw.Usage(0.05, 50))

    return lw.Loop(
        name="projection",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check"), lw.Check(fn=hidden, name="h", held_out=True)],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0), budget=lw.Budget(max_cost_usd=2.85)
        ),
        retry=lw.RetryPolicy(attempts=1),
    )


def test_a_paid_check_of_an_edit_does_not_make_the_next_attempt_look_cheaper(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    actor: list[int] = []
    with lw.Runtime(str(path)) as rt:
        r = rt.run_sync(_loop(actor), {"artifacts": {"doc": dict.fromkeys(PARTS, "bad")}})
        # two $1.00 cycles; a third is projected to cross $2.85: stopped before it
        assert (r.stop_reason, r.cycles, actor) == ("budget_cost", 2, [1, 2])
        assert r.spent.cost_usd == pytest.approx(2.0)
        rt.edit(r.run_id, "doc/a", "good", by="ana")  # b is still wrong
        r = rt.resume_sync(r.run_id, _loop(actor))
        # the edit judged ($0.10), and no actor cycle started that the budget could not hold
        # (before: a third actor cycle, $0.90 paid, the budget crossed before its checks)
        assert (r.stop_reason, r.cycles, actor) == ("budget_cost", 3, [1, 2])
        assert r.spent.cost_usd == pytest.approx(2.10)
        assert r.state.paid_cycles == [2, 2, 2]  # the check-only cycle is no attempt
    with lw.store.open_store(str(path)) as st:
        rec = st.get_run(r.run_id)
        trace = trace_of_run(st, rec)
    assert trace is not None and [c.check_only for c in trace.cycles] == [False, False, True]
    o = simulate(trace, contract_from_snapshot(rec.contract))
    assert (o.reason, o.cycles, o.cost_usd) == ("budget_cost", 3, pytest.approx(2.10))
