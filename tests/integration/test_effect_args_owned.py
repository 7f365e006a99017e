"""An effect that changes its arguments in place changes neither the proposal the cycle
records nor what the engine judged: it is given its own copy, as a verifier is (DESIGN.md:
"what is judged is what is stored"). Before, the effect was handed the proposal's own nested
values (``Effect.bind`` copied the top level only): the record showed arguments the actor
never proposed, whose digest was not the record's ``digest``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import loopwright as lw

TASK = {"goal": "g", "artifacts": {"doc": {"a": "", "b": ""}}}


def test_an_effect_changing_its_arguments_changes_no_record(tmp_path: Path) -> None:
    seen: list[Any] = []

    def _send(n: str, bag: list[Any], meta: dict[str, Any]) -> dict[str, Any]:
        seen.append((list(bag), dict(meta)))
        bag.append("changed by the effect")  # in place: the actor's proposal must not see it
        meta["extra"] = 1
        return {"ok": n}

    send = lw.effect("send", name="send", requires_success=False)(_send)

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {"b": f"b{ctx.cycle}"}).edits,
            effects=(send.call(n=f"m{ctx.cycle}", bag=[1, [2]], meta={"k": "v"}),),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    loop = lw.Loop(
        name="fx",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[send],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
    )
    with lw.Runtime(tmp_path / "s.db", group_commit=False) as rt:
        r = rt.run_sync(loop, TASK, task_key="fx")
        assert (r.cycles, r.stop_reason) == (2, "budget_cycles")
        records = [c.record for c in rt.store.checkpoints(r.run_id) if c.record]
    # each call saw the arguments as proposed (the second not the first's changes)...
    assert seen == [([1, [2]], {"k": "v"})] * 2
    decided = [x for x in records if x.get("decision") == "revise"]
    assert len(decided) == 2
    for rec in decided:
        # ...and each cycle's record holds the proposal as the actor made it, whose digest is
        # the record's
        (call,) = rec["proposal"]["effects"]
        assert call["args"]["bag"] == [1, [2]] and call["args"]["meta"] == {"k": "v"}
        assert lw.Proposal.from_dict(rec["proposal"]).digest() == rec["digest"]
