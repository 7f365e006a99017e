"""The replay actor: recordings in order, recorded usage, resumable, a clean escalation when
the recordings run out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.actors import NO_MORE_ATTEMPTS, ReplayActor, replay_actor


def ctx(cycle: int, task: dict[str, Any]) -> lw.Context:
    return lw.Context(
        run_id="r",
        cycle=cycle,
        goal="",
        task=task,
        artifacts={},
        accepted={},
        findings=(),
        plan=(),
        next_step=None,
        remaining=lw.Remaining(None, None, None, None),
    )


TASK = {
    "recorded": {
        "attempts": [
            {"code": "v1", "usage": {"cost_usd": 0.5, "tokens": 100, "seconds": 0.0}},
            "v2",
        ]
    }
}


def test_cycle_one_evaluates_the_initial_artifact() -> None:
    p = ReplayActor()(ctx(1, TASK))
    assert p.kind == "noop" and p.escalate is None


def test_recordings_in_order_with_recorded_usage() -> None:
    actor = ReplayActor()
    p2, p3 = actor(ctx(2, TASK)), actor(ctx(3, TASK))
    assert [e.value for e in p2.edits] == ["v1"] and p2.edits[0].ref == "program/code"
    assert p2.usage == lw.Usage(0.5, 100, 0.0)
    assert [e.value for e in p3.edits] == ["v2"] and p3.usage is None


def test_the_recording_comes_from_the_context_not_from_memory() -> None:
    # a fresh actor (a resumed process) asked for cycle 3 replays the second recording
    assert [e.value for e in ReplayActor()(ctx(3, TASK)).edits] == ["v2"]
    assert [e.value for e in replay_actor(evaluate_initial=False)(ctx(2, TASK)).edits] == ["v2"]


def test_running_out_is_an_escalation_not_an_exception() -> None:
    p = ReplayActor()(ctx(4, TASK))
    assert p.escalate == NO_MORE_ATTEMPTS and not p.changes()
    assert ReplayActor()(ctx(2, {})).escalate == NO_MORE_ATTEMPTS


def test_a_run_out_of_recordings_ends_escalated(tmp_path: Path) -> None:
    def never_passes(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False,
            score=0.0,
            findings=(lw.Finding("wrong", "program", "code", "test"),),
        )

    loop = lw.Loop(
        name="replay",
        actor=ReplayActor(),
        verifiers=[lw.Check(fn=never_passes)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=10)),
    )
    task = {"artifacts": {"program": {"code": "v0"}}, **TASK}
    with lw.Runtime(str(tmp_path / "r.db")) as rt:
        r = rt.run_sync(loop, task, task_key="k")
    assert r.status == "escalated" and r.stop_reason == "escalated"
    assert r.cycles == 3  # seed, v1, v2
    assert r.spent.cost_usd == 0.5 and r.spent.tokens == 100
    assert r.packet is not None and NO_MORE_ATTEMPTS in str(r.packet)
    assert r.state.artifacts["program"].parts["code"].value == "v2"
