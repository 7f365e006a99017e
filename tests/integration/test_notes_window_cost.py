"""A cycle's work must not grow with the notes its state holds (invariant 8; bench/RESULTS.md,
seventh stop). An effect's result, a person's approval or answer, an edit: each adds a note,
and the state keeps the newest ``NOTES_WINDOW``. Every commit deep-copied that window into
its head and every cycle's candidate copied each note, so a loop with an effect every cycle
paid for up to 100 notes twice a cycle, and one that parks for a person every 25 cycles paid
more each cycle until cycle 2,500. The test counts the Python calls a cycle makes (cProfile's
count, not its time) when the state holds a few notes and when it holds many."""

from __future__ import annotations

import cProfile
from pathlib import Path
from typing import Any

from support.call_counts import work_calls
from support.effect_loops import noted_loop

import loopwright as lw
from loopwright._checkpoint import NOTES_WINDOW

CYCLES = 100
EARLY = (6, 16)  # the state holds 5 to 15 effect notes
LATE = (CYCLES - 10, CYCLES)  # 89 to 99


def _calls_per_cycle(tmp_path: Path) -> tuple[float, float, int]:
    profiles = {w: cProfile.Profile() for w in (EARLY, LATE)}
    seen: list[int] = []

    @lw.effect("notify", key=lambda a: f"n-{a['n']}", requires_success=False)
    def notify(n: int, *, key: str) -> dict[str, Any]:
        return {"sent": n, "channel": "mail", "to": ["a@example.org"]}

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(len(ctx.notes))
        return lw.Proposal(
            edits=(lw.Edit("doc", "body", f"draft {ctx.cycle}"),),
            effects=(notify.call(n=ctx.cycle),),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        # the verifier of cycle k runs once a cycle: profile whole cycles, boundary to boundary
        k = len(seen)
        for (a, b), prof in profiles.items():
            if k == a:
                prof.enable()
            elif k == b:
                prof.disable()
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still open", "doc", "body"),)
        )

    loop = lw.Loop(
        name="noted",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        effects=(notify,),
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )
    # no writer thread, no heartbeat inside the test, no memory: the same calls every cycle
    with lw.Runtime(tmp_path / "s.db", group_commit=False, memory=False, lease_ttl_s=3600) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"body": ""}}}, task_key="T")
    assert (r.cycles, r.stop_reason) == (CYCLES, "budget_cycles")

    def per_cycle(w: tuple[int, int]) -> float:
        # the cycle's own calls: the event loop's go with the machine's load (support.call_counts)
        return work_calls(profiles[w]) / (w[1] - w[0])

    return per_cycle(EARLY), per_cycle(LATE), seen[-1]


def test_a_cycle_costs_the_same_with_many_notes_as_with_few(tmp_path: Path) -> None:
    early, late, notes = _calls_per_cycle(tmp_path)
    assert notes == CYCLES - 1 <= NOTES_WINDOW  # the late cycles' states held many notes
    # Before: ≈ 2,400 calls a cycle with 10 notes, ≈ 9,100 with 95 (the deep copy of the
    # window in every head, the copy of each note in every candidate; counted with builtins and
    # the event loop's calls, which this count now leaves out). The slack covers the
    # store's B-trees getting a level deeper, not a cost per note.
    assert late <= early * 1.03, (early, late)


def test_notes_survive_the_store_as_they_are(tmp_path: Path) -> None:
    """Heads share the notes' entries with the state: what is loaded is what was kept."""
    loop = noted_loop(NOTES_WINDOW + 7)
    with lw.Runtime(tmp_path / "s.db", snapshot_every=5) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"body": 0}}}, task_key="T")
        loaded = rt.store.latest_checkpoint(r.run_id).task_state()
    assert r.state is not None
    assert loaded.notes == r.state.notes
    assert len(loaded.notes) == NOTES_WINDOW
    assert [n["cycle"] for n in loaded.notes] == list(range(8, NOTES_WINDOW + 8))
    assert loaded.notes[-1]["result"] == {"sent": NOTES_WINDOW + 7}
