"""A cancel offers the compensations of a run's done effects (a refund), which run only when
someone resumes the run: no worker claims an ended run. Where no one did, nothing said they
waited (stop 50): ``show`` said "cancelled", ``approvals`` listed nothing for an allowed
refund, and the payment stood unseen. The cancel's packet says it now, where the cancel is
recorded; once a resume runs them, the packet says what ran instead."""

from __future__ import annotations

import dataclasses

import pytest
from support.printed import shown_text
from test_people import PAID, make_loop, task

import loopwright as lw

# the first payment is allowed (and so its refund: a refund is judged as what it undoes); the
# second asks a person, so the run parks on it and can be cancelled there
RULES = (
    lw.PolicyRule(kind="spend", action="allow", name="ok", when=lambda a: a["invoice"] != "X-2"),
    lw.PolicyRule(kind="spend", action="require", name="big"),
)


def _cancelled(rt: lw.Runtime, loop: lw.Loop, *, asked: bool) -> lw.RunRecord:
    r = rt.run_sync(loop, task("X-1", 100), task_key="k")
    if asked:  # (the first payment approved, to be paid at all)
        rt.approve(r.run_id, by="ann")
        r = rt.resume_sync(r.run_id, loop)
    assert r.status == "accepted" and PAID == ["X-1"]
    rt.edit(r.run_id, "inv/invoice", "X-2", by="me")  # reopened: pays X-2 next, asked first
    assert rt.resume_sync(r.run_id, loop).status == "awaiting_approval"
    return rt.cancel(r.run_id, by="me", loop=loop)


@pytest.mark.parametrize("refund", ["allowed", "asked"])
def test_a_cancelled_runs_waiting_refund_is_said_until_it_runs(url: str, refund: str) -> None:
    rules = RULES if refund == "allowed" else RULES[1:]
    loop = dataclasses.replace(
        make_loop(rules), contract=lw.Contract(budget=lw.Budget(max_cycles=5))
    )
    PAID.clear()
    with lw.Runtime(url) as rt:
        done = _cancelled(rt, loop, asked=refund == "asked")
        assert done.status == "cancelled" and PAID == ["X-1"]  # not refunded yet
        said = done.packet["recommended_action"]
        assert said.startswith("Its compensations are not run yet: pay (pay:X-1). They run ")
        # (a run started from Python is resumed there: newuser52)
        assert f"`Runtime.resume('{done.run_id[:12]}', loop)` in Python" in said
        assert ("`loopwright approvals`" in said) == (refund == "asked")
        shown = " ".join(shown_text(url, done.run_id)[0].split())
        assert "Its compensations are not run yet: pay (pay:X-1)" in shown
        if refund == "asked":
            rt.approve(done.run_id, by="ann")
        after = rt.resume_sync(done.run_id, loop)
        assert after.status == "cancelled" and PAID == ["X-1", "refund:X-1"]
        assert "not run yet" not in after.packet["recommended_action"]
        assert "compensations_waiting" not in after.packet
        assert [n["status"] for n in after.packet["compensations"]] == ["done"]
        assert "not run yet" not in " ".join(shown_text(url, done.run_id)[0].split())


def test_a_cancel_with_nothing_to_undo_says_nothing_of_it(url: str) -> None:
    loop = dataclasses.replace(
        make_loop(RULES), contract=lw.Contract(budget=lw.Budget(max_cycles=5))
    )
    PAID.clear()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, task("X-2", 100), task_key="k")  # parked before paying
        assert r.status == "awaiting_approval" and PAID == []
        done = rt.cancel(r.run_id, by="me", loop=loop)
        assert "not run yet" not in done.packet["recommended_action"]
        assert "compensations_waiting" not in done.packet
