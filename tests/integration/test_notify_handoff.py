"""A run's end posted by `--notify-run-ends` routes what the stop contract's escalation names
(the loop-engineering seed's row: "Route the trace, evidence, unresolved state, and recommended
next action"): its owner and route, the recommended action, the unresolved findings with their
evidence, and the trace. It carried only the status, the stop cause and a link, so the
contract's owner and route reached no one (docs/requirements.md, E-C6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from doc_loop import TASK, fields

import loopwright as lw
from loopwright.web._notify_bodies import EVIDENCE_MAX, HANDOFF_LISTED, run_end_body


def _loop(actor: Any) -> lw.Loop:
    return lw.Loop(
        name="handoff",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(
            no_progress=lw.NoProgress(cycles=2),
            budget=lw.Budget(max_cycles=6),
            escalation=lw.Escalation(
                owner="ap-team", route="queue:<!channel>", recommended_action="check the PO"
            ),
        ),
    )


def stuck(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit("doc", {"a": 1} if ctx.cycle == 1 else {"b": 9}, usage=lw.Usage(0.1))


def fixer(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit("doc", {"a": 1, "b": 2, "c": 3}, usage=lw.Usage(0.1))


def test_a_run_that_ends_unaccepted_is_handed_to_its_owner_with_its_packet(tmp_path: Path) -> None:
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_loop(stuck), TASK, task_key="stuck")
        assert r.stop_reason == "no_progress"
        body = run_end_body(rt.store.get_run(r.run_id), "http://dash")
    hand = body["handoff"]
    assert (hand["owner"], hand["route"]) == ("ap-team", "queue:<!channel>")
    assert hand["recommended_action"].startswith("check the PO")
    # the unresolved state: b and c are still wrong, each with where it is and its evidence
    assert hand["unresolved"] == 2
    assert [(f["artifact"], f["part"], f["evidence"]) for f in hand["unresolved_findings"]] == [
        ("doc", "b", {"expected": 2}),
        ("doc", "c", {"expected": 3}),
    ]
    assert hand["trace"]["run_id"] == r.run_id
    # the chat line names whom it is for, escaped as the run's other words are
    assert "for ap-team via queue:&lt;!channel&gt;" in body["text"]
    json.dumps(body)  # what is posted is JSON


def test_an_accepted_run_hands_nothing_over(tmp_path: Path) -> None:
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_loop(fixer), TASK, task_key="done")
        assert r.accepted
        body = run_end_body(rt.store.get_run(r.run_id), None)
    assert body["handoff"] is None and " for " not in body["text"]


def test_a_long_list_of_findings_is_counted_and_its_long_evidence_named_by_size(
    tmp_path: Path,
) -> None:
    many = HANDOFF_LISTED + 5
    task = {"artifacts": {"doc": {f"p{i}": 0 for i in range(many)}}}

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        found = tuple(
            lw.Finding("wrong", "doc", f"p{i}", evidence={"log": "x" * (EVIDENCE_MAX * (i % 2))})
            for i in range(many)
        )
        return lw.Verdict(passed=False, score=0.0, findings=found)

    loop = lw.Loop(
        name="many",
        actor=lambda ctx: lw.Proposal(note="look"),
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, task, task_key="many")
        assert r.stop_reason == "budget_cycles"
        hand = run_end_body(rt.store.get_run(r.run_id), None)["handoff"]
    assert hand["unresolved"] == many
    listed = hand["unresolved_findings"]
    assert [f["part"] for f in listed] == [f"p{i}" for i in range(HANDOFF_LISTED)]
    assert listed[0]["evidence"] == {"log": ""}
    assert listed[1]["evidence"] == {"omitted_chars": len(json.dumps({"log": "x" * EVIDENCE_MAX}))}
