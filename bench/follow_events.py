"""What following a run costs (``Runtime.events``, stream52) at two run lengths.

Usage:  python bench/follow_events.py [--cycles 200,2000]

Per run length N: a trivial loop runs N cycles into a fresh SQLite store. Then, best of 5 (in
ms): a reconnect's lookup of where ``after_seq`` is, five events before the log's end
(``event_id_at``: the built-in store's walk on the index, and the ``Store`` base class's
default, which reads the log), one idle look at the end of the log (what a follower pays each
poll while nothing comes), and reading the whole log through the follower (``follow=False``)
beside ``trace.iter_trace_records``, the export it matches. Flat is the goal for the first
two; the third grows with the log as the export does.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright import trace
from loopwright.store._protocol_commit import CommitStore
from loopwright.trace._follow import Follower

TASK = {"goal": "g", "artifacts": {"doc": {"body": ""}}}


def loop(budget: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    return lw.Loop(
        name="followed",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=budget)),
    )


def best_ms(fn: Callable[[], Any], n: int = 5) -> float:
    out = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out * 1000


def measure(n: int) -> str:
    with tempfile.TemporaryDirectory() as d, lw.Runtime(Path(d) / "s.db") as rt:
        run = rt.run_sync(loop(n), TASK, task_key="k").run_id
        st = rt.store
        count = sum(st.event_counts(run).values())
        seq = count - 5
        seek = best_ms(lambda: st.event_id_at(run, seq))
        seek_default = best_ms(lambda: CommitStore.event_id_at(st, run, seq))
        f = Follower(st, run, after_seq=count, until="ended", poll_s=0.5)
        idle = best_ms(f.look, 20)
        follow = best_ms(lambda: list(rt.events_sync(run, follow=False)))
        export = best_ms(lambda: list(trace.iter_trace_records(st, run)))
    return (
        f"| {n:,} | {count:,} | {seek:.3f} | {seek_default:.1f} | {idle:.3f} "
        f"| {follow:.1f} | {export:.1f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", default="200,2000")
    sizes = [int(x) for x in ap.parse_args().cycles.split(",")]
    print(
        "| cycles | events | seek SQL ms | seek default ms | idle look ms | follow all ms "
        "| export ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        print(measure(n))


if __name__ == "__main__":
    main()
