"""A part the actor creates during a run (not in the task's artifacts) is held in memory like
any other once committed: its current, accepted and best versions, not every version it ever
had (invariant 8). Before, such a part had no way to read its versions back from the store,
so ``trim`` kept all of them: a run whose actor adds a part (a comic's new panel, a draft's
new section) and edits it every cycle held every value it ever wrote (a 2,000-cycle run of
7 KB values: 52 MB of RSS at its end against 36 MB at cycle 200)."""

from __future__ import annotations

from pathlib import Path

import loopwright as lw

CYCLES = 60


def _loop(held: list[int]) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"added": f"draft {ctx.cycle} " * 20, "seed": ctx.cycle})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        for ref in ("doc/added", "doc/seed"):
            part = state.part(ref)
            assert part is not None
            held.append(len(part.known))
        f = lw.Finding("not yet", "doc", "added", "style")
        return lw.Verdict(passed=False, score=0.5, findings=(f,))

    return lw.Loop(
        name="new-parts",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(
            success=lw.Success(min_score=0.98, accept_parts="on_success"),
            budget=lw.Budget(max_cycles=CYCLES),
        ),
    )


def test_a_part_created_by_the_actor_does_not_hold_every_version(tmp_path: Path) -> None:
    held: list[int] = []
    with lw.Runtime(tmp_path / "s.db") as rt:
        result = rt.run_sync(_loop(held), {"artifacts": {"doc": {"seed": 0}}}, task_key="k")
        assert result.cycles == CYCLES
        # every verifier call sees the candidate: the held versions plus the new one
        assert len(held) == 2 * CYCLES
        assert max(held[-20:]) <= 4, held[-20:]
        # and every version is still there, read from the store
        versions = result.state.part("doc/added").versions  # type: ignore[union-attr]
        assert [v.n for v in versions] == list(range(1, CYCLES + 1))
        assert [v.value for v in versions] == [f"draft {c} " * 20 for c in range(1, CYCLES + 1)]
