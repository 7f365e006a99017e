"""A run this server already resumes is not resumed again in another thread (web50b).

``POST /api/runs/ID/resume`` (or a decision that resumes) started a thread each time: the
run's lease refused all but one, but a burst of requests spawned that many threads. Now a
second ask while this server's resume of the run is alive starts none and says so; the thread
under way goes round once more when it ends if the run still waits to go on, so an ask that
came as it finished is not lost. The resume is a stand-in blocked on an Event the test holds:
nothing here depends on timing."""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.dashboard import dashboard
from support.modules import load_sibling

import loopwright as lw
from loopwright.web import create_app

LOCAL = "http://127.0.0.1"
TOKEN = "server-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_helpers_resume_once")


def _hold_resumes(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[str]]:
    """Resumes as a stand-in held until the Event is set; the runs it was called for."""
    go, calls = threading.Event(), []

    def held_resume(self: lw.Runtime, rid: str, loop: Any) -> None:
        calls.append(rid)
        assert go.wait(120)  # released by the test (a guard, not a timing)

    monkeypatch.setattr(lw.Runtime, "resume_sync", held_resume)
    return go, calls


def test_a_burst_of_resumes_starts_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id = _web().make_parked_run(tmp_path)
    go, calls = _hold_resumes(monkeypatch)
    c = dashboard(store, token=TOKEN, identity="oscar")
    resumes: list[threading.Thread] = c.app.state.resumes  # type: ignore[attr-defined]
    with lw.Runtime(store) as rt:
        aid = rt.pending_approval(run_id).approval_id
    r = c.post(f"/api/approvals/{aid}/approve", json={}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["resume"] == "the run is resuming"
    try:
        for _ in range(5):
            r = c.post(f"/api/runs/{run_id}/resume", json={}, headers=AUTH)
            assert r.status_code == 200, r.text
            assert "already resuming on this server" in r.json()["message"]
        assert len([t for t in resumes if t.is_alive()]) == 1
    finally:
        go.set()
        for t in list(resumes):
            t.join(120)
    # the ones asked while it ran: one more round, the run still waiting to go on
    assert calls == [run_id, run_id]
    assert c.app.state.resuming == {}  # type: ignore[attr-defined]
    r = c.post(f"/api/runs/{run_id}/resume", json={}, headers=AUTH)
    assert "the run is resuming" in r.json()["message"]  # a new ask starts a thread again
    for t in list(resumes):
        t.join(120)
    assert calls == [run_id] * 3


def test_the_runs_resumed_at_once_are_bounded_server_wide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One resume thread per run, but no bound over runs: a signed-in operator could start as
    many reruns with ``start: true`` as they liked, each a thread running a loop. With
    ``max_resumes=2`` and two resumes held, a third rerun is 503 with ``Retry-After`` before its
    fork is made, audited once (the rest counted); a decision is made and its run not resumed.
    """
    store, run_id = _web().make_parked_run(tmp_path)
    go, calls = _hold_resumes(monkeypatch)
    app = create_app(store, token=TOKEN, identity="oscar", max_resumes=2)
    c = TestClient(app, base_url=LOCAL)
    resumes: list[threading.Thread] = app.state.resumes
    rerun = {"at_cycle": 0, "contract": {}, "start": True}
    try:
        for _ in range(2):
            r = c.post(f"/api/runs/{run_id}/rerun", json=rerun, headers=AUTH)
            assert r.status_code == 200 and "the run is resuming" in r.json()["message"], r.text
        with lw.Runtime(store) as rt:
            runs = len(rt.store.list_runs())
            before = len(rt.store.audit())
        for _ in range(3):
            r = c.post(f"/api/runs/{run_id}/rerun", json=rerun, headers=AUTH)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "30"
            assert "as many runs as it may at once (2," in r.json()["detail"]
        r = c.post(f"/api/runs/{run_id}/resume", json={}, headers=AUTH)
        assert r.status_code == 503, r.text
        with lw.Runtime(store) as rt:
            assert len(rt.store.list_runs()) == runs  # no fork made
            new = rt.store.audit()[before:]
            aid = rt.pending_approval(run_id).approval_id
        assert [(a.actor, a.action, a.outcome) for a in new] == [("oscar", "resume", "refused")]
        r = c.post(f"/api/approvals/{aid}/approve", json={}, headers=AUTH)
        assert r.status_code == 200, r.text  # the decision is made; no third thread
        assert r.json()["resume"].startswith("not resumed: this server resumes as many")
        assert len([t for t in resumes if t.is_alive()]) == 2
    finally:
        go.set()
        for t in list(resumes):
            t.join(120)
    assert len(calls) == 2
    app.state.resumes_refused.flush()  # as the server's stop does: the 3 counted recorded
    with lw.Runtime(store) as rt:
        last = rt.store.audit()[-1]
    assert (last.actor, last.outcome, last.detail.get("counted")) == ("oscar", "refused", 3)
    assert "resume a rerun's new run: 2" in last.detail["reason"]  # each kind named
    assert f"resume run {run_id}: 1" in last.detail["reason"]


def test_a_rerun_whose_start_fails_after_its_fork_names_the_run_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun with ``start`` makes its fork, then audits the start: where that fails (here the
    store, at the audit's write) the fork exists, and the error said only "the store failed",
    so a person retried and made a second fork. The error names the run made."""
    from loopwright.web import _actions

    store, run_id = _web().make_parked_run(tmp_path)
    go, calls = _hold_resumes(monkeypatch)
    real = _actions.operate

    def failing(store: Any, who: Any, action: str, target: str, **kw: Any) -> None:
        if action == "resume":
            raise lw.StoreUnavailableError("the database went away")
        real(store, who, action, target, **kw)

    monkeypatch.setattr(_actions, "operate", failing)
    c = dashboard(store, token=TOKEN, identity="oscar")
    with lw.Runtime(store) as rt:
        before = {r.run_id for r in rt.store.list_runs()}
    rerun = {"at_cycle": 0, "contract": {}, "start": True}
    try:
        r = c.post(f"/api/runs/{run_id}/rerun", json=rerun, headers=AUTH)
    finally:
        go.set()
    assert r.status_code == 503, r.text
    with lw.Runtime(store) as rt:
        made = {r.run_id for r in rt.store.list_runs()} - before
    assert len(made) == 1  # the fork was made before the step that failed
    (new,) = made
    detail = r.json()["detail"]
    assert f"run {new} " in detail and "resume it" in detail, detail
    assert calls == []  # not started
    monkeypatch.setattr(_actions, "operate", real)
    r = c.post(f"/api/runs/{new}/resume", json={}, headers=AUTH)  # what the error says to do
    assert r.status_code == 200, r.text
    for t in list(c.app.state.resumes):  # type: ignore[attr-defined]
        t.join(120)
    assert calls == [new]
