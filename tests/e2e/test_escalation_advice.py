"""The next action of a run escalated by an error in user code is one a person can follow: it
said "Fix the actor error ... and resume or rerun", but `resume` and a rerun of the task key
both return the ended run as it is (an outside probe: the llm_repair example run before its
model server was started)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conftest import cli

ACTOR = """
import loopwright as lw

def actor(ctx):
    if ctx.cycle == {broken_at}:
        raise RuntimeError("the model server is not running")
    return lw.Proposal.edit("doc", {{"n": ctx.cycle}})

def check(state, proposal):
    n = state.artifacts["doc"].values()["n"]
    return lw.Verdict(passed=n >= 3, score=min(1.0, n / 3))
"""

SPEC = """
name = "advice"
[actor]
ref = "flaky.py:actor"
[[verifiers]]
ref = "flaky.py:check"
[contract.budget]
max_cycles = 6
"""


def test_the_advice_of_an_actor_error_reopens_and_finishes_the_run(tmp_path: Path) -> None:
    (tmp_path / "flaky.py").write_text(ACTOR.format(broken_at=2))
    (tmp_path / "loop.toml").write_text(SPEC)
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"n": 0}}}))
    store = tmp_path / "s.db"
    first = cli(
        "run", "loop.toml", "--task", "t.json", "--task-key", "k", cwd=tmp_path, store=store
    )
    assert first.returncode == 5, first.stderr
    shown = json.loads(cli("show", "k", "--json", cwd=tmp_path, store=store).stdout)
    advice = shown["run"]["packet"]["recommended_action"]
    assert "RuntimeError: the model server is not running" in advice
    # the actor is fixed; the commands the advice names, literally, finish the run
    (tmp_path / "flaky.py").write_text(ACTOR.format(broken_at=-1))
    commands = re.findall(r"`loopwright ([^`]+)`", advice)
    assert [c.split()[0] for c in commands] == ["rollback", "resume"]
    for command in commands:
        r = cli(*command.replace("NAME", "ann").split(), cwd=tmp_path, store=store)
        assert r.returncode == 0, r.stderr
    done = json.loads(cli("show", "k", "--json", cwd=tmp_path, store=store).stdout)
    assert (done["run"]["status"], done["run"]["cycle"]) == ("accepted", 3)
