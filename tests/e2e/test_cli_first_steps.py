"""What a new user typed first, from outside (helper newuser48): each gave an answer that did
not say how to get what they meant. Real subprocesses, as in ``test_bad_inputs``."""

from __future__ import annotations

from pathlib import Path

from .test_bad_inputs import TASK, dump, lw, refused, task_file
from .test_cli_mistakes import accepted  # noqa: F401  (a fixture)


def test_a_task_files_bare_id_names_the_key_it_got(
    accepted: tuple[Path, str],  # noqa: F811
    project: Path,
) -> None:
    """`loopwright run` keys a task file's ``{"id": "t"}`` as ``e2e:t``; ``show t`` said only
    "no run 't'", though the run table had shown the key, cut or not."""
    store, _ = accepted
    before = dump(store)
    for command in (("show", "t"), ("approve", "t", "--by", "me")):
        refused(lw(*command, cwd=project, store=store), "no run 't'", "did you mean 'e2e:t'")
    assert dump(store) == before
    # an id no run has gets no guess
    line = refused(lw("show", "nothing-like-it", cwd=project, store=store), "no run")
    assert "did you mean" not in line


def test_a_fork_whose_budget_is_spent_at_its_start_says_so(
    accepted: tuple[Path, str],  # noqa: F811
    project: Path,
) -> None:
    """A fork goes on counting its origin's cycles: `fork RUN --at-cycle 1` with a contract of
    `max_cycles = 1` (read as "one more cycle") made a run that `resume` stopped at once,
    budget_cycles, with no cycle run, and nothing said so when it was made."""
    store, run_id = accepted
    (project / "one.toml").write_text("[contract.budget]\nmax_cycles = 1\n")
    made = lw("fork", run_id, "--at-cycle", "1", "--contract", "one.toml", cwd=project, store=store)
    assert made.returncode == 0, made.stderr
    note = " ".join(made.stderr.split())
    assert "will stop (budget_cycles) before its first cycle" in note, made.stderr
    assert "1 cycle(s) of its cap of 1" in note and "--contract" in note
    new = made.stdout.split("new run ")[1].split()[0]
    resumed = lw("resume", new, cwd=project, store=store)
    assert resumed.returncode == 3 and "budget_cycles" in resumed.stdout, resumed.stdout
    # a budget that leaves room says nothing
    (project / "five.toml").write_text("[contract.budget]\nmax_cycles = 5\n")
    room = lw(
        "fork", run_id, "--at-cycle", "1", "--contract", "five.toml", cwd=project, store=store
    )
    assert room.returncode == 0 and room.stderr == "", room.stderr


def test_a_task_key_beside_the_specs_own_task_file_says_which_file(project: Path) -> None:
    """`loopwright run loop.toml --task-key K` with a spec whose `tasks` file holds several
    tasks said "--task-key needs exactly one task": no --task was given, so which tasks?"""
    store = project / "s.db"
    spec = (project / "loop.toml").read_text()
    (project / "loop.toml").write_text('tasks = "tasks.jsonl"\n' + spec)
    task_file(project, TASK, {**TASK, "id": "u"})
    line = refused(
        lw("run", "loop.toml", "--task-key", "K", cwd=project, store=store), "--task-key"
    )
    assert "tasks (in the spec)" in line and "tasks.jsonl holds 2" in line, line
    assert "--task FILE" in line
    assert not store.exists()


STUCK_CHECK = """
import os, pathlib, signal, threading
import loopwright as lw

MARK = pathlib.Path(__file__).with_name("stuck-once")

def actor(ctx):
    return lw.Proposal.edit("doc", {"n": ctx.cycle})

def check(state, proposal):
    if state.artifacts["doc"].values()["n"] == 2 and not MARK.exists():
        MARK.touch()
        for _ in range(3):  # a person pressing Ctrl-C at a check that never returns
            os.kill(os.getpid(), signal.SIGINT)
        threading.Event().wait()  # never set: only the third press gets out of here
    return lw.Verdict(passed=False, score=state.artifacts["doc"].values()["n"] / 100)
"""


def test_ctrl_c_reaches_a_check_that_never_returns(tmp_path: Path) -> None:
    """A check with no timeout_s is called inline, on the event loop: asyncio's Ctrl-C handler
    runs only in the loop, so no Ctrl-C stopped a check that hung (the first was never taken,
    later ones were ignored: kill -9 was the only way out). Now the second press says so and
    the third stops at once; the finished cycle is kept and the run resumes."""
    (tmp_path / "stuck.py").write_text(STUCK_CHECK)
    (tmp_path / "loop.toml").write_text(
        "name = 'stuck'\n[actor]\nref = 'stuck.py:actor'\n[[verifiers]]\nref = 'stuck.py:check'\n"
        "[contract.budget]\nmax_cycles = 4\n"
    )
    (tmp_path / "t.json").write_text('{"artifacts": {"doc": {"n": 0}}}')
    store = tmp_path / "s.db"
    r = lw("run", "loop.toml", "--task", "t.json", "--task-key", "k", cwd=tmp_path, store=store)
    assert r.returncode == 130, (r.stdout[-2000:], r.stderr)
    assert "Traceback" not in r.stderr and "never retrieved" not in r.stderr, r.stderr
    hint, said = r.stderr.splitlines()[:2]
    assert hint.startswith("loopwright: still waiting for user code to return"), r.stderr
    assert "press Ctrl-C again to stop at once" in hint
    assert said.startswith("loopwright: interrupted; every finished cycle is checkpointed")
    resumed = lw("resume", "k", cwd=tmp_path, store=store)
    assert resumed.returncode == 3 and "budget_cycles" in resumed.stdout, resumed.stderr


def test_replay_says_a_rolled_back_run_is_left_out(
    accepted: tuple[Path, str],  # noqa: F811
    project: Path,
) -> None:
    """`replay store` leaves a rolled-back run out (docs/replay.md) and said "0 recorded
    run(s)" of a store of one run, the user's, with no word of why."""
    store, run_id = accepted
    before = lw("replay", "store", "--contract", "loop.toml", cwd=project, store=store)
    assert before.returncode == 0 and "rolled back" not in before.stderr, before.stderr
    back = lw("rollback", run_id, "--to-cycle", "1", "--by", "ann", cwd=project, store=store)
    assert back.returncode == 0, back.stderr
    r = lw("replay", "store", "--contract", "loop.toml", cwd=project, store=store)
    assert r.returncode == 2  # nothing left to replay: said, with why
    assert "note: 1 run(s) rolled back are left out" in r.stderr, r.stderr
