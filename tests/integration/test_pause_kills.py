"""SIGKILL around a person's pause, at deterministic points (``pausekill/pause_runner.py``: the
engine's phase boundaries, and ``pause_filed`` in the person's process; no timing), SQLite and
PostgreSQL: killed after the pause was filed mid-cycle (before the cycle's commit, after it),
while the run parks, after it parked; and the person's own process killed after filing the
pause of a run not started, and while parking it. Each time, whatever resumes the run next
(``resume``, or a worker's claim) parks it without an actor call; once unpaused it ends as the
run without a pause does, every cycle concluded once, and no actor call repeated but the one
a kill lost with its uncommitted cycle."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from doc_loop import TARGET
from forkserver import run_child

import loopwright as lw

RUNNER = Path(__file__).resolve().parent / "pausekill" / "pause_runner.py"
sys.path.insert(0, str(RUNNER.parent))

from pause_runner import make_loop  # noqa: E402

# (mode, kill point, actor calls the kill lost: a cycle killed before its commit is redone)
POINTS = [
    ("run", "after_actor:2", 1),  # the pause filed in cycle 2, its commit not written
    ("run", "before_checkpoint:3", 1),
    ("run", "after_checkpoint:3", 0),  # cycle 2 committed, not parked yet
    ("run", "before_checkpoint:4", 0),  # killed in the parking commit
    ("run", "after_checkpoint:4", 0),  # parked
    ("pause", "pause_filed:1", 0),  # a person's pause of a run not started, not parked yet
    ("pause", "before_checkpoint:1", 0),
    ("pause", "after_checkpoint:1", 0),
]


def _killed(db: str, work: Path, mode: str, kill: str) -> None:
    env = {**os.environ, "PK_KILL": kill, "PK_PAUSE_AT": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("LOOPWRIGHT_STORE", None)
    # forked (tests/forkserver.py): the same runner, its own pid
    p = run_child([sys.executable, str(RUNNER), db, str(work), mode], env, 120)
    assert p.returncode == -9, (p.returncode, p.stdout, p.stderr)  # killed where asked


@pytest.mark.parametrize(("mode", "kill", "lost"), POINTS, ids=[f"{m}-{k}" for m, k, _ in POINTS])
def test_killed_around_a_pause(url: str, tmp_path: Path, mode: str, kill: str, lost: int) -> None:
    _killed(url, tmp_path, mode, kill)
    calls = tmp_path / "calls.log"
    before = calls.read_text().split() if calls.exists() else []
    loop = make_loop(url, tmp_path, 0)  # (files no pause of its own)
    with lw.Runtime(url, lease_ttl_s=30) as rt:
        [rec] = rt.store.list_runs()
        # the dead process's lease lapses (as its TTL would): moved to the past, no waiting
        m = rt.store._MARK  # type: ignore[attr-defined]
        with rt.store._tx() as conn:  # type: ignore[attr-defined]
            conn.execute(f"UPDATE runs SET lease_expires_at = {m}", (rt.store.clock() - 1,))
        [pause] = rt.store.approvals(run_id=rec.run_id, status="pending")
        assert pause.kind == "pause"
        # whatever takes the run next parks it, calling no actor
        claimed = rt.store.claim_runs(rt.owner, 30.0, limit=5)
        if claimed:  # (runnable by its status: not started, or killed before it parked)
            [(rid, token)] = claimed
            r = asyncio.run(rt.resume(rid, loop, token=token))
        else:
            r = rt.resume_sync(rec.run_id, loop)
        assert r.status == "awaiting_approval"
        assert rt.store.claim_runs(rt.owner, 30.0, limit=5) == []
        assert (calls.read_text().split() if calls.exists() else []) == before
        rt.unpause(rec.run_id, by="bob")
        done = rt.resume_sync(rec.run_id, loop)
        decisions = Counter(e.cycle for e in rt.store.events(rec.run_id) if e.kind == "decision")
    assert done.status == "accepted" and done.cycles == 4
    assert done.state.artifacts["doc"].values() == TARGET
    assert decisions == {1: 1, 2: 1, 3: 1, 4: 1}  # every cycle concluded once
    made = [int(c) for c in calls.read_text().split()]
    assert len(made) == 4 + lost and sorted(set(made)) == [1, 2, 3, 4]
