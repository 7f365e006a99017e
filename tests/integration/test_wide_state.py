"""Invariant 8 by the state's width: a cycle looks only at the parts it changed (copy-on-write
forks, per-part change tracking, snapshots spaced by the number of parts), and that changes
nothing a run stores or resumes to.

The loop here has a wide state (70 filler parts, so snapshots come every parts ÷ 20 = 3+
checkpoints whatever ``snapshot_every`` says), adds a part every cycle, accepts parts over
time, improves on some cycles and not others, and runs a held-out verifier that writes into
what it judges. The oracle is the same run with every checkpoint a full snapshot written by
a full walk of the state (``SNAPSHOT_SHARE`` patched so that ``snapshot_every=1`` holds):
incremental and full bookkeeping must store the same thing. Crashes are placed at phase
boundaries, as in ``test_append_only_state``; nothing depends on timing.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_append_only_state import SLOW, crash_points, outcome
from test_append_only_state import run_with_crashes as crashing

import loopwright as lw
from loopwright import _checkpoint

CYCLES = 12
FILLER = 70
TASK = {
    "goal": "a wide state that keeps growing",
    "artifacts": {"doc": {"a": "a0", "b": "b0", **{f"f{i}": "" for i in range(FILLER)}}},
    "held_out": {"a": "a4"},
}


def actor(ctx: lw.Context) -> lw.Proposal:
    n = ctx.cycle
    doc = ctx.artifacts["doc"]
    edits: dict[str, Any] = {"b": f"b{n % 3}", f"new{n}": {"n": n, "tags": ["t"]}}
    if not ctx.is_accepted("doc", "a"):
        edits["a"] = f"a{n}"
    filler = f"f{(n * 7) % FILLER}"
    if not ctx.is_accepted("doc", filler) and doc[filler] == "":
        edits[filler] = f"x{n}"
    return lw.Proposal.edit("doc", edits)


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    v = state.values()["doc"]
    findings = [lw.Finding("b is never right", "doc", "b", "content")]
    if v["a"] not in ("a4", "a5"):
        findings.append(lw.Finding("a is not right yet", "doc", "a", "content"))
    n = state.cycle + 1
    # Odd cycles judge only what they changed (``checked``); even ones judge everything, so
    # every clean part is accepted then. The score rises every third cycle (an improvement).
    checked = tuple(e.ref for e in proposal.changes()) if n % 2 else None
    return lw.Verdict(passed=False, score=0.1 * (n // 3), findings=tuple(findings), checked=checked)


def held_out(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    # A misbehaving held-out verifier: it writes into what it judges. None of it may reach
    # the run (invariant 3).
    for e in proposal.changes():
        part = state.part(e.ref)
        assert part is not None
        if isinstance(part.value, dict):
            part.value["tags"].append("held-out was here")
        state.set_part("doc", e.part, "overwritten by the held-out check", 99)
    state.task["held_out"]["a"] = "changed"
    return lw.Verdict(passed=state.part("doc/a").count > 0, score=0.5)  # type: ignore[union-attr]


def make_loop() -> lw.Loop:
    return lw.Loop(
        name="wide",
        actor=actor,
        verifiers=[
            lw.Check(fn=check, name="check"),
            lw.Check(fn=held_out, name="hidden", held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )


def run_with_crashes(db: Path, k: int, crashes: list[tuple[str, int]]) -> None:
    crashing(db, k, crashes, make=make_loop, task=TASK, cycles=CYCLES)


_RUNS: dict[tuple[int, bool], dict[str, Any]] = {}


def reference(k: int, *, full: bool = False) -> dict[str, Any]:
    if (k, full) not in _RUNS:
        with tempfile.TemporaryDirectory(prefix="lw-wide-") as folder:
            db = Path(folder) / "ref.db"
            if full:
                with pytest.MonkeyPatch.context() as m:
                    m.setattr(_checkpoint, "SNAPSHOT_SHARE", 10**9)
                    run_with_crashes(db, 1, [])
            else:
                run_with_crashes(db, k, [])
            _RUNS[(k, full)] = outcome(db)
    return _RUNS[(k, full)]


def test_the_wide_run_exercises_what_it_must() -> None:
    ref = reference(50, full=True)
    assert ref["status"] == ("stopped", "budget_cycles", CYCLES, 0.4)
    parts = {p["name"]: p for p in ref["state"]["artifacts"][0]["parts"]}
    assert len(parts) == 2 + FILLER + CYCLES  # a new part every cycle
    status = {name: p["versions"][-1]["status"] for name, p in parts.items()}
    assert status["b"] == "rejected" and status["a"] == "accepted"
    assert status["new2"] == "accepted" and status["f14"] == "accepted"
    # nothing the held-out check wrote reached the run
    assert parts["new3"]["versions"][-1]["value"] == {"n": 3, "tags": ["t"]}
    assert all(
        v["value"] != "overwritten by the held-out check"
        for p in parts.values()
        for v in p["versions"]
    )
    assert ref["state"]["task"]["held_out"] == {"a": "a4"}
    # best_parts was set on the improving cycles, with the parts of the best cycle
    assert ref["state"]["best_cycle"] == 12 and ref["state"]["best_parts"]["doc/new12"] == 1


@pytest.mark.parametrize("k", [1, 2, 5, 50])
def test_incremental_bookkeeping_stores_what_a_full_walk_stores(k: int) -> None:
    assert reference(k) == reference(50, full=True)


def test_snapshots_are_spaced_by_the_number_of_parts(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    with lw.Runtime(db, snapshot_every=1) as rt:
        r = rt.run_sync(make_loop(), TASK, task_key="k")
        rows = rt.store._checkpoint_rows(r.run_id, latest=False)
    snapshots = [row.seq for row in rows if row.seq == row.base]
    # 72 parts at the start, 84 at the end: a snapshot every 3, then every 4 checkpoints
    gaps = {b - a for a, b in itertools.pairwise(snapshots[1:])}
    assert gaps <= {3, 4} and len(snapshots) < len(rows) / 2


@SLOW
@given(k=st.integers(min_value=1, max_value=6), crashes=crash_points(CYCLES))
def test_a_wide_run_crashed_anywhere_resumes_to_the_uninterrupted_state(
    k: int, crashes: list[tuple[str, int]]
) -> None:
    with tempfile.TemporaryDirectory(prefix="lw-wide-crash-") as folder:
        db = Path(folder) / "run.db"
        run_with_crashes(db, k, crashes)
        assert outcome(db) == reference(50, full=True)


def test_listing_checkpoints_resolves_each_state_when_read(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    with lw.Runtime(db, snapshot_every=2) as rt:
        r = rt.run_sync(make_loop(), TASK, task_key="k")
        cks = rt.store.checkpoints(r.run_id)
        latest = rt.store.latest_checkpoint(r.run_id)
        backwards = [ck.state for ck in reversed(rt.store.checkpoints(r.run_id))]
    # read after the store is closed: what a state needs was read with the list
    assert cks[-1].state == latest.state and cks[-1] == latest
    assert [ck.state["cycle"] for ck in cks] == [ck.cycle for ck in cks]
    # read in order (each from the one before) or not: the same states
    assert [ck.state for ck in cks] == backwards[::-1]
    counts = [len(ck.state["artifacts"][0]["parts"]) for ck in cks if ck.record]
    assert counts == sorted(counts) and counts[-1] == 2 + FILLER + CYCLES
