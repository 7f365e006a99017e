"""A proposal refused for touching accepted work is not labelled a repeat (outside51a).

The engine records such a cycle ``duplicate`` (it counts as a cycle without progress, as a
repeat does) with the decision ``refused``. ``loopwright show`` and the dashboard's run page
printed "(repeat)" beside it, so an outside user whose actor wrote a new value to a part the
checks had accepted (no finding named it) read that the duplicate check had misfired: each
proposal was new. A refused cycle now says it touched accepted work; a repeat still says
"(repeat)".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from support.dashboard import dashboard
from support.printed import TextSink

import loopwright as lw
from loopwright.cli import _app


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        # cycle 1 writes a (the check names only a: b is accepted after it); cycle 2 writes
        # b, accepted: refused; cycle 3 sends cycle 1's proposal again: a repeat
        return lw.Proposal.edit("doc", {"a": "x"} if ctx.cycle != 2 else {"b": "new"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("wrong", "doc", "a"),))

    return lw.Loop(
        name="touches",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


def _run(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 's.db'}?durability=process"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), {"artifacts": {"doc": {"a": "", "b": ""}}}, task_key="K")
        recs = {
            c.record["cycle"]: c.record
            for c in rt.store.checkpoints(r.run_id)
            if c.record and "proposal" in c.record
        }
    assert r.cycles == 3
    # the engine's record, as the label reads it
    assert (recs[2]["decision"], recs[2]["duplicate"]) == ("refused", True)
    assert (recs[3]["decision"], recs[3]["duplicate"]) == ("revise", True)
    return url, r.run_id


def _blocks(text: str) -> dict[int, str]:
    body = text.split("Timeline", 1)[1].split("\nArtifacts", 1)[0]
    return {int(b.split()[1]): b for b in re.split(r"\n(?=cycle \d+ )", body)[1:]}


def test_show_says_a_refused_cycle_touched_accepted_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    url, run_id = _run(tmp_path)
    sink, old = TextSink(), sys.stdout
    sys.stdout = sink
    try:
        _app.show(run_id, store=url, as_json=False, all_=True)
    finally:
        sys.stdout = old
    rows = _blocks("".join(sink.parts))
    assert "(repeat)" not in rows[2] and "touches accepted work" in rows[2]
    assert "(repeat)" in rows[3] and "touches accepted" not in rows[3]
    assert "(repeat)" not in rows[1] and "touches accepted" not in rows[1]


def test_the_run_page_says_a_refused_cycle_touched_accepted_work(tmp_path: Path) -> None:

    url, run_id = _run(tmp_path)
    token = "test-token-0123456789"
    c = dashboard(url, token=token)
    c.headers["Authorization"] = f"Bearer {token}"
    page = c.get(f"/runs/{run_id}").text
    assert page.count("(repeat)") == 1  # cycle 3's
    assert page.count("(touches accepted work)") == 1  # cycle 2's
