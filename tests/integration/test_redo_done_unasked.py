"""A run rolled back and resumed redoes a payment it made already under its key, with the same
arguments: nothing is paid (the recorded result is reused), so the approval policy does not
park the run for a person again. Before, it parked with a card saying "already done by this
run under its key: approved, its result is reused" — an approval that could change nothing.
A payment done by another run, or with other arguments, is still asked about."""

from __future__ import annotations

from pathlib import Path

from test_approval_card_done_already import _loop as payer

import loopwright as lw

TASK = {"artifacts": {"inv": {"status": "open"}}}


def _loop(paid: list[str], amount: float = 10.0) -> lw.Loop:
    return payer(paid, amount=amount, refundable=False)  # a rollback leaves the payment done


def _paid_then_rolled_back(rt: lw.Runtime, loop: lw.Loop, paid: list[str]) -> str:
    run = rt.run_sync(loop, TASK, task_key="A").run_id
    rt.approve(run, by="ann")
    assert rt.resume_sync(run, loop).accepted and paid == ["I6"]
    rt.rollback(run, to_cycle=0, by="ops", loop=loop)
    return run


def test_a_redo_of_its_own_done_payment_is_not_asked_again(tmp_path: Path) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        run = _paid_then_rolled_back(rt, loop, paid)
        r = rt.resume_sync(run, loop)
        asked = [a.what for a in rt.store.approvals(run_id=run)]
        assert r.accepted, (r.status, asked)  # before: "awaiting_approval", asked twice
        assert len(asked) == 1 and paid == ["I6"]  # asked once, paid once
        [note] = [e.data for e in rt.store.events(run) if e.kind == "approval_not_needed"]
        assert note["effect"] == "pay" and "done already by this run" in note["why"]


def test_a_redo_with_other_arguments_is_still_asked(tmp_path: Path) -> None:
    paid: list[str] = []
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        run = _paid_then_rolled_back(rt, _loop(paid), paid)
        r = rt.resume_sync(run, _loop(paid, amount=20.0))
        assert r.status == "awaiting_approval", r.status
        [req] = rt.store.approvals(run_id=run, status="pending")
        assert "with other arguments" in req.what and paid == ["I6"]
