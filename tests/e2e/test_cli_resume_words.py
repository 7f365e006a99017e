"""What `run`, `resume` and `approve --resume` tell a newcomer operating a loop (newcomer54):
`resume --all` skipped a run with the store's raw refusal ("skipped X: run <whole id> is
being executed by …", "skipped X: spec: the run's spec …"); a parked run ended its line
with "awaiting_approval (-)" and no word of what to do next; a Ctrl-C left the live view's
last line unended; dollars read `$0.0000` for nothing spent and for a few millionths alike.
No timing: the Ctrl-C is the actor's own SIGINT at a cycle it picks, leases are taken by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.store import open_store

from .test_bad_inputs import lw as cli
from .test_cli_worker_words import SPEC  # the "never" loop: 2 cycles, never accepted

MODULE = """
import os
import signal

import loopwright as lw

def actor(ctx):
    stop = ctx.task.get("sigint_at")
    mark = os.path.join(os.path.dirname(__file__), "interrupted")
    if stop == ctx.cycle and not os.path.exists(mark):  # Ctrl-C, once, inside this cycle
        open(mark, "w").close()
        os.kill(os.getpid(), signal.SIGINT)
    cost = ctx.task.get("cost", 0.0)
    if ctx.task.get("noop"):
        return lw.Proposal.edit("doc", {}, usage=lw.Usage(cost_usd=cost))
    return lw.Proposal.edit("doc", {"n": ctx.cycle}, usage=lw.Usage(cost_usd=cost))

def check(state, proposal):
    return lw.Verdict(passed=False, score=0.1)
"""

RISK = """
[[contract.risk]]
name = "any_change"
touches = ["doc/n"]
"""


def _project(tmp_path: Path, spec: str = SPEC) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "never.py").write_text(MODULE)
    (tmp_path / "loop.toml").write_text(spec)
    return tmp_path


def _queue(tmp_path: Path, *tasks: dict[str, object], store: Path | None = None) -> list[str]:
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    r = cli("run", "loop.toml", "--tasks", "t.jsonl", "--queue", "--json", cwd=tmp_path,
            store=store or tmp_path / "s.db")  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [q["run_id"] for q in json.loads(r.stdout)]


DOC = {"artifacts": {"doc": {"n": 0}}}


def test_resume_all_says_once_which_run_it_skipped_and_why(tmp_path: Path) -> None:
    project = _project(tmp_path / "here")
    moved = _project(tmp_path / "moved")
    [held] = _queue(project, {"id": "h", **DOC}, store=tmp_path / "s.db")
    [goes] = _queue(moved, {"id": "g", **DOC}, store=tmp_path / "s.db")
    (moved / "loop.toml").unlink()  # that run's spec is gone
    with lw.Runtime(str(tmp_path / "s.db")) as rt:  # another process holds the first
        rt.store.acquire_lease(held, "elsewhere:4242:ab12:x", 3600.0)
    r = cli("resume", "--all", "--store", str(tmp_path / "s.db"), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    skips = {x.split()[1]: x for x in r.stdout.splitlines() if x.startswith("skipped ")}
    hold, gone = skips[held[:12]], skips[goes[:12]]
    # polish54: the holder as a person reads it, not its host:pid:nonce:space name
    assert hold.startswith(
        f"skipped {held[:12]} (never:h): held by pid 4242 on host elsewhere ("
    ), hold
    assert held not in hold, hold  # the whole id, after its short form, said it twice
    assert "another process is driving it: follow it with `loopwright show" in hold, hold
    assert gone.startswith(f"skipped {goes[:12]} (never:g): the run's spec "), gone
    assert "Traceback" not in r.stderr


def test_resume_and_approve_say_how_the_run_ended_and_what_next(tmp_path: Path) -> None:
    project = _project(tmp_path, SPEC + RISK)
    [run_id] = _queue(project, {"id": "p", **DOC})
    short = run_id[:12]
    r = cli("resume", short, "--store", "s.db", cwd=project)
    assert r.returncode == 4, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"run {short} (never:p): awaiting_approval", r.stdout  # not "(-)"
    assert lines[1].startswith(
        "next: 1 run(s) wait for a person: `loopwright approvals --store s.db` says what each "
        f"asks; `loopwright approve {short} --resume --store s.db`"
    ), r.stdout
    wide = {"COLUMNS": "200"}
    listed = cli("runs", "--store", "s.db", cwd=project, env=wide).stdout  # (it said "-")
    assert "waits for a person: loopwright approvals --store s.db" in listed, listed
    assert cli("approve", short, "--store", "s.db", cwd=project).returncode == 0
    listed = cli("runs", "--store", "s.db", cwd=project, env=wide).stdout
    assert f"decided, waits to be resumed: loopwright resume {short} --store s.db" in listed
    r = cli("resume", short, "--store", "s.db", cwd=project)  # parks again
    assert r.returncode == 4 and f"run {short} (never:p): awaiting_approval" in r.stdout, r.stdout
    r = cli("approve", short, "--resume", "--store", "s.db", cwd=project)  # 2 cycles: stopped
    assert r.returncode == 3, r.stdout + r.stderr
    with open_store(str(project / "s.db")) as st:
        cause = (st.get_run(run_id).packet or {})["stop_cause"]
    ended = r.stdout.splitlines()[1:]
    assert ended[:2] == [
        f"run {short} (never:p): stopped (budget_cycles)",
        f"  why it stopped: {cause}",
    ]
    assert ended[2] == (
        "next: why it stopped, with the best candidate and the recommended action: "
        f"`loopwright show {short} --store s.db`"
    ), r.stdout


def test_ctrl_c_ends_the_live_view_then_resume_goes_on(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "t.jsonl").write_text(json.dumps({"id": "c", "sigint_at": 1, **DOC}) + "\n")
    r = cli("run", "loop.toml", "--tasks", "t.jsonl", cwd=project, store=project / "s.db")
    assert r.returncode == 130, r.stdout + r.stderr
    assert r.stdout.endswith("\n"), repr(r.stdout[-80:])  # stderr's message began on its line
    [msg] = r.stderr.splitlines()
    assert msg.startswith("loopwright: interrupted;"), msg
    r = cli("resume", "--all", cwd=project, store=project / "s.db")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.splitlines()[0].endswith("(never:c): stopped (budget_cycles)"), r.stdout


def test_dollars_read_one_way_for_nothing_and_for_millionths(tmp_path: Path) -> None:
    project = _project(tmp_path)
    tasks = [{"id": "free", "noop": True, **DOC}, {"id": "tiny", "cost": 0.00002, **DOC}]
    (project / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    store = project / "s.db"
    ran = cli("run", "loop.toml", "--tasks", "t.jsonl", cwd=project, store=store)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    free = cli("show", "never:free", cwd=project, store=store).stdout
    tiny = cli("show", "never:tiny", cwd=project, store=store).stdout
    assert "$0, 0 tokens" in free, free  # nothing spent: not "$0.0000"
    assert "  proposal noop" in [x.rstrip() for x in free.splitlines()], free  # not "noop:"
    assert "$0.00004, 0 tokens" in tiny, tiny  # a few millionths: not rounded to nothing
    assert "score 0.10  $0.00002" in tiny, tiny
    runs = cli("runs", cwd=project, store=store, env={"COLUMNS": "200"}).stdout
    metrics = cli("metrics", cwd=project, store=store, env={"COLUMNS": "200"}).stdout
    diff = cli("diff", "never:free", "never:tiny", cwd=project, store=store).stdout
    assert "$0.00004 spent" in metrics, metrics
    assert "$0 " in diff and "$0.00004" in diff, diff
    assert "null" not in diff, diff  # held-out of runs without one: "-", as show says it
    for out in (ran.stdout, free, tiny, runs, metrics, diff):
        assert not re.search(r"\$0\.0+(?![0-9])", out), out  # zeros that say nothing
    for out in (ran.stdout, runs):  # their "spend $" / "cost $" columns (no rates there)
        assert not re.search(r"\b0\.0+(?![0-9])", out), out


def test_resume_all_reads_a_run_it_skips_as_held_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The refusal's line (who holds the run, for how long) and its hint (how to follow it) were
    # each read from the store: the skipped run read twice. One read says both.
    from loopwright._engine import Runtime
    from loopwright.cli import main
    from loopwright.store._sql_runs import RunsSQL

    project = _project(tmp_path)
    [held] = _queue(project, {"id": "h", **DOC})
    with lw.Runtime(str(project / "s.db")) as rt:  # another process holds it
        rt.store.acquire_lease(held, "elsewhere:4242:ab12:x", 3600.0)
    refused: list[str] = []
    reads: list[str] = []  # the runs read once the resume was refused
    get_run, resume = RunsSQL.get_run, Runtime.resume

    def counted(self: RunsSQL, run_id: str) -> lw.RunRecord:
        if refused:
            reads.append(run_id)
        return get_run(self, run_id)

    async def noted(self: Runtime, run_id: str, loop: lw.Loop, **kw: Any) -> lw.RunResult:
        try:
            return await resume(self, run_id, loop, **kw)
        except lw.ConflictError:
            refused.append(run_id)
            raise

    monkeypatch.setattr(RunsSQL, "get_run", counted)
    monkeypatch.setattr(Runtime, "resume", noted)
    monkeypatch.chdir(project)
    assert main(["resume", "--all", "--store", "s.db"]) == 2
    out = capsys.readouterr().out
    [skip] = [x for x in out.splitlines() if x.startswith("skipped ")]
    assert skip.startswith(f"skipped {held[:12]} (never:h): held by pid 4242 on host elsewhere (")
    assert "another process is driving it: follow it with `loopwright show" in skip, skip
    assert refused == [held] and reads == [held], reads
