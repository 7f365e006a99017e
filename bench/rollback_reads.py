"""A rollback by two cycles of a long run that did an effect every cycle: what it reads.

Usage:  python bench/rollback_reads.py [--sizes 2000,20000] [--dir DIR] [--src PATH ...]
            [--json OUT]

One run per size on the embedded SQLite store (``DIR``, kept: a second call with the same
``--dir`` measures the same runs): every cycle pays one invoice (an effect with a business
key and a compensation, allowed by the policy), every proposal is rejected, the cycle budget
ends it. Then, per ``--src`` tree (``git archive`` of a commit; default: this tree's
``src``) and size, in a process of its own, on a copy of the store: ``Runtime.rollback`` to
the run's last cycle but two, with the loop (so the two effects after it are offered for
compensation). Each row gives the journal entries the store decoded (``JournalEntry`` made
by the SQL core: deterministic), the ``tracemalloc`` peak of the rollback, and its CPU
seconds. The last lines give, per tree, the ratio of the largest size to the smallest: about
the ratio of the sizes is linear in the run's length, about 1 is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LOOP = """
from typing import Any
import loopwright as lw


def refund(key: str, result: Any, args: dict[str, Any]) -> None:
    return None


PAY = lw.effect("spend", name="pay", key=lambda a: a["invoice"], compensate=refund,
                requires_success=False)(lambda invoice: {"paid": invoice})


def loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=lw.Proposal.edit("doc", {"p0": str(ctx.cycle)}).edits,
                           effects=(PAY.call(invoice=f"I-{ctx.cycle}"),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5,
                          findings=(lw.Finding("open", "doc", "p0"),))

    return lw.Loop(name="paying", actor=actor, verifiers=[lw.Check(fn=check, name="check")],
                   effects=[PAY],
                   approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
                   contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)))
"""

MAKE = """
import sys
sys.path.insert(0, sys.argv[3])
import loopwright as lw
from paying import loop
n, db = int(sys.argv[1]), sys.argv[2]
with lw.Runtime(f"sqlite:///{db}?durability=process") as rt:
    r = rt.run_sync(loop(n), {"artifacts": {"doc": {}}}, task_key=f"pay-{n}")
    assert r.cycles == n, r
"""

MEASURE = """
import json, sys, time, tracemalloc
sys.path.insert(0, sys.argv[3])
import loopwright as lw
from loopwright.store import _sql_core
from paying import loop
n, db = int(sys.argv[1]), sys.argv[2]
made = [0]
base = _sql_core.JournalEntry


class Counted(base):
    __slots__ = ()

    def __init__(self, *a, **k):
        made[0] += 1
        super().__init__(*a, **k)


with lw.Runtime(f"sqlite:///{db}?durability=process") as rt:
    run = rt.store.get_run(f"pay-{n}")
    rt.store.journal(run.run_id, key="warm")  # statements prepared, modules imported
    _sql_core.JournalEntry = Counted
    tracemalloc.start()
    cpu = time.process_time()
    rt.rollback(run.run_id, n - 2, by="bench", loop=loop(n))
    cpu = time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    offers = len((rt.store.latest_checkpoint(run.run_id).state.get("pending") or {})
                 .get("offers") or ())
print(json.dumps({"decoded": made[0], "peak_kb": peak // 1024, "cpu_s": round(cpu, 4),
                  "offers": offers}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2000,20000")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--src", action="append", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    here = str(Path(__file__).resolve().parent.parent / "src")
    srcs = a.src or [here]
    d = Path(a.dir or tempfile.mkdtemp(prefix="rollback_reads-"))
    d.mkdir(parents=True, exist_ok=True)
    (d / "paying.py").write_text(LOOP)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        db = d / f"pay{n}.db"
        if not db.exists():
            t = time.perf_counter()
            env = {**os.environ, "PYTHONPATH": srcs[-1]}
            subprocess.run([sys.executable, "-c", MAKE, str(n), str(db), str(d)], env=env,
                           check=True)  # fmt: skip
            print(f"# wrote {n} cycles in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        for src in srcs:
            copy = d / f"copy{n}.db"
            shutil.copyfile(db, copy)
            env = {**os.environ, "PYTHONPATH": src}
            out = subprocess.run(
                [sys.executable, "-c", MEASURE, str(n), str(copy), str(d)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            row = {"src": src, "cycles": n, **json.loads(out.strip().splitlines()[-1])}
            rows.append(row)
            print(json.dumps(row))
            copy.unlink()
    for src in srcs:
        mine = sorted((r for r in rows if r["src"] == src), key=lambda r: r["cycles"])
        lo, hi = mine[0], mine[-1]
        print(
            f"{src}: decoded_ratio={hi['decoded'] / max(lo['decoded'], 1):.2f} "
            f"mem_ratio={hi['peak_kb'] / max(lo['peak_kb'], 1):.2f} "
            f"cpu_ratio={hi['cpu_s'] / max(lo['cpu_s'], 1e-9):.2f} "
            f"(sizes {lo['cycles']} -> {hi['cycles']})"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
