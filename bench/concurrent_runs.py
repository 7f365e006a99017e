"""Throughput of many concurrent runs in one process (group commit) against a plain commit floor.

Usage:  python bench/concurrent_runs.py [--runs 100] [--cycles 50] [--dir DIR] [--pg URL] [--quick]
                                        [--sweep 2,10]

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

Two more figures, same process, same disk, to read the ratio by:

* **engine, one commit per cycle** — the same engine run with ``Runtime(group_commit=False)``:
  what grouping itself buys.
* **floor, the engine's rows** — plain ``sqlite3`` replaying, one transaction per cycle, exactly
  the rows the grouped engine wrote for each cycle (its run-row update, checkpoint with state and
  record, events): what committing this much data cycle by cycle costs with no engine at all.

First, ``--sweep`` (default 2 and 10 concurrent runs, about 2,000 cycles each): grouped against
one by one at low concurrency, where a batch holds few commits.

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
from loopwright.store import open_store

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


def engine(
    store: str, runs: int, cycles: int, group: bool = True
) -> tuple[float, int, dict[str, float]]:
    loop = make_loop(cycles)
    tasks = [
        {"task_key": f"b{i}-{uuid.uuid4().hex[:6]}", "artifacts": {"doc": {"p1": "", "pad": ""}}}
        for i in range(runs)
    ]
    with lw.Runtime(store, group_commit=group) as rt:
        t0, cpu0, loop0 = time.perf_counter(), time.process_time(), time.thread_time()
        results = asyncio.run(rt.run_many(loop, tasks, concurrency=runs))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        loop_cpu = time.thread_time() - loop0  # asyncio.run runs the event loop in this thread
        done = sum(r.cycles for r in results)
        assert all(r.stop_reason == "budget_cycles" for r in results), {
            r.stop_reason for r in results
        }
        # CPU per cycle, of the process (all threads) and of the event loop's thread alone:
        # what no batching of commits removes
        return wall, done, {"cpu": cpu / max(1, done), "loop_cpu": loop_cpu / max(1, done)}


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


def floor_same_rows(engine_db: Path, path: Path) -> tuple[float, int, float]:
    """Replay the engine's own per-cycle writes, one plain transaction per cycle."""
    src = sqlite3.connect(str(engine_db))
    events: dict[tuple[str, int], list[tuple[object, ...]]] = {}
    for run_id, cycle, kind, ts, data in src.execute(
        "SELECT run_id, cycle, kind, ts, data FROM events ORDER BY id"
    ):
        events.setdefault((run_id, cycle), []).append((run_id, cycle, kind, ts, data))
    commits = []
    for row in src.execute(
        "SELECT run_id, seq, cycle, state, record, fencing_token, created_at FROM checkpoints "
        "WHERE seq > 0 ORDER BY created_at, run_id, seq"
    ):
        # a cycle's events go with its first checkpoint
        commits.append((row, events.pop((row[0], row[2]), [])))
    src.close()
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, cycle INT, last_seq INT, updated_at REAL);"
        "CREATE TABLE checkpoints (run_id TEXT, seq INT, cycle INT, state TEXT, record TEXT,"
        " fencing_token INT, created_at REAL, PRIMARY KEY (run_id, seq));"
        "CREATE TABLE events (id INTEGER PRIMARY KEY, run_id TEXT, cycle INT, kind TEXT,"
        " ts REAL, data TEXT);"
        "CREATE INDEX events_run ON events(run_id, id);"
    )
    db.executemany("INSERT OR IGNORE INTO runs VALUES (?, 0, 0, 0)", [(c[0][0],) for c in commits])
    nbytes = sum(len(c[0][3]) + len(c[0][4] or "") for c in commits)
    t0 = time.perf_counter()
    for cp, evs in commits:
        db.execute("BEGIN")
        db.execute(
            "UPDATE runs SET cycle=?, last_seq=?, updated_at=? WHERE run_id=?",
            (cp[2], cp[1], cp[6], cp[0]),
        )
        db.execute("INSERT INTO checkpoints VALUES (?,?,?,?,?,?,?)", cp)
        if evs:
            db.executemany(
                "INSERT INTO events(run_id, cycle, kind, ts, data) VALUES (?,?,?,?,?)", evs
            )
        db.execute("COMMIT")
    wall = time.perf_counter() - t0
    db.close()
    return wall, len(commits), nbytes / max(1, len(commits))


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
    ap.add_argument(
        "--sweep",
        default="2,10",
        help="also these numbers of concurrent runs (about 2,000 cycles each), grouped and "
        "one by one: what grouping costs or buys at low concurrency ('' for none)",
    )
    a = ap.parse_args()
    if a.quick:
        a.runs, a.cycles, a.sweep = 20, 10, ""
    n = a.runs * a.cycles
    print(
        f"loopwright {lw.__version__} · Python {platform.python_version()} · "
        f"{os.cpu_count()} CPUs · sqlite {sqlite3.sqlite_version}"
    )
    print(f"{a.runs} concurrent runs × {a.cycles} cycles = {n} cycles; floor: {n} single commits")
    try:
        sweep = [int(x) for x in a.sweep.split(",") if x.strip()]
        if any(r < 1 for r in sweep):
            raise ValueError
    except ValueError:
        raise SystemExit(
            f"--sweep: a comma-separated list of run counts >= 1, not {a.sweep!r}"
        ) from None
    rows = []
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        for runs in sweep:
            cycles = max(1, 2000 // runs)
            w_g, n_g, _ = engine(f"sqlite:///{d}/sweep-g{runs}.db", runs, cycles)
            w_1, n_1, _ = engine(f"sqlite:///{d}/sweep-1{runs}.db", runs, cycles, group=False)
            print(
                f"{runs:4d} concurrent runs × {cycles} cycles: grouped {n_g / w_g:6.0f} "
                f"cycles/s, one by one {n_1 / w_1:6.0f} cycles/s ({w_1 / n_1 / (w_g / n_g):.2f}×)"
            )
        wall_e, done, info = engine(f"sqlite:///{d}/engine.db", a.runs, a.cycles)
        wall_1, done_1, _ = engine(f"sqlite:///{d}/alone.db", a.runs, a.cycles, group=False)
        wall_f = floor_sqlite(Path(d) / "floor.db", n)
        wall_s, n_s, size = floor_same_rows(Path(d) / "engine.db", Path(d) / "same.db")
        rows.append(
            ("sqlite (synchronous=FULL)", done / wall_e, done_1 / wall_1, n / wall_f, n_s / wall_s)
        )
        print(f"engine rows per cycle: {size / 1024:.1f} KB of state and record, plus events")
        loop_us, commit_us = info["loop_cpu"] * 1e6, wall_f / n * 1e6
        all_us, wall_us = info["cpu"] * 1e6, wall_e / done * 1e6
        print(
            f"engine CPU per cycle (grouped): {all_us:.0f} µs in all threads, "
            f"{loop_us:.0f} µs in the event loop's thread, which runs every cycle's Python one "
            f"after another; one plain durable commit: {commit_us:.0f} µs -> however commits "
            f"are grouped, the ratio cannot exceed {commit_us / loop_us:.2f} on this machine"
        )
        # The writer thread's work (rows bound and stepped through the sqlite3 module) holds
        # the GIL but for SQLite's own steps and the fsync, so the two threads' CPU adds up
        # in wall time: the loop waits while the writer holds the GIL.
        print(
            f"wall {wall_us:.0f} µs a cycle: the event loop's thread waited "
            f"{wall_us - loop_us:.0f} µs of it, the writer thread ran {all_us - loop_us:.0f} µs "
            f"(one GIL) -> with both threads' CPU the bound is {commit_us / all_us:.2f}"
        )
    if a.pg:
        schema_e, schema_1, schema_f = (
            f"lw_bench_{uuid.uuid4().hex[:8]}",
            f"lw_alone_{uuid.uuid4().hex[:8]}",
            f"lw_floor_{uuid.uuid4().hex[:8]}",
        )
        sep = "&" if "?" in a.pg else "?"
        try:
            for schema in (schema_e, schema_1):  # (Runtime refuses a ?schema= not there)
                open_store(f"{a.pg}{sep}schema={schema}").close()
            wall_e, done, _ = engine(f"{a.pg}{sep}schema={schema_e}", a.runs, a.cycles)
            wall_1, done_1, _ = engine(
                f"{a.pg}{sep}schema={schema_1}", a.runs, a.cycles, group=False
            )
            wall_f = floor_pg(a.pg, schema_f, n)
            rows.append(("postgresql", done / wall_e, done_1 / wall_1, n / wall_f, None))
        finally:
            for schema in (schema_e, schema_1, schema_f):
                drop_schema(a.pg, schema)
    print(
        f"{'store':26} {'engine grouped':>15} {'engine 1-by-1':>14} {'floor 2 KB':>11} "
        f"{'floor same rows':>16} {'ratio':>6}"
    )
    for name, e, e1, f, fs in rows:
        same = f"{fs:16.0f}" if fs is not None else f"{'-':>16}"
        print(f"{name:26} {e:15.0f} {e1:14.0f} {f:11.0f} {same} {e / f:6.2f}")
    print("(cycles or commits per second; ratio = engine grouped / floor 2 KB)")
    print(f"group_commit_ratio={rows[0][1] / rows[0][3]:.3f}")


if __name__ == "__main__":
    main()
