"""What a person's pause costs the cycles of runs never paused: cycles/s before and after, at
several sizes (one run alone: each commit on its own; 10 and 100 runs: group commits).

Usage:  python bench/pause_flag.py --before /path/to/old/src [--after src] [--rounds 3]
                                   [--pg URL] [--dir DIR]

The pause adds no statement to a cycle: the fencing read every commit does already returns
``cancel_requested OR open_requests > 0`` instead of ``cancel_requested``, and each execution
start reads the run's pending requests once (``_pause._pause_if_asked``). Each round runs each
version in a fresh subprocess, ABBA order (drift of a noisy machine hits both alike), with
``concurrent_runs.engine``'s workload (a trivial actor and verifier); prints each version's
cycles/s and the ratio of the medians (after / before: 1.00 is no change).
"""

from __future__ import annotations

import statistics

from before_after import abba, arguments

SIZES = ((1, 300), (10, 50), (100, 50))  # (runs, cycles each)

CHILD = """
import json, sys, tempfile, uuid
sys.path.insert(0, {src!r})
sys.path.insert(0, {bench!r})
import loopwright
assert loopwright.__file__.startswith({src!r}), loopwright.__file__
import concurrent_runs as cr
out = {{}}
for runs, cycles in {sizes!r}:
    with tempfile.TemporaryDirectory(dir={dir!r}) as d:
        wall, n, _ = cr.engine(f"sqlite:///{{d}}/e.db", runs, cycles)
        out[f"sqlite {{runs}}x{{cycles}}"] = n / wall
    if {pg!r}:
        schema = f"lw_pf_{{uuid.uuid4().hex[:8]}}"
        import psycopg
        with psycopg.connect({pg!r}, autocommit=True) as c:
            c.execute(f'CREATE SCHEMA "{{schema}}"')  # (a store is made in a schema that exists)
        try:
            wall, n, _ = cr.engine(f"{{{pg!r}}}?schema={{schema}}", runs, cycles)
            out[f"postgresql {{runs}}x{{cycles}}"] = n / wall
        finally:
            cr.drop_schema({pg!r}, schema)
print(json.dumps(out))
"""


def main() -> None:
    results = abba(arguments(), CHILD, sizes=SIZES)
    print(f"{'store, runs x cycles':24} {'before (cycles/s)':>26} {'after':>26}  ratio")
    for key in results["after"][0]:
        b = [x[key] for x in results["before"]]
        f = [x[key] for x in results["after"]]
        print(
            f"{key:24} {' / '.join(f'{x:,.0f}' for x in b):>26} "
            f"{' / '.join(f'{x:,.0f}' for x in f):>26}  "
            f"{statistics.median(f) / statistics.median(b):.2f}"
        )


if __name__ == "__main__":
    main()
