"""A store damaged after the dashboard opened it (a page of the file overwritten: "database
disk image is malformed", found only when a page reads that part) is answered as the store
failing, 503 with a line that says so — a page in the browser, JSON for the API — and one line
in the server's log, not a 500 "Internal Server Error" with a traceback (as ``loopwright
show`` says it in one line, exit 2)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import loopwright as lw

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from loopwright.web import create_app

TOKEN = "probe40-damaged-store-token"
LOCAL = "http://127.0.0.1"


def _run(db: Path) -> str:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"{ctx.cycle:04d} " + "x" * 3000})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("no", "doc", "body"),))

    loop = lw.Loop(
        name="damaged",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=150)),
    )
    with lw.Runtime(db) as rt:
        return rt.run_sync(loop, {"artifacts": {"doc": {"body": ""}}}, task_key="d").run_id


def _damage(db: Path) -> None:
    """Overwrite the middle of the file (every page there: b-tree pages of several tables)."""
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        fh.seek(size // 3)
        fh.write(b"\xa5" * (size // 3))
        fh.flush()
        os.fsync(fh.fileno())


def test_a_damaged_store_is_a_503_that_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "s.db"
    run_id = _run(db)
    client = TestClient(
        create_app(str(db), token=TOKEN), base_url=LOCAL, raise_server_exceptions=False
    )
    assert client.get("/api/runs").status_code == 200  # the run's row is readable
    _damage(db)
    caplog.set_level(logging.WARNING, logger="loopwright.web")
    page = client.get(f"/runs/{run_id}", headers={"accept": "text/html"})
    assert page.status_code == 503, page.text[:300]
    assert "damaged" in page.text
    api = client.get(f"/api/runs/{run_id}/parts/doc/body/versions", params={"limit": 500})
    assert api.status_code == 503, api.text[:300]
    assert "damaged" in api.json()["detail"]
    assert str(db) not in page.text + api.text  # the store's path stays in the log
    logged = [r for r in caplog.records if r.name == "loopwright.web"]
    assert logged and all(r.exc_info is None for r in logged)
    assert any("malformed" in r.getMessage() for r in logged)
