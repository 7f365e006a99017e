"""`loopwright worker` leaves a fork to whoever made it (fork54): a fork is made to be edited
first (`fork`, `edit`, then `resume NEW`), but every worker claimed every `pending` run, so on a
store a pool serves the fork ran on the state it was made with before its maker's edit. Now no
worker claims it until `resume NEW` starts it (or it was made with `fork --queue`); `runs` and
`show` say how to start it. Each worker polls once (`--once`): no time is waited on."""

from __future__ import annotations

import json
from pathlib import Path

from loopwright.store import open_store

from .test_bad_inputs import lw

TASK = {"artifacts": {"doc": {"a": 0, "b": 0, "c": 0, "pay": 10}}}  # 4 cycles, one fix each


def _origin(project: Path, store: Path) -> None:
    (project / "t.json").write_text(json.dumps(TASK))
    r = lw("run", "loop.toml", "--task", "t.json", "--task-key", "o", cwd=project, store=store)
    assert r.returncode == 0, r.stderr


def _worker_once(project: Path, store: Path) -> str:
    r = lw("worker", "--once", "--json", cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_a_worker_leaves_a_fork_until_its_maker_starts_it(project: Path) -> None:
    store = project / "s.db"
    _origin(project, store)
    r = lw("fork", "o", "--at-cycle", "1", "--key", "f", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    assert "not started, and no worker starts it: start it with: loopwright resume" in r.stdout
    with open_store(str(store)) as st:
        made = st.get_run("f")
    assert made.maker_starts
    _worker_once(project, store)
    with open_store(str(store)) as st:
        left = st.get_run("f")
        kinds = [e.kind for e in st.events(left.run_id)]
    # before: the worker claimed it and ran it to the end before anyone could edit it
    assert (left.status, left.cycle, left.fencing_token) == ("pending", 1, made.fencing_token)
    assert kinds == ["run_created"]
    said = f"fork, not started: start it with: loopwright resume {left.run_id[:12]}"
    runs = lw("runs", cwd=project, store=store, env={"COLUMNS": "200"})
    assert said in runs.stdout, runs.stdout
    narrow = lw("runs", cwd=project, store=store, env={"COLUMNS": "80"})
    assert said in narrow.stdout.replace("\n", " "), narrow.stdout  # whole, under the table
    show = lw("show", "f", cwd=project, store=store, env={"COLUMNS": "200"})
    assert said in show.stdout, show.stdout
    # the maker's edit, then their start: accepted, a worker's like any run from then on
    r = lw("edit", "f", "doc/b", "--value", "2", "--by", "ann", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    r = lw("resume", "f", cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    with open_store(str(store)) as st:
        done = st.get_run("f")
    assert done.status == "accepted" and not done.maker_starts
    assert "fork, not started" not in lw("runs", cwd=project, store=store).stdout


def test_a_queued_fork_is_the_workers(project: Path) -> None:
    store = project / "s.db"
    _origin(project, store)
    r = lw("fork", "o", "--at-cycle", "1", "--key", "q", "--queue", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    assert "queued: a worker serving the store starts it" in r.stdout
    _worker_once(project, store)
    with open_store(str(store)) as st:
        assert st.get_run("q").status == "accepted"
