"""What deciding each test outside the candidate's process costs (stop 54).

One sandboxed check (``run_tests``) of N single-assert tests and of one ``check(candidate)``
script of N asserts, on this tree and on another (``--base SRC``, e.g. a ``git archive`` of the
commit before), in alternating rounds. CPU time is the children's user + system seconds
(``RUSAGE_CHILDREN``), which a loaded machine does not stretch as wall time: the one harness
before, the judge and the worker it reaps now. It is measured with ``isolate=False`` (no
wrapper: bubblewrap's processes are not reaped by this one, so their CPU would not be counted;
the wrapper is the same before and after); the wall column is under the boundary this machine
gives.

    .venv/bin/python bench/held_out_judge.py --base /tmp/base/src            # ~2 min
    .venv/bin/python bench/held_out_judge.py --base /tmp/base/src --rounds 3 # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CODE = "def add(a, b):\n    return a + b\n"


def suite(n: int, script: bool) -> list[str]:
    asserts = [f"assert add({k}, {k + 1}) == {2 * k + 1}" for k in range(n)]
    if not script:
        return asserts
    body = "".join(f"    {a.replace('add(', 'candidate(')}\n" for a in asserts)
    return ["def check(candidate):\n" + body + "\ncheck(add)"]


def measure(n: int, script: bool) -> dict[str, float]:
    import resource
    import time

    from loopwright.verifiers import run_tests

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run_tests(CODE, suite(n, script), isolate=False, allow_unisolated=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    walled = run_tests(CODE, suite(n, script))
    wall = time.perf_counter() - t0
    if not (r.passed and walled.passed):
        raise SystemExit(f"the honest candidate failed: {r.to_dict()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_ms": cpu * 1000, "wall_ms": wall * 1000}


def one(src: str, n: int, script: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run(
        [sys.executable, __file__, "--one", str(n), "--script" if script else "--asserts"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", help="the src/ directory of the tree to compare with")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--script", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--asserts", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one is not None:
        print(json.dumps(measure(a.one, a.script)))
        return
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    trees = {"this": here, **({"base": a.base} if a.base else {})}
    print("| form | tests | tree | CPU ms (median) | wall ms (median) |")
    print("|---|---:|---|---:|---:|")
    for script in (False, True):
        for n in (10, 50):
            got: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
            for r in range(a.rounds):
                order = list(trees) if r % 2 == 0 else list(reversed(trees))
                for k in order:
                    got[k].append(one(trees[k], n, script))
            form = "check(candidate) script" if script else "single asserts"
            for k in trees:
                cpu = statistics.median(x["cpu_ms"] for x in got[k])
                wall = statistics.median(x["wall_ms"] for x in got[k])
                print(f"| {form} | {n} | {k} | {cpu:.1f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
