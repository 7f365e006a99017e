from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_cli

LOOP_MODULE = """
import loopwright as lw

WANT = {"a": 1, "b": 2, "c": 3, "pay": 10}

def actor(ctx):
    if ctx.task.get("boom"):
        raise RuntimeError("actor exploded")
    fixes = {f.part: f.evidence["expected"] for f in ctx.findings[:1]}
    if ctx.task.get("stuck"):
        fixes = {"a": 99}
    return lw.Proposal.edit("doc", fixes or {"a": ctx.artifacts["doc"]["a"]},
                            usage=lw.Usage(cost_usd=0.05, tokens=100))

def check(state, proposal):
    doc = state.artifacts["doc"].values()
    bad = [lw.Finding(f"{k} wrong", "doc", k, "value", evidence={"expected": v})
           for k, v in WANT.items() if doc.get(k) != v]
    return lw.Verdict(passed=not bad, score=1 - len(bad) / len(WANT), findings=tuple(bad))

def audit(state, proposal):
    return lw.Verdict(passed=True)
"""

SPEC = """
name = "e2e"
project = "tests"
[actor]
ref = "loopmod.py:actor"
timeout_s = 5
[[verifiers]]
ref = "loopmod.py:check"
[[verifiers]]
ref = "loopmod.py:audit"
held_out = true
[contract.budget]
max_cycles = 8
max_cost_usd = 3.0
[contract.no_progress]
cycles = 2
[[contract.risk]]
name = "payment_change"
touches = ["doc/pay"]
[contract.escalation]
owner = "qa"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "loopmod.py").write_text(LOOP_MODULE)
    (tmp_path / "loop.toml").write_text(SPEC)
    return tmp_path


def cli(*args: str, cwd: Path, store: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``loopwright ARGS`` (the installed console script) in its own process, its output
    captured: forked from a process that imported the CLI once (tests/forkserver.py,
    ``run_cli``), or a real subprocess where the environment asks for one."""
    env = dict(os.environ)
    env.pop("LOOPWRIGHT_DEBUG", None)
    if store is not None:
        env["LOOPWRIGHT_STORE"] = str(store)
    exe = Path(sys.executable).with_name("loopwright")
    return run_cli([str(exe), *args], env, timeout=120, cwd=cwd)
