"""An approval request's one-line description shows each effect argument cut to 200 characters
(names48): a 5,000-character memo was repeated whole in the card's heading, `loopwright
approvals`, `show` and the API's ``what``, and pushed "already done by run X" a screen down,
where the card's argument table cut it at 2,000. The whole arguments stay in the request's
evidence (the table, the API), and what a person approves is bound to them, not to the text.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from support.dashboard import dashboard
from test_approval_card_done_already import _loop
from test_approval_card_reuse_listed import _cli, _words

import loopwright as lw

MEMO = "memo " + "m" * 4995  # 5,000 characters
CUT = "… (5,000 characters)"


TASK = {"artifacts": {"inv": {"status": "open"}}}


def test_a_long_argument_is_cut_in_the_heading_and_whole_in_the_evidence(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    paid: list[str] = []
    loop = _loop(paid, "I9", memo=MEMO)
    with lw.Runtime(store) as rt:
        a = rt.run_sync(loop, TASK, task_key="A")
        rt.approve(a.run_id, by="ann")
        assert rt.resume_sync(a.run_id, loop).accepted and paid == ["I9"]
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        [req] = rt.store.approvals(run_id=b, status="pending")
    done = f"already done by run {a.run_id[:12]} under its key"
    # before: the heading held the memo whole (5,000 characters) before the note
    assert CUT in req.what and done in req.what and len(req.what) < 600, len(req.what)
    assert req.what.index(done) < 400
    assert req.evidence["effects"][0]["args"]["memo"] == MEMO  # the arguments stay whole
    for words in (_words(_cli(store, "approvals")), _words(_cli(store, "show", b))):
        assert CUT in words and done in words and words.count("m") < 400, words[:400]
    c = dashboard(store, token="memo-token-0123456789")
    page = c.post("/login", data={"token": "memo-token-0123456789", "next": "/approvals"}).text
    card = r'<section class="card pending"[^>]*>\s*<h2>(.*?)</h2>'
    [heading] = [html.unescape(h) for h in re.findall(card, page, flags=re.S)]
    assert CUT in heading and done in heading, heading[:400]
    cells = [html.unescape(x) for x in re.findall(r"<td><code>(.*?)</code></td>", page, re.S)]
    assert MEMO[:1999] + "…" in cells  # the argument table, as before
    [api] = c.get("/api/approvals").json()
    assert api["what"] == req.what
    doc = c.get(f"/api/runs/{b}").json()
    [whole] = [x for x in doc["approvals"] if x["approval_id"] == req.approval_id]
    assert whole["evidence"]["effects"][0]["args"]["memo"] == MEMO
    with lw.Runtime(store) as rt:  # approving it reuses A's payment: nothing paid again
        rt.approve(b, by="ann")
        assert rt.resume_sync(b, loop).accepted and paid == ["I9"]


def test_two_calls_read_alike_in_the_heading_are_two_actions(tmp_path: Path) -> None:
    """The description is cut, the binding is not: memos that differ past the cut read alike
    in the heading, and each request is bound to its own call."""
    paid: list[str] = []
    one, two = "x" * 300 + "ONE", "x" * 300 + "TWO"
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        reqs = []
        for memo, invoice in ((one, "I1"), (two, "I2")):
            run = rt.run_sync(_loop(paid, invoice, memo=memo), TASK, task_key=invoice)
            [req] = rt.store.approvals(run_id=run.run_id, status="pending")
            reqs.append(req)
        a, b = reqs
        said = "memo='" + "x" * 198 + "… (303 characters)"
        assert said in a.what and said in b.what
        assert a.what.replace("I1", "I2") == b.what
        assert a.evidence["needs"][0]["call"] != b.evidence["needs"][0]["call"]
