"""`loopwright show` (text) prints the start of a long stored text, not all of it (outside50b).

A request's diff held the whole value it changes, and the escalation packet an actor's whole
reason and each finding whole: `show` printed them all, wrapped by rich in time that grows with
the square of a word's length (a 3 MB value: two minutes; a 10 MB one: more than ten, on a run
that `show --json` prints in four seconds). Each is cut, saying how much more `--json` holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import loopwright as lw

from .test_bad_inputs import lw as cli

LONG = 300_000


def _loop(how: str) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if how == "escalate" and ctx.cycle > 1:  # after a cycle whose check found something
            return lw.Proposal(escalate="r" * LONG)
        if how == "escalate":
            return lw.Proposal.edit("doc", {"value": "x"})
        return lw.Proposal.edit("doc", {"value": "v" * LONG, "flag": 1})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        found = lw.Finding("f" * LONG, "doc", "value", "value")
        return lw.Verdict(passed=False, score=0.5, findings=(found,))

    return lw.Loop(
        name=how,
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            risk=[lw.RiskRule(name="flag_change", touches=("doc/flag",))],
        ),
    )


def _shown(tmp_path: Path, how: str, status: str) -> tuple[str, dict[str, object]]:
    store = tmp_path / "s.db"
    with lw.Runtime(str(store)) as rt:
        task = {"artifacts": {"doc": {"value": "start", "flag": 0}}}
        r = rt.run_sync(_loop(how), task, task_key=how)
        assert r.status == status
    text = cli("show", how, cwd=tmp_path, store=store, env={"COLUMNS": "80"})
    assert text.returncode == 0, text.stderr
    whole = cli("show", how, "--json", cwd=tmp_path, store=store)
    assert whole.returncode == 0, whole.stderr
    return " ".join(text.stdout.split()), json.loads(whole.stdout)  # (as wrapped: words)


def test_a_requests_long_value_is_cut_in_show(tmp_path: Path) -> None:
    out, whole = _shown(tmp_path, "park", "awaiting_approval")
    # before: the card held all 300,000 characters (3,900 lines of 80)
    assert out.count("v") < 10_000, len(out)
    assert "more characters: show --json has it whole" in out
    assert "+ doc/flag: 1" in out  # the rest of the diff still shown
    [request] = whole["approvals"]  # type: ignore[misc]
    assert "v" * LONG in request["diff"]


def test_a_long_reason_and_finding_are_cut_in_show(tmp_path: Path) -> None:
    out, whole = _shown(tmp_path, "escalate", "escalated")
    # before: the reason twice (its cycle's row and the packet) and the finding, whole
    assert out.count("r") < 10_000, len(out)
    assert out.count("f") < 10_000, len(out)
    assert "more characters: show --json has it whole" in out
    packet = whole["run"]["packet"]  # type: ignore[index]
    assert "r" * LONG in packet["summary"]
    assert packet["unresolved_findings"][0]["message"] == "f" * LONG
