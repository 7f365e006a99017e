"""A cycle that asked a question is listed before its parked marker (polish52): the cycle
concludes ("asked") and parks for the answer, but its parking record is written first, so
``loopwright show`` and the run page listed "parked for approval: answered by ann" above the
question it answered. An approval's marker still precedes its cycle's row (that row is what
was applied once it was approved)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.modules import load_sibling
from support.printed import shown_text

import loopwright as lw
from loopwright.web import create_app

WEB = load_sibling(__file__, "test_web.py", "_question_order_web_helpers")
TASK = {"artifacts": {"a": {"x": 1}}}


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            return lw.Proposal(question=lw.Question("which a?"))
        return lw.Proposal.edit("a", {"x": 2})

    done = lw.Check(fn=lambda s, p: lw.Verdict(passed=p.kind != "question", score=1.0))
    cap = lw.Contract(budget=lw.Budget(max_cycles=4))
    return lw.Loop(name="asks", actor=actor, verifiers=[done], contract=cap)


def _answered(url: str) -> str:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="q")
        assert r.status == "awaiting_approval"
        rt.answer(r.run_id, "the first", by="ann")
        r = rt.resume_sync(r.run_id, _loop())
        assert r.status == "accepted"
        return r.run_id


@pytest.mark.parametrize("columns", ["80", "160"])  # a block per cycle; a table
def test_show_lists_the_question_before_its_answer(
    url: str, columns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    run_id = _answered(url)
    for every in (True, False):  # every cycle, and the default window
        text = shown_text(url, run_id, every=every)[0].split("Timeline", 1)[1]
        asked, parked = text.find('"which a?"'), text.find("parked for approval: answered by ann")
        assert 0 <= asked < parked < text.find("accepted"), text


def test_the_run_page_lists_the_question_before_its_answer(url: str) -> None:
    run_id = _answered(url)
    c = TestClient(create_app(url, token=WEB.TOKEN), base_url=WEB.LOCAL)
    auth = {"Authorization": f"Bearer {WEB.TOKEN}"}
    rows: list[dict[str, Any]] = c.get(f"/api/runs/{run_id}", headers=auth).json()["timeline"]
    said = [(r["cycle"], r.get("decision"), r.get("outcome")) for r in rows]
    assert said == [(1, "asked", None), (1, None, "answered by ann"), (2, "accepted", None)]
    page = c.get(f"/runs/{run_id}", headers=auth).text.split("<h2>Timeline</h2>", 1)[1]
    assert 0 <= page.find("<td>asked</td>") < page.find("parked for approval: answered by ann")
