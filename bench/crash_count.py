"""What counting a run's crashes costs at resume, at two run lengths (stuck52).

Usage:  python bench/crash_count.py [--cycles 50,2000] [--crashes 3] [--repeat 200]

Per run length N: a trivial loop runs N cycles on SQLite; ``--crashes`` ``resumed`` events are
appended after them, as executions that died at cycle N + 1 leave them. Then, side by side on
the same store: ``crashes_at`` (the read a resume of a ``running`` run adds, from the end of
the event log) and ``latest_checkpoint`` (a read every resume already makes), each the median
of ``--repeat`` calls, with rows returned and SQLite statements run. Flat in N is the goal:
the count reads the log's end by its index, never the whole log, and nothing per cycle.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright._crash_bound import crashes_at
from loopwright.store import NewEvent


def _loop(cycles: int) -> lw.Loop:
    return lw.Loop(
        name="crash-count",
        actor=lambda ctx: lw.Proposal.edit("doc", {"n": ctx.cycle}),
        verifiers=[lambda s, p: lw.Verdict(passed=False, score=0.5)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _median_ms(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def _statements(rt: lw.Runtime, fn: Any) -> int:
    store: Any = rt.store
    seen = [0]
    with store._conn() as conn:
        conn.set_trace_callback(lambda _sql: seen.__setitem__(0, seen[0] + 1))
        try:
            fn()
        finally:
            conn.set_trace_callback(None)
    return seen[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", default="50,2000")
    ap.add_argument("--crashes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    print("| cycles | events | crashes_at ms | latest_checkpoint ms | ratio | crashes_at stmts |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (int(c) for c in args.cycles.split(",")):
        with tempfile.TemporaryDirectory() as tmp, lw.Runtime(Path(tmp) / "s.db") as rt:
            r = rt.run_sync(_loop(n), {"artifacts": {"doc": {"n": 0}}})
            rt.store.append_events(
                r.run_id, [NewEvent(n, "resumed", {}) for _ in range(args.crashes)]
            )
            events = len(rt.store.events(r.run_id))
            found = crashes_at(rt.store, r.run_id, n)
            assert found == args.crashes, found  # (back to the run's `stopped` event)
            count_it = partial(crashes_at, rt.store, r.run_id, n)
            count = _median_ms(count_it, args.repeat)
            ck = _median_ms(partial(rt.store.latest_checkpoint, r.run_id), args.repeat)
            stmts = _statements(rt, count_it)
            print(f"| {n} | {events} | {count:.3f} | {ck:.3f} | {count / ck:.2f} | {stmts} |")


if __name__ == "__main__":
    main()
