"""More mistakes that get one line and exit 2 (an outside probe, helper fix/cli): each was an
"internal error" (exit 1), a hang, a silent exit 0, a traceback, or a value taken as another.
Real subprocesses, as in ``test_bad_inputs``."""

from __future__ import annotations

import contextlib
import importlib.abc
import json
import os
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from .test_bad_inputs import TASK, dump, lw, refused

OTHER_SPEC = """
name = "other"
project = "elsewhere"
[actor]
ref = "loopmod.py:actor"
[[verifiers]]
ref = "loopmod.py:check"
[contract.budget]
max_cycles = 2
"""


@pytest.fixture
def accepted(project: Path) -> tuple[Path, str]:
    """A store holding one accepted run: (store, run id)."""
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(TASK))
    r = lw("run", "loop.toml", "--task", "t.json", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    [run] = json.loads(lw("runs", "--json", cwd=project, store=store).stdout)
    return store, run["run_id"]


def test_demo_concurrency_below_one(project: Path) -> None:
    """`demo --concurrency 0` hung for ever with 25 runs pending; -1 was an internal error."""
    store = project / "d.db"
    for n in ("0", "-1"):
        refused(lw("demo", "--concurrency", n, cwd=project, store=store), "--concurrency")
    assert not store.exists()


def test_arguments_that_are_not_utf8(accepted: tuple[Path, str], project: Path) -> None:
    store, run_id = accepted
    before = dump(store)
    bad = os.fsdecode(b"\xff\xfe")  # as Python holds such an argument
    for args in (
        ("show", bad),
        ("approve", run_id, "--by", bad),
        ("runs", "--project", bad),
        ("users", "add", bad, "--role", "viewer"),
    ):
        line = refused(lw(*args, cwd=project, store=store), "not valid text", "UTF-8")
        assert "\\xff" in line
    assert dump(store) == before


def test_a_very_long_run_argument(accepted: tuple[Path, str], project: Path) -> None:
    """SQLite refused the prefix lookup's LIKE pattern (internal error); shorter, the whole
    blob was echoed in the message."""
    store, _ = accepted
    before = dump(store)
    for n in (40_000, 60_000):
        for cmd in ("show", "cancel", "trace"):
            line = refused(lw(cmd, "a" * n, cwd=project, store=store), "no run")
            assert len(line) < 400, len(line)
    line = refused(lw("export", "eval-cases", "--run", "b" * 60_000, cwd=project, store=store))
    assert "no run" in line and len(line) < 400
    assert dump(store) == before


def test_replay_save_traces_like_out(accepted: tuple[Path, str], project: Path) -> None:
    store, _ = accepted
    (project / "c2.toml").write_text("[contract.budget]\nmax_cycles = 2\n")
    args = ("replay", "store", "--contract", "c2.toml", "--save-traces")
    # as --out: a missing folder is refused (a typo's), one made first is written in
    refused(lw(*args, "new/dir/t.jsonl", cwd=project, store=store), "--save-traces", "mkdir -p")
    assert not (project / "new").exists()
    (project / "new/dir").mkdir(parents=True)
    r = lw(*args, "new/dir/t.jsonl", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    assert len((project / "new/dir/t.jsonl").read_text().splitlines()) == 1
    (project / "adir").mkdir()
    refused(lw(*args, "adir", cwd=project, store=store), "--save-traces", "Is a directory")


def test_worker_max_runs_below_one(accepted: tuple[Path, str], project: Path) -> None:
    store, _ = accepted
    for n in ("0", "-1"):
        refused(lw("worker", "--once", "--max-runs", n, cwd=project, store=store), "--max-runs")


def test_worker_lease_and_poll_out_of_range(accepted: tuple[Path, str], project: Path) -> None:
    """probe43a: a lease of 1e-9 s passed runs back and forth between workers, one of 1e300 s
    locked a dead worker's runs for ever; both were taken."""
    store, _ = accepted
    for opt, value in (("--lease-ttl", "1e-9"), ("--lease-ttl", "1e300"), ("--lease-ttl", "0.5"),
                       ("--poll", "0"), ("--poll", "1e300")):  # fmt: skip
        refused(lw("worker", "--once", opt, value, cwd=project, store=store), opt)


def test_fork_with_another_loops_spec(accepted: tuple[Path, str], project: Path) -> None:
    """The fork was labelled the other loop, in the old run's project."""
    store, run_id = accepted
    (project / "other.toml").write_text(OTHER_SPEC)
    before = dump(store)
    args = ("fork", run_id, "--at-cycle", "0", "--spec", "other.toml")
    refused(lw(*args, cwd=project, store=store), "--spec", "'other'", "'e2e'")
    assert dump(store) == before
    r = lw("fork", run_id, "--at-cycle", "0", "--spec", "loop.toml", cwd=project, store=store)
    assert r.returncode == 0, r.stderr


class _Interrupting(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, *_: Any) -> None:
        if name == "loopwright.cli._app":
            raise KeyboardInterrupt


def test_ctrl_c_while_the_cli_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C in the first fraction of a second was a KeyboardInterrupt traceback."""
    from loopwright.cli import main

    monkeypatch.delitem(sys.modules, "loopwright.cli._app", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Interrupting(), *sys.meta_path])
    assert main(["runs"]) == 130
    assert capsys.readouterr().err == "loopwright: interrupted\n"


def test_ctrl_c_while_building_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwright.cli import _app, main

    def command_for(args: list[str]) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(_app, "command_for", command_for)
    assert main(["runs"]) == 130
    assert capsys.readouterr().err == "loopwright: interrupted\n"


def test_ctrl_c_before_a_run_exists(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loopwright runs` lists no run that was never created."""
    import loopwright._spec
    from loopwright.cli import main

    def load_spec(path: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(loopwright._spec, "load_spec", load_spec)
    (project / "t.json").write_text(json.dumps(TASK))
    store = project / "s.db"
    assert main(["run", str(project / "loop.toml"), "--task", str(project / "t.json"),
                 "--store", str(store)]) == 130  # fmt: skip
    assert capsys.readouterr().err.strip() == "loopwright: interrupted"
    assert not store.exists()


def test_ctrl_c_in_a_command_that_drives_no_run(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C in `check` (or fit-stop, metrics...) said "every finished cycle is checkpointed
    ... `loopwright resume RUN` continues it": no run was started, so there is none to resume."""
    import loopwright._spec
    from loopwright.cli import main

    def load_spec(path: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(loopwright._spec, "load_spec", load_spec)
    assert main(["check", str(project / "loop.toml")]) == 130
    assert capsys.readouterr().err == "loopwright: interrupted\n"


def test_a_run_row_with_a_number_that_is_text(accepted: tuple[Path, str], project: Path) -> None:
    store, run_id = accepted
    con = sqlite3.connect(store)
    con.execute("UPDATE runs SET cycle = 'abc' WHERE run_id = ?", (run_id,))
    con.commit()
    con.close()
    before = dump(store)
    for args in (("runs",), ("runs", "--json"), ("show", run_id), ("metrics",)):
        refused(lw(*args, cwd=project, store=store), "store:", "table runs", run_id, "damaged")
    assert dump(store) == before


def test_dashboard_urls_that_are_not_http(accepted: tuple[Path, str], project: Path) -> None:
    store, _ = accepted
    refused(
        lw("ui", "--public-url", "not a url", "--port", "1", cwd=project, store=store),
        "--public-url",
        "http",
    )
    refused(
        lw("worker", "--once", "--dashboard-url", "ftp://x", cwd=project, store=store),
        "--dashboard-url",
        "http",
    )


def test_notify_settlings_every_and_rounds(accepted: tuple[Path, str], project: Path) -> None:
    """notify56b: `--notify-every` (how often the settlings are read) and `--notify-rounds`
    (failed rounds before a settling is given up) on both commands that notify."""
    store, _ = accepted
    hook = ("--notify", "http://127.0.0.1:9/hook")
    for args, option in (
        (("ui", *hook, "--notify-every", "0", "--port", "1"), "--notify-every"),
        (("worker", "--once", *hook, "--notify-every", "-1"), "--notify-every"),
        (("worker", "--once", "--notify-every", "7200"), "--notify-every"),
        (("ui", *hook, "--notify-rounds", "0", "--port", "1"), "--notify-rounds"),
        (("worker", "--once", *hook, "--notify-rounds", "-1"), "--notify-rounds"),
    ):
        refused(lw(*args, cwd=project, store=store), option)


def test_an_empty_store_option(accepted: tuple[Path, str], project: Path) -> None:
    """`--store ""` (an unset variable) was the default store."""
    for args in (("runs",), ("show", "x")):
        refused(lw(*args, "--store", "", cwd=project), "--store", "empty")
    assert not (project / ".loopwright").exists()


def test_a_by_name_longer_than_a_user_name(accepted: tuple[Path, str], project: Path) -> None:
    store, run_id = accepted
    before = dump(store)
    long = "n" * 20_000
    for args in (
        ("approve", run_id, "--by", long),
        ("cancel", run_id, "--by", long),
        ("memory", "add", "a note", "--scope", "global", "--by", long),
    ):
        line = refused(lw(*args, cwd=project, store=store), "--by", "64")
        assert len(line) < 300
    assert dump(store) == before
    # 64 is as long as `users add` allows: still a name
    r = lw("memory", "add", "a note", "--scope", "global", "--by", "n" * 64, cwd=project,
           store=store)  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_import_of_a_file_without_tasks(project: Path) -> None:
    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n")):
        (project / name).write_text(text)
        refused(lw("import", "ldb", name, "--out", "o.jsonl", cwd=project), "no tasks", name)
    assert not (project / "o.jsonl").exists()


@pytest.mark.parametrize("created", [True, False])
def test_ctrl_c_during_a_ray_batch_says_whether_runs_were_left(
    created: bool,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`run --executor ray` interrupted after its runs were created said only "interrupted",
    though they were there to resume (the local executor points at `runs` and `resume`)."""
    import loopwright as lw
    import loopwright.executors
    from loopwright.cli import main

    def run_on_ray(spec: Path, tasks: list[Any], keys: list[str], url: str, **_: Any) -> None:
        if created:  # the driver creates every run before Ray starts
            with lw.Runtime(url) as rt:
                for task, key in zip(tasks, keys, strict=True):
                    rt.create(lw.load_spec(spec), task, task_key=key)
        raise KeyboardInterrupt

    monkeypatch.setattr(loopwright.executors, "run_on_ray", run_on_ray)
    (project / "t.json").write_text(json.dumps(TASK))
    args = ["run", str(project / "loop.toml"), "--task", str(project / "t.json")]
    code = main([*args, "--executor", "ray", "--store", str(project / "s.db")])
    assert code == 130
    err = capsys.readouterr().err
    at = f" --store {project / 's.db'}"  # the store it was given, named (newuser52)
    # runs this command did not name (Ray's driver made them): the one command that continues
    # them all (newuser46), not `resume RUN`, which named no run (hints55)
    assert (f"`loopwright resume --all{at}` continues every interrupted run" in err) is created
    assert "RUN" not in err, err


@pytest.mark.parametrize("command", ["run", "check"])
def test_ctrl_c_while_a_spec_module_is_imported_exits_130_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """Ctrl-C while the spec's actor module runs at import (a model loaded, a slow import):
    exit 130 and one line, no traceback, no pointing at `resume` (no run was made), as for any
    interruption (stall51 asked; it was already so)."""
    import signal

    from loopwright.cli import main

    name = f"slowimport_{command}"
    (tmp_path / f"{name}.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)  # a person's Ctrl-C here\n"
        "def actor(ctx):\n    raise AssertionError('never called')\n"
        "def check(state, proposal):\n    raise AssertionError('never called')\n"
    )
    (tmp_path / "loop.toml").write_text(
        f"name = 'slow'\n[actor]\nref = '{name}.py:actor'\n[[verifiers]]\n"
        f"ref = '{name}.py:check'\n[contract.budget]\nmax_cycles = 3\n"
    )
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"n": 0}}}))
    monkeypatch.chdir(tmp_path)
    store = ["--task", "t.json", "--store", str(tmp_path / "s.db")] if command == "run" else []
    try:
        assert main([command, "loop.toml", *store]) == 130
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.modules.pop(name, None)
    captured = capsys.readouterr()
    assert captured.err == "loopwright: interrupted\n", captured.err
    assert "Traceback" not in captured.out


TWICE_ACTOR = """
import os, signal
import loopwright as lw

def actor(ctx):
    if ctx.cycle == 2:  # an impatient person: Ctrl-C, and again at once
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    return lw.Proposal.edit("doc", {"n": ctx.cycle})

def check(state, proposal):
    return lw.Verdict(passed=False, score=state.artifacts["doc"].values()["n"] / 100)
"""


def test_ctrl_c_twice_winds_the_runs_down_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second Ctrl-C landed in the middle of the first one's winding down, where asyncio
    raises KeyboardInterrupt for it wherever it lands: a process printed asyncio's tracebacks
    ("Task exception was never retrieved"); here, in one process, it was still pending and
    interrupted the next command (`resume` exited 130). Now the first cancels the runs, later
    ones are ignored, the lease is released and the run resumes."""
    import signal
    import sqlite3

    from loopwright.cli import main

    (tmp_path / "twice.py").write_text(TWICE_ACTOR)
    spec = (
        "name = 'twice'\n[actor]\nref = 'twice.py:actor'\n[[verifiers]]\nref = 'twice.py:check'\n"
    )
    (tmp_path / "loop.toml").write_text(spec + "[contract.budget]\nmax_cycles = 50\n")
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"n": 0}}}))
    store = tmp_path / "s.db"
    monkeypatch.chdir(tmp_path)
    try:
        args = ["run", "loop.toml", "--task", "t.json", "--task-key", "k", "--store", str(store)]
        assert main(args) == 130
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "never retrieved" not in err, err
    # (both presses came while the actor held the loop: the second says a third stops at once,
    # test_cli_first_steps; nothing else of the winding down changes)
    hint, said = err.splitlines()[0], err.splitlines()[1]
    assert hint.startswith("loopwright: still waiting for user code to return"), err
    assert said.startswith("loopwright: interrupted; every finished cycle is checkpointed"), err
    with contextlib.closing(sqlite3.connect(store)) as con, con:
        [(status, owner, cycle)] = con.execute(
            "SELECT status, lease_owner, cycle FROM runs"
        ).fetchall()
    assert (status, owner) == ("running", None) and cycle < 50  # released: nothing holds it
    assert main(["resume", "k", "--store", str(store)]) == 3  # on to its cycle budget


def _one_spec_moved(project: Path) -> tuple[Path, str]:
    """A store of two runs, "stays" (its spec here) and "goes" (its spec gone since): the
    store and the run id of "goes"."""
    from loopwright import Runtime, load_spec

    store = project / "s.db"
    other = project / "other"
    other.mkdir()
    (other / "loopmod.py").write_text((project / "loopmod.py").read_text())
    (other / "loop.toml").write_text((project / "loop.toml").read_text().replace("e2e", "moved"))
    with Runtime(str(store)) as rt:
        rt.create(load_spec(project / "loop.toml"), TASK, task_key="stays")
        goes = rt.create(load_spec(other / "loop.toml"), TASK, task_key="goes")[0].run_id
    (other / "loop.toml").unlink()  # the second run's spec is gone
    return store, goes


def test_resume_all_that_skips_a_run_does_not_exit_0(project: Path) -> None:
    """`resume --all` that could resume none of its runs (the spec moved) printed "skipped" and
    exited 0, which reads as "all accepted"; `run` exits 2 for runs it did not run."""
    store, _ = _one_spec_moved(project)
    r = lw("resume", "--all", cwd=project, store=store)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "skipped" in r.stdout and "(goes)" in r.stderr and "Traceback" not in r.stderr
    assert "(stays): accepted" in r.stdout


def test_a_run_whose_spec_moved_says_how_to_go_on(project: Path) -> None:
    """newuser46: "the run's spec … is not here (moved, deleted, or on another host)" said
    what was wrong and not what to do: `resume` takes no spec; `fork --spec` does."""
    store, goes = _one_spec_moved(project)
    line = refused(lw("resume", goes, cwd=project, store=store), "spec: the run's spec")
    assert "put it back there to resume the run" in line
    advice = line.split("`")[1]
    assert advice == f"loopwright fork {goes[:12]} --at-cycle 0 --spec SPEC", line
    moved = project / "elsewhere"
    moved.mkdir()
    (moved / "loopmod.py").write_text((project / "loopmod.py").read_text())
    (moved / "loop.toml").write_text((project / "loop.toml").read_text().replace("e2e", "moved"))
    args = advice.replace("SPEC", str(moved / "loop.toml")).split()[1:]
    forked = lw(*args, cwd=project, store=store)
    assert forked.returncode == 0 and "new run" in forked.stdout, forked.stdout + forked.stderr


def test_worker_once_says_why_it_skipped_a_run(project: Path) -> None:
    """`worker --once` that could not drive a run (its spec moved) said only "skipped 1" at
    the end: the why was in a `worker_skipped` event no one reads there. It is printed, one
    line a run, as `resume --all` prints it."""
    store, goes = _one_spec_moved(project)
    r = lw("worker", "--once", cwd=project, store=store)
    assert "(stays): accepted" in r.stdout and "skipped 1" in r.stdout
    said = " ".join(r.stdout.split())  # (the console wraps long lines)
    assert f"skipped {goes[:12]}: spec: the run's spec" in said, r.stdout
    assert said.count("skipped ") == 2 and "is not here" in said, r.stdout
    assert "Traceback" not in r.stderr
    r = lw("worker", "--once", "--json", cwd=project, store=store)
    assert json.loads(r.stdout)["skipped"] == 1  # stdout stays JSON: the line is on stderr
    assert f"skipped {goes[:12]}: " in " ".join(r.stderr.split())


def test_loopwrights_own_names_are_not_a_person(project: Path, accepted: tuple[Path, str]) -> None:
    """A decision by "loopwright" (the OS user of a service account, --by's default) was
    recorded as the system's: its denial did not revoke earned authority (an outside probe,
    probe42a). Such a name is refused for a decision and for a user."""
    store, run_id = accepted
    before = dump(store)
    for verb in ("approve", "deny"):
        for name in ("loopwright", "policy:earned"):
            refused(lw(verb, run_id, "--by", name, cwd=project, store=store), repr(name))
    refused(
        lw("users", "add", "loopwright", "--role", "admin", cwd=project, store=store),
        "'loopwright'",
    )
    assert dump(store) == before


def test_import_out_that_is_its_source(project: Path) -> None:
    """`import ldb runs.jsonl --out runs.jsonl` replaced the recording with its tasks (exit 0;
    outside probe, stop 51)."""
    src = Path(__file__).resolve().parents[1] / "data" / "ldb" / "humaneval"
    recording = (src / "reflexion" / "gpt-4o-2024-05-13.jsonl").read_bytes()
    (project / "runs.jsonl").write_bytes(recording)
    for out in ("runs.jsonl", "./runs.jsonl", str(project / "runs.jsonl")):
        r = lw("import", "ldb", "runs.jsonl", "--out", out, cwd=project)
        refused(r, "--out", "is the file being imported")
        assert (project / "runs.jsonl").read_bytes() == recording


def test_out_naming_the_store_is_refused(accepted: tuple[Path, str], project: Path) -> None:
    """`export eval-cases --out s.db`, with s.db the store it read, truncated the store to 0
    bytes, every run lost (outside probe, stop 51): any command's --out naming an SQLite
    database is refused, the store as it was."""
    store, run_id = accepted
    before = store.read_bytes()
    ldb = Path(__file__).resolve().parents[1] / "data" / "ldb" / "humaneval" / "reflexion"
    for args in (
        ("export", "eval-cases", "--out", "s.db"),
        ("export", "preference-pairs", "--out", str(store)),
        ("trace", run_id, "--out", "./s.db"),
        ("trace", run_id, "--format", "otlp-json", "--out", "s.db"),
        ("import", "ldb", str(ldb / "gpt-4o-2024-05-13.jsonl"), "--out", "s.db"),
    ):
        refused(lw(*args, cwd=project, store=store), args[-2], "is an SQLite database")
        assert store.read_bytes() == before, args
    [run] = json.loads(lw("runs", "--json", cwd=project, store=store).stdout)
    assert run["run_id"] == run_id


def test_import_label_no_task_key_may_hold(project: Path) -> None:
    """`import ldb … --label $'a\\nb'` wrote 164 tasks, exit 0, whose every key `run` refused
    (outside probe, stop 51): one line naming --label, no file written."""
    src = Path(__file__).resolve().parents[1] / "data" / "ldb" / "humaneval" / "reflexion"
    r = lw("import", "ldb", str(src / "gpt-4o-2024-05-13.jsonl"), "--out", "t.jsonl",
           "--label", "a\nb", cwd=project)  # fmt: skip
    refused(r, "--label: label 'a\\nb' must not hold a control character")
    assert not (project / "t.jsonl").exists()


def test_out_to_stdout_or_a_pipe_is_written(accepted: tuple[Path, str], project: Path) -> None:
    """The guard against writing over a database read the first bytes of --out: `--out
    /dev/stdout` (a pipe here) and a named pipe a reader waits on were opened to read, and the
    command waited for ever on what it would write itself (review51b). Written, as before."""
    store, run_id = accepted
    r = lw("trace", run_id, "--out", "/dev/stdout", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout.splitlines()[0])
    assert first["run_id"] == run_id

    fifo = project / "trace.pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with fifo.open("rb") as fh:  # (waits for the writer, as `cat trace.pipe` does)
            got.append(fh.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        r = lw("trace", run_id, "--out", str(fifo), cwd=project, store=store)
    finally:
        with contextlib.suppress(OSError):  # (a reader still waiting is let go: no writer)
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(got[0].splitlines()[0])["run_id"] == run_id


def test_resume_all_leaves_a_fork_never_started_to_its_maker(project: Path) -> None:
    """(polish52) `resume --all` started a fork that was made and never started, as if it were
    interrupted: a fork waits for its maker (an edit, say, then `resume`); starting it ran its
    effects on the state it was made with. A run a batch created and never reached is still
    continued, as the Ctrl-C message promises; the fork left is named, with how to start it."""
    from loopwright import Runtime, load_spec

    store = project / "s.db"
    with Runtime(str(store)) as rt:
        done = rt.run_sync(load_spec(project / "loop.toml"), TASK, task_key="done")
        fork = rt.fork(done.run_id, at_cycle=0).run_id
        rt.create(load_spec(project / "loop.toml"), TASK, task_key="batch")  # never reached
    r = lw("resume", "--all", cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    said = " ".join(r.stdout.split())
    assert "(batch): accepted" in said and fork[:12] not in said.split("left")[0], said
    assert "left 1 fork(s) never started" in said, said
    assert f"{fork[:12]} (done~fork-" in said, said  # (its task key)
    assert f"start it with: loopwright resume {fork[:12]}" in said, said
    runs = {
        x["run_id"]: x["status"]
        for x in json.loads(lw("runs", "--json", cwd=project, store=store).stdout)
    }
    assert runs[fork] == "pending"
    started = lw("resume", fork[:12], cwd=project, store=store)  # as printed
    assert started.returncode == 0 and "accepted" in started.stdout, started.stderr


def test_resume_all_goes_on_with_a_fork_that_ran_and_was_reopened_by_an_edit(
    project: Path,
) -> None:
    """(crash54) A fork its maker started, that ended, and that a person's edit reopened is
    ``pending`` with ``forked_from``: `resume --all` read that as "never started" (the mark
    ``maker_starts`` is cleared) and left it, telling the person to start what had run."""
    from loopwright import Runtime, load_spec

    store = project / "s.db"
    with Runtime(str(store)) as rt:
        loop = load_spec(project / "loop.toml")
        done = rt.run_sync(loop, TASK, task_key="done")
        fork = rt.fork(done.run_id, at_cycle=0).run_id
        assert rt.resume_sync(fork, loop).status == "accepted"
        reopened = rt.edit(fork, "doc/a", 99, by="ann")
        assert (reopened.status, reopened.maker_starts) == ("pending", False)
    r = lw("resume", "--all", cwd=project, store=store)
    said = " ".join(r.stdout.split())
    assert "never started" not in said, said
    assert fork[:12] in said, said
    with Runtime(str(store)) as rt:
        assert rt.store.get_run(fork).status != "pending"
