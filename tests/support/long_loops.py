"""The loop the long-run tests drive: the actor edits one part a cycle, the check rejects
every proposal with one located finding, until the cycle budget ends the run. Each test
says what a cycle writes (``edit``: cycle number → the parts' new values)."""

from __future__ import annotations

from collections.abc import Callable

import loopwright as lw


def rejecting_loop(
    cycles: int, edit: Callable[[int], dict[str, str]], *, usage: lw.Usage | None = None
) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", edit(ctx.cycle), usage=usage)

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "p0"),))

    return lw.Loop(
        name="long",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )
