"""The next commands the CLI prints name the store it was given (helper newuser52): after
`loopwright approvals --store s.db`, `approve ... --store s.db` and a Ctrl-C of `run ...
--store s.db`, the printed `loopwright approve/resume ...` left `--store` out, so the command
copied as printed read the default store ("no store at .loopwright/loopwright.db")."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from .test_bad_inputs import lw, spec, task_file
from .test_cli_first_steps import STUCK_CHECK

MODULE = """
import os, pathlib, signal
import loopwright as lw

MARK = pathlib.Path(__file__).with_name("interrupted-once")

def actor(ctx):
    if ctx.task.get("interrupt") and ctx.cycle == 2 and not MARK.exists():
        MARK.touch()
        os.kill(os.getpid(), signal.SIGINT)  # a person pressing Ctrl-C, at cycle 2
    # the payment's part at cycle 3 only: that cycle parks for a person (payment_change)
    return lw.Proposal.edit("doc", {"pay": 10} if ctx.cycle == 3 else {"n": ctx.cycle})

def check(state, proposal):
    doc = state.artifacts["doc"].values()
    return lw.Verdict(passed=doc.get("pay") == 10, score=1.0 if doc.get("pay") == 10 else 0.5)
"""

SPEC = """
name = "hint"
[actor]
ref = "hint.py:actor"
[[verifiers]]
ref = "hint.py:check"
[contract.budget]
max_cycles = 6
[[contract.risk]]
name = "payment_change"
touches = ["doc/pay"]
"""


def _printed(text: str, start: str) -> list[str]:
    """The command that follows ``start`` in ``text`` (up to a '(' note or the line's end),
    as argv without its leading ``loopwright``."""
    line = text.split(start, 1)[1].splitlines()[0].split(" (", 1)[0].strip().strip("`")
    words = shlex.split(line)
    assert words[0] == "loopwright", line
    return words[1:]


def test_the_printed_next_commands_carry_the_store_and_work_as_printed(tmp_path: Path) -> None:
    (tmp_path / "hint.py").write_text(MODULE)
    name = spec(tmp_path, "hint.toml", SPEC)
    tasks = task_file(tmp_path, {"id": "h1", "artifacts": {"doc": {"n": 0, "pay": 5}}})
    store = ["--store", "s.db"]  # on the command line, no $LOOPWRIGHT_STORE
    parked = lw("run", name, "--tasks", tasks, *store, cwd=tmp_path)
    assert parked.returncode == 4, parked.stderr
    listed = lw("approvals", *store, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    decide = _printed(listed.stdout, "decide with: ")
    # runnable as printed (notify56: no `[--note TEXT]` left to strip)
    assert decide[-2:] == ["--store", "s.db"], decide
    assert "NAME" not in decide, decide  # polish54: typed as printed, no name to fill in
    decided = lw(*decide, cwd=tmp_path)  # as printed: no --store added here
    assert decided.returncode == 0, decided.stderr
    go_on = _printed(decided.stdout, "continue it with: ")
    assert go_on[-2:] == ["--store", "s.db"], go_on
    resumed = lw(*go_on, cwd=tmp_path)
    assert resumed.returncode == 0 and "accepted" in resumed.stdout, resumed.stderr
    assert not (tmp_path / ".loopwright").exists()  # no default store was read, nor made


def test_an_interrupted_runs_message_names_the_store(tmp_path: Path) -> None:
    (tmp_path / "hint.py").write_text(MODULE)
    name = spec(tmp_path, "hint.toml", SPEC)
    tasks = task_file(tmp_path, {"id": "h2", "interrupt": True, "artifacts": {"doc": {"n": 0}}})
    stopped = lw("run", name, "--tasks", tasks, "--store", "s.db", cwd=tmp_path)
    assert stopped.returncode == 130, (stopped.stdout, stopped.stderr)
    said = " ".join(stopped.stderr.split())
    assert "`loopwright runs --store s.db` lists the run" in said, said
    # the run it drove, by its id (hints55: `resume RUN`, typed as printed, named no run)
    listed = lw("runs", "--json", "--store", "s.db", cwd=tmp_path)
    [run_id] = [r["run_id"] for r in json.loads(listed.stdout)]
    go_on = shlex.split(
        said.split("`loopwright runs --store s.db` lists the run, `", 1)[1].split("`", 1)[0]
    )
    assert go_on == ["loopwright", "resume", run_id[:12], "--store", "s.db"], go_on
    assert "(`loopwright resume --all --store s.db`: every interrupted run)" in said, said
    resumed = lw(*go_on[1:], cwd=tmp_path)
    assert resumed.returncode == 4 and "awaiting_approval" in resumed.stdout, resumed.stderr


def test_the_second_ctrl_c_at_a_stuck_check_names_the_store(tmp_path: Path) -> None:
    """The press that says user code holds the run names the store too, and the run by its id
    (hints55: `loopwright resume RUN` named no run): typed as printed, it goes on."""
    (tmp_path / "stuck.py").write_text(STUCK_CHECK)
    (tmp_path / "loop.toml").write_text(
        "name = 'stuck'\n[actor]\nref = 'stuck.py:actor'\n[[verifiers]]\nref = 'stuck.py:check'\n"
        "[contract.budget]\nmax_cycles = 4\n"
    )
    (tmp_path / "t.json").write_text('{"artifacts": {"doc": {"n": 0}}}')
    args = ("run", "loop.toml", "--task", "t.json", "--task-key", "k", "--store", "s.db")
    r = lw(*args, cwd=tmp_path)
    assert r.returncode == 130, (r.stdout[-2000:], r.stderr)
    hint = r.stderr.splitlines()[0]
    assert hint.startswith("loopwright: still waiting for user code to return"), r.stderr
    go_on = shlex.split(hint.rsplit("with `", 1)[1].rstrip("`"))
    assert go_on[:2] == ["loopwright", "resume"] and go_on[3:] == ["--store", "s.db"], hint
    assert go_on[2] != "RUN" and not (tmp_path / ".loopwright").exists(), hint
    resumed = lw(*go_on[1:], cwd=tmp_path)  # as printed
    assert resumed.returncode == 3, (resumed.stdout, resumed.stderr)  # (budget: never passes)
    shown = lw("show", "k", "--json", "--store", "s.db", cwd=tmp_path)
    assert json.loads(shown.stdout)["run"]["run_id"].startswith(go_on[2])
