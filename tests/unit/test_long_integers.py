"""An integer no JSON text can be written with (more than the 4,300 digits Python writes an int
as text) is refused, named, where it is a value the run judges, and written as a note where it
is only shown. Each crashed a run with a bare ``ValueError`` ("Exceeds the limit (4300 digits)
for integer string conversion"): an actor's edit holding one ended the run ``failed`` (the
proposal's digest), a finding's evidence holding one failed the cycle's commit and left the run
``running``, unable to go on, and a task's field holding one failed ``create_run``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

LONG = 10**5000
CONTRACT = lw.Contract(budget=lw.Budget(max_cycles=2))


def _passes(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True)


def _run(tmp_path: Path, actor: Any, check: Any, task: dict[str, Any]) -> lw.RunResult:
    loop = lw.Loop(name="long", actor=actor, verifiers=[lw.Check(fn=check)], contract=CONTRACT)
    with lw.Runtime(tmp_path / "s.db") as rt:
        return rt.run_sync(loop, task, task_key="k")


def test_an_edit_holding_a_long_integer_escalates_naming_the_part(tmp_path: Path) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("a", {"p": LONG})

    result = _run(tmp_path, actor, _passes, {"artifacts": {"a": {"p": 1}}})
    assert (result.status, result.stop_reason) == ("escalated", "escalated")
    assert "the value of a/p cannot be stored as JSON" in result.packet["cause"]


def test_an_edit_holding_a_64_bit_or_longer_integer_is_kept_exact(tmp_path: Path) -> None:
    exact = 10**30 + 7

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("a", {"p": exact})

    result = _run(tmp_path, actor, _passes, {"artifacts": {"a": {"p": 1}}})
    assert result.status == "accepted"
    with lw.Runtime(tmp_path / "s.db") as rt:
        state = rt.store.latest_checkpoint(result.run_id).task_state()
    assert state.artifacts["a"].values()["p"] == exact


def test_a_findings_long_integer_evidence_is_written_as_a_note(tmp_path: Path) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("a", {"p": 2})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        found = lw.Finding("too big", "a", "p", "size", evidence={"n": LONG})
        return lw.Verdict(passed=False, score=0.5, findings=(found,))

    result = _run(tmp_path, actor, check, {"artifacts": {"a": {"p": 1}}})
    assert (result.status, result.stop_reason, result.cycles) == ("stopped", "budget_cycles", 2)
    with lw.Runtime(tmp_path / "s.db") as rt:
        [finding] = rt.store.latest_checkpoint(result.run_id).task_state().findings
    assert finding.evidence["n"] == "<an integer of 16610 bits, too long to write as JSON>"


def test_a_task_field_holding_a_long_integer_is_refused_naming_where(tmp_path: Path) -> None:
    task = {"other": [1, LONG], "artifacts": {"a": {"p": 1}}}
    with pytest.raises(lw.ConfigError, match=r"other\[1\] is an integer of 16610 bits"):
        _run(tmp_path, lambda ctx: lw.Proposal(), _passes, task)
    with lw.Runtime(tmp_path / "s.db") as rt:
        assert rt.store.list_runs() == []  # nothing made
