"""Invariant 1 (durability) under real crashes: SIGKILL a running loop at random moments,
restart it, and check that the run ends exactly where an uninterrupted one ends.

Each case runs the loop of ``crashloop/`` (eight parts, one repaired per slow cycle) twice in
subprocesses: once uninterrupted (the reference), once killed with ``SIGKILL`` after a seeded
random delay and restarted with the same ``task_key`` until it ends. Then it checks, against the
store itself:

* the final state (artifacts with every version and status, plan, findings, history, scores,
  spend other than wall time), stop reason, status and cycle count equal the reference's;
* checkpoint sequence numbers are contiguous; each cycle is committed exactly once with its
  record, the only repeated cycle numbers being status-only commits (resume, stop);
* the per-cycle events (cycle_started, proposal, verdicts, decision, stopped) appear once per
  committed cycle and equal the reference's, in order;
* no accepted part version is ever lost or changed in any later checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

HERE = Path(__file__).resolve().parent / "crashloop"
SPEC = HERE / "loop.toml"
BUDGET_SPEC = HERE / "loop_budget.toml"  # max_cycles = 6
RUNNER = HERE / "runner.py"
KEY = "crash-resume-1"
KILLS = 5
CYCLE_EVENTS = ("cycle_started", "proposal", "proposal_refused", "verdict", "decision", "stopped")

PARTS = [f"p{i}" for i in range(8)]
TARGET = {p: f"{p.upper()}-OK" for p in PARTS}


def _task(*, hard: list[str], stubborn: list[str]) -> dict[str, Any]:
    start = {p: ("draft" if p not in ("p0", "p6") else TARGET[p]) for p in PARTS}
    return {
        "goal": "make every part match its target",
        "artifacts": {"doc": start},
        "target": TARGET,
        "hard": hard,
        "stubborn": stubborn,
        "plan": [
            {"id": "first-half", "parts": [f"doc/{p}" for p in PARTS[:4]]},
            {
                "id": "second-half",
                "depends_on": ["first-half"],
                "parts": [f"doc/{p}" for p in PARTS[4:]],
            },
        ],
    }


SUCCESS_TASK = _task(hard=["p2", "p5", "p7"], stubborn=[])
STALL_TASK = _task(hard=["p3"], stubborn=["p5"])


def _popen(db: Path, spec: Path, task_file: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CRASHLOOP_CALLS": str(db) + ".calls"}
    env.pop("LOOPWRIGHT_STORE", None)
    return subprocess.Popen(
        [sys.executable, str(RUNNER), str(db), str(spec), str(task_file), KEY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_ready(proc: subprocess.Popen[str], timeout: float = 30.0) -> bool:
    """Wait for the runner's ``ready`` line; False when it exited first."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        readable, _, _ = select.select([proc.stdout], [], [], 0.05)
        if readable:
            line = proc.stdout.readline()
            if line.strip() == "ready":
                return True
            if line == "":
                return False
    pytest.fail("the runner never said it was ready")


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"runner failed ({proc.returncode}):\n{err}"
    return dict(json.loads(out.strip().splitlines()[-1]))


def _reference(tmp: Path, spec: Path, task_file: Path) -> Path:
    db = tmp / "reference.db"
    proc = _popen(db, spec, task_file)
    _finish(proc)
    return db


def _crashed(tmp: Path, spec: Path, task_file: Path, seed: int) -> tuple[Path, int]:
    """Run with SIGKILLs at seeded random moments until the run ends; returns (db, kills)."""
    db = tmp / "crashed.db"
    rng = random.Random(seed)
    kills = 0
    for _ in range(KILLS):
        proc = _popen(db, spec, task_file)
        if not _wait_ready(proc):
            _finish(proc)
            return db, kills
        time.sleep(rng.uniform(0.01, 0.15))
        if proc.poll() is not None:  # it ended before the kill came
            _finish(proc)
            return db, kills
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        if proc.returncode == -signal.SIGKILL:
            kills += 1
        else:  # it finished in the instant between poll() and kill()
            assert proc.returncode == 0
            return db, kills
    _finish(_popen(db, spec, task_file))  # the last restart runs to the end
    return db, kills


def _no_wall_time(value: Any) -> Any:
    """Drop measured durations and run ids: the only things allowed to differ between runs."""
    if isinstance(value, dict):
        return {
            k: _no_wall_time(v)
            for k, v in value.items()
            if k not in ("seconds", "ts", "created_at", "run_id", "show")
        }
    if isinstance(value, list):
        return [_no_wall_time(v) for v in value]
    return value


def _snapshot(db: Path) -> dict[str, Any]:
    with lw.Runtime(str(db)) as rt:
        run = rt.store.get_run(KEY)
        return {
            "run": run,
            "checkpoints": rt.store.checkpoints(run.run_id),
            "events": rt.store.events(run.run_id),
        }


def _check_checkpoints(checkpoints: list[Any]) -> dict[int, dict[str, Any]]:
    """Contiguous seqs, every cycle committed once; returns the record of each cycle."""
    assert [c.seq for c in checkpoints] == list(range(len(checkpoints)))
    records: dict[int, dict[str, Any]] = {}
    prev = 0
    for ck in checkpoints:
        assert ck.cycle == ck.state["cycle"]
        if ck.cycle == prev:
            assert ck.record is None, f"cycle {ck.cycle} committed twice (seq {ck.seq})"
        else:
            assert ck.cycle == prev + 1, f"gap: cycle {prev} then {ck.cycle} (seq {ck.seq})"
            assert ck.record is not None and ck.record["cycle"] == ck.cycle
            records[ck.cycle] = ck.record
        prev = ck.cycle
    assert sorted(records) == list(range(1, prev + 1))
    return records


def _check_accepted_kept(checkpoints: list[Any]) -> int:
    """No accepted version is lost or changed in any later checkpoint; returns how many."""
    seen: dict[tuple[str, str, int], Any] = {}
    for ck in checkpoints:
        versions = {
            (a["name"], p["name"], v["n"]): v
            for a in ck.state["artifacts"]
            for p in a["parts"]
            for v in p["versions"]
        }
        for key, value in seen.items():
            assert key in versions, f"accepted version {key} lost at seq {ck.seq}"
            assert versions[key]["status"] == "accepted", f"{key} un-accepted at seq {ck.seq}"
            assert versions[key]["value"] == value, f"{key} changed at seq {ck.seq}"
        for key, v in versions.items():
            if v["status"] == "accepted":
                seen.setdefault(key, v["value"])
    return len(seen)


def _cycle_events(events: list[Any]) -> list[tuple[int, str, Any]]:
    return [(e.cycle, e.kind, _no_wall_time(e.data)) for e in events if e.kind in CYCLE_EVENTS]


@pytest.mark.parametrize(
    ("spec", "task", "expected", "seeds"),
    [
        pytest.param(SPEC, SUCCESS_TASK, ("accepted", "success"), (11, 12, 13), id="success"),
        pytest.param(SPEC, STALL_TASK, ("stopped", "no_progress"), (21, 22), id="no_progress"),
        pytest.param(BUDGET_SPEC, SUCCESS_TASK, ("stopped", "budget_cycles"), (31,), id="budget"),
    ],
)
def test_sigkill_and_resume_equals_uninterrupted(
    tmp_path: Path,
    spec: Path,
    task: dict[str, Any],
    expected: tuple[str, str],
    seeds: tuple[int, ...],
) -> None:
    task_file = tmp_path / "task.json"
    task_file.write_text(json.dumps(task))
    (tmp_path / "ref").mkdir()
    ref = _snapshot(_reference(tmp_path / "ref", spec, task_file))
    assert (ref["run"].status, ref["run"].stop_reason) == expected
    ref_records = _check_checkpoints(ref["checkpoints"])
    assert len(ref_records) >= 6  # long enough for kills to land mid-run
    ref_final = ref["checkpoints"][-1].state
    redone = 0
    for seed in seeds:
        work = tmp_path / f"seed{seed}"
        work.mkdir()
        db, kills = _crashed(work, spec, task_file, seed)
        assert kills >= 2, f"seed {seed}: only {kills} kill(s) landed before the run ended"
        got = _snapshot(db)
        run = got["run"]
        where = f"seed {seed}, {kills} kill(s)"

        assert (run.status, run.stop_reason, run.cycle) == (
            ref["run"].status,
            ref["run"].stop_reason,
            ref["run"].cycle,
        ), where
        assert (run.best_score, run.held_out_passed, run.tokens) == (
            ref["run"].best_score,
            ref["run"].held_out_passed,
            ref["run"].tokens,
        ), where
        assert run.cost_usd == pytest.approx(ref["run"].cost_usd), where
        assert _no_wall_time(run.packet) == _no_wall_time(ref["run"].packet), where

        final = got["checkpoints"][-1].state
        assert final["artifacts"] == ref_final["artifacts"], where  # values, versions, statuses
        assert _no_wall_time(final) == _no_wall_time(ref_final), where

        records = _check_checkpoints(got["checkpoints"])
        assert _no_wall_time(records) == _no_wall_time(ref_records), where
        assert _check_accepted_kept(got["checkpoints"]) >= 2, where

        events = _cycle_events(got["events"])
        assert events == _cycle_events(ref["events"]), where
        per_cycle = Counter((c, k) for c, k, _ in events)
        for n in range(1, run.cycle + 1):
            for kind in ("cycle_started", "proposal", "decision"):
                assert per_cycle[(n, kind)] == 1, (
                    f"{where}: cycle {n} has {per_cycle[(n, kind)]} {kind}"
                )
            assert per_cycle[(n, "verdict")] == 2, where
        assert sum(1 for e in got["events"] if e.kind == "stopped") == 1, where
        assert sum(1 for e in got["events"] if e.kind == "resumed") >= 1, where
        # Cycles whose actor ran more than once: a kill interrupted them in flight and the
        # resumed process did them again, committing them once.
        calls = Counter(Path(str(db) + ".calls").read_text().split())
        redone += sum(1 for c in calls.values() if c > 1)
    assert redone >= 1, "no kill landed inside a cycle"
