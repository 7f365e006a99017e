"""Cold start of the CLI: fresh processes for `import loopwright`, `loopwright --help` and
`loopwright runs` on a 1,000-run store, each net of a bare `python -c pass`.

    .venv/bin/python bench/cold_start.py              # ~15 s; last line: cold_runs_ms=<float>
    .venv/bin/python bench/cold_start.py --repeat 15 --runs 5000
    .venv/bin/python bench/cold_start.py --json out.json

Method (bench/README.md): the store is generated through the public Store API into a temp
directory; one warm-up round writes the byte-code caches and fills the page cache; then
``--repeat`` rounds each start every command once, in a rotating order so that a noisy moment
hits each alike. Reported: the median wall time per command, minus the median of
``python -c pass`` measured in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loopwright import Budget, Contract, NoProgress, Success
from loopwright.store import NewEvent, open_store

STATUSES = {
    "success": "accepted",
    "no_progress": "stopped",
    "budget_cycles": "stopped",
    "budget_cost": "stopped",
    "escalated": "escalated",
    "cancelled": "cancelled",
    "error": "failed",
}


def make_store(path: Path, runs: int, seed: int = 0) -> None:
    """``runs`` ended runs with the columns `loopwright runs` shows, through the Store API."""
    rng = random.Random(seed)
    contract = Contract(
        success=Success(),
        budget=Budget(max_cycles=12, max_cost_usd=2.0),
        no_progress=NoProgress(cycles=3),
    ).to_dict()
    reasons = list(STATUSES)
    now = time.time()
    with open_store(str(path)) as st:
        for i in range(runs):
            loop = rng.choice(["invoice_exceptions", "contract_redlines", "sql_repair"])
            key = f"{loop}/customer-{rng.randrange(10**6):06d}/document-{i:05d}.json"
            rec, _ = st.create_run(
                run_id=f"{rng.getrandbits(64):016x}",
                task_key=key,
                loop_name=loop,
                project="bench",
                spec_ref=None,
                loop_version=None,
                contract=contract,
                task={"id": key, "artifacts": {"doc": {"a": i, "b": "x" * 40}}},
                initial_state={"cycle": 0, "artifacts": {"doc": {"a": i}}},
            )
            token = st.acquire_lease(rec.run_id, "bench", 60.0)
            reason = rng.choice(reasons)
            cycles = rng.randint(1, 12)
            st.commit(
                rec.run_id,
                token,
                seq=1,
                cycle=cycles,
                state={"cycle": cycles, "artifacts": {"doc": {"a": i}}},
                record={"cycle": cycles, "decision": "stop"},
                events=[NewEvent(cycles, "stopped", {"reason": reason})],
                run={
                    "status": STATUSES[reason],
                    "stop_reason": reason,
                    "cycle": cycles,
                    "best_score": rng.random(),
                    "cost_usd": rng.random() * 2,
                    "tokens": rng.randrange(100_000),
                    "seconds": rng.random() * 60,
                    "ended_at": now - (runs - i),
                    "held_out_passed": rng.random() < 0.9 if reason == "success" else None,
                },
            )
            st.release_lease(rec.run_id, token)


def _exe() -> str:
    script = Path(sys.executable).with_name("loopwright")
    if not script.exists():
        sys.exit(f"no console script at {script}; install loopwright into this interpreter")
    return str(script)


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time, and the CPU time (user + system) of the process: on a loaded machine the
    wall time mostly measures the wait for a core, the CPU time much less so."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.decode()[-500:]}")
    return elapsed, (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="processes per command (default 7)")
    ap.add_argument("--runs", type=int, default=1000, help="runs in the store (default 1000)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    env = dict(os.environ)
    # Byte-code caches are what an installed package starts from; a session that disables
    # writing them would measure compilation instead.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("LOOPWRIGHT_DEBUG", None)
    env["COLUMNS"] = "80"
    py, exe = sys.executable, _exe()
    with tempfile.TemporaryDirectory(prefix="lw-cold-") as tmp:
        store = Path(tmp) / "runs.db"
        t0 = time.perf_counter()
        make_store(store, args.runs)
        made = time.perf_counter() - t0
        env["LOOPWRIGHT_STORE"] = str(store)
        cmds = {
            "python -c pass": [py, "-c", "pass"],
            "import loopwright": [py, "-c", "import loopwright"],
            "loopwright --help": [exe, "--help"],
            "loopwright runs": [exe, "runs"],
        }
        for cmd in cmds.values():  # warm-up: byte-code caches, page cache
            _time(cmd, env)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        cpu: dict[str, list[float]] = {name: [] for name in cmds}
        names = list(cmds)
        for i in range(args.repeat):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                wall, used = _time(cmds[name], env)
                times[name].append(wall)
                cpu[name].append(used)
    base = statistics.median(times["python -c pass"])
    cpu_base = statistics.median(cpu["python -c pass"])
    print(
        f"{args.runs} runs generated in {made:.1f} s; {args.repeat} processes per command; "
        f"load average {os.getloadavg()[0]:.2f}; {sys.version.split()[0]}"
    )
    print(f"{'command':<20} {'median ms':>10} {'net ms':>8} {'min..max ms':>14} {'net CPU ms':>11}")
    figures: dict[str, Any] = {"runs": args.runs, "repeat": args.repeat, "commands": {}}
    for name, ts in times.items():
        med = statistics.median(ts)
        net = med - base if name != "python -c pass" else 0.0
        net_cpu = statistics.median(cpu[name]) - cpu_base if name != "python -c pass" else 0.0
        span = f"{min(ts) * 1e3:.0f}..{max(ts) * 1e3:.0f}"
        print(f"{name:<20} {med * 1e3:>10.1f} {net * 1e3:>8.1f} {span:>14} {net_cpu * 1e3:>11.1f}")
        figures["commands"][name] = {
            "median_ms": med * 1e3,
            "net_ms": net * 1e3,
            "net_cpu_ms": net_cpu * 1e3,
        }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    cold = figures["commands"]["loopwright runs"]["net_ms"]
    print(f"cold_runs_ms={cold:.1f}")


if __name__ == "__main__":
    main()
