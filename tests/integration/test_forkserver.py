"""The kill tests' fork server (``tests/forkserver.py``): a forked child is the process a
``python SCRIPT`` subprocess was, as far as the tests look: its own pid (the one SIGKILLed, the
one that held the store), the request's argv, environment, folder and pipes, its own end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forkserver import Forked, ForkServer, child_process

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


def test_a_child_with_other_start_up_settings_is_a_real_subprocess(script: Path) -> None:
    forked = child_process([sys.executable, script, "ok"], _env())
    other = child_process([sys.executable, script, "ok"], _env(PYTHONHASHSEED="7"))
    assert isinstance(forked, Forked) and isinstance(other, subprocess.Popen)
    for proc in (forked, other):
        proc.communicate(timeout=120)
        assert proc.returncode == 0
