"""Settling an effect left in doubt over HTTP (settle54): ``loopwright settle`` had no API
route and no control on the run page, so an operator working from the dashboard saw IN DOUBT
and had no way to say what happened. ``POST /api/runs/{id}/effects/{key}/settle`` and the run
page's form, under the CLI's rules and words: an operator only (403, audited, before the body
is read), the run's own effect in doubt only (400, audited), a note with a control character
refused (400, audited), another body shape 422, a result for done only. SQLite and
PostgreSQL."""

from __future__ import annotations

import re
from typing import Any

from doc_loop import TASK
from support.dashboard import dashboard
from test_keyless_effect_failures import _paying
from test_pause_audit import _people, _tok

import loopwright as lw

SERVER = "server-token-0123456789"
LOCAL = "http://127.0.0.1"
PATH = "/api/runs/{}/effects/pay:I6/settle"


def _in_doubt(url: str) -> str:
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying([], ValueError), TASK, task_key="A")
    assert a.status == "escalated"
    _people(url)
    return a.run_id


def _bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {_tok(name)}"}


def _settles(url: str) -> list[tuple[str, str]]:
    with lw.Runtime(url) as rt:
        return [(a.actor, a.outcome) for a in rt.store.audit() if a.action == "settle_effect"]


def _entry(url: str, run_id: str) -> Any:
    with lw.Runtime(url) as rt:
        [entry] = rt.store.journal(run_id, kind="effect")
    return entry


def test_the_api_settles_under_the_cli_rules(url: str) -> None:
    run_id = _in_doubt(url)
    c = dashboard(url, token=SERVER, identity="srv")
    path = PATH.format(run_id)
    good = {"done": True, "result": {"id": "ch-9"}, "note": "bank shows ch-9"}
    # a viewer and an approver are refused before their body is read: 403, audited
    for name in ("rd", "ap"):
        assert c.post(path, json=good, headers=_bearer(name)).status_code == 403
    assert c.post(path, json=good).status_code == 401  # no token
    # what an operator sends, checked: another shape is 422; a note with an escape sequence,
    # or a result for "not done", 400 and audited
    for body in ({"done": "yes"}, {"done": 1}, {}, {"done": True, "reason": "x"}, [1]):
        r = c.post(path, json=body, headers=_bearer("op"))
        assert r.status_code == 422, (body, r.text)
    r = c.post(path, json={"done": True, "note": "ok\x1b[2J"}, headers=_bearer("op"))
    assert r.status_code == 400 and "note" in r.json()["detail"]
    r = c.post(path, json={"done": False, "result": {"id": "x"}}, headers=_bearer("op"))
    assert r.status_code == 400 and "done only" in r.json()["detail"]
    r = c.post(PATH.format(run_id).replace("pay:I6", "nope"), json=good, headers=_bearer("op"))
    assert r.status_code == 400 and "names no effect of the run; in doubt: pay" in r.text
    assert c.post(PATH.format("nope"), json=good, headers=_bearer("op")).status_code == 404
    assert _entry(url, run_id).status == "in_doubt"  # nothing refused touched it
    r = c.post(path, json=good, headers=_bearer("op"))
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["effect"]["status"] == "done" and got["effect"]["result"]
    assert got["message"].startswith(f"settled pay (pay:I6) as done for run {run_id[:12]} by op")
    assert "loopwright rollback" in got["message"]
    entry = _entry(url, run_id)
    assert entry.data["result"] == {"id": "ch-9"}
    assert entry.data["settled"] == {"by": "op", "done": True, "note": "bank shows ch-9"}
    # settled once: a second is refused, and says why
    r = c.post(path, json={"done": False}, headers=_bearer("op"))
    assert r.status_code == 400 and "is done, not in doubt" in r.text
    said = _settles(url)
    assert said.count(("rd", "refused")) == 1 and said.count(("ap", "refused")) == 1
    assert said.count(("op", "refused")) == 4  # the note, the result, "nope", the second
    assert said.count(("op", "allowed")) == 1


def test_the_run_page_settles_an_effect_in_doubt(url: str) -> None:
    run_id = _in_doubt(url)
    c = dashboard(url, token=SERVER, identity="srv")
    # a viewer signed in sees it is in doubt and who settles it, no form
    c.post("/login", data={"token": _tok("rd"), "next": "/"}, follow_redirects=False)
    page = c.get(f"/runs/{run_id}").text
    assert "IN DOUBT" in page and "an operator settles it" in page
    assert f'action="/runs/{run_id}/effects/settle"' not in page
    # one forged from the viewer's session (the page's token or not) is refused and audited
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf
    form = {"key": "pay:I6", "done": "no", "csrf": csrf.group(1)}
    assert c.post(f"/runs/{run_id}/effects/settle", data=form).status_code == 403
    assert _settles(url) == [("rd", "refused")]
    c.cookies.clear()
    c.post("/login", data={"token": _tok("op"), "next": "/"}, follow_redirects=False)
    page = c.get(f"/runs/{run_id}").text
    assert f'action="/runs/{run_id}/effects/settle"' in page
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m
    form = {"key": "pay:I6", "done": "yes", "result": "{not json", "csrf": m.group(1)}
    r = c.post(f"/runs/{run_id}/effects/settle", data=form)
    assert r.status_code == 400 and "is not JSON" in r.text
    form = {"key": "pay:I6", "done": "no", "csrf": "wrong"}
    assert c.post(f"/runs/{run_id}/effects/settle", data=form).status_code == 403
    form = {"key": "pay:I6", "done": "no", "note": "bank: nothing", "csrf": m.group(1)}
    r = c.post(f"/runs/{run_id}/effects/settle", data=form, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("#effects")
    shown = c.get(r.headers["location"]).text
    assert "settled pay (pay:I6) as not done" in shown
    assert "Settle: say whether it happened" not in shown  # settled: no form left
    entry = _entry(url, run_id)
    assert entry.status == "failed" and entry.data["settled"]["by"] == "op"
