"""How far the engine's SQL alone, and the least SQL a fenced durable cycle needs, sit from
``overhead_ratio ≤ 1.5`` (issue 14), beside the plain-sqlite3 floor, in one sitting.

Usage:  python bench/ratio_bound.py [--cycles 200] [--rounds 8] [--dir DIR]

Four sides, each a loop of ``--cycles`` durable commits on its own file (WAL,
``synchronous=FULL``), in ABBA-rotated rounds so that a noisy machine's drift hits all alike:

* **engine** — ``Runtime.run`` of bench/cycle_overhead.py's loop (actor and verifier return at
  once; every cycle the whole path: context, actor, apply, verify, decide, checkpoint).
* **engine SQL** — the statements that engine run sent to SQLite, recorded with their
  parameters (a proxy in front of the store's connection and cursor) and replayed in the same
  order against a copy of the database taken before them: everything the engine asks of SQLite,
  none of its Python.
* **fenced row** — the least a governed durable cycle can ask, whatever its layout: one
  transaction that checks and moves the run's fence (``UPDATE … RETURNING``) and writes one row
  holding as many bytes as the engine's cycle wrote in all its statements.
* **floor** — cycle_overhead.py's: one ~2 KB row inserted and committed.

Printed: ms per cycle of each, each over the floor, and what is left for the engine's Python
under the target (``1.5 × floor − SQL``), beside the engine's own CPU a cycle
(``time.process_time`` over its run less the replay's). The last line:
``python_budget_us=<µs> engine_python_us=<µs>``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cycle_overhead import Floor, Stamps, initial_task, make_loop

import loopwright as lw

Call = tuple[str, str, tuple[Any, ...] | None]  # (execute | executemany, sql, args)


class _Recording:
    """A connection or cursor whose statements are written down as they run: the store's own
    object does the work (it is what the engine's cycle really sends)."""

    def __init__(self, inner: Any, calls: list[Call] | None) -> None:
        self._inner = inner
        self.calls = calls

    def execute(self, sql: str, args: Any = ()) -> Any:
        if self.calls is not None:
            self.calls.append(("execute", sql, tuple(args)))
        return self._inner.execute(sql, args)

    def executemany(self, sql: str, rows: Any) -> Any:
        rows = [tuple(r) for r in rows]
        if self.calls is not None:
            self.calls.append(("executemany", sql, tuple(rows)))
        return self._inner.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> Any:
        return self._inner.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._inner.__exit__(*exc)


def _written_bytes(calls: list[Call]) -> int:
    def size(v: Any) -> int:
        return len(v) if isinstance(v, str | bytes) else 8

    total = 0
    for kind, _sql, args in calls:
        rows = args if kind == "executemany" else (args,)
        for row in rows or ():
            total += sum(size(v) for v in row)
    return total


def record_engine(workdir: Path, cycles: int) -> tuple[float, float, list[Call], Path]:
    """One engine run of ``cycles`` cycles whose steady cycles' statements are recorded: its ms a
    cycle (actor call to actor call), its CPU µs a cycle, the statements, and a copy of its
    database as it was before the first recorded one."""
    rt = lw.Runtime(f"sqlite:///{workdir / 'engine.db'}")
    task = initial_task(500)
    asyncio.run(rt.run(make_loop(cycles, Stamps()), task, task_key="warm"))
    store: Any = rt.store
    calls: list[Call] = []
    before = workdir / "before.db"
    stamps = Stamps()
    inner_loop = make_loop(cycles, stamps)
    actor = inner_loop.actor
    begun = [0.0, 0.0]

    def recording_actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:  # the first cycle's start-up stays out; from here every cycle is kept
            with sqlite3.connect(str(before)) as dst:
                store._db.backup(dst)
            store._db = _Recording(store._db, calls)
            store._cur = _Recording(store._cur, calls)
            begun[0], begun[1] = time.perf_counter(), time.process_time()
        return actor(ctx)  # type: ignore[no-any-return]

    loop = lw.Loop(
        name=inner_loop.name,
        actor=recording_actor,
        verifiers=inner_loop.verifiers,
        contract=inner_loop.contract,
    )
    try:
        result = asyncio.run(rt.run(loop, task, task_key="recorded"))
        if result.cycles != cycles:
            raise SystemExit(f"the engine run ended after {result.cycles} cycles: {result}")
        wall, cpu = time.perf_counter() - begun[0], time.process_time() - begun[1]
    finally:
        store._db, store._cur = (
            getattr(store._db, "_inner", store._db),
            getattr(store._cur, "_inner", store._cur),
        )
        rt.close()
    steady = cycles - 1
    return 1000 * wall / steady, 1e6 * cpu / steady, calls, before


def replay(path: Path, calls: list[Call], cycles: int) -> tuple[float, float]:
    """The recorded statements against a fresh copy of ``path``: ms and CPU µs a cycle."""
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA foreign_keys=ON")
    cur = db.cursor()
    t0, c0 = time.perf_counter(), time.process_time()
    for kind, sql, args in calls:
        if kind == "executemany":
            cur.executemany(sql, args or ())
        else:
            cur.execute(sql, args or ()).fetchall()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    db.close()
    return 1000 * wall / cycles, 1e6 * cpu / cycles


class FencedRow:
    """The least a fenced durable cycle asks: the fence checked and moved, one row written."""

    def __init__(self, path: Path, row_bytes: int) -> None:
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS runs(id TEXT PRIMARY KEY, token TEXT, cycle INTEGER)"
        )
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS cycles(run TEXT, n INTEGER, body TEXT, "
            "PRIMARY KEY(run, n)) WITHOUT ROWID"
        )
        self.body = "z" * row_bytes
        self.n = 0

    def round(self, cycles: int) -> float:
        self.n += 1
        run = f"run-{self.n}"
        self.db.execute("INSERT INTO runs VALUES(?, 't', 0)", (run,))
        t0 = time.perf_counter()
        for c in range(cycles):
            self.db.execute("BEGIN IMMEDIATE")
            got = self.db.execute(
                "UPDATE runs SET cycle = ? WHERE id = ? AND token = 't' RETURNING cycle",
                (c + 1, run),
            ).fetchall()
            assert got, "fenced out"
            self.db.execute("INSERT INTO cycles VALUES(?,?,?)", (run, c, self.body))
            self.db.execute("COMMIT")
        return 1000 * (time.perf_counter() - t0) / cycles


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.cycles < 3 or a.rounds < 1:
        print("ratio_bound: --cycles must be at least 3 and --rounds at least 1", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(dir=a.dir))
    try:
        engine_ms: list[float] = []
        engine_cpu: list[float] = []
        sql_ms: list[float] = []
        sql_cpu: list[float] = []
        row_ms: list[float] = []
        floor_ms: list[float] = []
        floor = Floor(base / "floor.db", "FULL")
        fenced: FencedRow | None = None
        per_cycle_bytes = statements = 0
        for r in range(a.rounds):
            work = base / f"r{r}"
            work.mkdir()
            sides = ["engine", "floor", "row", "sql"]
            k = r % len(sides)
            order = sides[k:] + sides[:k]
            if r % 2:
                order.reverse()
            calls: list[Call] = []
            before = work / "before.db"
            for side in order:
                if side == "engine":
                    ms, cpu, calls, before = record_engine(work, a.cycles)
                    engine_ms.append(ms)
                    engine_cpu.append(cpu)
                    per_cycle_bytes = _written_bytes(calls) // (a.cycles - 1)
                    statements = len(calls) // (a.cycles - 1)
                elif side == "floor":
                    floor_ms.append(floor.round(a.cycles))
                elif side == "row":
                    if fenced is None:  # (its row's size is the engine's, known after a run)
                        fenced = FencedRow(base / "row.db", 2048)
                    row_ms.append(fenced.round(a.cycles))
            # the replay needs the engine's recording: it runs last in its round, on a copy
            copy = work / "replay.db"
            shutil.copy(before, copy)
            ms, cpu = replay(copy, calls, a.cycles - 1)
            sql_ms.append(ms)
            sql_cpu.append(cpu)
            if fenced is not None:
                fenced.body = "z" * per_cycle_bytes
        floor.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    f = statistics.median(floor_ms)
    e, s, w = (statistics.median(x) for x in (engine_ms, sql_ms, row_ms))
    e_cpu, s_cpu = statistics.median(engine_cpu), statistics.median(sql_cpu)
    print(
        f"cycles={a.cycles} rounds={a.rounds} statements_a_cycle={statements} "
        f"bytes_a_cycle={per_cycle_bytes}"
    )
    for name, v in (("floor", f), ("fenced_row", w), ("engine_sql", s), ("engine", e)):
        print(f"{name:<11} {v:8.3f} ms/cycle  {v / f:6.2f} × floor")
    print(f"engine CPU {e_cpu:.0f} µs/cycle, of which its SQL replayed alone {s_cpu:.0f} µs")
    budget_sql = 1000 * (1.5 * f - s)
    budget_row = 1000 * (1.5 * f - w)
    print(
        f"left for the engine's Python under 1.5 × floor: {budget_sql:.0f} µs with today's SQL, "
        f"{budget_row:.0f} µs with one fenced row a cycle"
    )
    print(f"python_budget_us={budget_row:.0f} engine_python_us={e_cpu - s_cpu:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
