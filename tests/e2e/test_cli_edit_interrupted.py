"""``loopwright edit`` of an interrupted run (status ``running``, no process driving it: its
process was killed) printed "now running" and nothing else, as if the run went on from the
edit (advice47). It now says the run is interrupted, as ``loopwright runs`` does, and how to
resume it: ``loopwright resume RUN`` for a run started from a spec, from Python for one
started there (``loopwright resume`` has no loop to load for it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import cli
from .test_bad_inputs import lw

MODULE = """
import os, signal
import loopwright as lw

def actor(ctx):
    if ctx.cycle == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies: cycle 1 is checkpointed
    return lw.Proposal.edit("doc", {"n": ctx.cycle})

def check(state, proposal):
    return lw.Verdict(passed=state.artifacts["doc"].values()["n"] >= 3)
"""

SPEC = """
name = "killed"
[actor]
ref = "killed.py:actor"
[[verifiers]]
ref = "killed.py:check"
[contract.budget]
max_cycles = 5
"""

SCRIPT = """
import sys
sys.path.insert(0, ".")
import loopwright as lw
from killed import actor, check

loop = lw.Loop(name="killed", actor=actor, verifiers=[lw.Check(fn=check, name="check")],
               contract=lw.Contract.from_dict({"budget": {"max_cycles": 5}}))
with lw.Runtime(sys.argv[1]) as rt:
    rt.run_sync(loop, {"artifacts": {"doc": {"n": 0}}}, task_key="P")
"""


def _killed(tmp_path: Path) -> tuple[Path, str]:
    """A store with two killed runs, status ``running`` and no process: ``K`` started from a
    spec (its id returned), ``P`` from Python."""
    (tmp_path / "killed.py").write_text(MODULE)
    (tmp_path / "killed.toml").write_text(SPEC)
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"n": 0}}}))
    store = tmp_path / "s.db"
    r = cli("run", "killed.toml", "--task", "t.json", "--task-key", "K", cwd=tmp_path, store=store)
    assert r.returncode == -9, r.stdout + r.stderr
    [run] = json.loads(cli("runs", "--json", cwd=tmp_path, store=store).stdout)
    assert run["status"] == "running" and run["cycle"] == 1
    env = {k: v for k, v in os.environ.items() if k != "LOOPWRIGHT_DEBUG"}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(store)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == -9, p.stderr
    return store, str(run["run_id"])


def test_edit_of_a_killed_run_says_it_is_interrupted_and_how_to_resume(tmp_path: Path) -> None:
    store, run_id = _killed(tmp_path)
    e = cli("edit", "K", "doc/n", "--value", "3", "--by", "ann", cwd=tmp_path, store=store)
    assert e.returncode == 0, e.stderr
    out = " ".join(e.stdout.split())
    # before: "run 1a2b...: doc/n edited by ann, now running", and nothing more
    assert "now running (interrupted?" in out, out
    assert f"resume it with: loopwright resume {run_id[:12]}" in out, out
    # a run started from Python: `loopwright resume` refuses it, so the hint says where
    e = cli("edit", "P", "doc/n", "--value", "3", "--by", "ann", cwd=tmp_path, store=store)
    assert e.returncode == 0, e.stderr
    out = " ".join(e.stdout.split())
    assert "now running (interrupted?" in out and "resume it from Python" in out, out
    assert "loopwright resume" not in out, out
    # the hint works: resumed, the run goes on from the person's version and is accepted
    r = cli("resume", "K", cwd=tmp_path, store=store)
    assert r.returncode == 0 and "accepted" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("columns", ["80", "120"])
def test_runs_at_any_width_says_how_to_resume_an_interrupted_run(
    tmp_path: Path, columns: str
) -> None:
    """(polish52) At 80 columns (and 120) the "why it stopped" cell was cut to
    "interrupted? it…": the instruction was lost. It is said whole under the table."""
    store, run_id = _killed(tmp_path)
    python = next(
        r["run_id"] for r in json.loads(cli("runs", "--json", cwd=tmp_path, store=store).stdout)
        if r["task_key"] == "P"
    )  # fmt: skip
    r = lw("runs", cwd=tmp_path, store=store, env={"COLUMNS": columns})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(len(line) <= int(columns) for line in lines), lines
    said = " ".join(r.stdout.split("\n", 3)[3].split())  # (after the title, header and rule)
    assert "interrupted?" in said  # the cell, cut or not
    assert (
        f"interrupted, no process runs it: {run_id[:12]}; continue it with: "
        f"loopwright resume {run_id[:12]}" in said
    ), r.stdout
    assert (
        f"interrupted, no process runs it: {python[:12]}; started from Python: continue it "
        f"there with Runtime.resume({python[:12]!r}, loop)" in said
    ), r.stdout
    r = lw("runs", cwd=tmp_path, store=store, env={"COLUMNS": "400"})  # nothing cut: no note
    assert "interrupted, no process" not in r.stdout and "loopwright resume" in r.stdout
