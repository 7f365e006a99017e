"""A check-only cycle is never a repeat of an earlier one (newuser47).

Every check-only cycle judges the same empty proposal, so the first that failed put that
proposal's digest among the rejected ones and the next, after a second edit, was read as the
actor sending a rejected proposal again: recorded ``duplicate`` (``(repeat)`` in ``show``), not
an improvement and never the best candidate however well the person's second edit scored. The
packet then kept the state from before that edit as the best candidate, and the run lost the
actor cycle a material improvement gives back. A check-only cycle is no attempt: it is neither
a repeat nor rejected (an actor's empty proposal later is judged as its own).
"""

from __future__ import annotations

from typing import Any

import loopwright as lw

WANT = {"qty": 3, "price": 12.5, "cur": "EUR"}


def _loop(*, idle: bool = False, risk: tuple[lw.RiskRule, ...] = ()) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:  # never fixes anything
        if idle:  # proposes nothing: an empty proposal, as the check-only cycle's
            return lw.Proposal(note="nothing I can fix", usage=lw.Usage(0.01))
        return lw.Proposal.edit("inv", {"note": f"try {ctx.cycle}"}, usage=lw.Usage(0.01))

    def agree(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        inv = state.artifacts["inv"].values()
        bad = [lw.Finding(f"{k} wrong", "inv", k) for k, v in WANT.items() if inv.get(k) != v]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / 3, findings=tuple(bad))

    return lw.Loop(
        name="edit-twice",
        actor=actor,
        verifiers=[lw.Check(fn=agree, name="agree")],
        contract=lw.Contract(
            success=lw.Success(min_score=0.98),
            no_progress=lw.NoProgress(cycles=2),
            budget=lw.Budget(max_cycles=20),
            risk=risk,
        ),
    )


def _records(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [c.record for c in rt.store.checkpoints(run_id) if c.record and "proposal" in c.record]


def test_a_second_failing_edit_is_judged_as_new_and_kept_as_the_best(url: str) -> None:
    task = {"artifacts": {"inv": {"qty": 5, "price": 1, "cur": "USD", "note": ""}}}
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), task, task_key="K")
        assert r.stop_reason == "no_progress"
        rt.edit(r.run_id, "inv/qty", 3, by="ana")
        r = rt.resume_sync(r.run_id, _loop())
        first = next(c for c in _records(rt, r.run_id) if c.get("check_only"))
        assert first["decision"] == "revise" and first["improved"] is True
        rt.edit(r.run_id, "inv/price", 12.5, by="ana")
        r = rt.resume_sync(r.run_id, _loop())
        recs = _records(rt, r.run_id)
        checks = [c for c in recs if c.get("check_only")]
        assert len(checks) == 2
        second = checks[1]
        # before: duplicate True, improved False, the best candidate the first edit's
        assert second["duplicate"] is False
        assert second["improved"] is True
        assert r.state.best_cycle == second["cycle"]
        assert r.best_score is not None and abs(r.best_score - 2 / 3) < 1e-9
        assert r.packet is not None and r.packet["best_candidate"]["cycle"] == second["cycle"]
        # the improvement gives the actor its cycles again: two actor cycles after the check
        # (before: one, the stall carried over from before the edit)
        after = [c for c in recs if c["cycle"] > second["cycle"]]
        assert len(after) == 2 and not any(c.get("check_only") for c in after)
        # no check-only cycle put its empty proposal among the rejected ones
        assert CHECK_DIGEST not in r.state.rejected


CHECK_DIGEST = lw.Proposal(note="judged the person's edit").digest()


def test_a_parked_check_only_cycle_is_no_repeat_of_the_actors_empty_proposal(url: str) -> None:
    """The actor proposed nothing and failed (its empty proposal rejected); a person's edit is
    judged, a risk rule parks that check-only cycle, and once approved it concluded as a
    repeat of the actor's empty proposal: no improvement, not the best candidate."""

    def by_hand(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        return "a person set the quantity" if state.values()["inv"]["qty"] == 3 else None

    loop = _loop(idle=True, risk=(lw.RiskRule(name="hand", check=by_hand),))
    task = {"artifacts": {"inv": {"qty": 5, "price": 1, "cur": "USD", "note": ""}}}
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, task, task_key="K")
        assert r.stop_reason == "no_progress"
        assert _records(rt, r.run_id)[-1]["duplicate"] is True  # the actor's, sent again
        rt.edit(r.run_id, "inv/qty", 3, by="ana")
        assert rt.resume_sync(r.run_id, loop).status == "awaiting_approval"
        rt.approve(r.run_id, by="bo")
        r = rt.resume_sync(r.run_id, loop)
        [check] = [c for c in _records(rt, r.run_id) if c.get("check_only")]
        assert check["duplicate"] is False and check["improved"] is True
        assert r.state.best_cycle == check["cycle"]
