"""A cycle parked, approved after a person's edit, judged again and parked again on a further
request (a risk rule the edited state meets), whose effects then fail: each parked record holds
the spend before it, and the rows list it once (show48's carried records, pinned for this path
by review48c: waiting on the second request, and once its effects failed)."""

from __future__ import annotations

import dataclasses

import pytest
from support.printed import shown_text
from test_show_ended_inside import _json
from test_show_parked_cost import TASK, _loop, _rows

import loopwright as lw


def test_a_cycle_parked_again_after_its_approval_lists_its_spend_once(url: str) -> None:

    def edited(state: lw.TaskState, proposal: lw.Proposal, verdicts: object) -> str | None:
        return "x was edited" if state.artifacts["inv"].values()["x"] == 2 else None

    def loop(fails: bool = False) -> lw.Loop:
        base = _loop(fails=fails)
        rule = lw.RiskRule(name="edited", check=edited)
        return dataclasses.replace(base, contract=dataclasses.replace(base.contract, risk=(rule,)))

    def listed(run_id: str) -> float:
        doc = _json(url, run_id)
        total = sum((c.get("usage") or {}).get("cost_usd", 0) for c in doc["cycles"])
        assert total == pytest.approx(doc["run"]["cost_usd"])
        return float(total)

    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop(), TASK, task_key="t")
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "inv/x", 2, by="ana")
        rt.approve(r.run_id, by="ann")
        r = rt.resume_sync(r.run_id, loop())
        assert r.status == "awaiting_approval"  # (on the rule the edit meets)
        assert listed(r.run_id) == pytest.approx(0.07)
        rt.approve(r.run_id, by="ann")
        r = rt.resume_sync(r.run_id, loop(fails=True))
    assert r.status == "escalated"
    assert listed(r.run_id) == pytest.approx(r.spent.cost_usd) == pytest.approx(0.07)
    rows = _rows(shown_text(url, r.run_id)[0])
    assert rows.count("$0.0") == 1, rows
