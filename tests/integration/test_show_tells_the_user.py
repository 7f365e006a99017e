"""`loopwright show` answers the four questions the creative-loop seed puts to a run's page
(docs/requirements.md, L-33): "what the agent plans to do, what it has completed, what it needs
approval for and why it stopped". The plan table had no test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_loop import fields
from support.printed import shown_text

import loopwright as lw

TASK = {
    "goal": "fix doc",
    "artifacts": {"doc": {"a": 0, "b": 0, "c": 0}},
    "plan": [
        {"id": "s1", "title": "fix a", "parts": ["doc/a"]},
        {"id": "s2", "title": "fix b and c", "depends_on": ["s1"], "parts": ["doc/b", "doc/c"]},
    ],
}


def actor(ctx: lw.Context) -> lw.Proposal:
    step = {"a": 1} if ctx.cycle == 1 else {"b": 2, "c": 3}
    return lw.Proposal.edit("doc", step, usage=lw.Usage(0.1))


LOOP = lw.Loop(
    name="seen",
    actor=actor,
    verifiers=[fields],
    contract=lw.Contract(
        budget=lw.Budget(max_cycles=4),
        risk=[
            lw.RiskRule(name="b_change", touches=("doc/b",), reason="b is canon: ask the creator")
        ],
    ),
)


def _row(text: str, step: str) -> list[str]:
    """The plan table's cells of ``step``."""
    plan = text.split("Plan", 1)[1].split("Timeline", 1)[0]
    [line] = [ln for ln in plan.splitlines() if re.match(rf"[│┃]\s*{step}\s", ln)]
    return [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]


def test_show_says_the_plan_what_is_done_what_waits_for_a_person_and_why_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    url = f"sqlite:///{tmp_path / 's.db'}"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(LOOP, TASK, task_key="seen")
        assert r.status == "awaiting_approval"
        text, _ = shown_text(url, r.run_id)
        # what it plans and what it has completed
        assert _row(text, "s1") == ["s1", "fix a", "-", "done"]
        assert _row(text, "s2") == ["s2", "fix b and c", "s1", "next"]
        # what it needs approval for, and why
        assert "waiting for a decision on approval" in text and "(b_change)" in text
        assert "why: b is canon: ask the creator" in text and "status: pending" in text
        assert "+ doc/b: 2" in text

        rt.deny(r.run_id, by="ann", note="keep b")
        r = rt.resume_sync(r.run_id, LOOP)
        assert (r.status, r.stop_reason) == ("escalated", "escalated")
        text, _ = shown_text(url, r.run_id)
    # why it stopped, and what a person does next
    assert re.search(r"stopped because\s+escalated to a person", text)
    assert re.search(r"why it stopped\s+escalated after 1 cycle: ann denied", text)
    assert "Escalation packet" in text and "recommended:" in text
    assert "doc/b: b should be 2" in text  # the unresolved state it hands over
    assert _row(text, "s1")[-1] == "done"
