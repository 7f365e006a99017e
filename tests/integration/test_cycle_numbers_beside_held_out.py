"""A loop with a visible and a held-out check numbers its cycles 1, 2, 3 and charges each
call once. heldout55b's verdict event bound the count of self-reported tests to ``n`` with a
walrus inside ``Cycle._cycle``, whose ``n`` is the cycle's number: every cycle was recorded as
cycle 0, and the spend of a run of four $0.05 calls read $0.50 (each cycle's commit counted
the spend since "cycle 0")."""

from __future__ import annotations

from pathlib import Path

import loopwright as lw

WANT = {"a": 1, "b": 2, "c": 3}


def _actor(ctx: lw.Context) -> lw.Proposal:
    fixes = {f.part: f.evidence["expected"] for f in ctx.findings[:1]}
    return lw.Proposal.edit("doc", fixes, usage=lw.Usage(cost_usd=0.05))


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    doc = state.artifacts["doc"].values()
    bad = tuple(
        lw.Finding(f"{k} wrong", "doc", k, "value", evidence={"expected": v})
        for k, v in WANT.items()
        if doc.get(k) != v
    )
    return lw.Verdict(passed=not bad, score=1 - len(bad) / len(WANT), findings=bad)


def test_cycles_are_numbered_and_charged_once_beside_a_held_out_check(tmp_path: Path) -> None:
    loop = lw.Loop(
        name="numbered",
        actor=_actor,
        verifiers=[
            lw.Check(fn=_check),
            lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="audit", held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=8)),
    )
    with lw.Runtime(f"sqlite:///{tmp_path / 's.db'}") as rt:
        rec = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0, "b": 0, "c": 0}}}, task_key="k")
        cycles = [e.cycle for e in rt.store.events(rec.run_id) if e.kind == "cycle_started"]
    assert rec.status == "accepted"
    assert cycles == [1, 2, 3, 4]
    assert rec.cycles == 4
    assert abs(rec.spent.cost_usd - 0.20) < 1e-9
