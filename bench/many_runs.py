"""Peak memory and seconds of the readers of many long runs: ``fit-stop`` and ``replay`` of a
run-trace file (R runs of N cycles), and ``export eval-cases`` / ``preference-pairs`` of a
store, each in a fresh process (peak RSS: its ``VmHWM``; CPU: user + system).

Usage::

    PYTHONPATH=SRC python bench/many_runs.py --digest-runs 100   # the digest cache alone
    PYTHONPATH=SRC python bench/many_runs.py [--cycles 10,1000,10000] [--runs 5,20]
        [--stores /tmp/rp/run10.db,/tmp/rp/run1000.db,/tmp/rp/run10000.db] [--dir DIR]

The trace files are made here (a task whose score rises to success in two runs of three, a
plateau in the third; costs vary by cycle). The stores are ``bench/read_paths.py``'s. Run it
once per tree (``PYTHONPATH=`` a ``git archive`` of the base, then the branch's ``src``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loopwright.replay import Call, CycleTrace, RunTrace, write_traces

RUN = """
import sys
from loopwright.cli import main
try:
    rc = main(sys.argv[1:])
finally:
    hwm = [x for x in open('/proc/self/status') if x.startswith('VmHWM')][0].split()[1]
    sys.stderr.write(f"\\nVmHWM {hwm}\\n")
raise SystemExit(rc)
"""


def run(i: int, n: int) -> RunTrace:
    ok = i % 3 != 2
    scores = [min(1.0, 0.2 + 0.8 * k / n) if ok else 0.3 for k in range(1, n + 1)]
    cycles = tuple(
        CycleTrace(
            cycle=k,
            calls=(
                Call("actor", 0.01 + 0.001 * (k % 7), 100 + k % 50),
                Call("verifier:check"),
                Call("verifier:audit"),
            ),
            verdicts={"check": {"passed": s >= 1.0, "score": s}},
            score=s,
            held_out_passed=(s >= 1.0) if k == n else None,
            seconds=0.5,
        )
        for k, s in enumerate(scores, 1)
    )
    return RunTrace(
        run_id=f"r{i}",
        task_key=f"t{i}",
        cycles=cycles,
        required=("check",),
        recorded={
            "status": "accepted" if ok else "stopped",
            "stop_reason": "success" if ok else "budget_cycles",
            "cycles": n,
            "cost_usd": sum(c.cost_usd for c in cycles),
            "tokens": sum(c.tokens for c in cycles),
            "held_out_passed": ok,
        },
    )


def measure(args: list[str], cwd: str) -> tuple[float, float, float]:
    """(wall s, CPU s, peak MB) of ``loopwright ARGS`` in a fresh process."""
    before = os.times()
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", RUN, *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t
    after = os.times()
    if p.returncode != 0:
        raise SystemExit(f"loopwright {' '.join(args)}: rc {p.returncode}\n{p.stderr[-2000:]}")
    hwm = int(p.stderr.strip().splitlines()[-1].split()[1])
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu, hwm / 1024


def digest_cache(runs: int) -> None:
    """A worker's ``runs`` runs, each sending three large documents of its own (256 K
    characters, ASCII and outside the BMP) to the proposal digest: the bytes the process-wide
    cache holds after them, and the process's peak RSS."""
    import gc
    import sys

    from loopwright import _digest_text as dt

    for r in range(runs):
        for k, ch in enumerate(("a", "\U0001f600", "b")):
            dt.escaped_twice(ch * (256 * 1024 + 3 * r + k))
    gc.collect()
    held = sum(sys.getsizeof(v) + sys.getsizeof(b) for v, b in dt._known.values())
    status = Path("/proc/self/status").read_text().splitlines()
    hwm = next(x for x in status if x.startswith("VmHWM")).split()[1]
    print(
        f"digest cache after {runs} runs: {len(dt._known)} values, {held / 2**20:.1f} MB held; "
        f"peak RSS {int(hwm) / 1024:.1f} MB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cycles", default="10,1000,10000")
    ap.add_argument("--runs", default="5,20")
    ap.add_argument("--stores", default="")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--digest-runs", type=int, default=0, help="only the digest cache's bound")
    a = ap.parse_args()
    if a.digest_runs:
        digest_cache(a.digest_runs)
        return
    d = a.dir or Path(tempfile.mkdtemp(prefix="many_runs-"))
    d.mkdir(parents=True, exist_ok=True)
    contract = d / "replay.toml"
    contract.write_text("[contract.budget]\nmax_cycles = 100\n[contract.no_progress]\ncycles = 5\n")
    print("path                         runs  cycles    wall s   CPU s  peak MB")
    for r in (int(x) for x in a.runs.split(",")):
        for n in (int(x) for x in a.cycles.split(",")):
            f = d / f"runs{r}x{n}.jsonl"
            if not f.exists():
                write_traces((run(i, n) for i in range(r)), f)
            for name, args in (
                ("fit-stop FILE", ["fit-stop", str(f), "--json"]),
                ("replay FILE", ["replay", str(f), "--contract", str(contract), "--json"]),
            ):
                wall, cpu, mb = measure(args, str(d))
                print(f"{name:28s} {r:5d} {n:7d} {wall:9.2f} {cpu:7.2f} {mb:8.1f}", flush=True)
    for store in filter(None, a.stores.split(",")):
        for name in ("eval-cases", "preference-pairs"):
            wall, cpu, mb = measure(["export", name, "--store", store], str(d))
            print(f"export {name:21s} {Path(store).name:>14s} {wall:9.2f} {cpu:7.2f} {mb:8.1f}")


if __name__ == "__main__":
    main()
