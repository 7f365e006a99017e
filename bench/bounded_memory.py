"""Bounded memory (invariant 8): a long run of rejections, and a recall over many matches.

Usage:  python bench/bounded_memory.py [--cycles 2000] [--items 100,1600,10000]
                                       [--store postgresql://…/db] [--skip-rejecting]

* Rejecting loop: every cycle rejected (a new value each cycle), one run of ``--cycles`` on
  SQLite (``durability=process``). At cycle 200, half way and at the last cycle (``gc.collect``
  first): the bytes tracemalloc holds, and the rejected digests the live run holds in memory
  (count, and the bytes of their list, set and filter). Flat = bounded.
* Recall: one task with N active corrections, each sharing a word with the query; the same
  query recalled with every match scored (``ranked=None``) and with the default cap
  (``RECALL_RANKED``). SQLite: VM steps and statements (FTS5's inner reads) a recall, counted,
  and CPU ms (median of 5); PostgreSQL (``--store``, a schema per size, dropped after): the
  server's execution time (best of 3) and shared buffers of ``EXPLAIN (ANALYZE, BUFFERS)``.
  Each size says whether the two recalls returned the same items.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from typing import Any

import loopwright as lw
from loopwright import _exec
from loopwright._memory import FeedbackMemory, memory_search, recall_scopes
from loopwright.store import open_store

WORDS = ["title", "colour", "margin", "font", "header", "footer", "caption", "spacing", "border"]
QUERY = "the title font is too small and the caption spacing is off"


def rejecting(cycles: int) -> None:
    execs: list[Any] = []
    adopt = _exec.Execution.adopt

    def spy(self: Any, store: Any, stored: Any) -> None:
        adopt(self, store, stored)
        execs.append(self)

    _exec.Execution.adopt = spy  # type: ignore[method-assign]
    marks: dict[int, tuple[int, int, int]] = {}

    def note(n: int) -> None:
        gc.collect()
        d = execs[-1].state.rejected
        f = getattr(d, "_filter", None)
        held = sys.getsizeof(d) + sys.getsizeof(getattr(d, "_set", ())) + len(f or ())
        marks[n] = (tracemalloc.get_traced_memory()[0], len(d), held)

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle in (200, cycles // 2, cycles):
            note(ctx.cycle - 1)  # the cycles before this one are concluded
        return lw.Proposal.edit("doc", {"a": f"v{ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        f = lw.Finding("no", "doc", "a", "content")
        return lw.Verdict(passed=False, score=0.1, findings=(f,))

    loop = lw.Loop(
        name="rejecting",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )
    url = f"sqlite:///{tempfile.mkdtemp()}/r.db?durability=process"
    tracemalloc.start()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"goal": "g", "artifacts": {"doc": {"a": "x"}}}, task_key="k")
        assert r.cycles == cycles
    tracemalloc.stop()
    _exec.Execution.adopt = adopt  # type: ignore[method-assign]
    for n, (traced, held, size) in sorted(marks.items()):
        print(
            f"rejecting cycles={n} traced_bytes={traced} digests_held={held} held_bytes={size}",
            flush=True,
        )


def recall(sizes: list[int], url: str | None) -> None:
    from loopwright._memory import RECALL_RANKED  # (the rejecting part runs on older trees)

    for n in sizes:
        rng = random.Random(7)
        schema = f"lw_bounded_recall_{n}"
        store = open_store(
            f"{url}{'&' if '?' in url else '?'}schema={schema}"
            if url
            else f"sqlite:///{tempfile.mkdtemp()}/m.db?durability=process"
        )
        try:
            mem = FeedbackMemory(store)
            for i in range(n):
                a, b, c = rng.sample(WORDS, 3)
                text = f"correction {i}: fix the {a} and {b} near {c} item{i}"
                mem.add(scope="task", scope_key="t1", signal="correction", text=text, by="bench")
            got = {}
            for ranked in (None, RECALL_RANKED):
                got[ranked] = [
                    m.memory_id
                    for m in mem.retrieve(task_key="t1", project="p", query=QUERY, ranked=ranked)
                ]
                print(f"recall items={n} ranked={ranked} {measure(store, ranked, url)}", flush=True)
            print(f"recall items={n} same_items={got[None] == got[RECALL_RANKED]}", flush=True)
        finally:
            store.close()
            if url:
                import psycopg

                with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def measure(store: Any, ranked: int | None, url: str | None) -> str:
    db = getattr(store, "_db", None)
    search = memory_search(recall_scopes("t1", "p"), QUERY, 5, ranked)
    if url:  # PostgreSQL: what the server does
        import psycopg

        sql, args = store._memory_search_sql(search)
        times = []
        with psycopg.connect(url.split("?")[0]) as conn:
            conn.execute(f"SET search_path TO {store.schema}")
            for _ in range(3):
                plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, args)
                top = plan.fetchone()[0][0]
                times.append(top["Execution Time"])
        return f"server_ms={min(times):.2f} shared_hit={top['Plan'].get('Shared Hit Blocks')}"
    steps, statements = [0], [0]

    def step() -> int:
        steps[0] += 1
        return 0

    db.set_progress_handler(step, 1)
    db.set_trace_callback(lambda _q: statements.__setitem__(0, statements[0] + 1))
    try:
        store.memory_search([search])
    finally:
        db.set_progress_handler(None, 1)
        db.set_trace_callback(None)
    cpu = []
    for _ in range(5):
        t = time.process_time()
        store.memory_search([search])
        cpu.append(time.process_time() - t)
    return (
        f"vm_steps={steps[0]} statements={statements[0]} cpu_ms={statistics.median(cpu) * 1000:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--items", default="100,1600,10000")
    ap.add_argument("--store", default=None, help="postgresql://… (recall only)")
    ap.add_argument("--skip-rejecting", action="store_true")
    args = ap.parse_args()
    if not args.skip_rejecting and not args.store:
        rejecting(args.cycles)
    recall([int(x) for x in args.items.split(",")], args.store)


if __name__ == "__main__":
    main()
