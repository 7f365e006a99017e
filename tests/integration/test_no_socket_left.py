"""The model adapters' tests leave no connection to the garbage collector: the sync client's
pooled socket was closed only when collected, and its ResourceWarning (an error under this
suite's warning filters) failed whichever test was running then (fresh-clone CI, stop 39:
``test_review_reads``). The adapter's tests run in a child pytest that collects after every
test and lists what the collector had to finalise: 9 sockets before the adapters closed
their clients with the actor, none after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import loopwright as lw

HERE = Path(__file__).resolve().parent


def test_the_adapter_tests_leave_no_socket_to_the_collector(tmp_path: Path) -> None:
    out = tmp_path / "found.txt"
    src = str(Path(lw.__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COV_CORE_", "COVERAGE"))}
    paths = [src, str(HERE.parent / "support"), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["LEAKFIND_OUT"] = str(out)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-p",
            "no:unraisableexception",
            "-p",
            "leakfind",
            str(HERE / "test_openai_adapter.py"),
        ],
        cwd=str(HERE.parent.parent),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    found = out.read_text(encoding="utf-8").splitlines()
    assert not [f for f in found if "socket" in f], found
