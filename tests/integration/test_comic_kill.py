"""The comic example SIGKILLed mid-way (in a subprocess, at the N-th ``after_checkpoint``) and
resumed to the end: no accepted panel is re-rendered and the pages are exported exactly once."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "comic_pages" / "loop.toml"
TASK: dict[str, Any] = json.loads(SPEC.with_name("tasks.jsonl").read_text().splitlines()[0])
KILL_AT = 8  # the 8th checkpoint: a few panels accepted, before the canon change parks

RUNNER = """
import json, os, signal, sys
import loopwright as lw
db, spec, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
task = json.loads(sys.argv[4])
seen = 0
def on_phase(phase):
    global seen
    if phase == "after_checkpoint":
        seen += 1
        if seen == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
loop = lw.load_spec(spec)
with lw.Runtime(db) as rt:
    rt._on_phase = on_phase
    rt.run_sync(loop, task, task_key=task["task_key"])
"""


def _accepted(state: lw.TaskState) -> dict[str, tuple[str, dict[str, int]]]:
    """Accepted panels: the hash of the accepted svg and the number of versions of each part."""
    out = {}
    for name, art in state.artifacts.items():
        svg = art.parts.get("svg")
        if svg is None or svg.accepted is None:
            continue
        digest = hashlib.sha256(str(svg.accepted.value).encode()).hexdigest()
        out[name] = (digest, {k: len(p.versions) for k, p in art.parts.items()})
    return out


def test_killed_mid_way_resumes_without_rerender_or_second_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "comic.db")
    exports = tmp_path / "exports"
    env = {**os.environ, "COMIC_EXPORT_DIR": str(exports)}
    killed = subprocess.run(
        [sys.executable, "-c", RUNNER, db, str(SPEC), str(KILL_AT), json.dumps(TASK)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert not exports.exists()  # died long before publishing

    monkeypatch.setenv("COMIC_EXPORT_DIR", str(exports))
    loop = lw.load_spec(SPEC)
    with lw.Runtime(db) as rt:
        [run] = rt.store.list_runs()
        assert run.status == "running"  # the kill left it mid-flight
        before = _accepted(rt.store.checkpoints(run.run_id)[-1].task_state())
        assert len(before) >= 3, before

        r = rt.run_sync(loop, TASK, task_key=TASK["task_key"])  # resumes the same run
        assert r.run_id == run.run_id
        assert r.status == "awaiting_approval"  # the canon change
        rt.approve(r.run_id, by="creator")
        done = rt.resume_sync(r.run_id, loop)
        assert (done.status, done.stop_reason) == ("accepted", "success")
        after = _accepted(rt.store.checkpoints(run.run_id)[-1].task_state())
        assert len(after) == 9
        for pid, (digest, versions) in before.items():
            assert after[pid] == (digest, versions), pid  # not re-rendered, no new version
        # once more, after the end: nothing runs again
        assert rt.resume_sync(r.run_id, loop).status == "accepted"

    folder = exports / "lantern-harbor"
    assert (folder / "publish.log").read_text().splitlines() == [
        "publish:lantern-harbor/pages-3-4-5"
    ]
    assert [p.name for p in folder.glob("*.pdf")] == ["lantern-harbor.pdf"]
