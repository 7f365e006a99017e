"""Throughput of many concurrent runs in one process (group commit) against a plain commit floor.

Usage:  python bench/concurrent_runs.py [--runs 100] [--cycles 50] [--dir DIR] [--pg URL] [--quick]

In the same process, on the same file system, one after the other:

* **engine** — ``Runtime.run_many`` of ``--runs`` concurrent runs of ``--cycles`` cycles each
  (actor and verifier return at once, async; the verifier flags the edited part so no cycle is
  ever accepted and every run goes the whole way), against SQLite at the default durability
  (WAL, ``synchronous=FULL``). The runs' cycle commits are grouped: one transaction and one
  fsync per batch, and a run's next cycle starts only once the batch holding its checkpoint is
  durable.
* **floor** — plain ``sqlite3`` at the same durability: one ~2 KB row inserted and committed
  per cycle, ``runs × cycles`` times, one commit at a time (what a process committing each
  cycle on its own pays).

With ``--pg URL`` the same pair runs against PostgreSQL (a fresh schema, dropped after; the
floor is a psycopg loop of one-row transactions). The last line is
``group_commit_ratio=<engine cycles/s ÷ floor commits/s>`` for SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

import loopwright as lw

PAYLOAD = "x" * 2048


def make_loop(cycles: int) -> lw.Loop:
    async def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"p1": f"value {ctx.cycle}", "pad": PAYLOAD[:1500]})

    async def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False,
            score=0.5,
            findings=(lw.Finding("still wrong", "doc", "p1", "value"),),
        )

    return lw.Loop(
        name="bench-concurrent",
        actor=actor,
        verifiers=[verifier],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def engine(store: str, runs: int, cycles: int) -> tuple[float, int, dict[str, int]]:
    loop = make_loop(cycles)
    tasks = [
        {"task_key": f"b{i}-{uuid.uuid4().hex[:6]}", "artifacts": {"doc": {"p1": "", "pad": ""}}}
        for i in range(runs)
    ]
    with lw.Runtime(store) as rt:
        t0 = time.perf_counter()
        results = asyncio.run(rt.run_many(loop, tasks, concurrency=runs))
        wall = time.perf_counter() - t0
        done = sum(r.cycles for r in results)
        assert all(r.stop_reason == "budget_cycles" for r in results), {
            r.stop_reason for r in results
        }
        # how the commits were grouped, from the store: checkpoints per distinct commit time
        return wall, done, {"runs": len(results)}


def floor_sqlite(path: Path, n: int) -> float:
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT)")
    t0 = time.perf_counter()
    for _ in range(n):
        db.execute("BEGIN")
        db.execute("INSERT INTO t(body) VALUES (?)", (PAYLOAD,))
        db.execute("COMMIT")
    wall = time.perf_counter() - t0
    db.close()
    return wall


def floor_pg(url: str, schema: str, n: int) -> float:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("CREATE TABLE {}.t (id bigserial PRIMARY KEY, body text)").format(
                sql.Identifier(schema)
            )
        )
        ins = sql.SQL("INSERT INTO {}.t(body) VALUES (%s)").format(sql.Identifier(schema))
        t0 = time.perf_counter()
        for _ in range(n):
            with conn.transaction():
                conn.execute(ins, (PAYLOAD,))
        return time.perf_counter() - t0


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--pg", default=None, help="also measure PostgreSQL at this URL")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.runs, a.cycles = 20, 10
    n = a.runs * a.cycles
    print(
        f"loopwright {lw.__version__} · Python {platform.python_version()} · "
        f"{os.cpu_count()} CPUs · sqlite {sqlite3.sqlite_version}"
    )
    print(f"{a.runs} concurrent runs × {a.cycles} cycles = {n} cycles; floor: {n} single commits")
    rows = []
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        wall_e, done, _ = engine(f"sqlite:///{d}/engine.db", a.runs, a.cycles)
        wall_f = floor_sqlite(Path(d) / "floor.db", n)
        rows.append(("sqlite (synchronous=FULL)", done / wall_e, n / wall_f))
    if a.pg:
        schema_e, schema_f = f"lw_bench_{uuid.uuid4().hex[:8]}", f"lw_floor_{uuid.uuid4().hex[:8]}"
        sep = "&" if "?" in a.pg else "?"
        try:
            wall_e, done, _ = engine(f"{a.pg}{sep}schema={schema_e}", a.runs, a.cycles)
            wall_f = floor_pg(a.pg, schema_f, n)
            rows.append(("postgresql", done / wall_e, n / wall_f))
        finally:
            drop_schema(a.pg, schema_e)
            drop_schema(a.pg, schema_f)
    print(f"{'store':28} {'engine cycles/s':>16} {'floor commits/s':>16} {'ratio':>7}")
    for name, e, f in rows:
        print(f"{name:28} {e:16.0f} {f:16.0f} {e / f:7.2f}")
    print(f"group_commit_ratio={rows[0][1] / rows[0][2]:.3f}")


if __name__ == "__main__":
    main()
