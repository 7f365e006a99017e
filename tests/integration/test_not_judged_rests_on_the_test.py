"""A test ``judged_only`` refuses is marked ``not_judged`` only when the refusal rests on the
test itself (not of the judged form, whoever the candidate is), never on what the candidate
did (stop 56). A held-out failure resting on marked tests alone is not counted (stop 55:
nothing decided it), so the mark must not be the candidate's to set. Before, it was: a
candidate that bound the function under test where no parser sees it (``exec("def f…")``) or
answered a value that is not plain data (an ``int`` subclass) had its tests refused and
marked, and its held-out failure — every test wrong — left ``false_success_rate``."""

from __future__ import annotations

from support.held_out import held_out_loop

import loopwright as lw
from loopwright.verifiers.sandbox import run_tests

LOOPED = "for x in range(3):\n    assert add(x, 0) == x"  # not of the judged form
EXEC_WRONG = 'exec("def add(a, b):\\n    return 4\\n")\n'


def test_a_refusal_the_candidate_caused_is_its_failure() -> None:
    r = run_tests(EXEC_WRONG, ["assert add(2, 3) == 5", LOOPED], judged_only=True)
    mine, form = r.tests
    assert not mine.passed and not mine.not_judged and not mine.self_reported, mine
    assert "the candidate's doing" in (mine.error or ""), mine
    assert not form.passed and form.not_judged, form  # (the test's form: whoever wrote it)
    fake = "class Fake(int):\n    pass\ndef add(a, b):\n    return Fake(a + b)\n"
    (t,) = run_tests(fake, ["assert add(2, 3) == 5"], judged_only=True).tests
    assert not t.passed and not t.not_judged and t.error.startswith("not judged: a value"), t


def test_a_candidate_cannot_hide_its_held_out_failure(url: str) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("program", {"code": EXEC_WRONG})

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    task = {
        "artifacts": {"program": {"code": ""}},
        "held_out": {"tests": ["assert add(2, 3) == 5"]},
    }
    with lw.Runtime(url) as rt:
        r = rt.run_sync(held_out_loop(actor, visible, judged_only=True), task, task_key="hide")
        rec = rt.store.get_run(r.run_id)
        m = lw.compute_metrics(rt.store)
    assert r.status == "accepted", r.packet
    # a false success, counted (it read held_out_self_reported 1: not independent)
    assert (rec.held_out_passed, rec.held_out_self_reported) == (False, 0)
    assert rec.held_out_independent is False
    assert m.basis["false_success_rate"] == (1, 1), m.basis
    assert m.held_out_self_reported == 0
