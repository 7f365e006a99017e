"""The actor's ``Context.history`` is a window of the last ``history_window`` cycles
(docs/storage.md), also for a run resumed by a runtime whose window differs from the one that
wrote its checkpoints: a larger window is filled from the run's earlier checkpoints, a smaller
one is cut, before the first cycle after the resume. Crashes are placed at phase boundaries
(``support.crash``): nothing here depends on timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.crash import Crash, phase_hook

import loopwright as lw

CYCLES = 40
TASK = {"goal": "a window of history", "artifacts": {"doc": {"p": ""}}}


def make_loop(seen: dict[int, list[dict[str, Any]]]) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        seen[ctx.cycle] = [dict(h) for h in ctx.history]
        return lw.Proposal.edit("doc", {"p": f"v{ctx.cycle % 7}"})  # no use of the history

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        v = str(state.values()["doc"]["p"])
        return lw.Verdict(
            passed=False, score=int(v[1:]) / 10, findings=(lw.Finding("no", "doc", "p", "x"),)
        )

    return lw.Loop(
        name="window",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )


def contexts(
    db: Path | str, steps: list[tuple[int, int, tuple[str, int] | None]]
) -> dict[int, list[dict[str, Any]]]:
    """Run the loop with each ``(snapshot_every, history_window, crash)`` in turn (a new
    runtime each time, as a restarted process), to the end; each cycle's context history as
    the last runtime's actor saw it."""
    seen: dict[int, list[dict[str, Any]]] = {}
    for k, window, crash in steps:
        seen.clear()
        with lw.Runtime(db, snapshot_every=k, history_window=window) as rt:
            rt._on_phase = phase_hook(crash)
            try:
                r = rt.run_sync(make_loop(seen), TASK, task_key="k")
            except Crash:
                continue
        assert r.cycles == CYCLES
    return seen


@pytest.mark.parametrize("k", [1, 4, 50])
@pytest.mark.parametrize(("before", "after"), [(3, 10), (10, 3), (1, 25), (5, 5)])
def test_a_resumed_run_shows_the_window_its_runtime_asks_for(
    tmp_path: Path, k: int, before: int, after: int
) -> None:
    want = contexts(tmp_path / "ref.db", [(k, after, None)])
    # the 30th commit of a cycle's checkpoint (the first commit is the run's start)
    got = contexts(tmp_path / "run.db", [(k, before, ("after_checkpoint", 30)), (k, after, None)])
    resumed = min(got)  # the first cycle the resumed runtime ran
    assert 25 <= resumed <= 31, resumed
    assert list(got) == list(range(resumed, CYCLES + 1))
    for c in got:
        assert len(got[c]) == min(after, c - 1), (c, len(got[c]))
        assert got[c] == want[c], c


def test_the_window_is_filled_on_each_store(tmp_path: Path, url: str) -> None:
    want = contexts(tmp_path / "ref.db", [(4, 12, None)])
    got = contexts(url, [(4, 2, ("after_checkpoint", 30)), (4, 12, None)])
    assert min(got) >= 25
    assert all(got[c] == want[c] for c in got)
    assert len(got[min(got)]) == 12
