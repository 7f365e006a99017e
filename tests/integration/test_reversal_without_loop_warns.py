"""`Runtime.rollback` / `Runtime.cancel` without ``loop=`` (outside probe outside50a): the
compensations of the run's done effects cannot be known, so none is offered — recorded as a
``compensations_not_offered`` event, which a Python caller never saw: a refund a user expected
silently did not happen. The Python API now logs a warning on ``loopwright.runs`` naming the
run and ``loop=`` (the CLI prints its own line, as it does for an unjudged edit)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

PAID: list[str] = []


@lw.effect("spend", key=lambda a: str(a["invoice"]))
def pay(invoice: str, *, key: str) -> dict[str, Any]:
    PAID.append(key)
    return {"paid": key}


@pay.compensation
def refund(key: str, result: dict[str, Any], args: dict[str, Any]) -> None:
    PAID.remove(key)


@lw.effect("spend", name="pay_early", key=lambda a: str(a["invoice"]), requires_success=False)
def pay_early(invoice: str, *, key: str) -> dict[str, Any]:
    PAID.append(key)
    return {"paid": key}


@pay_early.compensation
def refund_early(key: str, result: dict[str, Any], args: dict[str, Any]) -> None:
    PAID.remove(key)


def _ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


def _actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal(edits=(lw.Edit("inv", "s", "paid"),), effects=(pay.call(invoice="W-1"),))


LOOP = lw.Loop(
    name="reversal-warns",
    actor=_actor,
    verifiers=[lw.Check(fn=_ok)],
    contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    effects=[pay],
    approvals=lw.ApprovalPolicy(
        (
            lw.PolicyRule(kind="spend", effect="pay.compensate", action="allow", name="refund"),
            lw.PolicyRule(kind="spend", action="allow", name="pay"),
        )
    ),
)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "loopwright.runs" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("given", [False, True])
def test_a_rollback_without_the_loop_says_no_refund_was_offered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, given: bool
) -> None:
    PAID.clear()
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(LOOP, {"artifacts": {"inv": {"s": "new"}}}, task_key="rb")
        assert r.accepted and PAID == ["pay:W-1"]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="loopwright.runs"):
            rt.rollback(r.run_id, 0, by="gus", loop=LOOP if given else None)
        said = _warnings(caplog)
        if given:
            assert said == []
        else:
            [line] = said
            assert r.run_id[:12] in line and "loop=" in line and "rollback" in line
            rt.resume_sync(r.run_id, LOOP)
            assert PAID == ["pay:W-1"]  # nothing undone, nothing paid twice


def test_a_cancel_without_the_loop_says_no_refund_was_offered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    PAID.clear()

    def pays_then_asks(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            return lw.Proposal(effects=(pay_early.call(invoice="W-2"),))
        return lw.Proposal(question=lw.Question("Which PO?", choices=("PO-1", "PO-2")))

    def never(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    loop = lw.Loop(
        name="reversal-warns-cancel",
        actor=pays_then_asks,
        verifiers=[lw.Check(fn=never)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=[pay_early],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, {"artifacts": {"inv": {"s": "new"}}}, task_key="c")
        assert r.status == "awaiting_approval" and PAID == ["pay_early:W-2"]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="loopwright.runs"):
            out = rt.cancel(r.run_id, by="gus")
        assert out.status == "cancelled"
        [line] = _warnings(caplog)
        assert r.run_id[:12] in line and "loop=" in line and "cancel" in line
        assert PAID == ["pay_early:W-2"]
