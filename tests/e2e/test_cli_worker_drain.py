"""`loopwright worker` stopped by Ctrl-C while it drives a run: the run finishes its cycle in
flight and is handed back, not ended. The worker said "run …: running (-)" and "worker done: 1
claimed; ended: running 1" — a drained run counted as ended, and nothing said how it goes on
(outside49). Now it says the run was drained, not ended, and what continues it. The signal is
sent by the actor itself, in cycle 2: no timing involved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import loopwright as lw

ACTOR = """
import os, signal
import loopwright as lw

def actor(ctx):
    if ctx.cycle == 2 and os.environ.get("STOP_IN_CYCLE_2"):  # a person presses Ctrl-C
        os.kill(os.getpid(), signal.SIGINT)
    return lw.Proposal.edit("doc", {"n": ctx.cycle})

def check(state, proposal):
    return lw.Verdict(passed=False, score=state.artifacts["doc"].values()["n"] / 100)
"""

SPEC = """
name = "drain"
[actor]
ref = "drain.py:actor"
[[verifiers]]
ref = "drain.py:check"
[contract.budget]
max_cycles = 5
"""


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopwright", *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=240,  # (a worker that ignored Ctrl-C would wait for ever: a failure)
    )


def test_ctrl_c_on_a_worker_says_its_runs_were_drained_and_how_they_go_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "drain.py").write_text(ACTOR)
    (tmp_path / "loop.toml").write_text(SPEC)
    store = str(tmp_path / "s.db")
    with lw.Runtime(store) as rt:
        [created] = [rt.create(lw.load_spec(tmp_path / "loop.toml"), {}, task_key="d-1")[0]]
    run_id = created.run_id

    proc = _cli(
        "worker", "--store", store, "--poll", "0.1", "--concurrency", "1",
        cwd=tmp_path, STOP_IN_CYCLE_2="1",
    )  # fmt: skip
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    out = proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    # the run's line: drained after the cycle in flight, and what continues it
    assert f"run {run_id[:12]} (d-1): drained after cycle 2, not ended" in out, out
    assert f"`loopwright resume {run_id[:12]} --store {store}`" in out, out  # (newuser52)
    assert "running (-)" not in out, out
    # the summary counts it apart from the runs that ended
    assert "ended: running" not in out, out
    assert "ended: none; drained 1 (not ended: the next worker continues them" in out, out

    with lw.Runtime(store) as rt:
        rec = rt.store.get_run(run_id)
    assert (rec.status, rec.cycle) == ("running", 2)  # kept: cycle 2 committed, nothing lost
    # and it goes on as the line says, from cycle 3 to its budget
    resumed = _cli("resume", run_id[:12], "--store", store, cwd=tmp_path)
    assert resumed.returncode == 3, (resumed.stdout, resumed.stderr)
    with lw.Runtime(store) as rt:
        assert rt.store.get_run(run_id).cycle == 5
