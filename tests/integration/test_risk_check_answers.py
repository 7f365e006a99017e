"""A risk rule's ``check`` answering ``True`` (outside probe outside50a): a user writing a
predicate (``-> bool``) parked the run with the request's reason ``"True"`` — the word an
approver read on the card as *why* — instead of the rule's ``reason``. ``True`` now means
"this needs a person" and the request says the rule's ``reason`` (or names the rule); a
falsy answer (``False``, ``None``, ``""``) parks nothing; a text is the reason, as before."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw


def _loop(answer: object, reason: str) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"t": "new"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    def risky(state: lw.TaskState, proposal: lw.Proposal, verdicts: object) -> object:
        return answer

    rule = lw.RiskRule(name="wire", check=risky, reason=reason)  # type: ignore[arg-type]
    return lw.Loop(
        name="risk-answers",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2), risk=(rule,)),
    )


@pytest.mark.parametrize(
    ("answer", "reason", "why"),
    [
        (
            True,
            "a wire transfer needs a second pair of eyes",
            "a wire transfer needs a second pair of eyes",
        ),
        (True, "", "the check of risk rule 'wire' says the proposal needs a person"),
        (
            "the amount is over the vendor's limit",
            "ignored",
            "the amount is over the vendor's limit",
        ),
    ],
)
def test_a_check_that_says_pause_parks_with_a_reason_in_words(
    tmp_path: Path, answer: object, reason: str, why: str
) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(answer, reason), {"artifacts": {"doc": {"t": "old"}}}, task_key="k")
        assert r.status == "awaiting_approval"
        req = rt.pending_approval(r.run_id)
    assert req.rule == "wire"
    assert req.why == why


@pytest.mark.parametrize("answer", [False, None, ""])
def test_a_check_that_says_no_parks_nothing(tmp_path: Path, answer: object) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(answer, "r"), {"artifacts": {"doc": {"t": "old"}}}, task_key="k")
    assert r.status == "accepted", r.packet
