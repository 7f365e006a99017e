"""What `loopwright worker` and `loopwright resume` tell an operator (polish53): a worker's
line for an ended run said only "escalated (escalated)", not why; `resume RUN` of a run a
worker holds named the worker and its lease time, not what to do. No timing involved: the
runs end by their own budget or actor, the lease is taken by hand."""

from __future__ import annotations

import json
from pathlib import Path

import loopwright as lw
from loopwright.store import open_store

from .test_bad_inputs import lw as cli

SECRET = "sk-live-abcdefghijklmnopqrstuvwx1234"

MODULE = f"""
import loopwright as lw

def actor(ctx):
    if ctx.task.get("boom"):
        raise RuntimeError("token {SECRET} refused")
    return lw.Proposal.edit("doc", {{"n": ctx.cycle}})

def check(state, proposal):
    return lw.Verdict(passed=False, score=0.1)
"""

SPEC = """
name = "never"
[actor]
ref = "never.py:actor"
[[verifiers]]
ref = "never.py:check"
[contract.budget]
max_cycles = 2
"""


def _queue(tmp_path: Path, *tasks: dict[str, object]) -> list[str]:
    (tmp_path / "never.py").write_text(MODULE)
    (tmp_path / "loop.toml").write_text(SPEC)
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    r = cli("run", "loop.toml", "--tasks", "t.jsonl", "--queue", "--json", cwd=tmp_path,
            store=tmp_path / "s.db")  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [q["run_id"] for q in json.loads(r.stdout)]


def test_the_worker_says_why_each_run_stopped_as_show_does(tmp_path: Path) -> None:
    doc = {"artifacts": {"doc": {"n": 0}}}
    spent, boom = _queue(tmp_path, {"id": "a", **doc}, {"id": "b", "boom": True, **doc})
    r = cli("worker", "--once", "--store", "s.db", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    with open_store(str(tmp_path / "s.db")) as st:
        for run_id in (spent, boom):
            cause = (st.get_run(run_id).packet or {})["stop_cause"]
            at = next(i for i, x in enumerate(lines) if x.startswith(f"run {run_id[:12]}"))
            assert lines[at + 1] == f"  why it stopped: {cause}", r.stdout
    assert "the cycle budget of 2 is used up" in r.stdout, r.stdout
    assert "the actor raised an exception" in r.stdout and SECRET not in r.stdout, r.stdout


def test_resume_of_a_run_a_worker_holds_says_how_to_follow_it(tmp_path: Path) -> None:
    [run_id] = _queue(tmp_path, {"id": "a", "artifacts": {"doc": {"n": 0}}})
    with lw.Runtime(str(tmp_path / "s.db")) as rt:  # a worker on another host holds it
        rt.store.acquire_lease(run_id, "elsewhere:4242:ab12:x", 3600.0)
    r = cli("resume", run_id[:12], "--store", "s.db", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    [line] = r.stderr.splitlines()
    assert "is being executed by pid 4242 on host elsewhere (lease for" in line, line
    follow = (
        "another process is driving it: follow it with "
        f"`loopwright show {run_id[:12]} --store s.db`"
    )
    assert follow in line and "Runtime.events" in line, line
    assert "Traceback" not in r.stderr


def test_resume_says_why_each_run_stopped_as_the_worker_does(tmp_path: Path) -> None:
    doc = {"artifacts": {"doc": {"n": 0}}}
    spent, boom, held = _queue(
        tmp_path, {"id": "a", **doc}, {"id": "b", "boom": True, **doc}, {"id": "c", **doc}
    )
    r = cli("resume", spent[:12], "--store", "s.db", cwd=tmp_path)
    with lw.Runtime(str(tmp_path / "s.db")) as rt:  # a worker on another host holds one
        rt.store.acquire_lease(held, "elsewhere:4242:ab12:x", 3600.0)
    r_all = cli("resume", "--all", "--store", "s.db", cwd=tmp_path)
    assert r_all.returncode == 2, r_all.stdout + r_all.stderr  # one skipped
    with open_store(str(tmp_path / "s.db")) as st:
        for out, run_id in ((r.stdout, spent), (r_all.stdout, boom)):
            lines = out.splitlines()
            cause = (st.get_run(run_id).packet or {})["stop_cause"]
            at = next(i for i, x in enumerate(lines) if x.startswith(f"run {run_id[:12]}"))
            assert lines[at + 1] == f"  why it stopped: {cause}", out
    assert "the actor raised an exception" in r_all.stdout and SECRET not in r_all.stdout
    [skip] = [x for x in r_all.stdout.splitlines() if x.startswith("skipped")]
    assert skip.startswith(f"skipped {held[:12]} (never:c): held by pid 4242 on host elsewhere"), (
        skip
    )
    follow = (
        f"another process is driving it: follow it with `loopwright show {held[:12]} --store s.db`"
    )
    assert follow in skip, skip
