"""What ``export eval-cases`` and ``export preference-pairs`` cost on one store, in process:
CPU seconds, SQL statements (SQLite: a ``set_trace_callback`` count) and a hash of the output
(the two trees' outputs must be byte-identical).

Usage:  PYTHONPATH=SRC python bench/export_reads.py STORE_URL [--write N]

``--write N`` first writes a run of N cycles (five parts, every cycle rejected, a held-out key
in the task) into the store. Run it once per tree (``PYTHONPATH=`` a ``git archive`` of the base
and the branch's ``src``) on the same store; with ``bench/read_paths.py``'s stores:
``sqlite:////tmp/rp/run10000.db``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import time

import loopwright as lw
from loopwright import trace
from loopwright.store import open_store
from loopwright.store.sqlite import SQLiteStore


def write(url: str, n: int) -> str:
    loop = lw.Loop(
        name="long",
        actor=lambda ctx: lw.Proposal.edit("doc", {f"p{ctx.cycle % 5}": f"v{ctx.cycle}"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=n)),
    )
    task = {"artifacts": {"doc": {f"p{i}": "" for i in range(5)}}, "held_out": {"k": 1}}
    with lw.Runtime(url) as rt:
        return rt.run_sync(loop, task, task_key="t").run_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--write", type=int, default=0)
    a = ap.parse_args()
    if a.write:
        write(a.url, a.write)
    seen = [0]
    out: dict[str, object] = {}
    with open_store(a.url) as st:
        if isinstance(st, SQLiteStore):
            st._db.set_trace_callback(lambda _q: seen.__setitem__(0, seen[0] + 1))
        t = time.process_time()
        buf = io.StringIO()
        for rid in trace.ended_run_ids(st):
            trace.write_eval_case(st, rid, buf)
        out.update(case_cpu=round(time.process_time() - t, 2), case_statements=seen[0])
        seen[0], t = 0, time.process_time()
        pairs = json.dumps(trace.preference_pairs(st))
        out.update(pair_cpu=round(time.process_time() - t, 2), pair_statements=seen[0])
    text = buf.getvalue() + "\n" + pairs
    out["sha256"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
