"""Per-cycle overhead of the loopwright engine against a plain sqlite3 commit floor.

Usage:  python bench/cycle_overhead.py [--rounds 40] [--cycles 10] [--dir DIR] [--quick]

Both sides run in this process, on the same file system, in alternating rounds (ABBA order, so
drift on a noisy machine hits both alike):

* **engine** — ``Runtime.run`` of a loop whose actor and verifier return at once, with a ~2 KB
  state, against ``sqlite:///…`` (WAL, ``synchronous=FULL``: the default durability). A cycle is
  timed from one actor call to the next, so it covers everything the engine does per cycle:
  build the context, call the actor, apply the edit, call the verifier, decide by the contract,
  serialise and commit the checkpoint (checkpoint row, events, run row) under the lease.
* **floor** — plain ``sqlite3``: one ~2 KB row inserted and committed per cycle (WAL,
  ``synchronous=FULL``), the least any durable per-cycle checkpoint can cost.

It also measures ``durability=process`` (``synchronous=NORMAL``) beside the same floor at
``synchronous=NORMAL``, the import time of ``loopwright``, and the cold start of
``loopwright runs``. The last line is ``overhead_ratio=<engine/floor>`` (median of the per-round
ratios, full durability).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loopwright as lw

PAYLOAD_BYTES = 2048
PARTS = 4  # parts in the benchmark artifact; their values make up most of the state


# --- the engine side --------------------------------------------------------------------------
@dataclass
class Stamps:
    """Actor call times of one run: the steady-state cycle is the gap between two calls."""

    times: list[float] = field(default_factory=list)


def make_loop(cycles: int, stamps: Stamps) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        stamps.times.append(time.perf_counter())
        return lw.Proposal.edit("doc", {"p1": f"value {ctx.cycle}"})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        # One located finding on the part being edited: it is rejected, never accepted (an
        # accepted part would be protected and the next edit refused before verification), so
        # every cycle runs the whole path: actor, verifier, decide, checkpoint.
        return lw.Verdict(
            passed=False,
            score=0.5,
            findings=(lw.Finding("p1 still open", "doc", "p1", "content"),),
        )

    return lw.Loop(
        name="bench",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def initial_task(per_part: int) -> dict[str, Any]:
    return {
        "goal": "benchmark",
        "artifacts": {"doc": {f"p{i}": ("x" * max(1, per_part)) for i in range(PARTS)}},
    }


def calibrated_task(rt: lw.Runtime, cycles: int, state_bytes: int, key: str) -> dict[str, Any]:
    """A task whose checkpointed state averages ``state_bytes`` over a run of ``cycles``.

    The state grows every cycle (a new part version, a history entry), so a short calibration
    run measures the growth and the part values are sized to centre the run on the target.
    """
    first: dict[int, int] = {}
    for i, per_part in enumerate((50, 150)):
        probe = asyncio.run(
            rt.run(make_loop(cycles, Stamps()), initial_task(per_part), task_key=f"{key}-{i}")
        )
        sizes = checkpoint_sizes(rt, probe.run_id)
        first[per_part] = sizes["state_bytes_first"]
    growth = (sizes["state_bytes_last"] - sizes["state_bytes_first"]) / (cycles - 1)
    first_target = state_bytes - growth * (cycles - 1) / 2
    slope = (first[150] - first[50]) / 100  # state bytes per byte of each part value
    per_part = 50 + round((first_target - first[50]) / slope)
    return initial_task(per_part)


@dataclass
class EngineRound:
    ms_per_cycle: float  # steady state: actor call to actor call
    ms_per_cycle_whole_run: float  # wall time of run() / cycles: start, finish, packet included
    run_id: str


async def engine_round(rt: lw.Runtime, cycles: int, task: dict[str, Any], key: str) -> EngineRound:
    stamps = Stamps()
    loop = make_loop(cycles, stamps)
    t0 = time.perf_counter()
    result = await rt.run(loop, task, task_key=key)
    wall = time.perf_counter() - t0
    if result.cycles != cycles or result.stop_reason != "budget_cycles":
        raise RuntimeError(f"benchmark run ended unexpectedly: {result.to_dict()}")
    # the state keeps a window of recent cycles (Runtime(history_window=...)): check those
    decisions = [h["decision"] for h in result.state.history]
    if any(d != "revise" for d in decisions[:-1]) or len(decisions) != min(cycles, 20):
        raise RuntimeError(f"benchmark cycles were not all verified: {decisions}")
    gaps = [b - a for a, b in zip(stamps.times, stamps.times[1:], strict=False)]
    return EngineRound(
        ms_per_cycle=1000 * sum(gaps) / len(gaps),
        ms_per_cycle_whole_run=1000 * wall / cycles,
        run_id=result.run_id,
    )


# --- the floor ----------------------------------------------------------------------------------
class Floor:
    """A plain sqlite3 table, one ~2 KB row inserted and committed per cycle."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.db = sqlite3.connect(str(path), isolation_level=None)
        mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        assert str(mode).lower() == "wal", mode
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS checkpoints("
            "id INTEGER PRIMARY KEY, run TEXT, cycle INTEGER, state TEXT)"
        )
        self.payload = "y" * PAYLOAD_BYTES
        self.n = 0

    def round(self, cycles: int) -> float:
        """ms per insert-and-commit over ``cycles`` commits."""
        self.n += 1
        run = f"run-{self.n}"
        t0 = time.perf_counter()
        for c in range(cycles):
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT INTO checkpoints(run, cycle, state) VALUES(?,?,?)",
                (run, c, self.payload),
            )
            self.db.execute("COMMIT")
        return 1000 * (time.perf_counter() - t0) / cycles

    def close(self) -> None:
        self.db.close()


# --- the comparison ---------------------------------------------------------------------------
@dataclass
class Comparison:
    label: str
    engine: list[float] = field(default_factory=list)
    engine_whole: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        return [e / f for e, f in zip(self.engine, self.floor, strict=True)]

    def summary(self) -> dict[str, float]:
        return {
            "engine_ms": statistics.median(self.engine),
            "engine_whole_run_ms": statistics.median(self.engine_whole),
            "floor_ms": statistics.median(self.floor),
            "ratio": statistics.median(self.ratios),
            "ratio_min": min(self.ratios),
            "ratio_max": max(self.ratios),
        }


async def compare(
    label: str,
    workdir: Path,
    durability: str,
    rounds: int,
    cycles: int,
    task: dict[str, Any],
) -> tuple[Comparison, dict[str, int]]:
    store_url = f"sqlite:///{workdir / f'engine-{durability}.db'}"
    if durability != "full":
        store_url += f"?durability={durability}"
    sync = "FULL" if durability == "full" else "NORMAL"
    rt = lw.Runtime(store_url)
    floor = Floor(workdir / f"floor-{durability}.db", sync)
    out = Comparison(label)
    try:
        # Warm-up: first-use costs (imports, statement cache, file growth) stay out of the numbers.
        await engine_round(rt, cycles, task, f"{label}-warmup")
        floor.round(cycles)
        for r in range(rounds):
            engine_first = r % 4 in (0, 3)  # ABBA
            if not engine_first:
                out.floor.append(floor.round(cycles))
            er = await engine_round(rt, cycles, task, f"{label}-{r}")
            out.engine.append(er.ms_per_cycle)
            out.engine_whole.append(er.ms_per_cycle_whole_run)
            if engine_first:
                out.floor.append(floor.round(cycles))
        sizes = checkpoint_sizes(rt, er.run_id)
    finally:
        rt.close()
        floor.close()
    return out, sizes


async def compare_long(workdir: Path, cycles: int, task: dict[str, Any]) -> Comparison:
    """One run of ``cycles`` cycles against ``cycles`` floor commits, ABBA (engine, floor, floor,
    engine): what a cycle costs late in a long run (invariant 8: the same as early on)."""
    rt = lw.Runtime(f"sqlite:///{workdir / 'engine-long.db'}")
    floor = Floor(workdir / "floor-long.db", "FULL")
    out = Comparison(f"long-{cycles}")
    try:
        for i, engine_first in enumerate((True, False)):
            if not engine_first:
                out.floor.append(floor.round(cycles))
            er = await engine_round(rt, cycles, task, f"long-{i}")
            out.engine.append(er.ms_per_cycle)
            out.engine_whole.append(er.ms_per_cycle_whole_run)
            if engine_first:
                out.floor.append(floor.round(cycles))
    finally:
        rt.close()
        floor.close()
    return out


def checkpoint_sizes(rt: lw.Runtime, run_id: str) -> dict[str, int]:
    cks = [c for c in rt.store.checkpoints(run_id) if c.record is not None]
    state = [len(json.dumps(c.state, separators=(",", ":"))) for c in cks]
    record = [len(json.dumps(c.record, separators=(",", ":"))) for c in cks]
    return {
        "state_bytes_first": state[0],
        "state_bytes_last": state[-1],
        "state_bytes_mean": round(statistics.mean(state)),
        "record_bytes_mean": round(statistics.mean(record)),
    }


# --- start-up costs ---------------------------------------------------------------------------
def median_wall(cmd: list[str], n: int, env: dict[str, str] | None = None) -> tuple[float, int]:
    """Median wall time of ``cmd`` in ms over ``n`` runs (after one warm-up), and its exit code."""
    rc = subprocess.run(cmd, capture_output=True, env=env, check=False).returncode
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, capture_output=True, env=env, check=False).returncode
        times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times), rc


def import_self_ms(n: int) -> float:
    """Median cumulative ``import loopwright`` time from ``-X importtime`` (µs → ms)."""
    values = []
    for _ in range(n):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import loopwright"],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in proc.stderr.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] == "loopwright":
                values.append(int(parts[1]) / 1000)
    return statistics.median(values)


def startup(workdir: Path, n: int) -> dict[str, Any]:
    py = sys.executable
    base, _ = median_wall([py, "-c", "pass"], n)
    imp, _ = median_wall([py, "-c", "import loopwright"], n)
    out: dict[str, Any] = {
        "python_bare_ms": base,
        "import_loopwright_process_ms": imp,
        "import_loopwright_net_ms": imp - base,
        "import_loopwright_importtime_ms": import_self_ms(n),
    }
    cli = shutil.which("loopwright", path=str(Path(py).parent)) or ""
    env = {**os.environ, "LOOPWRIGHT_STORE": f"sqlite:///{workdir / 'engine-full.db'}"}
    if cli:
        ms, rc = median_wall([cli, "runs"], n, env=env)
        out["loopwright_runs_ms"] = ms if rc == 0 else None
        out["loopwright_runs_rc"] = rc
    else:
        out["loopwright_runs_ms"] = None
        out["loopwright_runs_rc"] = None
    return out


# --- main -------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40, help="alternating rounds per comparison")
    ap.add_argument("--cycles", type=int, default=10, help="cycles per engine run / floor batch")
    ap.add_argument("--state-bytes", type=int, default=PAYLOAD_BYTES, help="target state size")
    ap.add_argument("--dir", type=Path, default=None, help="where the database files go")
    ap.add_argument("--startup-runs", type=int, default=7, help="subprocess timings per number")
    ap.add_argument("--long", type=int, default=2000, help="cycles of the one long run (0: none)")
    ap.add_argument("--quick", action="store_true", help="few rounds, for a smoke test")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.cycles, args.startup_runs = 4, 10, 3
        args.long = min(args.long, 200)
    if args.cycles < 3:
        ap.error("--cycles must be at least 3")

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)  # (a --dir not made yet was a traceback)
    tmp = tempfile.mkdtemp(prefix="lw-bench-", dir=args.dir)
    workdir = Path(tmp)
    try:
        with lw.Runtime(str(workdir / "calibrate.db")) as rt:
            task = calibrated_task(rt, args.cycles, args.state_bytes, "calibrate")
        full, sizes = asyncio.run(compare("full", workdir, "full", args.rounds, args.cycles, task))
        proc, _ = asyncio.run(
            compare("process", workdir, "process", args.rounds, args.cycles, task)
        )
        long = asyncio.run(compare_long(workdir, args.long, task)) if args.long else None
        starts = startup(workdir, args.startup_runs)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    f, p = full.summary(), proc.summary()
    print(
        f"loopwright {lw.__version__} · Python {platform.python_version()} · "
        f"{platform.system()} {platform.machine()} · {os.cpu_count()} CPUs · sqlite "
        f"{sqlite3.sqlite_version}"
    )
    print(
        f"files in {args.dir or tempfile.gettempdir()}; {args.rounds} alternating rounds of "
        f"{args.cycles} cycles; medians over rounds"
    )
    print(
        f"checkpoint: state {sizes['state_bytes_first']}–{sizes['state_bytes_last']} B "
        f"(mean {sizes['state_bytes_mean']} B) + cycle record {sizes['record_bytes_mean']} B"
    )
    print()
    print(
        f"{'durability':<22}{'engine ms/cycle':>16}{'(whole run)':>13}{'floor ms/commit':>17}"
        f"{'ratio':>8}{'range':>14}"
    )
    for name, s in (("full (synchronous=FULL)", f), ("process (NORMAL)", p)):
        print(
            f"{name:<22}{s['engine_ms']:>16.3f}{s['engine_whole_run_ms']:>13.3f}"
            f"{s['floor_ms']:>17.3f}{s['ratio']:>8.2f}"
            f"{s['ratio_min']:>7.2f}–{s['ratio_max']:<6.2f}"
        )
    if long is not None:
        lg = long.summary()
        print(
            f"{'full, ' + str(args.long) + ' cycles':<22}{lg['engine_ms']:>16.3f}"
            f"{lg['engine_whole_run_ms']:>13.3f}{lg['floor_ms']:>17.3f}{lg['ratio']:>8.2f}"
            f"{lg['ratio_min']:>7.2f}–{lg['ratio_max']:<6.2f}"
        )
    print()
    print(
        f"import loopwright: {starts['import_loopwright_net_ms']:.1f} ms net of a bare "
        f"interpreter ({starts['import_loopwright_process_ms']:.1f} ms process, "
        f"{starts['python_bare_ms']:.1f} ms bare); -X importtime cumulative "
        f"{starts['import_loopwright_importtime_ms']:.1f} ms"
    )
    if starts["loopwright_runs_ms"] is not None:
        print(f"loopwright runs (cold process): {starts['loopwright_runs_ms']:.1f} ms")
    else:
        print(
            f"loopwright runs: not measured (CLI missing or failed, rc="
            f"{starts['loopwright_runs_rc']})"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "full": f,
                    "process": p,
                    "long": long.summary() if long is not None else None,
                    "sizes": sizes,
                    "startup": starts,
                },
                indent=2,
            )
        )
    if long is not None:
        print(f"overhead_ratio_{args.long}={long.summary()['ratio']:.3f}")
    print(f"overhead_ratio={f['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
