"""Invariant 1 (durability) under real crashes: SIGKILL a running loop at seeded phase points,
restart it, and check that the run ends exactly where an uninterrupted one ends.

Each case runs the loop of ``crashloop/`` (eight parts, one repaired per cycle) twice in
subprocesses: once uninterrupted (the reference), once killed with ``SIGKILL`` and restarted with
the same ``task_key`` until it ends. Each killed process dies at a seeded phase boundary of the
engine's cycle (``CRASHLOOP_KILL=PHASE:N``, through ``Runtime._on_phase``), never after a timed
delay, so where the kills land does not depend on the machine's load. The first kill of each seed
comes right after the actor ran, so at least one cycle is interrupted in flight and done again.
Then it checks, against the store itself:

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
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from forkserver import Forked, child_process
from support.crash import less_owed
from test_append_only_state import RUN_ID

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


# Phase boundaries of a cycle (``Runtime._on_phase``). Every process first commits the run's
# status (one before/after_checkpoint pair), then each cycle reaches all four in this order.
PHASES = ("before_actor", "after_actor", "before_checkpoint", "after_checkpoint")


def _popen(
    db: Path, spec: Path, task_file: Path, kill: tuple[str, int] | None = None
) -> Forked | subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CRASHLOOP_CALLS": str(db) + ".calls"}
    env.pop("LOOPWRIGHT_STORE", None)
    env.pop("CRASHLOOP_KILL", None)
    if kill is not None:
        env["CRASHLOOP_KILL"] = f"{kill[0]}:{kill[1]}"
    # forked (tests/forkserver.py): the same runner, its own pid
    return child_process(
        [sys.executable, str(RUNNER), str(db), str(spec), str(task_file), KEY], env
    )


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate()
    assert proc.returncode == 0, f"runner failed ({proc.returncode}):\n{err}"
    return dict(json.loads(out.strip().splitlines()[-1]))


def _reference(tmp: Path, spec: Path, task_file: Path) -> Path:
    db = tmp / "reference.db"
    proc = _popen(db, spec, task_file)
    _finish(proc)
    return db


def _cycle(db: Path) -> int:
    """The run's last committed cycle (0 before it exists)."""
    if not db.exists():
        return 0
    with lw.Runtime(str(db)) as rt:
        runs = [r for r in rt.store.list_runs() if r.task_key == KEY]
        return runs[0].cycle if runs else 0


def _kill_point(rng: random.Random, phases: tuple[str, ...], span: int) -> tuple[str, int]:
    """A phase point within the process's first ``span`` cycles. A process first commits the
    run's status (checkpoint phase N=1), then cycle k reaches the actor phases for the k-th time
    and the checkpoint phases for the (k+1)-th time; so it commits at most ``span`` cycles."""
    k = rng.randint(1, span)
    phase = rng.choice(phases)
    return phase, (rng.randint(1, k + 1) if phase.endswith("checkpoint") else k)


def _crashed(tmp: Path, spec: Path, task_file: Path, seed: int, cycles: int) -> tuple[Path, int]:
    """Run with KILLS SIGKILLs at seeded phase points, then to the end; returns (db, kills).

    Each kill lands within the first ``span`` cycles of its process, ``span`` chosen so that
    the kills spread over the run and all land before its last cycle (``cycles`` is the
    reference's). The first kill comes after the actor, so that cycle is done again."""
    db = tmp / "crashed.db"
    rng = random.Random(seed)
    for i in range(KILLS):
        left = cycles - _cycle(db)
        span = (left - 1) // (KILLS - i)
        assert span >= 1, f"seed {seed}: {left} cycle(s) left for {KILLS - i} kill(s)"
        point = _kill_point(rng, ("after_actor",) if i == 0 else PHASES, span)
        proc = _popen(db, spec, task_file, kill=point)
        _, err = proc.communicate()
        assert proc.returncode == -signal.SIGKILL, (
            f"seed {seed}: expected a SIGKILL at {point}, got exit {proc.returncode}:\n{err}"
        )
    _finish(_popen(db, spec, task_file))  # the last restart runs to the end
    return db, KILLS


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
    if isinstance(value, str):  # advice names its run (``loopwright show 0123456789ab``)
        return RUN_ID.sub("RUN", value)
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
    # A cycle's decision names the lease of the execution that concluded it (crash54): after a
    # kill that is a later execution's than the uninterrupted run's, by design.
    return [
        (e.cycle, e.kind, _no_wall_time({k: v for k, v in e.data.items() if k != "lease"}))
        for e in events
        if e.kind in CYCLE_EVENTS
    ]


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
    assert len(ref_records) > KILLS  # room for every kill before the run's last cycle
    ref_final = ref["checkpoints"][-1].state
    for seed in seeds:
        work = tmp_path / f"seed{seed}"
        work.mkdir()
        db, kills = _crashed(work, spec, task_file, seed, ref["run"].cycle)
        got = _snapshot(db)
        run = got["run"]
        where = f"seed {seed}, {kills} kill(s)"

        assert (run.status, run.stop_reason, run.cycle) == (
            ref["run"].status,
            ref["run"].stop_reason,
            ref["run"].cycle,
        ), where
        # Every cycle's record as the uninterrupted run's, less what a redone cycle was charged
        # for the calls of its killed attempt (invariant 7: the provider billed them).
        records = _check_checkpoints(got["checkpoints"])
        assert records.keys() == ref_records.keys(), where
        shown: dict[int, Any] = {}
        owed: list[Any] = []
        for n, r in records.items():
            shown[n], charged = less_owed(r, ref_records[n])
            owed += charged
        assert _no_wall_time(shown) == _no_wall_time(ref_records), where
        # each actor call made again was charged for the one the kill interrupted
        calls = Counter(Path(str(db) + ".calls").read_text().split())
        again = sum(c - 1 for c in calls.values())
        assert sum(1 for c in owed if c["who"] == "actor") == again, where
        owed_cost = sum(c["cost_usd"] for c in owed)
        owed_tokens = sum(c["tokens"] for c in owed)

        assert (run.best_score, run.held_out_passed, run.tokens) == (
            ref["run"].best_score,
            ref["run"].held_out_passed,
            ref["run"].tokens + owed_tokens,
        ), where
        assert run.cost_usd == pytest.approx(ref["run"].cost_usd + owed_cost), where
        packet, ref_packet = run.packet or {}, ref["run"].packet or {}
        if "spent" in ref_packet:
            assert packet["spent"]["cost_usd"] == pytest.approx(
                ref_packet["spent"]["cost_usd"] + owed_cost
            ), where
            assert packet["spent"]["tokens"] == ref_packet["spent"]["tokens"] + owed_tokens
        assert _no_wall_time({**packet, "spent": None}) == _no_wall_time(
            {**ref_packet, "spent": None}
        ), where

        final = got["checkpoints"][-1].state
        assert final["artifacts"] == ref_final["artifacts"], where  # values, versions, statuses
        assert final["spent"]["cost_usd"] == pytest.approx(
            ref_final["spent"]["cost_usd"] + owed_cost
        ), where
        assert _no_wall_time({**final, "spent": None}) == _no_wall_time(
            {**ref_final, "spent": None}
        ), where
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
        # Cycles whose actor ran more than once: a kill after the actor interrupted them in
        # flight and the resumed process did them again, committing them once.
        assert any(c > 1 for c in calls.values()), f"{where}: no cycle was done again"
