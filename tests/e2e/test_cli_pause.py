"""`loopwright pause` and `unpause` end to end: a run parked on its payment's request is
paused too; the pause is listed with the requests, has no deny, and holds the run after its
payment is approved until a person unpauses it; a finished run's pause is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import cli
from .test_cli import _parking_task


def _one_line_refusal(r: object) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)  # type: ignore[attr-defined]
    err = r.stderr.strip()  # type: ignore[attr-defined]
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("loopwright: error:"), err
    return str(err)


def test_pause_unpause_and_refusals(project: Path) -> None:
    store = project / "s.db"
    task = _parking_task(project / "t.json")
    cli("run", "loop.toml", "--task", str(task), cwd=project, store=store)
    run_id = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)[0]["run_id"]
    r = cli(
        "pause", run_id, "--by", "ana", "--note", "checking the vendor", cwd=project, store=store
    )
    assert r.returncode == 0, r.stderr
    assert f"run {run_id[:12]}: paused by ana" in r.stdout
    assert f"loopwright unpause {run_id[:12]}" in r.stdout
    listed = json.loads(cli("approvals", "--json", cwd=project, store=store).stdout)
    kinds = sorted(a["kind"] for a in listed)
    assert len(kinds) == 2 and "pause" in kinds, listed
    pause_id = next(a["approval_id"] for a in listed if a["kind"] == "pause")
    pay_id = next(a["approval_id"] for a in listed if a["kind"] != "pause")
    again = cli("pause", run_id, "--by", "bo", cwd=project, store=store)
    assert "paused already" in _one_line_refusal(again)
    denied = cli("deny", run_id, "--by", "bo", "--request", pause_id, cwd=project, store=store)
    assert "a person's pause" in _one_line_refusal(denied)
    # the payment approved: the pause still holds the run (a resume leaves it parked)
    ok = cli("approve", run_id, "--by", "bo", "--request", pay_id, cwd=project, store=store)
    assert ok.returncode == 0, ok.stderr
    held = cli("resume", run_id, cwd=project, store=store)
    assert "awaiting_approval" in held.stdout, (held.stdout, held.stderr)
    up = cli("unpause", run_id, "--by", "bo", "--resume", cwd=project, store=store)
    assert up.returncode == 0, (up.stdout, up.stderr)
    assert f"unpaused run {run_id[:12]}" in up.stdout and "accepted" in up.stdout
    assert "already ended (accepted); nothing to unpause" in _one_line_refusal(
        cli("unpause", run_id, "--by", "bo", cwd=project, store=store)
    )
    ended = cli("pause", run_id, "--by", "ana", cwd=project, store=store)
    assert "already ended (accepted)" in _one_line_refusal(ended)
