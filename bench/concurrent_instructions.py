"""``concurrent_runs.py``'s loop run as R concurrent runs (``Runtime.run_many``,
group commit on), for valgrind to count what a cycle costs when many runs share one event loop.

Usage:  python bench/concurrent_instructions.py CYCLES [--runs R] [--one-by-one] [--full]

``(Ir(R, 60) - Ir(R, 10)) / (R * 50)`` is the instructions a cycle of the concurrent case, all
threads together (callgrind runs the writer thread too); beside ``cycle_instructions.py``'s
single-run figure, the difference is what sharing the loop costs a cycle (the group commit, the
shared memory read, the runs' tasks, futures and turns). Run ids are a fixed series and the
start-up's objects are frozen out of the collector, so two runs of one tree count alike.
``--one-by-one``: ``Runtime(group_commit=False)``. ``--full``: the store at its default
durability (``synchronous=FULL``; the fsync is the kernel's, not counted), else
``durability=process`` as ``cycle_instructions.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import tempfile
import uuid

import concurrent_runs
import cycle_phases

import loopwright as lw

_ids = itertools.count(1)


def _fixed_uuid4() -> uuid.UUID:
    n = next(_ids) * 1_000_003
    return uuid.UUID(int=n << 64 | n)  # (a run id is the hex's first 16 digits)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cycles", type=int)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--one-by-one", action="store_true")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--sync", action="store_true", help="cycle_phases.py's sync actor and verifier")
    a = ap.parse_args()
    if a.cycles < 1 or a.runs < 1:
        raise SystemExit("CYCLES and --runs: whole numbers >= 1")
    uuid.uuid4 = _fixed_uuid4
    url = f"sqlite:///{tempfile.mkdtemp()}/x.db" + ("" if a.full else "?durability=process")
    if a.sync:  # run in threads when runs share the loop (a blocking call stalls no other run)
        loop, task = cycle_phases.make_loop(a.cycles), cycle_phases.TASK
    else:
        loop, task = (
            concurrent_runs.make_loop(a.cycles),
            {"artifacts": {"doc": {"p1": "", "pad": ""}}},
        )
    tasks = [{**task, "task_key": f"k{i}"} for i in range(a.runs)]
    with lw.Runtime(url, group_commit=not a.one_by_one) as rt:
        gc.collect()
        gc.freeze()
        results = asyncio.run(rt.run_many(loop, tasks, concurrency=a.runs))
    if sorted({r.cycles for r in results}) != [a.cycles] or len(results) != a.runs:
        raise SystemExit(f"not every run ran {a.cycles} cycles: {[r.cycles for r in results]}")


if __name__ == "__main__":
    main()
