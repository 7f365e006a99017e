"""What an operator met using the dashboard and CLI from outside (round 2's console test):
values no part can hold refused in one line, a run whose request was decided elsewhere
resumable from its page, errors as pages in a browser without the store's location, limits
beyond a database integer, and the demo's next steps naming its store."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from forkserver import run_cli
from support.modules import load_sibling

import loopwright as lw
from loopwright.store import open_store
from loopwright.web import create_app

WEB = load_sibling(__file__, "test_web.py", "_operator_web_helpers")
TOKEN, LOCAL = WEB.TOKEN, WEB.LOCAL
HTML = {"Accept": "text/html,application/xhtml+xml"}


@pytest.fixture
def parked(tmp_path: Path) -> tuple[str, str]:
    return WEB.make_parked_run(tmp_path)  # type: ignore[no-any-return]


def _client(store: str) -> tuple[TestClient, str]:
    c = TestClient(create_app(store, token=TOKEN, identity="ana"), base_url=LOCAL)
    return c, WEB._sign_in(c)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("loopwright"))
    return run_cli([exe, *args], dict(os.environ), timeout=None, cwd=cwd)  # (tests/forkserver.py)


def test_values_no_part_can_hold_are_refused_everywhere(parked: tuple[str, str]) -> None:
    store, run_id = parked
    with lw.Runtime(store) as rt:
        for bad in (float("nan"), float("inf"), {"x": float("-inf")}, {1, 2}, {"a": {1: "b"}}):
            with pytest.raises(lw.ConfigError, match="must be JSON"):
                rt.edit(run_id, "doc/a", bad, by="ana")
    c, csrf = _client(store)
    form = {"ref": "doc/a", "note": "", "csrf": csrf}
    for typed, said in (
        ("1e999", "out of range"),
        ("NaN", "not a JSON value"),
        ("-Infinity", "not a JSON value"),
        ("9" * 5000, "5,000 digits"),
    ):
        r = c.post(f"/runs/{run_id}/edit", data={**form, "value": typed})
        assert r.status_code == 400 and said in r.json()["detail"], (typed, r.text)
    r = c.post(f"/runs/{run_id}/edit", data={**form, "ref": "noslash", "value": "1"})
    assert r.status_code == 400 and "artifact/part" in r.json()["detail"]
    assert c.get(f"/api/runs/{run_id}").json()["edits"] == []  # nothing stored
    here = Path(store).parent
    for typed, said in (("1e999", "out of range"), ("NaN", "holds JSON"), ("x", "holds JSON")):
        p = _cli(
            "edit", run_id, "doc/a", "--value", typed, "--by", "ana", "--store", store, cwd=here
        )
        assert p.returncode == 2 and said in p.stderr and "Traceback" not in p.stderr, p.stderr
    # a JSON value for a JSON part goes through
    p = _cli("edit", run_id, "doc/a", "--value", "3", "--by", "ana", "--store", store, cwd=here)
    assert p.returncode == 0, p.stderr


def test_a_request_decided_elsewhere_leaves_the_run_resumable_from_its_page(
    parked: tuple[str, str],
) -> None:
    store, run_id = parked
    c, csrf = _client(store)
    page = c.get(f"/runs/{run_id}").text
    assert 'value="resume"' not in page  # a pending request: decide it first
    with lw.Runtime(store) as rt:
        rt.approve(run_id, by="bea")  # from the CLI or code, without resuming
    page = c.get(f"/runs/{run_id}").text
    assert 'value="resume"' in page
    assert "its request was decided; it waits to be resumed" in page
    assert "approved by bea elsewhere" in page
    r = c.post(
        f"/runs/{run_id}/act", data={"action": "resume", "csrf": csrf}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    WEB._wait_status(store, run_id, "accepted")


def test_a_denial_from_the_page_says_the_run_ends(parked: tuple[str, str]) -> None:
    store, run_id = parked
    c, csrf = _client(store)
    [a] = c.get(f"/api/approvals?run_id={run_id}").json()
    r = c.post(
        f"/approvals/{a['approval_id']}/decide",
        data={"action": "deny", "csrf": csrf},
        follow_redirects=False,
    )
    assert r.status_code == 303
    msg = re.sub(r"%20", " ", r.headers["location"])
    assert "ends escalated" in msg and "resuming" not in msg
    WEB._wait_status(store, run_id, "escalated")


def test_errors_are_pages_in_a_browser_and_never_name_the_store(
    parked: tuple[str, str],
) -> None:
    store, run_id = parked
    c, csrf = _client(store)
    r = c.get("/runs/nosuchrun", headers=HTML)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert 'id="refused-detail"' in r.text and "no run &#39;nosuchrun&#39; in this store" in r.text
    assert store not in r.text
    api = c.get("/api/runs/nosuchrun")
    assert api.status_code == 404 and store not in api.text
    assert api.json()["detail"] == "no run 'nosuchrun' in this store"
    r = c.get("/compare?a=x&b=y&c=z", headers=HTML)
    assert r.headers["content-type"].startswith("text/html")
    bad = c.post(f"/runs/{run_id}/rollback", data={"to_cycle": "abc", "csrf": csrf}, headers=HTML)
    assert bad.status_code == 400 and "to_cycle" in bad.text and "<html" in bad.text
    assert c.post(f"/runs/{run_id}/rollback", data={"to_cycle": "abc", "csrf": csrf}).json()[
        "detail"
    ]  # a script keeps the JSON detail
    assert c.get("/api/runs?limit=-5").status_code == 400
    assert c.get("/api/runs?limit=100000000000").status_code == 200


def test_limits_beyond_a_database_integer_and_days_before_1970(
    parked: tuple[str, str],
) -> None:
    store, _ = parked
    here = Path(store).parent
    p = _cli("runs", "--limit", "9" * 25, "--store", store, cwd=here)
    assert p.returncode == 0 and "damaged" not in p.stderr, p.stderr
    p = _cli("metrics", "--days", "99999999999999", "--store", store, cwd=here)
    assert p.returncode == 0 and "internal error" not in p.stderr, p.stderr
    p = _cli("audit", "--after", "9" * 25, "--store", store, cwd=here)
    assert p.returncode == 0 and "0 audit record(s)" in p.stdout, p.stderr


def test_the_demos_next_steps_work_as_printed_with_its_store(tmp_path: Path) -> None:
    store = str(tmp_path / "elsewhere" / "demo.db")
    (tmp_path / "elsewhere").mkdir()
    p = _cli("demo", "--store", store, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    steps = p.stdout.split("Try next", 1)[1].splitlines()[1:]
    # (each begins with the program as it is typed here: `loopwright`, or its path when PATH
    # does not find it, newuser52)
    commands = [line.strip().split("  ")[0] for line in steps if line.strip()]
    assert commands and all(f"--store {store}" in cmd for cmd in commands), commands
    assert all(cmd.split()[0].endswith("loopwright") for cmd in commands), commands
    for cmd in commands:
        if cmd.split()[1] in ("runs", "show", "approvals", "trace"):  # the read-only ones
            args = shlex.split(cmd)[1:]
            r = _cli(*args, cwd=tmp_path)  # from another directory: the store is named
            assert r.returncode == 0, (cmd, r.stderr)


def test_a_judged_candidate_that_was_never_applied_is_on_the_timeline(tmp_path: Path) -> None:
    """A run that stopped on a failed effect: the cycle that paid nothing is on the timeline
    with its proposal, verdicts and spend, marked not applied, and the header says whose
    held-out verdict it shows."""
    fx = load_sibling(__file__, "test_effects_engine.py", "_operator_fx_helpers")
    bank = fx.Payments()
    bank.failures = [ValueError("card declined")]
    pay = bank.effect(retry=fx.FAST)
    actor = fx.Script(fx.LOOK, fx.with_effects(fx.FIX_ALL, pay.call(invoice="A-1", amount=5.0)))
    store = str(tmp_path / "fx.db")
    with lw.Runtime(store) as rt:
        r = rt.run_sync(fx.make_loop(actor, [pay]), fx.TASK)
    assert r.status == "escalated"
    c = TestClient(create_app(store, token=TOKEN), base_url=LOCAL)
    rows = c.get(f"/api/runs/{r.run_id}").json()["timeline"]
    assert [(t["cycle"], t["unapplied"]) for t in rows] == [(1, False), (2, True)]
    assert rows[1]["decision"] == "not applied: its effects did not complete"
    assert [e["ref"] for e in rows[1]["edits"]] == ["doc/a", "doc/b", "doc/c"]
    assert rows[1]["effects"] == ["pay"] and rows[1]["visible"]
    page = c.get(f"/runs/{r.run_id}").text
    assert 'class="unapplied"' in page
    assert "not applied: its effects did not complete" in page
    # a cycle that never concluded is no place to roll back or fork to
    from loopwright.web._actions import _cycles

    assert _cycles(open_store(store), r.run_id) == [0, 1]


def test_a_denied_cycle_shows_what_was_denied(parked: tuple[str, str]) -> None:
    store, run_id = parked
    with lw.Runtime(store) as rt:
        rt.deny(run_id, by="bea")
        rt.resume_sync(run_id, lw.load_spec(Path(store).parent / "web.toml"))
    c = TestClient(create_app(store, token=TOKEN), base_url=LOCAL)
    rows = c.get(f"/api/runs/{run_id}").json()["timeline"]
    last, end = rows[-2], rows[-1]
    assert last["unapplied"]
    assert last["decision"] == "parked for approval: denied by bea, never applied"
    # then why the run ended inside it, at no further cost (review47c)
    assert (end["cycle"], end["ended_inside"]) == (last["cycle"], True)
    assert end["note"] == "approval denied by bea" and end["cost_usd"] == 0
    assert "doc/pay" in [e["ref"] for e in last["edits"]]  # the change the person denied
    page = c.get(f"/runs/{run_id}").text
    assert f"the verdict on cycle {last['cycle']}'s candidate, which was not applied" in page


def test_a_parked_cycle_approved_later_is_not_shown_as_unapplied(parked: tuple[str, str]) -> None:
    store, run_id = parked
    c = TestClient(create_app(store, token=TOKEN), base_url=LOCAL)
    [waiting] = [t for t in c.get(f"/api/runs/{run_id}").json()["timeline"] if t["unapplied"]]
    assert waiting["decision"] == "parked for approval: not applied yet"
    with lw.Runtime(store) as rt:
        rt.approve(run_id, by="bea")
        rt.resume_sync(run_id, lw.load_spec(Path(store).parent / "web.toml"))
    rows = c.get(f"/api/runs/{run_id}").json()["timeline"]
    assert not [t for t in rows if t["unapplied"]]
    n = waiting["cycle"]
    # the parked marker, then the cycle as it concluded: its spend counted once
    assert [(t["cycle"], t["parked"]) for t in rows if t["cycle"] == n] == [(n, True), (n, False)]


def test_bodies_and_store_failures_answer_in_one_line_without_the_location(
    parked: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id = parked
    c, csrf = _client(store)
    h = {"X-CSRF-Token": csrf, "Content-Type": "application/json"}
    url = f"/api/runs/{run_id}/parts/doc/a"
    for body in ("[" * 50_000, '{"value": NaN}', '{"value": 1e999}', "\xff"):
        r = c.post(url, content=body.encode("utf-8", "surrogateescape"), headers=h)
        assert r.status_code == 400 and "the body must be JSON" in r.json()["detail"], body[:9]
    r = c.post(f"/api/runs/{run_id}/rollback", content="[" * 50_000, headers=h)
    assert r.status_code == 400
    # A database that fails mid-decision: 503, and the driver's words (host, port) stay in the log
    app_store = c.app.state.store  # type: ignore[attr-defined]

    def down(*_: object, **__: object) -> None:
        raise lw.StoreUnavailableError(
            'postgresql://db.internal:5432/x: OperationalError: connection to server at "10.0.0.7"'
        )

    monkeypatch.setattr(app_store, "decide_approval", down)
    [a] = c.get(f"/api/approvals?run_id={run_id}").json()
    r = c.post(
        f"/api/approvals/{a['approval_id']}/approve", json={}, headers={"X-CSRF-Token": csrf}
    )
    assert r.status_code == 503, r.text
    assert "10.0.0.7" not in r.text and "db.internal" not in r.text


def test_a_filter_value_no_run_or_request_can_have_is_refused(parked: tuple[str, str]) -> None:
    """``/api/runs?status=acepted`` answered ``[]`` (200): read as "no such runs", where the
    CLI's ``runs --status`` refuses it naming the choices (newuser47)."""
    store, run_id = parked
    c, _ = _client(store)
    for url, field in (
        ("/api/runs?status=acepted", "status"),
        ("/api/runs?stop_reason=budget", "stop_reason"),
        ("/api/approvals?status=aproved", "status"),
        ("/?status=acepted", "status"),
    ):
        r = c.get(url)
        assert r.status_code == 400, (url, r.status_code)
        assert r.json()["detail"].startswith(f"{field}: must be one of "), r.text
    # the values there are, and none, still answer
    assert [x["run_id"] for x in c.get("/api/runs?status=awaiting_approval").json()] == [run_id]
    assert c.get("/api/runs?status=&stop_reason=").status_code == 200
    assert c.get("/api/runs?stop_reason=success").json() == []
    assert len(c.get("/api/approvals?status=pending").json()) == 1
    assert c.get("/api/approvals?status=expired").json() == []
