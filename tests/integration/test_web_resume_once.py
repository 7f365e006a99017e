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
from support.modules import load_sibling

import loopwright as lw
from loopwright.web import create_app

LOCAL = "http://127.0.0.1"
TOKEN = "server-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_helpers_resume_once")


def test_a_burst_of_resumes_starts_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id = _web().make_parked_run(tmp_path)
    go, calls = threading.Event(), []

    def held_resume(self: lw.Runtime, rid: str, loop: Any) -> None:
        calls.append(rid)
        assert go.wait(120)  # released by the test (a guard, not a timing)

    monkeypatch.setattr(lw.Runtime, "resume_sync", held_resume)
    c = TestClient(create_app(store, token=TOKEN, identity="oscar"), base_url=LOCAL)
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
