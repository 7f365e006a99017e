"""Python calls a governed cycle of bench/long_runs.py's trivial loop: a count, not a time.

Usage:  PYTHONHASHSEED=0 python bench/cycle_calls.py [--top 60] [--json OUT]

Runs the loop for 50 and for 1,050 cycles (each on a fresh SQLite file at the default
durability) under cProfile and prints ``calls_per_cycle=(calls(1050) - calls(50)) / 1000``
(start-up, imports and the run's end cancel out), then the difference by function: calls a
cycle and self time a cycle in µs (the time is cProfile's, inflated, and as noisy as the
machine; the counts are the same on any machine and load). Set ``PYTHONPATH=<tree>/src`` to
count another tree (bench/RESULTS.md, "2026-12-04 (stop 37) — engine CPU").
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import tempfile

from long_runs import TASK, Stamps, make_loop

import loopwright as lw

Row = tuple[float, float, str]


def profile(n: int) -> dict[str, tuple[int, float]]:
    """``{function: (calls, self seconds)}`` of one run of ``n`` cycles."""
    folder = tempfile.mkdtemp(prefix="lw-calls-")
    with lw.Runtime(os.path.join(folder, "x.db")) as rt:
        rt.create(make_loop(n, Stamps()), {"goal": "warm"}, task_key="warm")  # schema, pages
        prof = cProfile.Profile()
        prof.enable()
        r = asyncio.run(rt.run(make_loop(n, Stamps()), TASK, task_key="k"))
        prof.disable()
    if r.cycles != n:
        raise RuntimeError(f"benchmark run ended unexpectedly: {r.to_dict()}")
    home = os.path.dirname(lw.__file__)
    out: dict[str, tuple[int, float]] = {}
    # Summed over getstats()'s entries, one per code object: pstats keys functions by
    # (file, line, name) and keeps only the last of those that share one (the record codec's
    # generated `<string>:1(drop)` functions), which made the total drift between runs.
    for entry in prof.getstats():
        code = entry.code
        if isinstance(code, str):  # a built-in: cProfile gives its description
            key = f"~:0({code})"
        else:
            path = code.co_filename
            where = os.path.relpath(path, home) if "loopwright" in path else os.path.basename(path)
            key = f"{where}:{code.co_firstlineno}({code.co_name})"
        calls, own = out.get(key, (0, 0.0))
        out[key] = (calls + entry.callcount, own + entry.inlinetime)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=60, help="functions listed (most calls first)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    small, big = profile(50), profile(1050)
    calls = (sum(v[0] for v in big.values()) - sum(v[0] for v in small.values())) / 1000
    rows: list[Row] = []
    for k in set(small) | set(big):
        (nb, tb), (ns, ts) = big.get(k, (0, 0.0)), small.get(k, (0, 0.0))
        if nb != ns:
            rows.append(((nb - ns) / 1000, (tb - ts) / 1000 * 1e6, k))
    rows.sort(key=lambda r: -r[0])
    print(f"calls_per_cycle={calls:.1f}  ({lw.__file__})")
    print(f"{'calls/cycle':>11} {'self µs':>8}  function")
    for n, us, k in rows[: args.top]:
        print(f"{n:>11.2f} {us:>8.2f}  {k}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"calls_per_cycle": calls, "rows": rows}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
