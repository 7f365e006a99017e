"""The next action of an escalated run is one a person can follow: for an error in user code it
said "Fix the actor error ... and resume or rerun", for an actor's own escalation "... and start
a new run", but `resume` and a rerun of the task key both return the ended run as it is (an
outside probe: the llm_repair example run before its model server was started)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conftest import cli

ACTOR = """
import loopwright as lw

def actor(ctx):
    if ctx.cycle == {broken_at}:
        {stuck}
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


RAISES = 'raise RuntimeError("the model server is not running")'
ESCALATES = 'return lw.Proposal(escalate="two invoices with the same number: which one is paid?")'


def advice_followed(tmp_path: Path, stuck: str) -> str:
    """Run a task whose actor gets stuck at cycle 2, fix the actor, then type the commands the
    run's advice names, literally: returns the advice."""
    (tmp_path / "flaky.py").write_text(ACTOR.format(broken_at=2, stuck=stuck))
    (tmp_path / "loop.toml").write_text(SPEC)
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"n": 0}}}))
    store = tmp_path / "s.db"
    first = cli(
        "run", "loop.toml", "--task", "t.json", "--task-key", "k", cwd=tmp_path, store=store
    )
    assert first.returncode == 5, first.stderr
    shown = json.loads(cli("show", "k", "--json", cwd=tmp_path, store=store).stdout)
    advice: str = shown["run"]["packet"]["recommended_action"]
    # the actor is fixed; the commands the advice names, literally, finish the run
    (tmp_path / "flaky.py").write_text(ACTOR.format(broken_at=-1, stuck=stuck))
    commands = re.findall(r"`loopwright ([^`]+)`", advice)
    assert [c.split()[0] for c in commands] == ["rollback", "resume"]
    for command in commands:
        r = cli(*command.replace("NAME", "ann").split(), cwd=tmp_path, store=store)
        assert r.returncode == 0, r.stderr
    done = json.loads(cli("show", "k", "--json", cwd=tmp_path, store=store).stdout)
    assert (done["run"]["status"], done["run"]["cycle"]) == ("accepted", 3)
    return advice


def test_the_advice_of_an_actor_error_reopens_and_finishes_the_run(tmp_path: Path) -> None:
    advice = advice_followed(tmp_path, RAISES)
    assert "RuntimeError: the model server is not running" in advice


def test_the_advice_of_an_actor_escalation_reopens_and_finishes_the_run(tmp_path: Path) -> None:
    advice = advice_followed(tmp_path, ESCALATES)
    assert "start a new run" not in advice
