"""The kill tests' fork server (``tests/forkserver.py``): a forked child is the process a
``python SCRIPT`` subprocess was, as far as the tests look: its own pid (the one SIGKILLed, the
one that held the store), the request's argv, environment, folder and pipes, its own end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forkserver import Forked, ForkServer, child_process, cli_popen

import loopwright as lw

SCRIPT = """
import json, os, signal, sys
import loopwright as lw

what = sys.argv[1]
print(json.dumps({"pid": os.getpid(), "argv": sys.argv, "cwd": os.getcwd(),
                  "env": os.environ.get("FS_PROBE"), "path0": sys.path[0],
                  "name": __name__}), flush=True)
print("to stderr", file=sys.stderr)
if what == "exit":
    sys.exit(3)
if what == "raise":
    raise ValueError("boom in the child")
if what == "kill":
    print("unflushed but unbuffered")
    os.kill(os.getpid(), signal.SIGKILL)
if what == "pause":  # until a signal ends it
    signal.pause()
if what == "store":

    def actor(ctx):
        return lw.Proposal(edits=(lw.Edit("doc", "a", 1),))

    def check(state, proposal):
        return lw.Verdict(passed=state.artifacts["doc"].values()["a"] == 1)

    loop = lw.Loop(name="fs", actor=actor, verifiers=[check],
                   contract=lw.Contract(budget=lw.Budget(max_cycles=3)))
    with lw.Runtime(sys.argv[2]) as rt:
        rt._on_phase = lambda p: p == "after_checkpoint" and os.kill(os.getpid(), 9)
        rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="K")
"""


@pytest.fixture(scope="module")
def server() -> ForkServer:
    fs = ForkServer()
    yield fs
    fs.close()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    path = tmp_path / "bin" / "child.py"
    path.write_text(SCRIPT)
    return path


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def test_a_forked_child_has_the_requests_argv_env_folder_and_its_own_pid(
    server: ForkServer, script: Path, tmp_path: Path
) -> None:
    import json

    proc = server.popen([sys.executable, script, "ok", "x y"], _env(FS_PROBE="p1"), cwd=tmp_path)
    out, err = proc.communicate(timeout=120)
    seen = json.loads(out.splitlines()[0])
    assert proc.returncode == 0
    assert seen["pid"] == proc.pid != os.getpid()
    assert seen["argv"] == [str(script), "ok", "x y"]
    assert (seen["cwd"], seen["env"]) == (str(tmp_path), "p1")
    assert (seen["path0"], seen["name"]) == (str(script.parent), "__main__")
    assert err == "to stderr\n"


def test_exit_codes_tracebacks_and_sigkill_come_back_as_from_a_subprocess(
    server: ForkServer, script: Path
) -> None:
    ends = {}
    for what in ("exit", "raise", "kill"):
        proc = server.popen([sys.executable, script, what], _env())
        out, err = proc.communicate(timeout=120)
        ends[what] = proc.returncode
        if what == "raise":
            assert err.rstrip().endswith("ValueError: boom in the child")
        if what == "kill":  # written before the kill, unbuffered as PYTHONUNBUFFERED asks
            assert out.splitlines()[-1] == "unflushed but unbuffered"
            assert str(proc.pid) in out
    assert ends == {"exit": 3, "raise": 1, "kill": -9}


def test_children_run_at_once_and_each_gets_its_own_end(server: ForkServer, script: Path) -> None:
    procs = [server.popen([sys.executable, script, w], _env()) for w in ("kill", "exit", "ok")]
    assert len({p.pid for p in procs}) == 3
    ends = [p.communicate(timeout=120) and p.returncode for p in reversed(procs)]
    assert ends == [0, 3, -9]


def test_the_killed_child_is_the_one_that_wrote_the_store(
    server: ForkServer, script: Path, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    proc = server.popen([sys.executable, script, "store", db], _env())
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == -9, err
    with lw.Runtime(db) as rt:
        run = rt.store.get_run("K")
        # killed after its first checkpoint, its lease still naming the killed pid
        assert run.status == "running" and f":{proc.pid}:" in (run.lease_owner or "")
        assert rt.store.latest_checkpoint(run.run_id).cycle == 0  # the task as given


def test_a_running_child_polls_none_and_ends_by_the_signal_sent(
    server: ForkServer, script: Path
) -> None:
    """``poll`` of a child still running is ``None``, as ``Popen.poll``: it raised
    BlockingIOError (a non-blocking read of the child's end, stop 56)."""
    proc = server.popen([sys.executable, script, "pause"], _env())
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM
    assert proc.poll() == -signal.SIGTERM


def test_cli_popen_writes_to_the_files_given_and_is_signalled_as_a_process(
    tmp_path: Path,
) -> None:
    """``cli_popen`` (test_workers' `loopwright worker` processes): a forked console script
    whose stdout and stderr are the files given, polled, signalled and waited as a ``Popen``."""
    exe = str(Path(sys.executable).with_name("loopwright"))
    out_path, err_path = tmp_path / "w.out", tmp_path / "w.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = cli_popen([exe, "--version"], dict(os.environ), out.fileno(), err.fileno())
    assert isinstance(proc, Forked)  # (this environment is the server's)
    assert proc.wait(timeout=120) == 0
    assert re.match(r"loopwright \d", out_path.read_text()), out_path.read_text()
    db = tmp_path / "s.db"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = cli_popen(
            [exe, "worker", "--store", str(db), "--poll", "0.1"],
            dict(os.environ),
            out.fileno(),
            err.fileno(),
        )
    while "claiming up to" not in out_path.read_text():
        assert proc.poll() is None, err_path.read_text()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=120) == -signal.SIGKILL


def test_a_child_with_other_start_up_settings_is_a_real_subprocess(script: Path) -> None:
    forked = child_process([sys.executable, script, "ok"], _env())
    other = child_process([sys.executable, script, "ok"], _env(PYTHONHASHSEED="7"))
    assert isinstance(forked, Forked) and isinstance(other, subprocess.Popen)
    for proc in (forked, other):
        proc.communicate(timeout=120)
        assert proc.returncode == 0


# --- the CLI's server: ``run_cli`` ----------------------------------------------------------
LOOPMOD = """
import loopwright as lw

def actor(ctx):
    return lw.Proposal.edit("doc", {"a": 1, "pay": 0}, usage=lw.Usage(cost_usd=0.05, tokens=9))

def check(state, proposal):
    return lw.Verdict(passed=state.artifacts["doc"].values()["a"] == 1)
"""
SPEC = """
name = "fs"
project = "tests"
[actor]
ref = "loopmod.py:actor"
[[verifiers]]
ref = "loopmod.py:check"
[contract.budget]
max_cycles = 3
[[contract.risk]]
name = "payment_change"
touches = ["doc/pay"]
[contract.escalation]
owner = "qa"
"""


def _ago(text: str) -> str:
    """The listing's ages ("17s ago") read at the second each command ran, as one."""
    return re.sub(r"\b\d+[smhd] ago\b", "N ago", text)


def test_a_forked_loopwright_prints_and_exits_as_the_console_script_does(tmp_path: Path) -> None:
    """The same command lines, given to the installed ``loopwright`` as a real subprocess and
    through ``run_cli``'s server, give the same exit code, stdout and stderr: help (every command
    module imported), usage errors, refusals, a parked run's listings read from one store, a
    spec read from a stdin pipe and the entry point's own ``sys.argv[0]`` (``--version`` and
    the demo's next steps name it)."""
    (tmp_path / "loopmod.py").write_text(LOOPMOD)
    (tmp_path / "loop.toml").write_text(SPEC)
    (tmp_path / "t.json").write_text('{"id": "t", "artifacts": {"doc": {"a": 0, "pay": 10}}}')
    exe = str(Path(sys.executable).with_name("loopwright"))
    env = {k: v for k, v in os.environ.items() if k != "LOOPWRIGHT_DEBUG"}
    env.update(LOOPWRIGHT_STORE=str(tmp_path / "s.db"), COLUMNS="100")
    parked = subprocess.run(
        [exe, "run", "loop.toml", "--task", "t.json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert parked.returncode == 4, parked.stderr
    lines: list[tuple[list[str], str | None]] = [
        (["--version"], None),
        (["--help"], None),
        (["run", "--help"], None),
        (["users", "--help"], None),
        (["nope"], None),
        (["runs", "--bogus"], None),
        (["runs"], None),
        (["runs", "--json"], None),
        (["show", "fs:t", "--json"], None),
        (["show", "fs:t"], None),
        (["approvals"], None),
        (["metrics"], None),
        (["trace", "fs:t"], None),
        (["check", "loop.toml"], None),
        (["check", "/dev/stdin"], SPEC),
        (["show", "no-such-run"], None),
        (["approve", "fs:t", "--by", ""], None),
        (["runs"], "piped text nobody reads"),
    ]
    import forkserver

    for args, stdin in lines:
        fresh = subprocess.run(
            [exe, *args], cwd=tmp_path, env=env, input=stdin, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        forked = forkserver.run_cli([exe, *args], env, timeout=120, cwd=tmp_path, input=stdin)
        got = (forked.returncode, _ago(forked.stdout), forked.stderr)
        assert got == (fresh.returncode, _ago(fresh.stdout), fresh.stderr), args
    assert forkserver._CLI_SERVER, "the commands were forked"
    served = forkserver._CLI_SERVER[0]
    assert served.serves(env)
    for setting in ("FORCE_COLOR", "TERMINAL_WIDTH", "LC_ALL", "PYTHONIOENCODING"):
        assert not served.serves({**env, setting: "1"}), setting  # a real subprocess then


def test_the_cli_server_preloads_every_command_module_in_full_apps_order() -> None:
    """A command module registers its commands on ``app`` when imported, and ``--help`` lists
    them in that order: the server imports them all, in the order ``full_app`` does, so a new
    one left out of ``CLI_PRELOAD`` would be listed elsewhere by a forked ``--help``."""
    from forkserver import CLI_PRELOAD

    from loopwright.cli._app import _ELSEWHERE

    commands = set(_ELSEWHERE.values())
    preloaded = [
        m for m in (n.removeprefix("loopwright.cli.") for n in CLI_PRELOAD) if m in commands
    ]
    assert preloaded == sorted(set(_ELSEWHERE.values()))
