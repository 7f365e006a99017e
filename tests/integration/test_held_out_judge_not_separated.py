"""A held-out verdict counts as independent only where the judge's result lines are out of the
candidate's reach (stop 56). Where the worker keeps root (``isolation="none"`` run as root, an
interpreter ``nobody`` cannot read) or no boundary separates it from the judge
(``isolation="none"``), the candidate can write those lines: every test is self-reported, and
no refusal's ``not_judged`` mark holds (the candidate could have written it to take its failure
out of the count). Before, such a pass counted as an independent held-out pass in
``false_success_rate`` and ``verified_completion_rate`` (the layer said ``judge (worker keeps
root: not separated)`` and nothing read it), and a failure resting on a marked refusal was left
out of them."""

from __future__ import annotations

import os
from typing import Any

import pytest
from support.held_out import held_out_loop

import loopwright as lw
from loopwright._verdict import undecided_note
from loopwright.verifiers import _run_tests
from loopwright.verifiers.sandbox import run_tests

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the worker keeps root only as root")

RIGHT = "def add(a, b):\n    return a + b\n"
JUDGED = ["assert add(2, 3) == 5", "assert add(0, 0) == 0"]
LOOPED = "for x in range(3):\n    assert add(x, 0) == x"  # not of the judged form
UNISOLATED: dict[str, Any] = {"isolate": False, "allow_unisolated": True}
# A wrong candidate that writes the judge's result lines itself: a root worker with no boundary
# opens the judge's result pipe (fd 3: the judge's dup of its stdout) past the audit hook (a
# path relative to a ``dir_fd``), writes a pass for every test and the end, and kills the judge
# (``pidfd_send_signal`` raises no audit event) before it writes its own.
FORGER = r"""
import json, os, signal
def add(a, b):
    return 0
def _forge(n):
    judge = os.getppid()
    fd = os.open("proc/%d/fd/3" % judge, os.O_WRONLY, dir_fd=os.open("/", os.O_RDONLY))
    said = [json.dumps({"i": i, "passed": True}) for i in range(n)] + ['{"done": true}']
    os.write(fd, ("\n".join(said) + "\n").encode())
    signal.pidfd_send_signal(os.pidfd_open(judge), signal.SIGKILL)
_forge(2)
"""


def _run(
    url: str, tests: list[str], key: str, code: str = RIGHT, **options: Any
) -> tuple[Any, Any, Any]:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("program", {"code": code})

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    task = {"artifacts": {"program": {"code": ""}}, "held_out": {"tests": tests}}
    with lw.Runtime(url) as rt:
        r = rt.run_sync(held_out_loop(actor, visible, **options), task, task_key=key)
        rec = rt.store.get_run(r.run_id)
        [held] = [x["held_out"] for _s, _c, x in rt.store.iter_records(r.run_id) if x]
        m = lw.compute_metrics(rt.store)
    assert r.status == "accepted", r.packet
    return rec, held["hidden_tests"], m


def test_a_root_worker_without_a_boundary_self_reports_every_test() -> None:
    r = run_tests(RIGHT, JUDGED, isolate=False)
    assert r.passed and r.not_separated == "no boundary (isolation none), the worker keeps root"
    assert all(t.self_reported for t in r.tests), r.tests
    assert r.layers["verdict"] == (
        "self-reported: 2 of 2 tests (judge not separated: no boundary (isolation none), the "
        "worker keeps root)"
    )
    # a refusal's mark is the judge's line: the candidate's to write here
    (ok, refused) = run_tests(RIGHT, [JUDGED[0], LOOPED], isolate=False, judged_only=True).tests
    assert ok.passed and not refused.passed and not refused.not_judged


def test_a_root_worker_inside_a_boundary_self_reports_every_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An interpreter ``nobody`` cannot read: the worker keeps root inside the boundary."""
    monkeypatch.setattr(_run_tests, "nobody_ids", lambda python, boundary: None)
    r = run_tests(RIGHT, JUDGED)
    assert r.isolation != "none" and r.not_separated == "the worker keeps root", r.layers
    assert r.passed and all(t.self_reported for t in r.tests)


def test_a_separated_judge_decides_as_before() -> None:
    r = run_tests(RIGHT, JUDGED)
    assert r.isolation != "none" and r.not_separated == "" and r.layers["user"] == "nobody"
    assert r.layers["verdict"] == "judge" and not any(t.self_reported for t in r.tests)


def test_such_a_pass_is_not_counted_as_a_held_out_pass(url: str) -> None:
    rec, verdict, m = _run(url, JUDGED, "root", **UNISOLATED)
    # it read (True, 0): an independent pass, counted by both rates
    assert (rec.held_out_passed, rec.held_out_self_reported) == (True, 2)
    assert rec.held_out_independent is None
    assert verdict["evidence"]["self_reported"] == [0, 1]
    assert "the worker keeps root" in verdict["evidence"]["not_separated"]
    assert undecided_note(verdict) == (
        "2 of 2 tests self-reported: the judge was not separated from the candidate (no "
        "boundary (isolation none), the worker keeps root), which could have forged them"
    )
    assert m.basis["false_success_rate"] == (0, 0), m.basis
    assert m.basis["verified_completion_rate"] == (0, 0), m.basis
    assert m.held_out_self_reported == 1


def test_a_failure_on_a_refused_test_stays_a_failure(url: str) -> None:
    rec, verdict, m = _run(url, [JUDGED[0], LOOPED], "refused", judged_only=True, **UNISOLATED)
    # it read held_out_self_reported 1 (fail*: not counted); the mark was the judge's line,
    # which the candidate could have written
    assert (rec.held_out_passed, rec.held_out_self_reported) == (False, 0)
    assert rec.held_out_independent is False
    assert verdict["evidence"]["not_judged"] == []
    assert m.basis["false_success_rate"] == (1, 1), m.basis


def test_a_forged_pass_is_not_counted_as_a_held_out_pass(url: str) -> None:
    """Not a hypothetical: the candidate writes the judge's lines, and every test passes."""
    r = run_tests(FORGER, JUDGED, isolate=False)
    assert r.passed and r.status == "completed", r  # (the wrong candidate passed, "judged")
    assert all(t.self_reported for t in r.tests)
    rec, _verdict, m = _run(url, JUDGED, "forged", code=FORGER, **UNISOLATED)
    # it read (True, 0): an independent held-out pass of a wrong candidate, a verified
    # completion, and no false success
    assert (rec.held_out_passed, rec.held_out_self_reported) == (True, 2)
    assert rec.held_out_independent is None
    assert m.basis["verified_completion_rate"] == (0, 0), m.basis
    assert (m.held_out_pass_self_reported, m.held_out_fail_not_judged) == (1, 0)
