"""A refund's settling tells the truth, in one transaction, and what it refuses is audited
(settle54b). Before: the cancelled run's packet still listed the settled compensation
``in_doubt`` with "Undo by hand… settle…" advice (``show``, the dashboard and the API read the
packet); the payment's entries were written in transactions of their own ahead of the one
carrying the audit record (a cut between them: the payment recorded refunded, the refund in
doubt, no record of who); a result that is not strict JSON, or a key or note holding a NUL or
a lone surrogate, was refused before the role check with no record, and so were the API's
too-deeply-nested result and the form's result that is not JSON. SQLite and PostgreSQL."""

from __future__ import annotations

import re

import pytest
from support.dashboard import AUTH, dashboard, run_page
from support.settle_cut import settle_cut_short
from test_pause_audit import _tok
from test_refund_settlement import Refunds, refund_dies, settled
from test_web_settle import _in_doubt

import loopwright as lw
from loopwright.cli import main

COMP = "pay.compensate:pay:I6"


def _refund_in_doubt(url: str) -> str:
    a = refund_dies(url, settled(Refunds()), "after_effect_intent")
    with lw.Runtime(url) as rt:
        assert rt.resume_sync(a, settled(Refunds())).status == "cancelled"
        packet = rt.store.get_run(a).packet or {}
    [note] = [n for n in packet["compensations"] if n.get("key") == "pay:I6"]
    assert note["status"] == "in_doubt"
    assert f"loopwright settle {a[:12]} {COMP}" in packet["recommended_action"]
    return a


def _settles(url: str) -> list[tuple[str, str, str]]:
    with lw.Runtime(url) as rt:
        return [
            (r.actor, r.outcome, str(r.detail.get("reason", "")))
            for r in rt.store.audit()
            if r.action == "settle_effect"
        ]


@pytest.mark.parametrize("done", [True, False])
def test_the_packet_says_what_was_settled(
    url: str, done: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _refund_in_doubt(url)
    with lw.Runtime(url) as rt:
        rt.settle_effect(a, COMP, done=done, by="ops", note="provider checked")
        packet = rt.store.get_run(a).packet or {}
    [note] = [n for n in packet["compensations"] if n.get("key") == "pay:I6"]
    assert note["status"] == ("done" if done else "failed")
    assert note["settled"] == {"by": "ops", "done": done, "note": "provider checked"}
    advice = packet["recommended_action"]
    assert "loopwright settle" not in advice and "in_doubt" not in str(packet)
    if done:  # nothing left to undo by hand
        assert "Undo by hand" not in advice
    else:  # the payment stands: undone by hand, if it must be, and it says why
        assert "settled not done by ops" in advice and "Undo by hand" in advice
    # ...and so do `loopwright show`, the API and the run page, which read it
    assert main(["show", a, "--store", url]) == 0
    shown = capsys.readouterr().out
    assert "loopwright settle" not in shown and "in_doubt" not in shown
    c = dashboard(url, identity="ana")
    got = c.get(f"/api/runs/{a}", headers=AUTH).json()
    got.pop("events")  # (the history: it was in doubt, then settled)
    assert "loopwright settle" not in str(got)
    assert got["packet"]["compensations"] == packet["compensations"]
    assert not any(e["in_doubt"] or e["status"] == "in_doubt" for e in got["journal"])
    page = run_page(c, a, before="events")
    # (its waterfall and events, the history, still say the refund was once in doubt)
    assert "IN DOUBT" not in page and f"loopwright settle {a[:12]} {COMP}" not in page
    assert f"pay — {'done' if done else 'failed'}" in page


@pytest.mark.parametrize("done", [True, False])
def test_a_settling_cut_short_leaves_nothing_written(url: str, done: bool) -> None:
    a = _refund_in_doubt(url)
    # the audit record is the transaction's last write: the payment's entries, the refund's
    # and the packet are all before it
    settle_cut_short(url, a, COMP, done=done, by="ops")
    with lw.Runtime(url) as rt:
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "undoing"
        assert _settles(url) == []
        # settled again, it completes, with its record
        rt.settle_effect(a, COMP, done=done, by="ops")
        [orig] = rt.store.journal(a, key="effect:pay:I6")
        assert orig.status == ("compensated" if done else "done")
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == ("compensated" if done else "done")
    assert _settles(url) == [("ops", "allowed", "")]


def test_what_a_settling_refuses_is_audited_who_first(url: str) -> None:
    run_id = _in_doubt(url)  # (people: rd a viewer, op an operator)
    with lw.Runtime(url) as rt:
        # who before what: a viewer is refused for who they are, whatever they send
        with pytest.raises(lw.NotPermittedError):
            rt.settle_effect(run_id, "pay\x00", done=True, by="rd", result=float("nan"))
        for kw in (
            {"result": float("nan")},
            {"result": {1, 2}},
            {"note": "ok\ud800"},
            {"note": "a\x00b"},
        ):
            with pytest.raises(lw.ConfigError):
                rt.settle_effect(run_id, "pay:I6", done=True, by="op", **kw)
        with pytest.raises(lw.ConfigError):
            rt.settle_effect(run_id, "pay\x00", done=False, by="op")
        [entry] = rt.store.journal(run_id, kind="effect")
        assert entry.status == "in_doubt"
    said = _settles(url)
    assert [s[:2] for s in said] == [("rd", "refused")] + [("op", "refused")] * 5, said


def test_the_api_and_the_form_audit_what_they_refuse(url: str) -> None:
    run_id = _in_doubt(url)
    c = dashboard(url, identity="srv")
    path = f"/api/runs/{run_id}/effects/pay:I6/settle"
    deep = '{"done": true, "result": ' + "[" * 50_000 + "]" * 50_000 + "}"
    bearer = {"Authorization": f"Bearer {_tok('op')}", "Content-Type": "application/json"}
    r = c.post(path, content=deep, headers=bearer)
    assert r.status_code == 400 and "nested too deeply" in r.text
    assert c.post(path, content="{not json", headers=bearer).status_code == 400
    said = _settles(url)
    assert [s[:2] for s in said] == [("op", "refused")] * 2, said
    assert "nested too deeply" in said[0][2]
    # a session without X-CSRF-Token: refused and audited as forged, under the person's name
    c.post("/login", data={"token": _tok("op"), "next": "/"}, follow_redirects=False)
    r = c.post(path, json={"done": False})
    assert r.status_code == 403 and "X-CSRF-Token" in r.text
    with lw.Runtime(url) as rt:
        forged = [
            x
            for x in rt.store.audit()
            if x.actor == "op" and "CSRF" in str(x.detail) and "effects/pay:I6/settle" in x.target
        ]
        assert len(forged) == 1, [(x.actor, x.action, x.target, x.detail) for x in rt.store.audit()]
        [entry] = rt.store.journal(run_id, kind="effect")
        assert entry.status == "in_doubt"
    # the form: a result that is not JSON is audited; its box takes several lines
    page = c.get(f"/runs/{run_id}").text
    assert re.search(r'<textarea name="result"', page)
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m
    form = {"key": "pay:I6", "done": "yes", "result": "{not json", "csrf": m.group(1)}
    r = c.post(f"/runs/{run_id}/effects/settle", data=form)
    assert r.status_code == 400 and "is not JSON" in r.text
    assert [s[:2] for s in _settles(url)] == [("op", "refused")] * 3
    many = '{\n  "id": "ch-9",\n  "lines": [1,\n 2]\n}'
    form = {"key": "pay:I6", "done": "yes", "result": many, "csrf": m.group(1)}
    r = c.post(f"/runs/{run_id}/effects/settle", data=form, follow_redirects=False)
    assert r.status_code == 303, r.text
    with lw.Runtime(url) as rt:
        [entry] = rt.store.journal(run_id, kind="effect")
    assert entry.status == "done" and entry.data["result"] == {"id": "ch-9", "lines": [1, 2]}
