"""A held-out pass that rests on tests the candidate's own process decided (stop 54's
``self_reported``) is said where a person reads the held-out verdict (sandbox54b): the run's
``loopwright show`` (its held-out row and timeline column) and the dashboard's run page. It
read "pass", as a pass the judge decided does; nothing of it reaches the actor (invariant 3,
``test_heldout_spy.py``; this only renders what the store holds)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from support.dashboard import dashboard
from support.held_out import held_out_loop
from support.printed import TextSink

import loopwright as lw
from loopwright.cli import _app

NOTE = "1 of 2 tests self-reported: the candidate could have forged them"
# The second test is not of the judged form (a loop): the candidate's process decides it.
HELD_OUT = ["assert add(2, 3) == 5", "for x in range(3):\n    assert add(x, 0) == x"]
RIGHT = "def add(a, b):\n    return a + b\n"


def _run(tmp_path: Path, *, escalate: bool = False) -> tuple[str, str, list[str]]:
    seen: list[str] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(repr(ctx))
        return lw.Proposal.edit("program", {"code": RIGHT})

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=not escalate, score=0.5 if escalate else 1.0)

    loop = held_out_loop(actor, visible)
    task: dict[str, Any] = {
        "artifacts": {"program": {"code": "def add(a, b):\n    return 0\n"}},
        "held_out": {"tests": HELD_OUT},
    }
    url = f"sqlite:///{tmp_path / 's.db'}?durability=process"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, task, task_key="K")
    assert r.held_out_passed is True
    return url, r.run_id, seen


def _show(url: str, run_id: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # (a note on one line)
    sink, old = TextSink(), sys.stdout
    sys.stdout = sink
    try:
        _app.show(run_id, store=url, as_json=False, all_=True)
    finally:
        sys.stdout = old
    return "".join(sink.parts)


def test_show_says_a_held_out_pass_rests_on_self_reported_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, run_id, seen = _run(tmp_path)
    out = _show(url, run_id, monkeypatch)
    timeline = out.split("Timeline", 1)[1]
    assert f"hidden_tests 1.00 ({NOTE})" in timeline, out
    assert not any("self-reported" in s for s in seen)  # (the actor's contexts)


def test_an_ended_runs_held_out_row_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run that ended without acceptance keeps its held-out verdicts in its packet
    url, run_id, _ = _run(tmp_path, escalate=True)
    out = _show(url, run_id, monkeypatch)
    [row] = [x.strip("│ ") for x in out.splitlines() if x.strip("│ ").startswith("held-out ")]
    assert row.split(None, 1)[1] == f"pass (hidden_tests: {NOTE})", row


def test_the_run_page_says_so(tmp_path: Path) -> None:

    url, run_id, _ = _run(tmp_path)
    token = "test-token-0123456789"
    c = dashboard(url, token=token)
    c.headers["Authorization"] = f"Bearer {token}"
    page = c.get(f"/runs/{run_id}").text
    assert (
        f'<span class="pass">pass</span> <span class="warn">(hidden_tests: {NOTE})</span>' in page
    )
    assert page.count(f"({NOTE})") == 1  # the timeline's held-out cell
