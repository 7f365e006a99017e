"""Does a cycle cost the same at cycle 5,000 as at cycle 5? (invariant 8)

Usage:  python bench/long_runs.py [--sizes 50,500,5000] [--dir DIR] [--resumes 5]

For each size N, in one process, ABBA-alternated (engine, floor, floor, engine: drift on a
noisy machine hits both alike; each side's figure is the mean of its two runs):

* **engine** — one ``Runtime.run`` of N cycles of a trivial loop (the actor writes a new value
  of one part, the verifier rejects it with one located finding) on the embedded SQLite store
  at its default durability (WAL, ``synchronous=FULL``), a fresh database per run;
* **floor** — plain ``sqlite3``: N commits of one row as large as the engine's average
  checkpoint (WAL, ``synchronous=FULL``): the least a durable per-cycle checkpoint can cost.

Per size it prints the engine's µs per cycle (steady state: actor call to actor call), CPU µs
per cycle, database bytes per cycle (file growth after a WAL checkpoint, and ``write_bytes``
of ``/proc/self/io``), peak RSS, and the time a fresh process takes to load the run's latest
state (median of ``--resumes`` processes). The last lines are

    growth_ratio=<µs/cycle at the largest size ÷ µs/cycle at the smallest>     target ≤ 1.2
    bytes_per_cycle_<N>=<int>   database growth per cycle at the largest size  target ≤ 2 KB
    resume_ms_<N>=<float>       loading the latest state at the largest size   target ≤ 50 ms
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import loopwright as lw


@dataclass
class Stamps:
    times: list[float] = field(default_factory=list)


def make_loop(cycles: int, stamps: Stamps) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        stamps.times.append(time.perf_counter())
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        # Rejected every cycle (an accepted part would be protected): every cycle runs the
        # whole path — actor, apply, verifier, decide, checkpoint.
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still open", "doc", "body", "text"),)
        )

    return lw.Loop(
        name="long",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


TASK = {"goal": "a long loop", "artifacts": {"doc": {"body": "", "title": "a title"}}}


def _io_written() -> int:
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _db_bytes(path: Path) -> int:
    """Size of the database once its WAL is checkpointed into it."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


@dataclass
class EngineRun:
    us_per_cycle: float
    us_per_cycle_last_tenth: float
    cpu_us_per_cycle: float
    db_bytes_per_cycle: float
    io_bytes_per_cycle: float
    value_bytes_per_cycle: float
    path: Path
    run_id: str


def engine_run(n: int, folder: Path, tag: str) -> EngineRun:
    path = folder / f"engine-{n}-{tag}.db"
    with lw.Runtime(path) as rt:
        rt.create(make_loop(n, Stamps()), {"goal": "warm"}, task_key="warm")  # schema, pages
        empty = _db_bytes(path)
        stamps = Stamps()
        io0, cpu0 = _io_written(), time.process_time()
        r = asyncio.run(rt.run(make_loop(n, stamps), TASK, task_key=f"run-{n}"))
        cpu = time.process_time() - cpu0
        io = _io_written() - io0
        if (r.cycles, r.stop_reason) != (n, "budget_cycles"):
            raise RuntimeError(f"benchmark run ended unexpectedly: {r.to_dict()}")
        grown = _db_bytes(path) - empty
    gaps = [b - a for a, b in zip(stamps.times, stamps.times[1:], strict=False)]
    tenth = gaps[-max(1, len(gaps) // 10) :]
    value_bytes = sum(len(json.dumps(f"draft {c}")) for c in range(1, n + 1)) / n
    return EngineRun(
        us_per_cycle=statistics.fmean(gaps) * 1e6,
        us_per_cycle_last_tenth=statistics.fmean(tenth) * 1e6,
        cpu_us_per_cycle=cpu / n * 1e6,
        db_bytes_per_cycle=grown / n,
        io_bytes_per_cycle=io / n,
        value_bytes_per_cycle=value_bytes,
        path=path,
        run_id=r.run_id,
    )


def floor_run(n: int, folder: Path, tag: str, row_bytes: int) -> float:
    """µs per durable commit of one ``row_bytes`` row (plain sqlite3, WAL, FULL)."""
    path = folder / f"floor-{n}-{tag}.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE ck (run TEXT, seq INTEGER, state TEXT, PRIMARY KEY (run, seq))")
    payload = "x" * row_bytes
    t0 = time.perf_counter()
    for i in range(n):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO ck VALUES (?, ?, ?)", ("r", i, payload))
        db.execute("COMMIT")
    us = (time.perf_counter() - t0) / n * 1e6
    db.close()
    return us


_LOAD = """
import sys, time
t0 = time.perf_counter()
from loopwright.store import open_store
import loopwright.store.sqlite  # imports are not the resume (they compile, uncached, here)
t1 = time.perf_counter()
st = open_store(sys.argv[1])
ck = st.latest_checkpoint(sys.argv[2])
if hasattr(ck, "task_state"):
    state = ck.task_state()
else:  # a release before the append-only layout (to compare with)
    from loopwright import TaskState
    state = TaskState.from_dict(ck.state)
assert state.cycle == int(sys.argv[3]), state.cycle
t2 = time.perf_counter()
st.close()
print((t2 - t1) * 1000)
"""


def resume_ms(run: EngineRun, n: int, times: int) -> float:
    """Median wall time, in fresh processes, to open the store and load the latest state
    (the interpreter's start and the imports are not counted: where PYTHONDONTWRITEBYTECODE
    is set, every fresh process compiles loopwright's modules again)."""
    out = []
    for _ in range(times):
        done = subprocess.run(
            [sys.executable, "-c", _LOAD, str(run.path), run.run_id, str(n)],
            check=True,
            capture_output=True,
            text=True,
        )
        out.append(float(done.stdout.strip()))
    return statistics.median(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="50,500,5000")
    ap.add_argument("--dir", help="folder for the databases (default: a temp folder)")
    ap.add_argument("--resumes", type=int, default=5)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lw-long-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"# loopwright · Python {platform.python_version()} · {base}")
    print(
        f"{'cycles':>7} {'µs/cycle':>9} {'last 10%':>9} {'floor µs':>9} {'× floor':>8} "
        f"{'CPU µs':>7} {'DB B/cyc':>9} {'IO B/cyc':>9} {'RSS MB':>7} {'resume ms':>10}"
    )
    rows: dict[int, dict[str, float]] = {}
    for n in sizes:
        a1 = engine_run(n, base, "a1")
        row = round(a1.db_bytes_per_cycle)
        f1 = floor_run(n, base, "b1", row)
        f2 = floor_run(n, base, "b2", row)
        a2 = engine_run(n, base, "a2")
        us = (a1.us_per_cycle + a2.us_per_cycle) / 2
        floor = (f1 + f2) / 2
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        res = resume_ms(a2, n, args.resumes)
        rows[n] = {
            "us": us,
            "last": (a1.us_per_cycle_last_tenth + a2.us_per_cycle_last_tenth) / 2,
            "floor": floor,
            "cpu": (a1.cpu_us_per_cycle + a2.cpu_us_per_cycle) / 2,
            "db": (a1.db_bytes_per_cycle + a2.db_bytes_per_cycle) / 2,
            "io": (a1.io_bytes_per_cycle + a2.io_bytes_per_cycle) / 2,
            "values": a2.value_bytes_per_cycle,
            "rss": rss,
            "resume": res,
        }
        r = rows[n]
        print(
            f"{n:>7} {r['us']:>9.0f} {r['last']:>9.0f} {r['floor']:>9.0f} "
            f"{r['us'] / r['floor']:>8.2f} {r['cpu']:>7.0f} {r['db']:>9.0f} {r['io']:>9.0f} "
            f"{r['rss']:>7.1f} {r['resume']:>10.1f}",
            flush=True,
        )
        for p in base.glob(f"*-{n}-*.db*"):
            p.unlink()
    small, big = rows[sizes[0]], rows[sizes[-1]]
    print(f"# part values written per cycle: {big['values']:.0f} B; peak RSS is the process's")
    print(f"# resume at {sizes[-1]} ÷ resume at {sizes[0]}: {big['resume'] / small['resume']:.2f}")
    # the target is on wall time (the µs/cycle); CPU time tells growth from a loaded
    # machine, which wall time cannot (outside51a: 1.595 on wall, 548 -> 600 µs of CPU)
    print(
        f"# cpu growth (CPU µs/cycle at {sizes[-1]} ÷ at {sizes[0]}): {big['cpu'] / small['cpu']:.3f}"
    )
    print(f"growth_ratio={big['us'] / small['us']:.3f}")
    print(f"bytes_per_cycle_{sizes[-1]}={round(big['db'])}")
    print(f"resume_ms_{sizes[-1]}={big['resume']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
