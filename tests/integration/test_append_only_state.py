"""Invariant 8 — a cycle's checkpoint is a delta, versions are rows written once, snapshots keep
loading bounded — and invariant 1 still holds on that layout: a run crashed anywhere (between a
delta and its snapshot included) resumes to the state an uninterrupted run reaches, for any
snapshot interval K.

Crashes are placed at phase boundaries of the cycle (``Runtime._on_phase``): in process, by a
``BaseException`` no engine handler catches (nothing after it is committed), and in a real
subprocess by SIGKILL. Nothing here depends on timing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.crash import Crash, phase_hook

import loopwright as lw
from loopwright import _state_codec as codec

CYCLES = 10
PHASES = ("before_actor", "after_actor", "before_checkpoint", "after_checkpoint")
TASK = {
    "goal": "three parts, one accepted early, one never",
    "artifacts": {"doc": {"a": "a0", "b": "b0", "c": "c0"}},
    "plan": [{"id": "s1", "parts": ["doc/a"]}, {"id": "s2", "parts": ["doc/c"]}],
}


def actor(ctx: lw.Context) -> lw.Proposal:
    n = ctx.cycle
    edits: dict[str, Any] = {"b": f"b{n % 3}"}  # b's values repeat: cycle 7 repeats cycle 4
    if not ctx.is_accepted("doc", "a"):
        edits["a"] = f"a{n}"
    if n == 6:
        edits["c"] = "c-final"
    return lw.Proposal.edit("doc", edits)


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    v = state.values()["doc"]
    findings = [lw.Finding("b is never right", "doc", "b", "content")]
    if v["a"] not in ("a3",):
        findings.append(lw.Finding("a is not a3 yet", "doc", "a", "content"))
    if v["c"] != "c-final":
        findings.append(lw.Finding("c is not final", "doc", "c", "content"))
    return lw.Verdict(passed=False, score=1 - len(findings) / 4, findings=tuple(findings))


def make_loop() -> lw.Loop:
    return lw.Loop(
        name="append-only",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )


# A run's id as advice names it (``loopwright show 0123456789ab``): the id is the one thing
# a crashed run's text may differ in from the uninterrupted run's.
RUN_ID = re.compile(r"\b[0-9a-f]{12}\b")


def _no_time(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_time(v) for k, v in value.items() if k not in ("seconds", "created_at")}
    if isinstance(value, list):
        return [_no_time(v) for v in value]
    if isinstance(value, str):
        return RUN_ID.sub("RUN", value)
    return value


def outcome(db: Path) -> dict[str, Any]:
    """What must not depend on crashes: the final state with every version, each concluded
    cycle's record and its checkpoint's state (values, statuses, counts), the stored digests."""
    with lw.Runtime(db) as rt:
        rec = rt.store.get_run("k")
        r = rt.result(rec.run_id)
        cycles = {}
        for ck in rt.store.checkpoints(rec.run_id):
            if ck.record and "proposal" in ck.record:
                st_ = ck.task_state()
                cycles[ck.cycle] = {
                    "record": _no_time({k: ck.record[k] for k in ("digest", "decision", "score")}),
                    "duplicate": ck.record["duplicate"],
                    "state": _no_time(st_.to_dict()),
                }
        return {
            "status": (r.status, r.stop_reason, r.cycles, r.best_score),
            "state": _no_time(r.state.to_dict()),
            "cycles": cycles,
            "rejected": sorted(rt.store.rejected_digests(rec.run_id)),
        }


def run_with_crashes(
    db: Path,
    k: int,
    crashes: list[tuple[str, int]],
    *,
    make: Callable[[], lw.Loop] = make_loop,
    task: dict[str, Any] = TASK,
    cycles: int = CYCLES,
) -> int:
    """Run ``make()`` on ``task``, crashing at each point in turn (a new runtime each time),
    then to the end (``cycles`` cycles). Returns how many crashes happened."""
    happened = 0
    for crash in [*crashes, None]:
        with lw.Runtime(db, snapshot_every=k, history_window=3) as rt:
            rt._on_phase = phase_hook(crash)
            try:
                r = rt.run_sync(make(), task, task_key="k")
            except Crash:
                happened += 1
                continue
        assert r.cycles == cycles
        return happened
    raise AssertionError("unreachable")


_REFERENCE: dict[tuple[Callable[[], lw.Loop], int], dict[str, Any]] = {}


def reference(k: int, make: Callable[[], lw.Loop] = make_loop) -> dict[str, Any]:
    """The outcome of an uninterrupted run of ``make()`` with snapshot interval ``k``."""
    if (make, k) not in _REFERENCE:
        with tempfile.TemporaryDirectory(prefix="lw-ref-") as folder:
            db = Path(folder) / "ref.db"
            assert run_with_crashes(db, k, [], make=make) == 0
            _REFERENCE[make, k] = outcome(db)
    return _REFERENCE[make, k]


def test_the_reference_run_exercises_what_the_layout_must_keep() -> None:
    ref = reference(3)
    assert ref["status"] == ("stopped", "budget_cycles", CYCLES, 0.75)
    parts = {p["name"]: p for p in ref["state"]["artifacts"][0]["parts"]}
    assert [v["value"] for v in parts["a"]["versions"]] == ["a0", "a1", "a2", "a3"]
    assert parts["a"]["versions"][-1]["status"] == "accepted"  # and never edited again
    assert len(parts["b"]["versions"]) == CYCLES + 1  # a new version every cycle
    assert [v["value"] for v in parts["c"]["versions"]] == ["c0", "c-final"]
    assert ref["cycles"][7]["duplicate"] is True  # cycle 7 proposes what cycle 4 did
    assert len(ref["state"]["history"]) == 3  # the window, not every cycle
    # b's values repeat (b1, b2, b0): 7 and 8 repeat 4 and 5, 10 repeats 7; 9 does not repeat
    # 6 (which also wrote c). Every other proposal was rejected and its digest stored once.
    dups = [n for n, c in ref["cycles"].items() if c["duplicate"]]
    assert dups == [7, 8, 10]
    assert len(ref["rejected"]) == len(set(ref["rejected"])) == CYCLES - len(dups)


@pytest.mark.parametrize("k", [1, 2, 5, 50])
def test_the_snapshot_interval_does_not_change_what_is_stored(k: int) -> None:
    assert reference(k) == reference(3)


def crash_points(cycles: int) -> st.SearchStrategy[list[tuple[str, int]]]:
    """One to three crashes, each at a phase boundary of one of ``cycles`` cycles."""
    return st.lists(
        st.tuples(st.sampled_from(PHASES), st.integers(min_value=1, max_value=cycles)),
        min_size=1,
        max_size=3,
    )


SLOW = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SLOW
@given(k=st.integers(min_value=1, max_value=6), crashes=crash_points(CYCLES))
def test_a_run_crashed_anywhere_resumes_to_the_uninterrupted_state(
    k: int, crashes: list[tuple[str, int]]
) -> None:
    with tempfile.TemporaryDirectory(prefix="lw-crash-") as folder:
        db = Path(folder) / "run.db"
        run_with_crashes(db, k, crashes)
        assert outcome(db) == reference(k)


# --- the same with a plan that changes every cycle -----------------------------------------------
# A checkpoint carries only the plan steps its cycle added or changed (the ``plan@`` delta): a
# step added each cycle, the previous one started, the one before done, every fourth waiting
# on part c (done by the engine when c is accepted, at cycle 6).
def plan_actor(ctx: lw.Context) -> lw.Proposal:
    base = actor(ctx)
    n = ctx.cycle
    status = {f"g{n - 1}": "in_progress"} if n >= 2 else {}
    if n >= 3:
        status[f"g{n - 2}"] = "done"
    waits = ("doc/c",) if n % 4 == 0 else ()
    return lw.Proposal(
        edits=base.edits,
        new_steps=(lw.PlanStep(id=f"g{n}", title=f"step {n}", parts=waits),),
        plan=status,
    )


def make_plan_loop() -> lw.Loop:
    return lw.Loop(
        name="append-only-plan",
        actor=plan_actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )


def test_the_plan_reference_run_changes_its_plan_every_cycle() -> None:
    ref = reference(3, make_plan_loop)
    plan = {s["id"]: s for s in ref["state"]["plan"]}
    assert list(plan) == ["s1", "s2", *(f"g{n}" for n in range(1, CYCLES + 1))]
    assert plan["s1"]["status"] == "done" and plan["s2"]["status"] == "done"  # parts accepted
    assert [plan[f"g{n}"]["status"] for n in range(1, CYCLES + 1)] == [
        *["done"] * (CYCLES - 2),
        "in_progress",
        "pending",
    ]
    # each concluded cycle's stored state has the plan as it was then (cycle 5: g1..g5)
    at5 = [s["id"] for s in ref["cycles"][5]["state"]["plan"]]
    assert at5 == ["s1", "s2", "g1", "g2", "g3", "g4", "g5"]
    assert reference(1, make_plan_loop) == ref == reference(50, make_plan_loop)


@SLOW
@given(k=st.integers(min_value=1, max_value=6), crashes=crash_points(CYCLES))
def test_a_run_whose_plan_changes_every_cycle_resumes_to_the_uninterrupted_state(
    k: int, crashes: list[tuple[str, int]]
) -> None:
    with tempfile.TemporaryDirectory(prefix="lw-plan-crash-") as folder:
        db = Path(folder) / "run.db"
        run_with_crashes(db, k, crashes, make=make_plan_loop)
        assert outcome(db) == reference(k, make_plan_loop)


def test_checkpoints_are_deltas_between_snapshots(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    with lw.Runtime(db, snapshot_every=4) as rt:
        r = rt.run_sync(make_loop(), TASK, task_key="k")
        rows = rt.store._checkpoint_rows(r.run_id, latest=False)
        bases = [row.base for row in rows]
        snapshots = [row.seq for row in rows if row.seq == row.base]
        # seq 0 (creation) and then every 4th checkpoint is a full head; the rest are deltas
        assert snapshots == [0, *range(1, rows[-1].seq + 1, 4)]
        for row in rows:
            if row.seq != row.base:
                assert row.base == max(s for s in snapshots if s < row.seq)
                assert "task" not in row.state and "goal" not in row.state  # unchanged keys
                assert "artifacts" not in row.state  # values are never in a checkpoint
        assert bases[-1] >= rows[-1].seq - 3
        # loading the latest state reads the rows from the last snapshot only
        assert len(rt.store._checkpoint_rows(r.run_id, latest=True)) <= 4
        # each version is one row, written once
        versions = rt.store._version_rows(r.run_id)
        assert len(versions) == len({(v[0], v[1]) for v in versions}) == 4 + (CYCLES + 1) + 2


def test_a_failed_commit_is_written_whole_by_the_next(tmp_path: Path) -> None:
    """The engine noted what a commit would store before it failed: the next commit must not
    build a delta on it (it writes a snapshot and every version held)."""
    db = tmp_path / "run.db"
    with lw.Runtime(db, snapshot_every=50) as rt:
        real = rt.store.commit_request
        calls = {"n": 0}

        def flaky(*args: Any, **kw: Any) -> bool:
            calls["n"] += 1
            if calls["n"] == 4:
                raise lw.StoreError("disk hiccup")
            return real(*args, **kw)

        rt.store.commit_request = flaky  # type: ignore[method-assign]
        with pytest.raises(lw.StoreError):
            rt.run_sync(make_loop(), TASK, task_key="k")
        rec = rt.store.get_run("k")
        assert rec.status == "failed"  # the engine ended it, with one more commit
        stored = rt.store.latest_checkpoint(rec.run_id).task_state()
        assert stored.cycle == rec.cycle
        for ref, p in stored.iter_parts():
            kept = rt.store.versions(rec.run_id, ref)
            assert [v.n for v in kept] == list(range(1, p.count + 1)), ref


# --- the same with real SIGKILLs ---------------------------------------------------------------
def _child(db: str, k: int, phase: str, n: int) -> None:
    seen: dict[str, int] = {}

    def on_phase(p: str) -> None:
        seen[p] = seen.get(p, 0) + 1
        if (p, seen[p]) == (phase, n):
            os.kill(os.getpid(), signal.SIGKILL)

    with lw.Runtime(db, snapshot_every=k, history_window=3) as rt:
        rt._on_phase = on_phase
        rt.run_sync(make_loop(), TASK, task_key="k")


@pytest.mark.parametrize(
    ("k", "phase", "n"),
    [(3, "before_checkpoint", 4), (3, "after_checkpoint", 3), (1, "before_actor", 6)],
)
def test_sigkill_between_delta_and_snapshot_resumes_to_the_same_state(
    tmp_path: Path, k: int, phase: str, n: int
) -> None:
    db = tmp_path / "run.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import test_append_only_state as t; t._child({str(db)!r}, {k}, {phase!r}, {n})",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # only a hung child takes this long
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    run_with_crashes(db, k, [])  # a new process resumes it (the lease holder is dead)
    assert outcome(db) == reference(k)


def test_state_dicts_read_back_as_they_were_written() -> None:
    s = lw.TaskState.from_task(TASK, task_key="t")
    s.set_part("doc", "a", "a1", 1)
    h = codec.head(s)
    rows, written = codec.unwritten_versions(s, {})
    assert len(rows) == 4 and set(written) == {
        ("doc/a", 1),
        ("doc/a", 2),
        ("doc/b", 1),
        ("doc/c", 1),
    }
    found = {(r[0], r[1]): r for r in rows}
    back = lw.TaskState.from_dict(json.loads(json.dumps(codec.resolve(h, found))))
    assert back.values() == s.values() and back.plan == s.plan
    assert codec.apply_delta(h, codec.delta(h, h)) == h


def test_a_loop_with_an_effect_every_cycle_keeps_constant_checkpoints(tmp_path: Path) -> None:
    """Effect results become notes every cycle: the notes are a window and their delta is the
    new entries only, so a late checkpoint is as small as an early one."""
    sent: list[str] = []
    send = lw.effect("send", name="send", requires_success=False)(
        lambda n: sent.append(n) or {"ok": n}
    )

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {"b": f"b{ctx.cycle}"}).edits,
            effects=(send.call(n=f"m{ctx.cycle}"),),
        )

    loop = lw.Loop(
        name="fx",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=300)),
        effects=[send],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
    )
    with lw.Runtime(f"sqlite:///{tmp_path / 'fx.db'}?durability=process") as rt:
        r = rt.run_sync(loop, TASK, task_key="fx")
        assert r.cycles == 300 and len(sent) == 300
        from loopwright._checkpoint import NOTES_WINDOW

        assert len(r.state.notes) == NOTES_WINDOW
        rows = rt.store._checkpoint_rows(r.run_id, latest=False)  # type: ignore[attr-defined]
        deltas = [len(json.dumps(row.state)) for row in rows if row.seq != row.base]
        early, late = max(deltas[20:60]), max(deltas[-40:])
        assert late <= early * 1.1 + 20, (early, late)
