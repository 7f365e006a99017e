"""`loopwright show`'s timeline says what a proposal asks besides its edits (helper
newuser52): a question's row read "question:" and an effect-only proposal's "effects:", with
nothing after either, and an edit's effects were not named at all."""

from __future__ import annotations

from pathlib import Path

from .test_bad_inputs import lw, spec, task_file

MODULE = """
import loopwright as lw

@lw.effect("notify", key=lambda a: a["to"])
def ping(to: str, *, key: str) -> str:
    return "sent"

def actor(ctx):
    if ctx.cycle == 1:
        return lw.Proposal(question=lw.Question("Which PO governs?", choices=("PO-1", "PO-2")))
    if ctx.cycle == 2:
        return lw.Proposal(effects=(ping.call(to="ops"),))
    return lw.Proposal(edits=(lw.Edit("inv", "po", "PO-2"),), effects=(ping.call(to="desk"),))

def check(state, proposal):
    return lw.Verdict(passed=state.artifacts.get("inv") is not None, score=0.5)
"""

SPEC = """
name = "asks"
[actor]
ref = "asks.py:actor"
[[verifiers]]
ref = "asks.py:check"
[[effects]]
ref = "asks.py:ping"
[[approvals]]
kind = "notify"
action = "allow"
[contract.budget]
max_cycles = 5
"""


def test_the_timeline_names_a_question_and_the_effects_asked_for(tmp_path: Path) -> None:
    (tmp_path / "asks.py").write_text(MODULE)
    store = tmp_path / "s.db"
    name = spec(tmp_path, "asks.toml", SPEC)
    task = task_file(tmp_path, {"id": "a1"}, name="t.jsonl")
    parked = lw("run", name, "--tasks", task, cwd=tmp_path, store=store)
    assert parked.returncode == 4, parked.stderr
    answered = lw("answer", "asks:a1", "PO-2", "--resume", cwd=tmp_path, store=store)
    assert answered.returncode == 3, answered.stderr  # (stopped: budget_cycles)
    # narrow: one block per cycle, "proposal KIND: WHAT"
    shown = lw("show", "asks:a1", cwd=tmp_path, store=store, env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert 'proposal question: "Which PO governs?"' in text, shown.stdout
    assert "proposal effects: ping" in text, shown.stdout
    assert "proposal edit: inv/po, effect ping" in text, shown.stdout  # beside the edit
    # wide: a table, the proposal's cell a line each (the approval panel quotes no question)
    wide = lw("show", "asks:a1", cwd=tmp_path, store=store, env={"COLUMNS": "150"})
    assert wide.returncode == 0, wide.stderr
    assert '"Which PO governs?"' in wide.stdout, wide.stdout
    assert "effect ping" in wide.stdout, wide.stdout
