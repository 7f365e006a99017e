"""An approval given to a card promising a reuse pays nothing, however long after the decision
the effect runs (review48a), on SQLite and PostgreSQL.

Run B parked asking for an invoice run A had paid; its card said approving runs nothing again
("its result is reused"), and a person approved. The resumed cycle checks the claim as it
resumes (newuser47) and wrote its effects' write-ahead; B's process then died before the
effect ran (or A's refund ran in the moment between that check and the effect). A was rolled
back and refunded meanwhile. Before, B's effect found the key free (its next generation) and
paid the invoice again: the person had approved a reuse, and money went out. Now an effect
approved as a reuse runs only as a reuse: the refunded payment escalates B, saying why, and
nothing is paid.

The other process is placed at fixed points: B's crash at the phase before the effect's
intent, A's refund inside that same phase hook (no timing).
"""

from __future__ import annotations

import concurrent.futures as cf

import pytest
from test_approval_card_done_already import _loop
from test_approval_card_reuse_gone import TASK, _pending

import loopwright as lw


class Crash(BaseException):
    """The process dies here."""


def _b_approved_as_reuse(
    rt: lw.Runtime, loop: lw.Loop, paid: list[str], *, edited: bool = False
) -> tuple[str, str]:
    """A pays I6; B parks told the payment is reused, and is approved (``edited``: B was
    edited beside the request, so its cycle is judged again as it resumes)."""
    a = rt.run_sync(loop, TASK, task_key="A").run_id
    rt.approve(a, by="ann")
    assert rt.resume_sync(a, loop).accepted and paid == ["I6"]
    b = rt.run_sync(loop, TASK, task_key="B").run_id
    [req] = _pending(rt, b)
    assert "its result is reused" in req.what
    if edited:
        rt.edit(b, "inv/memo", "checked", by="eve")
    rt.approve(b, by="dan")
    return a, b


def _refund(url: str, a: str, loop: lw.Loop) -> None:
    with lw.Runtime(url) as other:
        other.rollback(a, to_cycle=0, by="ops", loop=loop)
        [refund] = _pending(other, a)
        other.approve(a, by="fin", approval_id=refund.approval_id)
        other.resume_sync(a, loop)  # refunds, then parks asking to pay again


def _not_paid_again(rt: lw.Runtime, b: str, paid: list[str]) -> None:
    assert paid == ["I6", "-I6"]  # before: ["I6", "-I6", "I6"], paid under pay:I6~2
    rec = rt.store.get_run(b)
    assert rec.status == "escalated", rec.status
    assert "approved as already done" in str(rec.packet), rec.packet


def test_a_reuse_refunded_while_the_approved_cycle_was_down_is_not_paid(url: str) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        a, b = _b_approved_as_reuse(rt, loop, paid)

    def die(name: str) -> None:
        if name == "before_effect_intent":
            raise Crash

    crashed = lw.Runtime(url)
    crashed._on_phase = die
    try:
        crashed.resume_sync(b, loop)
        raise AssertionError("the phase hook did not fire")
    except Crash:
        pass
    crashed.close()
    assert paid == ["I6"]
    _refund(url, a, loop)  # while B is down
    assert paid == ["I6", "-I6"]
    with lw.Runtime(url) as rt:
        rt.resume_sync(b, loop)
        _not_paid_again(rt, b, paid)


@pytest.mark.parametrize("edited", [False, True])
def test_a_reuse_refunded_just_before_the_effect_is_not_paid(url: str, edited: bool) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        a, b = _b_approved_as_reuse(rt, loop, paid, edited=edited)
        fired: list[str] = []

        def refund_now(name: str) -> None:
            if name == "before_effect_intent" and not fired:
                fired.append(name)
                # another process, between the check and the effect (a thread: its own
                # event loop)
                with cf.ThreadPoolExecutor(1) as pool:
                    pool.submit(_refund, url, a, loop).result()

        rt._on_phase = refund_now
        rt.resume_sync(b, loop)
        assert fired
        _not_paid_again(rt, b, paid)
