"""CPU an e2e test's ``loopwright ARGS`` costs: N calls of each command line below, run as the
installed console script's subprocess and through ``tests/forkserver.py``'s ``run_cli`` (forked
from a server that imported the CLI once; a server per line, its start and imports, measured
alone, printed once and taken out); CPU seconds (user + sys of the reaped processes) per call.

    PYTHONPATH=src python bench/cli_start.py 20
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import forkserver

LOOPMOD = """
import loopwright as lw

def actor(ctx):
    return lw.Proposal.edit("doc", {"a": 1})

def check(state, proposal):
    return lw.Verdict(passed=state.artifacts["doc"].values()["a"] == 1)
"""
SPEC = """
name = "b"
[actor]
ref = "loopmod.py:actor"
[[verifiers]]
ref = "loopmod.py:check"
[contract.budget]
max_cycles = 3
"""
LINES = (
    ("--version",),
    ("runs", "--json"),
    ("show", "b:t"),
    ("run", "loop.toml", "--task", "t.json", "--task-key", "again"),
    ("nope",),
)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main(n: int) -> None:
    work = Path(tempfile.mkdtemp())
    (work / "loopmod.py").write_text(LOOPMOD)
    (work / "loop.toml").write_text(SPEC)
    (work / "t.json").write_text(json.dumps({"id": "t", "artifacts": {"doc": {"a": 0}}}))
    exe = str(Path(sys.executable).with_name("loopwright"))
    env = {**os.environ, "LOOPWRIGHT_STORE": str(work / "s.db")}
    first = subprocess.run(
        [exe, "run", "loop.toml", "--task", "t.json"],
        check=True,
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    assert first.returncode == 0
    starts = []
    for _ in range(4):  # the first one writes the bytecode cache: not counted
        start = _children_cpu()
        forkserver.ForkServer(forkserver.CLI_PRELOAD, forkserver.CLI_STARTUP_VARS).close()
        starts.append(_children_cpu() - start)
    server = sum(starts[1:]) / 3  # a server's start and imports, no child
    cost: dict[str, list[float]] = {}
    for how in ("subprocess", "forked"):
        if how == "forked":
            os.environ.pop("LOOPWRIGHT_TEST_CLI_SUBPROCESS", None)
        else:
            os.environ["LOOPWRIGHT_TEST_CLI_SUBPROCESS"] = "1"
        per = []
        for args in LINES:
            start = _children_cpu()
            for _ in range(n):
                r = forkserver.run_cli([exe, *args], env, timeout=120, cwd=work)
                assert r.returncode == (2 if args == ("nope",) else 0), r.stderr
            if how == "forked":  # a server per line: its children are reaped with it
                forkserver._CLI_SERVER.pop().close()
            per.append((_children_cpu() - start - (server if how == "forked" else 0.0)) / n)
        cost[how] = per
    print(f"the CLI server's start (imports), once per test process: {server:.3f} s")
    print(f"{'command':<28} {'subprocess s/call':>18} {'forked s/call':>14} {'ratio':>6}")
    for i, args in enumerate(LINES):
        a, b = cost["subprocess"][i], cost["forked"][i]
        print(f"{' '.join(args)[:28]:<28} {a:>18.4f} {b:>14.4f} {b / a:>6.2f}")
    a, b = sum(cost["subprocess"]), sum(cost["forked"])
    print(f"{'mean':<28} {a / len(LINES):>18.4f} {b / len(LINES):>14.4f} {b / a:>6.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if sys.argv[1:] else 20)
