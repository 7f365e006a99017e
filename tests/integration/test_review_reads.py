"""Review of the long-run read paths (run page window, fork/rollback by cycle, metrics in
one pass): each test here failed on the tree it was written against."""

from __future__ import annotations

import re

import pytest

import loopwright as lw

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from loopwright.web import _app, create_app

TOKEN = "t" * 32
LOCAL = "http://127.0.0.1"


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"p": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "p"),))

    return lw.Loop(
        name="review",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _run(db: str, cycles: int) -> str:
    with lw.Runtime(db) as rt:
        task = {"goal": "g", "artifacts": {"doc": {"p": ""}}}
        return rt.run_sync(_loop(cycles), task, task_key="k").run_id


def test_a_windowed_run_page_says_where_every_cycle_is(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run longer than the page's window: the timeline's note was cut after "of N;" (its
    paragraph never closed, no link), though docs/ui.md says it links to the API."""
    db = str(tmp_path / "w.db")  # type: ignore[operator]
    rid = _run(db, 12)
    monkeypatch.setattr(_app, "CHECKPOINTS_READ", 5)
    monkeypatch.setattr(_app, "CYCLES_SHOWN", 3)
    page = TestClient(create_app(db, token=TOKEN), base_url=LOCAL).get(f"/runs/{rid}").text
    note = page.split("<h2>Timeline</h2>", 1)[1].split("<table", 1)[0]
    assert re.search(r"The last 3 cycles of 12; every one in <a href=\"/api/runs/", note), note
    assert note.strip().endswith("</p>"), note
