"""A score of -0.0 (a checker's ``-x * 0.0``, a mean of nothing negated) is 0.0: it was kept as
it was, recorded as ``-0.0`` and shown as ``-0.00`` by ``loopwright show`` (doubts52)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main


def test_a_negative_zero_score_is_zero_in_the_verdict() -> None:
    v = lw.Verdict(passed=False, score=-0.0)
    assert math.copysign(1.0, v.score or 0.0) == 1.0
    assert math.copysign(1.0, v.to_dict()["score"]) == 1.0
    assert math.copysign(1.0, lw.Verdict.from_dict({"passed": False, "score": -0.0}).value) == 1.0


def test_a_negative_zero_score_is_never_recorded_or_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": f"x{ctx.cycle}"})

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=-0.0)

    loop = lw.Loop(
        name="zero",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": ""}}}, task_key="t")
    assert main(["show", r.run_id, "--store", str(db)]) == 0
    shown = capsys.readouterr().out
    assert main(["show", r.run_id, "--store", str(db), "--json"]) == 0
    as_json = capsys.readouterr().out
    assert "✗ c 0.00" in shown and "-0.0" not in shown
    assert '"score": 0.0' in as_json and "-0.0" not in as_json
