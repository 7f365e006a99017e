"""`loopwright check` asks whether a loop's progress is checked independently: a held-out
sandbox check that lets the candidate's own process decide the tests the judge cannot
(``judged_only = false``, the default) is not wholly independent, and it says so (sandbox54b)."""

from __future__ import annotations

from typing import Any

import loopwright as lw
from loopwright.cli._check import review
from loopwright.verifiers import CommandVerifier

QUESTION = "Can the candidate decide its own held-out tests?"


def _answers(options: dict[str, Any] | None = None, **held: bool) -> dict[str, dict[str, str]]:
    checks = [lw.Check(fn=CommandVerifier(), name="visible_tests")]
    for name, judged_only in held.items():
        fn = CommandVerifier(tests_key="held_out.tests", judged_only=judged_only, **(options or {}))
        checks.append(lw.Check(fn=fn, name=name, held_out=True))
    loop = lw.Loop(
        name="sbx",
        actor=lambda ctx: lw.Proposal(),
        verifiers=checks,
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    return {a["question"]: a for a in review(loop)}


def test_a_held_out_check_that_takes_self_reported_verdicts_is_a_warning() -> None:
    found = _answers(hidden=False, judged=True)[QUESTION]
    assert found["status"] == "warn"
    assert found["answer"].startswith("yes, where a test is not of the judged form: hidden run")
    assert "judged_only = true" in found["answer"]


def test_judged_only_held_out_checks_leave_no_question() -> None:
    answers = _answers(judged=True)
    assert QUESTION not in answers
    assert answers["How is progress checked independently?"]["status"] == "ok"
    # (a visible check's self-reported tests are the actor's to see: not asked)
    assert QUESTION not in _answers()


def test_a_held_out_check_whose_judge_the_candidate_reaches_is_a_warning() -> None:
    """No boundary (``isolate=False``): every test is self-reported, judged_only or not (stop
    56); ``check`` said nothing of a judged_only check run so."""
    unisolated = {"isolate": False, "allow_unisolated": True}
    found = _answers(unisolated, judged=True)[QUESTION]
    assert found["status"] == "warn"
    assert found["answer"].startswith(
        "yes, every test of judged: its judge is not separated from the candidate (no "
        "boundary (isolation none)"
    ), found
