"""`loopwright run SPEC --tasks F --queue`: the runs are created and none is driven here; a
`loopwright worker` claims and drives them (stream52: only `Runtime.create` queued runs
before, so a CLI user had to write Python to feed a pool of workers)."""

from __future__ import annotations

import json
from pathlib import Path

from loopwright.store import open_store

from .test_bad_inputs import lw

LOOP_MODULE = """
import loopwright as lw

def actor(ctx):
    return lw.Proposal.edit("doc", {"title": "Hello"})

def titled(state, proposal):
    return lw.Verdict(passed=state.artifacts["doc"].values()["title"] == "Hello")
"""

SPEC = """
name = "titles"
[actor]
ref = "titlemod.py:actor"
[[verifiers]]
ref = "titlemod.py:titled"
[contract.budget]
max_cycles = 3
"""


def _setup(tmp_path: Path) -> None:
    (tmp_path / "titlemod.py").write_text(LOOP_MODULE)
    (tmp_path / "loop.toml").write_text(SPEC)
    lines = [{"id": f"t{i}", "artifacts": {"doc": {"title": "Helo"}}} for i in range(3)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines))


def test_queued_runs_are_created_pending_and_a_worker_drives_them(tmp_path: Path) -> None:
    _setup(tmp_path)
    store = tmp_path / "s.db"
    queue = ("run", "loop.toml", "--tasks", "t.jsonl", "--queue")
    r = lw(*queue, "--json", cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stderr
    queued = json.loads(r.stdout)
    assert [q["task_key"] for q in queued] == ["titles:t0", "titles:t1", "titles:t2"]
    assert all(q["created"] and q["status"] == "pending" for q in queued)
    assert "queued 3 new run(s) of loop titles" in r.stderr
    assert "drives the 3 pending run(s)" in r.stderr
    with open_store(str(store)) as st:
        for q in queued:
            run = st.get_run(q["run_id"])
            assert (run.status, run.cycle) == ("pending", 0)
            # created, never started: no executor touched it
            assert [e.kind for e in st.iter_events(run.run_id)] == ["run_created"]
    # the same tasks again: the runs under their keys are left as they are, none made twice
    r = lw(*queue, cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stderr
    assert "queued 0 new run(s)" in r.stdout and "left as it is (3 pending)" in r.stdout
    r = lw("worker", "--once", "--json", cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    assert stats["claimed"] == 3 and stats["ended"] == {"accepted": 3}, stats
    # ended runs are not queued again
    r = lw(*queue, cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stderr
    assert "(3 accepted)" in r.stdout and "drives the 0 pending run(s)" in r.stdout


def test_queue_with_the_ray_executor_is_one_line_and_exit_2(tmp_path: Path) -> None:
    _setup(tmp_path)
    store = tmp_path / "s.db"
    r = lw(
        "run", "loop.toml", "--tasks", "t.jsonl", "--queue", "--executor", "ray",
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--queue" in r.stderr, r.stderr
    assert not store.exists()  # refused before anything was created


def test_concurrency_where_no_run_is_driven_here_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """polish52b: ``run --queue --concurrency 2`` (and with ``--executor ray``) ignored the
    option without a word; it is refused before anything is created."""
    _setup(tmp_path)
    store = tmp_path / "s.db"
    for how in (("--queue",), ("--executor", "ray")):
        r = lw(
            "run", "loop.toml", "--tasks", "t.jsonl", *how, "--concurrency", "2",
            cwd=tmp_path, store=store,
        )  # fmt: skip
        assert r.returncode == 2, r.stdout + r.stderr
        said = r.stderr.strip().splitlines()
        assert len(said) == 1 and "--concurrency" in said[0] and how[0] in said[0], r.stderr
        assert not store.exists()  # refused before anything was created
