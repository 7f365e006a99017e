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
        assert "NAME" not in command, command  # typed literally (polish54)
        r = cli(*command.split(), cwd=tmp_path, store=store)
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


def _commands(advice: str) -> list[str]:
    return re.findall(r"`loopwright ([^`]+)`", advice)


def test_the_advice_of_a_spent_cycle_budget_names_commands_that_go_on(tmp_path: Path) -> None:
    """advice47: the cycle budget's advice said "accept it by hand or raise
    contract.budget.max_cycles": no command accepts a run, and `resume` keeps its contract.
    It names `show`, then a fork with a higher budget and `resume`, typed as it says."""
    (tmp_path / "flaky.py").write_text(ACTOR.format(broken_at=-1, stuck="pass"))
    (tmp_path / "loop.toml").write_text(SPEC.replace("max_cycles = 6", "max_cycles = 2"))
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"n": 0}}}))
    store = tmp_path / "s.db"
    r = cli("run", "loop.toml", "--task", "t.json", "--task-key", "k", cwd=tmp_path, store=store)
    assert r.returncode == 3, r.stderr
    shown = json.loads(cli("show", "k", "--json", cwd=tmp_path, store=store).stdout)
    assert shown["run"]["stop_reason"] == "budget_cycles"
    advice: str = shown["run"]["packet"]["recommended_action"]
    assert "by hand" not in advice and "accept" not in advice, advice
    run = shown["run"]["run_id"][:12]
    show, fork, resume = _commands(advice)[:3]
    assert show == f"show {run}" and resume == "resume", advice
    assert fork == f"fork {run} --at-cycle 2 --contract FILE", advice
    assert cli(*show.split(), cwd=tmp_path, store=store).returncode == 0
    # an edit of a run its cycle cap stopped is judged by a resume (the check-only cycle makes
    # no attempt: edit47), so the edit says to continue it
    e = cli("edit", "k", "doc/n", "--value", "3", "--by", "ann", cwd=tmp_path, store=store)
    assert e.returncode == 0, e.stderr
    said = " ".join(e.stdout.split())
    assert "continue it with: loopwright resume" in said, said
    (tmp_path / "more.toml").write_text("[contract.budget]\nmax_cycles = 4\n")
    r = cli(*fork.replace("FILE", "more.toml").split(), cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stderr
    new = re.search(r"new run (\w+)", r.stdout)
    assert new is not None, r.stdout
    r = cli(resume, new.group(1), cwd=tmp_path, store=store)
    assert r.returncode == 0 and "accepted" in r.stdout, r.stdout + r.stderr


def test_the_escalation_on_a_persons_version_names_commands_that_exist(tmp_path: Path) -> None:
    """advice47: a run whose person's version the loop would change escalated with "edit the
    part again, roll back, or approve an overwrite" (no rule asked for one: nothing to approve;
    where a person's version fails a check, "or accept the run as it is": no command does).
    Each choice names its commands, and they, as given, finish the run."""
    (tmp_path / "flaky.py").write_text(ACTOR.format(broken_at=2, stuck=ESCALATES))
    (tmp_path / "loop.toml").write_text(SPEC)
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"n": 0}}}))
    store = tmp_path / "s.db"
    r = cli("run", "loop.toml", "--task", "t.json", "--task-key", "f", cwd=tmp_path, store=store)
    assert r.returncode == 5, r.stderr  # the actor escalated at cycle 2
    e = cli("edit", "f", "doc/n", "--value", "2", "--by", "ann", cwd=tmp_path, store=store)
    assert e.returncode == 0, e.stderr
    r = cli("resume", "f", cwd=tmp_path, store=store)
    assert r.returncode == 5, r.stdout + r.stderr  # escalated: the person's n = 2 fails
    shown = json.loads(cli("show", "f", "--json", cwd=tmp_path, store=store).stdout)
    cause: str = shown["run"]["packet"]["cause"]
    assert "approve an overwrite" not in cause, cause
    run = shown["run"]["run_id"][:12]
    edit, resume, rollback, fork = _commands(cause)
    # the person's part named, the value's file said in words (polish55: `PART --value V`)
    assert edit == f"edit {run} doc/n --file FILE" and resume == f"resume {run}", cause
    assert "(FILE: a file holding the part's new value" in cause
    # the cycle the edit followed, whose checkpoint holds the version before it (hints55:
    # `--to-cycle N`, typed as printed, was refused)
    assert rollback == f"rollback {run} --to-cycle 1", cause
    assert re.fullmatch(f"fork {run} --at-cycle \\d+ --spec SPEC", fork), cause
    assert "; SPEC: the path of the spec file with that change)" in cause, cause
    assert "overwrite_accepted" in cause
    # the rollback as printed, on a copy of the store: the version before ann's is back
    import shutil

    shutil.copy(store, tmp_path / "copy.db")
    r = cli(*rollback.split(), "--by", "ann", cwd=tmp_path, store=tmp_path / "copy.db")
    assert r.returncode == 0, r.stderr
    back = json.loads(cli("show", "f", "--json", cwd=tmp_path, store=tmp_path / "copy.db").stdout)
    [doc] = back["state"]["artifacts"]
    assert doc["parts"][0]["versions"][-1]["value"] == 1, doc  # the actor's, not ann's 2
    r = cli(*fork.replace("SPEC", "loop.toml").split(), cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stderr  # (a fork: the run itself is not changed)
    (tmp_path / "n.json").write_text("3")
    edit = edit.replace("FILE", "n.json") + " --by ann"
    assert cli(*edit.split(), cwd=tmp_path, store=store).returncode == 0
    r = cli(*resume.split(), cwd=tmp_path, store=store)
    assert r.returncode == 0 and "accepted" in r.stdout, r.stdout + r.stderr
