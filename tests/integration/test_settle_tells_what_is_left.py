"""An ordinary effect's settling rewrites what the escalated run says (settle54c): before, a
refund's settling rewrote its run's packet but an ordinary effect's did not, so after
`loopwright settle` the run's cause, summary and advice still said "once checked, settle
it: `loopwright settle …`", and `show`, the API and the run page kept telling the person
to do what they had just done. Now they say who settled it, done or not, and what is left
(roll back to before its cycle, resume), written in the settling's transaction. A refund
settled shows who settled it in the run page's Compensations list. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from support.dashboard import dashboard, run_page
from support.settle_cut import settle_cut_short
from test_pause_audit import _tok
from test_settle_refund_truth import COMP, _refund_in_doubt
from test_web_settle import _in_doubt

import loopwright as lw
from loopwright.cli import main

ASK = "loopwright settle"


def _op() -> dict[str, str]:
    return {"Authorization": f"Bearer {_tok('op')}"}


@pytest.mark.parametrize("done", [True, False])
def test_show_the_api_and_the_page_say_it_was_settled(
    url: str, done: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _in_doubt(url)
    with lw.Runtime(url) as rt:
        assert ASK in (rt.store.get_run(a).packet or {})["recommended_action"]
        rt.settle_effect(a, "pay:I6", done=done, by="op", note="bank checked")
        packet = rt.store.get_run(a).packet or {}
    said = f"pay (pay:I6) was settled {'done' if done else 'not done'} by op"
    for field in ("cause", "summary", "recommended_action"):
        assert ASK not in packet[field] and said in packet[field], field
    assert "roll the run back to before cycle 1 and resume it" in packet["cause"]
    assert f"`loopwright rollback {a[:12]} --to-cycle 0`" in packet["recommended_action"]
    assert "settle" not in packet["evidence"] and packet["evidence"]["settled"] == "pay:I6"
    effect = packet["evidence"]["effect"]
    assert effect["status"] == ("done" if done else "failed")
    assert effect["settled"] == {"by": "op", "done": done, "note": "bank checked"}
    assert main(["show", a, "--store", url]) == 0
    shown = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert ASK not in shown and f"next action {said}" in shown
    c = dashboard(url, identity="srv")
    got = c.get(f"/api/runs/{a}", headers=_op()).json()
    got.pop("events")  # (the history: it was in doubt, then settled)
    assert ASK not in str(got) and got["next_action"].startswith(said)
    assert got["run"]["stop_cause"] == packet["stop_cause"]
    page = run_page(c, a, token=_tok("op"), before="events")
    assert ASK not in page and said in page


def test_a_settling_cut_short_leaves_the_packet_as_it_was(url: str) -> None:
    a = _in_doubt(url)
    settle_cut_short(url, a, "pay:I6", done=False, by="op")
    with lw.Runtime(url) as rt:
        rt.settle_effect(a, "pay:I6", done=False, by="op")
        assert ASK not in (rt.store.get_run(a).packet or {})["recommended_action"]


@pytest.mark.parametrize("done", [True, False])
def test_the_compensations_list_says_who_settled_a_refund(url: str, done: bool) -> None:
    a = _refund_in_doubt(url)
    with lw.Runtime(url) as rt:
        rt.settle_effect(a, COMP, done=done, by="ops", note="provider checked")
    page = run_page(dashboard(url, identity="ana"), a, before="retries")
    status = "done" if done else "failed"
    said = "done" if done else "not done"
    assert f"(settled {said} by ops: provider checked)</li>" in page
    assert f"pay — {status}" in page
