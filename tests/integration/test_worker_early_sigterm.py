"""`loopwright worker` sent SIGTERM while it starts, its modules still loading (a slow start
under load; an orchestrator stopping a worker it just started): it stops gracefully, exit 0,
having claimed nothing — not killed by the signal (exit -15). The signal is sent by the worker
itself at a known point (an import hook, as a module starts loading): no timing involved."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_workers import PATIENCE, SPEC, _create

import loopwright as lw

# Runs `loopwright worker` as its console script does (argv from sys.argv), after hooking the
# import of module $1: as it starts loading, the process sends itself SIGTERM.
SCRIPT = """
import os, signal, sys

hooked, store = sys.argv[1:3]

class Hook:
    def find_spec(self, name, path=None, target=None):
        if name == hooked:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, Hook())
sys.argv = ["loopwright", "worker", "--store", store, "--poll", "0.1"]
from loopwright.cli import main

sys.exit(main())
"""


@pytest.mark.parametrize(
    "module",
    [
        "loopwright.cli._app",  # the CLI's modules (typer, rich, the commands)
        "loopwright._engine",  # the worker command's own (the engine, the worker)
    ],
)
def test_a_sigterm_while_the_worker_loads_stops_it_cleanly(tmp_path: Path, module: str) -> None:
    store = str(tmp_path / "s.db")
    [run_id] = _create(store, 1, SPEC)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, module, store],
        check=False,
        capture_output=True,
        text=True,
        timeout=PATIENCE,  # (a worker that ignored the stop would wait for ever: a failure)
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert "stopping" in proc.stdout, proc.stdout
    assert "0 claimed" in proc.stdout, proc.stdout
    with lw.Runtime(store) as rt:  # the run was neither claimed nor touched
        rec = rt.store.get_run(run_id)
        assert (rec.status, rec.lease_owner, rec.fencing_token) == ("pending", None, 0), rec


@pytest.mark.parametrize(
    "args", [["--concurrency", "0"], ["--store", "{missing}", "--once"], ["--poll", "nope"]]
)
def test_a_worker_that_never_started_leaves_sigterm_as_it_was(
    tmp_path: Path, args: list[str]
) -> None:
    """A program that calls ``main`` itself (a supervisor, a test) with a worker's bad option
    or a store that does not exist: SIGTERM was left noted by the worker's start-up handler,
    so that process could no longer be stopped with it (review47)."""
    import signal

    from loopwright.cli import main

    mine = signal.getsignal(signal.SIGTERM)
    args = [a.replace("{missing}", str(tmp_path / "none.db")) for a in args]
    assert main(["worker", *args]) == 2
    assert signal.getsignal(signal.SIGTERM) is mine
