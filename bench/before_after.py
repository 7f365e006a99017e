"""Two versions of the engine side by side: grouped cycles/s of concurrent_runs.py's workload.

Usage:  python bench/before_after.py --before /path/to/old/checkout/src [--after src]
                                     [--rounds 3] [--pg URL] [--dir DIR]

Make the "before" tree with ``git worktree add /tmp/before <commit>`` and pass
``/tmp/before/src``. Each round runs each version in a fresh subprocess (ABBA order: before,
after, after, before, ...), so drift of a noisy machine hits both alike; the workload is
``concurrent_runs.engine`` (100 runs × 50 cycles) on SQLite, and on PostgreSQL with ``--pg``.
Prints each version's figures and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent

CHILD = """
import json, sys, tempfile, uuid
sys.path.insert(0, {src!r})
sys.path.insert(0, {bench!r})
import loopwright
assert loopwright.__file__.startswith({src!r}), loopwright.__file__
import concurrent_runs as cr
out = {{}}
with tempfile.TemporaryDirectory(dir={dir!r}) as d:
    wall, n, _ = cr.engine(f"sqlite:///{{d}}/e.db", 100, 50)
    out["sqlite"] = n / wall
if {pg!r}:
    schema = f"lw_ba_{{uuid.uuid4().hex[:8]}}"
    try:
        wall, n, _ = cr.engine(f"{{{pg!r}}}?schema={{schema}}", 100, 50)
        out["postgresql"] = n / wall
    finally:
        cr.drop_schema({pg!r}, schema)
print(json.dumps(out))
"""


def arguments() -> argparse.Namespace:
    """The options every before/after comparison takes (``pause_flag.py`` too)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the src/ folder of the old version")
    ap.add_argument("--after", default=str(BENCH.parent / "src"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pg", default="")
    ap.add_argument("--dir", default=None)
    return ap.parse_args()


def abba(a: argparse.Namespace, child: str, **fmt: object) -> dict[str, list[dict[str, float]]]:
    """``child`` (formatted with ``src``, ``bench``, ``dir``, ``pg`` and ``fmt``) run for each
    version in a fresh subprocess, ``a.rounds`` rounds in ABBA order; each run's last line of
    output is its JSON figures."""
    results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(a.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for who in order:
            src = str(Path(getattr(a, who)).resolve())
            code = child.format(src=src, bench=str(BENCH), dir=a.dir, pg=a.pg, **fmt)
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=False
            )
            if done.returncode:
                sys.exit(f"{who} failed:\n{done.stderr[-3000:]}")
            results[who].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return results


def main() -> None:
    results = abba(arguments(), CHILD)
    for store in results["after"][0]:
        b = [x[store] for x in results["before"]]
        f = [x[store] for x in results["after"]]
        print(
            f"{store:11} before {' / '.join(f'{x:,.0f}' for x in b)}   "
            f"after {' / '.join(f'{x:,.0f}' for x in f)}   "
            f"median ratio {statistics.median(f) / statistics.median(b):.2f}"
        )


if __name__ == "__main__":
    main()
