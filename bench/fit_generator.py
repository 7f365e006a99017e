"""stop 52: ``fit_stop`` given a generator of runs (the Python API): the process's peak
resident memory (a fresh process per size), at several sizes, so one sees whether it grows
with the runs.

Before stop 52 the API read a generator into a list (every run's cycles at once); the CLI
spilled its runs to a temporary file past ``HELD_CYCLES`` (``replay._spill.SpilledRuns``).

    PYTHONPATH=src python bench/fit_generator.py [N ...]   # runs of 40 cycles each
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Iterator

from many_runs import run  # (bench/ is on the path: the runs many_runs.py writes)

from loopwright.replay import RunTrace, fit_stop
from loopwright.replay._fit import Grid

CYCLES = 40


def runs(n: int) -> Iterator[RunTrace]:
    return (run(i, CYCLES) for i in range(n))


def one(n: int) -> None:
    """Fit ``n`` runs in this process; print its peak resident MB (before and after)."""
    grid = Grid(cost_quantiles=(), marginal_multiples=())  # plain rules: the reads dominate
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    fit_stop(runs(n), folds=3, grid=grid)
    s = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n:>6} {n * CYCLES:>8} {before:>10.0f} {peak:>8.0f} {s:>6.1f}", flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        one(int(sys.argv[2]))
        return
    sizes = [int(a) for a in sys.argv[1:]] or [300, 1200]
    print(f"{'runs':>6} {'cycles':>8} {'start MB':>10} {'peak MB':>8} {'s':>6}", flush=True)
    for n in sizes:
        subprocess.run([sys.executable, __file__, "--one", str(n)], check=True)


if __name__ == "__main__":
    main()
