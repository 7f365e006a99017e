"""A loop that performs one effect every cycle (each adds a note and a journal entry) and
rejects every proposal: the workload of the tests that check what an effect's cycles leave
behind does not grow with the run."""

from __future__ import annotations

from typing import Any

import loopwright as lw


def noted_loop(cycles: int) -> lw.Loop:
    """``cycles`` cycles, each editing ``doc/body`` and notifying once under its own key."""

    @lw.effect("notify", key=lambda a: f"n-{a['n']}", requires_success=False)
    def notify(n: int, *, key: str) -> dict[str, Any]:
        return {"sent": n}

    return lw.Loop(
        name="noted",
        actor=lambda ctx: lw.Proposal(
            edits=(lw.Edit("doc", "body", ctx.cycle),), effects=(notify.call(n=ctx.cycle),)
        ),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="c")],
        effects=(notify,),
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )
