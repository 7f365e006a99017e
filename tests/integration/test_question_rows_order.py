"""A cycle that asked a question is listed before its parked marker (polish52): the cycle
concludes ("asked") and parks for the answer, but its parking record is written first, so
``loopwright show`` and the run page listed "parked for approval: answered by ann" above the
question it answered. An approval's marker still precedes its cycle's row (that row is what
was applied once it was approved).

polish52b: a question's marker said "parked for approval: answered by ann" (no approval was
asked for): it says "parked for an answer"; the run page's question row said "question" only,
not the question's text as ``show`` does: it shows it, escaped."""

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


def _loop(asked: str = "which a?") -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            return lw.Proposal(question=lw.Question(asked))
        return lw.Proposal.edit("a", {"x": 2})

    done = lw.Check(fn=lambda s, p: lw.Verdict(passed=p.kind != "question", score=1.0))
    cap = lw.Contract(budget=lw.Budget(max_cycles=4))
    return lw.Loop(name="asks", actor=actor, verifiers=[done], contract=cap)


def _answered(url: str, asked: str = "which a?") -> str:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(asked), TASK, task_key="q")
        assert r.status == "awaiting_approval"
        rt.answer(r.run_id, "the first", by="ann")
        r = rt.resume_sync(r.run_id, _loop(asked))
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
        asked, parked = text.find('"which a?"'), text.find("parked for an answer: answered by ann")
        assert 0 <= asked < parked < text.find("accepted"), text
        assert "parked for approval" not in text, text


def test_the_run_page_lists_the_question_before_its_answer(url: str) -> None:
    run_id = _answered(url)
    c = TestClient(create_app(url, token=WEB.TOKEN), base_url=WEB.LOCAL)
    auth = {"Authorization": f"Bearer {WEB.TOKEN}"}
    rows: list[dict[str, Any]] = c.get(f"/api/runs/{run_id}", headers=auth).json()["timeline"]
    said = [(r["cycle"], r.get("decision"), r.get("outcome")) for r in rows]
    assert said == [(1, "asked", None), (1, None, "answered by ann"), (2, "accepted", None)]
    page = c.get(f"/runs/{run_id}", headers=auth).text.split("<h2>Timeline</h2>", 1)[1]
    row = page.find("<td>asked</td>")
    assert 0 <= row < page.find("parked for an answer: answered by ann")
    assert "parked for approval" not in page
    assert 0 <= page.find("which a?") < row  # the question's text, in its own row
    assert "which a?" in page.split("</table>", 1)[0]


def test_the_run_page_shows_a_question_escaped(url: str) -> None:
    run_id = _answered(url, asked="is <b>x</b> & y?")
    c = TestClient(create_app(url, token=WEB.TOKEN), base_url=WEB.LOCAL)
    auth = {"Authorization": f"Bearer {WEB.TOKEN}"}
    page = c.get(f"/runs/{run_id}", headers=auth).text
    assert "<b>x</b>" not in page
    table = page.split("<h2>Timeline</h2>", 1)[1].split("</table>", 1)[0]  # (not its card)
    assert "is &lt;b&gt;x&lt;/b&gt; &amp; y?" in table


def test_a_question_waiting_for_its_answer_says_so(url: str) -> None:
    """Its cycle never concluded yet: the row the write-ahead state makes says what it waits on
    (it said "parked for approval: not applied yet")."""
    with lw.Runtime(url) as rt:
        run_id = rt.run_sync(_loop(), TASK, task_key="q").run_id
    text = shown_text(url, run_id, every=True)[0].split("Timeline", 1)[1]
    assert "parked for an answer: not answered yet" in text and "for approval" not in text, text
    c = TestClient(create_app(url, token=WEB.TOKEN), base_url=WEB.LOCAL)
    auth = {"Authorization": f"Bearer {WEB.TOKEN}"}
    rows = c.get(f"/api/runs/{run_id}", headers=auth).json()["timeline"]
    assert [r.get("decision") for r in rows] == ["parked for an answer: not answered yet"]
