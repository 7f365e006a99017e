"""Resume after a SIGKILL at cycle 2,000 against one at cycle 20 (stop 54, issue 14).

Usage:  python bench/kill_resume.py [--cycles 20,2000] [--every 50,1000] [--resumes 5]
                                    [--store sqlite|postgres]

Per run length N and snapshot interval K (``Runtime(snapshot_every=K)``): a process runs a
loop of four parts (a plan step each, a visible check that locates a finding in one, a held-out
check, a reflector writing a task-scoped note each failed cycle, an effect keyed by a business
key every 100 cycles) whose actor SIGKILLs its own process in cycle N (after cycle N - 1's
commit, in the middle of cycle N: a crash, not a clean stop). Then, ``--resumes`` times, a
fresh process resumes that run from a copy of the killed store (``Runtime.resume``) and is
measured from the call to ``resume`` (the store already open, the imports done) up to the
resumed run's first actor call, where it kills itself again (so every repeat sees the same
store): Python function calls (cProfile: a count, steady under load), CPU ms and wall ms
(medians). What is read is the latest snapshot, at most K - 1 deltas, the lease's crash
bookkeeping and the reflection owed for cycle N - 1; flat in N is the goal.

On PostgreSQL (``--store postgres``, ``$LOOPWRIGHT_TEST_PG``) each repeat runs the N cycles
and the kill again in a schema of its own (dropped after), then resumes there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

_CHILD = r"""
import cProfile, json, os, signal, sys, time
import loopwright as lw

mode, url, n, every, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
PARTS = ("a", "b", "c", "d")
TASK = {
    "goal": "four parts",
    "artifacts": {"doc": dict.fromkeys(PARTS, "draft")},
    "plan": [{"id": f"s{p}", "parts": [f"doc/{p}"]} for p in PARTS],
}
stamps = {}
prof = cProfile.Profile()

@lw.effect("send", key=lambda a: f"note:{a['n']}", requires_success=False)
def note(n: int, *, key: str) -> dict:
    return {"sent": key}

def actor(ctx):
    if mode == "resume" and "cpu" not in stamps:
        prof.disable()
        stamps.update(cpu=time.process_time() - stamps["cpu0"], wall=time.perf_counter() - stamps["wall0"],
                      cycle=ctx.cycle)
        import pstats
        stamps["calls"] = pstats.Stats(prof).total_calls
        with open(out, "w") as fh:
            json.dump({k: v for k, v in stamps.items() if not k.endswith("0")}, fh)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "run" and ctx.cycle == n:
        os.kill(os.getpid(), signal.SIGKILL)
    part = PARTS[ctx.cycle % 4]
    effects = (note.call(n=ctx.cycle),) if ctx.cycle % 100 == 0 else ()
    return lw.Proposal(edits=(lw.Edit("doc", part, f"v{ctx.cycle}"),), effects=effects,
                       usage=lw.Usage(cost_usd=0.0001, tokens=10))

def check(state, proposal):
    return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "a", "t"),))

def audit(state, proposal):
    return lw.Verdict(passed=False, score=0.5)

loop = lw.Loop(
    name="kill-resume", actor=actor,
    verifiers=[lw.Check(fn=check, name="check"), lw.Check(fn=audit, name="audit", held_out=True)],
    contract=lw.Contract(budget=lw.Budget(max_cycles=n + 10)),
    effects=(note,),
    approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
    reflector=lambda ctx, verdicts: f"cycle {ctx.cycle}: still open",
)
with lw.Runtime(url, snapshot_every=every) as rt:
    if mode == "run":
        rt.run_sync(loop, TASK, task_key="KR")
    else:
        run_id = rt.store.get_run("KR").run_id
        stamps.update(cpu0=time.process_time(), wall0=time.perf_counter())
        prof.enable()
        rt.resume_sync(run_id, loop)
"""


def _child(*args: str) -> int:
    p = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], check=False, capture_output=True, text=True
    )
    if p.returncode != -signal.SIGKILL:
        raise SystemExit(f"child {args[0]} ended {p.returncode}, not killed:\n{p.stderr[-2000:]}")
    return p.returncode


def _pg_schema(base: str) -> tuple[str, str]:
    import psycopg

    schema = f"lw_bench_killresume54_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema, f"{base}{'&' if '?' in base else '?'}schema={schema}"


def _pg_drop(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def measure(n: int, every: int, resumes: int, store: str, folder: Path) -> dict[str, Any]:
    got: list[dict[str, Any]] = []
    if store == "sqlite":
        killed = folder / f"killed-{n}-{every}"
        killed.mkdir()
        _child("run", f"sqlite:///{killed / 's.db'}", str(n), str(every), "-")
        for i in range(resumes):
            copy = folder / f"copy-{n}-{every}-{i}"
            shutil.copytree(killed, copy)
            out = copy / "stamps.json"
            _child("resume", f"sqlite:///{copy / 's.db'}", str(n), str(every), str(out))
            got.append(json.loads(out.read_text()))
            shutil.rmtree(copy)
    else:
        base = os.environ["LOOPWRIGHT_TEST_PG"]
        for i in range(resumes):
            schema, url = _pg_schema(base)
            try:
                _child("run", url, str(n), str(every), "-")
                out = folder / f"stamps-{n}-{every}-{i}.json"
                _child("resume", url, str(n), str(every), str(out))
                got.append(json.loads(out.read_text()))
            finally:
                _pg_drop(base, schema)
    assert all(g["cycle"] == n for g in got), got  # the killed cycle is redone first
    return {
        "calls": statistics.median(g["calls"] for g in got),
        "cpu_ms": statistics.median(g["cpu"] for g in got) * 1000,
        "wall_ms": statistics.median(g["wall"] for g in got) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", default="20,2000")
    ap.add_argument("--every", default="50,1000", help="snapshot intervals K")
    ap.add_argument("--resumes", type=int, default=5)
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.cycles.split(",")]
    everys = [int(s) for s in args.every.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="lw-kill-resume-"))
    print(f"# {args.store}, {args.resumes} resume(s) each; {folder}")
    print(f"{'K':>5} {'killed at':>9} {'py calls':>9} {'CPU ms':>7} {'wall ms':>8}")
    try:
        for every in everys:
            rows = {}
            for n in sizes:
                rows[n] = r = measure(n, every, args.resumes, args.store, folder)
                print(
                    f"{every:>5} {n:>9} {r['calls']:>9.0f} {r['cpu_ms']:>7.1f} {r['wall_ms']:>8.1f}"
                )
            big, small = rows[sizes[-1]], rows[sizes[0]]
            print(
                f"calls_ratio_K{every}={big['calls'] / small['calls']:.3f} "
                f"cpu_ratio_K{every}={big['cpu_ms'] / small['cpu_ms']:.3f}"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
