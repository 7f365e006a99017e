"""The dashboard's actions on a long run read what they answer with, not the run's log: an
edit's reply (the version it made) read every event of the run to keep its last ``edited``
one, twice: 410 and 4,010 events decoded at 50 and 500 cycles, 2 now —, and a resume asked whether a
request was pending by reading the run's every request."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support.dashboard import dashboard
from support.long_loops import rejecting_loop
from test_rollback_journal_reads import _paying_loop

import loopwright as lw
from loopwright.store import _base, _sql_core, _sql_reads

TOKEN = "test-token-0123456789"
LOCAL = "http://127.0.0.1"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


class _CountedEvent(_base.Event):
    made: ClassVar[list[int]] = [0]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _CountedEvent.made[0] += 1
        super().__init__(*args, **kwargs)


def test_an_edit_from_the_api_reads_its_own_event_not_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: dict[int, int] = {}
    for cycles in (50, 500):
        store = str(tmp_path / f"w{cycles}.db")
        with lw.Runtime(store) as rt:
            r = rt.run_sync(
                rejecting_loop(cycles, lambda n: {"p0": f"{n}"}),
                {"artifacts": {"doc": {}}},
                task_key="w",
            )
            assert r.cycles == cycles
        c = dashboard(store, token=TOKEN, identity="ana")
        url = f"/api/runs/{r.run_id}/parts/doc/p0"
        first = c.post(url, json={"value": "by hand"}, headers=BEARER)  # warm
        assert first.status_code == 200, first.text
        with monkeypatch.context() as m:
            m.setattr(_sql_reads, "Event", _CountedEvent)
            _CountedEvent.made[0] = 0
            resp = c.post(url, json={"value": "by hand again"}, headers=BEARER)
            decoded[cycles] = _CountedEvent.made[0]
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["edit"]["by"] == "ana" and body["edit"]["part"] == "doc/p0"
        assert body["edit"]["version"] == cycles + 2, body["edit"]
        assert f"(version {cycles + 2}, accepted)" in body["message"]
    assert decoded == {50: 2, 500: 2}, decoded


class _CountedApproval(_base.Approval):
    made: ClassVar[list[int]] = [0]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _CountedApproval.made[0] += 1
        super().__init__(*args, **kwargs)


def test_a_resume_from_the_api_reads_the_pending_requests_not_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run parked on its request, after a cycle's request each cycle decided: the resume is
    refused (decide first), reading the pending request, not the run's every one (10 and 40
    requests decoded at 10 and 40 cycles before)."""
    asking = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="require", name="p"),))
    decoded: dict[int, int] = {}
    for cycles in (10, 40):
        store = str(tmp_path / f"a{cycles}.db")
        loop = dataclasses.replace(_paying_loop(cycles + 1), approvals=asking)
        with lw.Runtime(store) as rt:
            r = rt.run_sync(loop, {"artifacts": {"doc": {}}}, task_key="w")
            for _ in range(cycles - 1):
                rt.approve(r.run_id, by="ann")
                r = rt.resume_sync(r.run_id, loop)
            assert r.status == "awaiting_approval"
            assert len(rt.store.approvals(run_id=r.run_id)) == cycles
        c = dashboard(store, token=TOKEN, identity="ana")
        url = f"/api/runs/{r.run_id}/resume"
        assert c.post(url, headers=BEARER).status_code == 409  # warm
        with monkeypatch.context() as m:
            m.setattr(_sql_core, "Approval", _CountedApproval)
            _CountedApproval.made[0] = 0
            resp = c.post(url, headers=BEARER)
            decoded[cycles] = _CountedApproval.made[0]
        assert resp.status_code == 409 and "decision" in resp.json()["detail"], resp.text
    assert decoded == {10: 1, 40: 1}, decoded
