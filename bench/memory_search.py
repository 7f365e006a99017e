"""Feedback-memory retrieval at 1,000, 10,000 and 100,000 stored items: p95 latency of
``FeedbackMemory.retrieve`` (full-text search and ranking in the store).

    .venv/bin/python bench/memory_search.py            # ~2 min; last line: retrieve_p95_ms_100000=<float>
    .venv/bin/python bench/memory_search.py --sizes 1000,10000 --queries 100
    .venv/bin/python bench/memory_search.py --store postgresql://postgres@127.0.0.1:5432/bench
    .venv/bin/python bench/memory_search.py --json out.json
    .venv/bin/python bench/memory_search.py --reads [--store postgresql://…]   # ~1 min; counts

Method (bench/README.md): one store grows through the public API (``FeedbackMemory.add``,
global items confirmed with ``confirm``) to each size in turn; items are notes of 4-16 words
drawn from a 5,000-word vocabulary with Zipf-like frequencies, spread over 10 projects of 100
tasks each (55 % project scope, 40 % task, 5 % confirmed global), so one context reads ~5,500
project items, its task's ~40 and ~5,000 global ones at 100,000. Each query is what the engine
asks with: a goal and a few findings, 12-30 words from the same vocabulary, for a random task
of a random project, ``limit=5``. After 20 warm-up queries, ``--queries`` are timed one by one
(``time.perf_counter``, and ``time.process_time`` for the CPU this process spent, which a
busy shared machine does not inflate); reported: p50 and p95 of each per size.

``--reads``: what one capped recall (``recall_ranked``, 1,000) reads as the items matching
its query grow, in counts rather than time: ``--sizes`` items in one task's scope, every one
matching the query (written in bulk through the store's insert statement, plus 200 that do
not match in its project and global scopes); then one ``memory_search`` statement: SQLite's VM
steps (a progress handler) and CPU ms (median of 20); PostgreSQL's ``EXPLAIN (ANALYZE,
BUFFERS)`` after ``ANALYZE`` (the statistics autovacuum keeps): rows of ``memory`` read, by the
``hit`` CTE and in all, and shared buffers. bm25()'s IDF on SQLite counts every row holding a
query word inside FTS5: VM steps do not see it, CPU does.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loopwright._memory import MEMORY_SIGNALS, FeedbackMemory
from loopwright.store import open_store

PROJECTS = 10
TASKS_PER_PROJECT = 100
VOCABULARY = 5_000
# Zipf over all words puts the function words on top; the search drops those (stop words),
# so the content words follow the law from rank 50 on (Zipf-Mandelbrot with q = 50).
# ``--stopword-ranks 0``: the harsher law from rank 1 (one query matches most notes).
STOPWORD_RANKS = 50
SYLLABLES = [c + v for c in "bcdfghklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def vocabulary(rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class Words:
    """Words with Zipf-like frequencies (the k-th word ~ 1/k): a few common, most rare."""

    def __init__(self, rng: random.Random, offset: int = STOPWORD_RANKS) -> None:
        self.rng = rng
        self.words = vocabulary(rng)
        self.weights = [1.0 / (k + 1 + offset) for k in range(len(self.words))]

    def take(self, lo: int, hi: int) -> str:
        n = self.rng.randint(lo, hi)
        return " ".join(self.rng.choices(self.words, self.weights, k=n))


def grow(mem: FeedbackMemory, words: Words, rng: random.Random, n: int) -> None:
    for _ in range(n):
        p = rng.randrange(PROJECTS)
        roll = rng.random()
        text = words.take(4, 16)
        signal = rng.choice(MEMORY_SIGNALS)
        if roll < 0.05:
            it = mem.add(scope="global", signal=signal, text=text, by="bench")
            mem.confirm(it.memory_id, by="bench")
        elif roll < 0.45:
            task = f"p{p}/t{rng.randrange(TASKS_PER_PROJECT)}"
            mem.add(scope="task", scope_key=task, signal=signal, text=text, by="bench")
        else:
            mem.add(scope="project", scope_key=f"p{p}", signal=signal, text=text, by="bench")


def measure(
    mem: FeedbackMemory, words: Words, rng: random.Random, queries: int
) -> list[tuple[float, float]]:
    """(wall ms, CPU ms of this process) per timed query."""

    def one() -> tuple[float, float]:
        p = rng.randrange(PROJECTS)
        task = f"p{p}/t{rng.randrange(TASKS_PER_PROJECT)}"
        query = words.take(12, 30)
        t0, c0 = time.perf_counter(), time.process_time()
        got = mem.retrieve(task_key=task, project=f"p{p}", query=query, limit=5)
        dt, dc = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
        assert len(got) == 5, got  # every context has far more than 5 items to choose from
        return dt, dc

    for _ in range(20):
        one()
    return [one() for _ in range(queries)]


def _rows_read(node: dict[str, Any], inside: bool = False) -> tuple[int, int]:
    """(rows of ``memory`` read by the ``hit`` CTE, in all) in an EXPLAIN ANALYZE plan."""
    inside = inside or node.get("Subplan Name") == "CTE hit"
    hit = every = 0
    if node.get("Relation Name") == "memory":
        n = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        n = (n + node.get("Rows Removed by Index Recheck", 0)) * node.get("Actual Loops", 1)
        every, hit = n, n if inside else 0
    for child in node.get("Plans", ()):
        h, e = _rows_read(child, inside)
        hit, every = hit + h, every + e
    return hit, every


def reads(url: str, sizes: list[int]) -> list[dict[str, Any]]:
    """``--reads``: one capped recall's reads at each number of matching items."""
    from loopwright._memory import memory_search, recall_scopes
    from loopwright.store._rows import memory_values

    pg = url.startswith("postgres")
    scopes = recall_scopes("p0/t0", "p0")
    search = memory_search(scopes, "dragon wings", limit=5)
    out: list[dict[str, Any]] = []
    with open_store(url) as store:
        s: Any = store  # the SQL store's internals: its connection and statements
        if store.memory_query(limit=1):
            raise SystemExit(f"memory_search: error: {url} holds memory items already")

        def item(i: int, scope: str, key: str, text: str) -> tuple[Any, ...]:
            return memory_values(
                {
                    "memory_id": f"m{i:07d}", "scope": scope, "scope_key": key,
                    "signal": "correction", "strength": 0.3 + (i * 7919 % 70) / 100,
                    "text": text, "rule": None, "source": {}, "by": "bench",
                    "status": "active", "created_at": float(i), "updated_at": float(i),
                    "history": [],
                },
                s._js,
            )  # fmt: skip

        rows = [item(10**6 + i, *scopes[i % 2 * 2], f"plain note {i}") for i in range(200)]
        have = 0
        for size in sizes:
            rows += [item(i, "task", "p0/t0", f"dragon wing note {i}") for i in range(have, size)]
            have = size
            with s._tx() as conn:
                if pg:
                    with conn.cursor() as cur:
                        cur.executemany(s._q.insert_memory, rows)
                    conn.execute("ANALYZE memory")
                else:
                    conn.executemany(s._q.insert_memory, rows)
            rows = []
            query, args = s._memory_search_sql(search)
            row: dict[str, Any] = {"matching": size}
            if pg:
                with s._conn() as conn:
                    [[plan]] = conn.execute(
                        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, args
                    ).fetchone()
                top = plan["Plan"]
                row["hit_rows_read"], row["rows_read"] = _rows_read(top)
                row["buffers"] = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
                row["ms"] = round(plan["Execution Time"], 2)
            else:
                steps = [0]

                def step(steps: list[int] = steps) -> int:
                    steps[0] += 1
                    return 0

                s._db.set_progress_handler(step, 1)
                try:
                    s._db.execute(query, args).fetchall()
                finally:
                    s._db.set_progress_handler(None, 1)
                cpu = []
                for _ in range(20):
                    c0 = time.process_time()
                    s._db.execute(query, args).fetchall()
                    cpu.append((time.process_time() - c0) * 1000)
                row["vm_steps"], row["cpu_ms"] = steps[0], round(statistics.median(cpu), 2)
            print("  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
            out.append(row)
    return out


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20, method="inclusive")[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="store sizes, ascending")
    ap.add_argument("--queries", type=int, default=300, help="timed queries per size")
    ap.add_argument("--store", help="a store URL (default: a new SQLite file in a temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--stopword-ranks",
        type=int,
        default=STOPWORD_RANKS,
        help="Zipf ranks left to stop words (0: every word follows Zipf from rank 1)",
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument(
        "--reads", action="store_true", help="what one capped recall reads (counts, not time)"
    )
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        print(f"memory_search: error: --sizes: not integers: {args.sizes!r}", file=sys.stderr)
        return 2
    if sizes != sorted(sizes) or sizes[0] < 100 or args.queries < 20 or args.stopword_ranks < 0:
        print(
            "memory_search: error: --sizes must ascend from at least 100, --queries >= 20, "
            "--stopword-ranks >= 0",
            file=sys.stderr,
        )
        return 2
    if args.reads:
        with tempfile.TemporaryDirectory() as tmp:
            got = reads(args.store or str(Path(tmp) / "memory.db"), sizes)
        if args.json:
            args.json.write_text(json.dumps(got, indent=2) + "\n")
        return 0
    rng = random.Random(args.seed)
    words = Words(rng, args.stopword_ranks)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or str(Path(tmp) / "memory.db")
        with open_store(url) as store:
            if store.memory_query(limit=1):
                print(f"memory_search: error: {url} holds memory items already", file=sys.stderr)
                return 2
            mem = FeedbackMemory(store)
            have = 0
            for size in sizes:
                t0 = time.perf_counter()
                grow(mem, words, rng, size - have)
                load_s = time.perf_counter() - t0
                have = size
                timed = measure(mem, words, rng, args.queries)
                wall, cpu = [t for t, _ in timed], [c for _, c in timed]
                row = {
                    "items": size,
                    "load_s": round(load_s, 1),
                    "p50_ms": round(statistics.median(wall), 3),
                    "p95_ms": round(p95(wall), 3),
                    "cpu_p50_ms": round(statistics.median(cpu), 3),
                    "cpu_p95_ms": round(p95(cpu), 3),
                }
                results.append(row)
                print(
                    f"{size:>7} items  p50 {row['p50_ms']:7.2f} ms  p95 {row['p95_ms']:7.2f} ms"
                    f"  (CPU p50 {row['cpu_p50_ms']:.2f} ms, p95 {row['cpu_p95_ms']:.2f} ms;"
                    f" added in {load_s:.0f} s)",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    for row in results:
        print(f"retrieve_p95_ms_{row['items']}={row['p95_ms']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
