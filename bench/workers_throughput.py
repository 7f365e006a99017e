"""Cycles per second against the number of `loopwright worker` processes, on PostgreSQL, beside
the store's own commit rate measured in the same run as the ceiling.

Usage:  python bench/workers_throughput.py [--pg URL] [--runs 400] [--workers 1,2,4,8]
                                           [--concurrency 8] [--ceiling-seconds 3]
                                           [--quick] [--json out.json]

For each W (in the order 1, 2, 4, 8), in a fresh PostgreSQL schema each time, dropped after:

* **ceiling** — W processes, each a plain psycopg loop of the same shape of write as one engine
  checkpoint: one transaction per cycle that updates a run row (fenced by its token, as the
  store does), inserts a ~2 KB checkpoint row and 5 event rows, into the very tables loopwright
  creates (same indexes, same foreign keys), with ``synchronous_commit`` as the server has it.
  All W start together and commit for ``--ceiling-seconds``; the figure is commits/s summed.
* **engine** — R runs (``--runs``) of ``tests/integration/workers/loop.toml`` (three repair
  cycles per run, then a counting effect that pays once) created with ``Runtime.create``; then
  W ``loopwright worker --once --concurrency C`` processes with ``WORK_SLEEP=0`` (the actor
  returns at once: pure engine + store cost) drain them. The figure is the runs' cycles divided
  by the time from the first claim to the last run accepted (read from the store's own
  timestamps); the table also gives it from the moment the processes were spawned, and over the
  window when all W workers were working at once.

The ratio is engine cycles/s ÷ ceiling commits/s. The last line is
``workers_cycles_per_second=<W1>,<W2>,<W4>,<W8>``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import loopwright as lw

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "tests" / "integration" / "workers" / "loop.toml"
EXE = str(Path(sys.executable).with_name("loopwright"))
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
EVENTS_PER_CYCLE = 5
STATE_BYTES = 1600  # + a ~400 B cycle record: a ~2 KB checkpoint row
RECORD_BYTES = 400


# --- PostgreSQL plumbing ----------------------------------------------------------------------
def _base(url: str) -> str:
    if "schema=" in url:
        raise SystemExit(
            "--pg: give the database URL without ?schema= (each measurement makes its own)"
        )
    return url


def _with_schema(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def _connect(base: str, schema: str | None = None) -> Any:
    import psycopg
    from psycopg import sql

    conn = psycopg.connect(base, autocommit=True, connect_timeout=10)
    if schema:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


def _drop(base: str, schema: str) -> None:
    from psycopg import sql

    with _connect(base) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _fresh_schema(base: str) -> str:
    """A new schema holding loopwright's tables (created by the store's own migrations)."""
    from loopwright.store.postgres import PostgresStore

    schema = f"lw_bench_{uuid.uuid4().hex[:12]}"
    PostgresStore(_with_schema(base, schema), pool_min=0, pool_max=1).close()
    return schema


def _server(base: str) -> dict[str, str]:
    with _connect(base) as conn:
        return {
            name: str(conn.execute(f"SHOW {name}").fetchone()[0])
            for name in (
                "server_version",
                "synchronous_commit",
                "fsync",
                "wal_sync_method",
                "commit_delay",
                "max_connections",
            )
        }


class CpuMeter:
    """Busy share of all CPUs between start() and stop(), from /proc/stat (None elsewhere)."""

    def __init__(self) -> None:
        self._t0: tuple[int, int] | None = None

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        except OSError:
            return None
        vals = [int(v) for v in fields]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
        return sum(vals[:8]), idle

    def start(self) -> None:
        self._t0 = self._read()

    def stop(self) -> float | None:
        t1 = self._read()
        if self._t0 is None or t1 is None or t1[0] == self._t0[0]:
            return None
        return 1.0 - (t1[1] - self._t0[1]) / (t1[0] - self._t0[0])


# --- the ceiling: plain psycopg, one transaction per cycle -----------------------------------
def _ceiling_child(
    base: str,
    schema: str,
    run_ids: list[str],
    seconds: float,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    conn = _connect(base, schema)
    state = json.dumps({"artifacts": {"doc": {"text": "x" * (STATE_BYTES - 40)}}})
    record = json.dumps({"verdict": "y" * (RECORD_BYTES - 20)})
    event = json.dumps({"what": "z" * 60})
    seq = dict.fromkeys(run_ids, 0)

    def one(i: int) -> None:
        run_id = run_ids[i % len(run_ids)]
        seq[run_id] += 1
        now = time.time()
        with conn.transaction():
            flag = conn.execute(
                "UPDATE runs SET cycle=%s, best_score=%s, cost_usd=%s, tokens=%s, seconds=%s, "
                "lease_expires_at=%s, last_seq=%s, updated_at=%s WHERE run_id=%s "
                "AND fencing_token=%s RETURNING cancel_requested",
                (seq[run_id], 0.5, 0.0, 0, 0.0, now + 30, seq[run_id], now, run_id, 1),
            ).fetchone()
            assert flag is not None
            conn.execute(
                "INSERT INTO checkpoints(run_id, seq, cycle, state, record, fencing_token, "
                "created_at) VALUES(%s,%s,%s,%s,%s,%s,%s)",
                (run_id, seq[run_id], seq[run_id], state, record, 1, now),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO events(run_id, cycle, kind, ts, data) VALUES(%s,%s,%s,%s,%s)",
                    [(run_id, seq[run_id], f"k{j}", now, event) for j in range(EVENTS_PER_CYCLE)],
                )

    for i in range(20):  # warm up: connection, plans, caches
        one(i)
    ready.put(os.getpid())
    go.wait()
    n, t0 = 0, time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        one(n)
        n += 1
    results.put((n, time.perf_counter() - t0))
    conn.close()


@dataclass
class Ceiling:
    workers: int
    commits: int
    commits_per_s: float
    ms_per_commit_per_process: float
    cpu_busy: float | None


def measure_ceiling(base: str, w: int, runs_per_process: int, seconds: float) -> Ceiling:
    schema = _fresh_schema(base)
    try:
        ids = [[f"ceil-{p}-{k}" for k in range(runs_per_process)] for p in range(w)]
        now = time.time()
        with _connect(base, schema) as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO runs(run_id, task_key, loop_name, status, contract, task, "
                "created_at, updated_at, lease_owner, lease_expires_at, fencing_token) "
                "VALUES(%s,%s,'ceiling','running','{}','{}',%s,%s,'bench',%s,1)",
                [(r, r, now, now, now + 3600) for group in ids for r in group],
            )
        ctx = mp.get_context("spawn")
        ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        procs = [
            ctx.Process(
                target=_ceiling_child, args=(base, schema, ids[p], seconds, ready, go, results)
            )
            for p in range(w)
        ]
        for p in procs:
            p.start()
        try:
            for _ in range(w):
                ready.get(timeout=60)
            cpu = CpuMeter()
            cpu.start()
            go.set()
            got = [results.get(timeout=seconds + 60) for _ in range(w)]
            busy = cpu.stop()
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
        commits = sum(n for n, _ in got)
        rate = sum(n / dt for n, dt in got)
        per = sum(dt * 1000 / n for n, dt in got) / len(got)
        return Ceiling(w, commits, rate, per, busy)
    finally:
        _drop(base, schema)


# --- the engine: loopwright worker processes ---------------------------------------------------
@dataclass
class Engine:
    workers: int
    concurrency: int
    runs: int
    cycles: int
    create_s: float
    wall_s: float  # first claim -> last run accepted
    spawn_wall_s: float  # processes spawned -> last run accepted
    cycles_per_s: float
    spawn_cycles_per_s: float
    all_up_s: float | None  # the window when every worker was driving runs
    all_up_cycles_per_s: float | None
    checkpoints_per_cycle: float  # checkpoints written by the workers (not the creating one)
    events_per_cycle: float
    checkpoint_bytes: float  # mean state + record of the cycle checkpoints
    claimed: list[int]
    lost: int
    cpu_busy: float | None
    worker_cpu_s: float  # user + system of the worker processes, start-up included


def _create_runs(url: str, n: int) -> float:
    loop = lw.load_spec(SPEC)
    t0 = time.perf_counter()
    with lw.Runtime(url) as rt:
        for i in range(n):
            rt.create(
                loop,
                {"id": f"t{i}", "artifacts": {"doc": {"a": 0, "b": 0, "c": 0}}},
                task_key=f"bench/{i}",
            )
    return time.perf_counter() - t0


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure_startup_cpu(base: str) -> float:
    """CPU seconds of a `loopwright worker --once` that finds nothing to do (start-up and exit),
    the least of two tries: subtracted from the workers' CPU to give the per-cycle figure."""
    schema = _fresh_schema(base)
    try:
        best = float("inf")
        for _ in range(2):
            cpu0 = _children_cpu()
            subprocess.run(
                [EXE, "worker", "--store", _with_schema(base, schema), "--once", "--json"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
            )
            best = min(best, _children_cpu() - cpu0)
        return best
    finally:
        _drop(base, schema)


def measure_engine(base: str, w: int, runs: int, concurrency: int, timeout: float) -> Engine:
    schema = _fresh_schema(base)
    url = _with_schema(base, schema)
    work = Path(tempfile.mkdtemp(prefix="lw-bench-workers-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        create_s = _create_runs(url, runs)
        env = {**os.environ, "WORK_DIR": str(work), "WORK_SLEEP": "0"}
        cmd = [EXE, "worker", "--store", url, "--once", "--concurrency", str(concurrency)]
        cmd += ["--poll", "0.1", "--json"]
        cpu0 = _children_cpu()
        cpu = CpuMeter()
        cpu.start()
        spawned = time.time()
        for i in range(w):
            with (work / f"w{i}.out").open("wb") as out, (work / f"w{i}.err").open("wb") as err:
                procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=err))
        deadline = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        busy = cpu.stop()
        worker_cpu = _children_cpu() - cpu0
        stats = []
        for i, p in enumerate(procs):
            if p.returncode != 0:
                raise RuntimeError(
                    f"worker {i} exited {p.returncode}: {(work / f'w{i}.err').read_text()[-2000:]}"
                )
            stats.append(json.loads((work / f"w{i}.out").read_text()))
        with _connect(base, schema) as conn:
            status = Counter(
                dict(conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())
            )
            if status != Counter({"accepted": runs}):
                raise RuntimeError(f"not every run was accepted: {dict(status)}")
            paid = Counter(
                line.split(" ")[0] for line in (work / "effects.log").read_text().splitlines()
            )
            if len(paid) != runs or max(paid.values()) != 1:
                raise RuntimeError("the counting effect did not pay exactly once per run")
            cycles, last_end = conn.execute("SELECT sum(cycle), max(ended_at) FROM runs").fetchone()
            first_claim = conn.execute(
                "SELECT min(ts) FROM events WHERE kind IN ('started', 'resumed')"
            ).fetchone()[0]
            n_ck, ck_bytes = conn.execute(
                "SELECT count(*) FILTER (WHERE seq > 0), avg(octet_length(state::text) + "
                "coalesce(octet_length(record::text), 0)) FILTER (WHERE record IS NOT NULL) "
                "FROM checkpoints"
            ).fetchone()
            n_ev = conn.execute(
                "SELECT count(*) FROM events WHERE kind <> 'run_created'"
            ).fetchone()[0]
            # When was every worker busy? Each run is started by one owner and stopped by it
            # (nothing is taken over here): an owner's span is its first start to last stop.
            spans = conn.execute(
                "SELECT s.data::jsonb->>'owner', min(s.ts), max(e.ts) FROM events s "
                "JOIN events e ON e.run_id = s.run_id AND e.kind = 'stopped' "
                "WHERE s.kind = 'started' GROUP BY 1"
            ).fetchall()
            all_up = all_up_rate = None
            if len(spans) == w:
                lo, hi = max(s[1] for s in spans), min(s[2] for s in spans)
                if hi - lo >= 0.5:
                    done = conn.execute(
                        "SELECT count(*) FROM events WHERE kind = 'verdict' AND ts > %s "
                        "AND ts <= %s",
                        (lo, hi),
                    ).fetchone()[0]
                    all_up, all_up_rate = hi - lo, done / (hi - lo)
        wall = last_end - first_claim
        spawn_wall = last_end - spawned
        return Engine(
            workers=w,
            concurrency=concurrency,
            runs=runs,
            cycles=int(cycles),
            create_s=create_s,
            wall_s=wall,
            spawn_wall_s=spawn_wall,
            cycles_per_s=cycles / wall,
            spawn_cycles_per_s=cycles / spawn_wall,
            all_up_s=all_up,
            all_up_cycles_per_s=all_up_rate,
            checkpoints_per_cycle=n_ck / cycles,
            events_per_cycle=n_ev / cycles,
            checkpoint_bytes=float(ck_bytes or 0),
            claimed=[int(s["claimed"]) for s in stats],
            lost=sum(int(s["lost"]) for s in stats),
            cpu_busy=busy,
            worker_cpu_s=worker_cpu,
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        _drop(base, schema)
        shutil.rmtree(work, ignore_errors=True)


# --- the report ---------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def _num(x: float | None, fmt: str = ".0f") -> str:
    return "-" if x is None else format(x, fmt)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--pg",
        default=os.environ.get("LOOPWRIGHT_TEST_PG") or DEFAULT_PG,
        help="PostgreSQL URL, without ?schema= (default: $LOOPWRIGHT_TEST_PG or %(default)s)",
    )
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (400)")
    ap.add_argument("--workers", default="1,2,4,8", help="worker counts (1,2,4,8)")
    ap.add_argument("--concurrency", type=int, default=8, help="--concurrency of each worker (8)")
    ap.add_argument("--ceiling-seconds", type=float, default=None, help="per W (3)")
    ap.add_argument("--timeout", type=float, default=300.0, help="per engine measurement")
    ap.add_argument("--quick", action="store_true", help="100 runs, 1 s ceilings: a smoke run")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    runs = args.runs or (100 if args.quick else 400)
    ceil_s = args.ceiling_seconds or (1.0 if args.quick else 3.0)
    ws = [int(x) for x in args.workers.split(",") if x.strip()]
    if not ws or min(ws) < 1 or runs < 1 or args.concurrency < 1:
        ap.error("need --workers >= 1, --runs >= 1, --concurrency >= 1")
    base = _base(args.pg)
    try:
        server = _server(base)
    except Exception as exc:
        print(f"cannot reach PostgreSQL at {base}: {exc}", file=sys.stderr)
        return 2
    load0 = os.getloadavg()
    print(
        f"loopwright {lw.__version__} · Python {platform.python_version()} · "
        f"{platform.system()} {platform.machine()} · {os.cpu_count()} CPUs · "
        f"load {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}"
    )
    print(
        f"PostgreSQL {server['server_version']} at {base} · synchronous_commit="
        f"{server['synchronous_commit']} fsync={server['fsync']} "
        f"wal_sync_method={server['wal_sync_method']} commit_delay={server['commit_delay']}"
    )
    print(
        f"{runs} runs × 3 cycles of {SPEC.relative_to(ROOT)} (WORK_SLEEP=0) per W; "
        f"workers --once --concurrency {args.concurrency}; ceiling {ceil_s:g} s per W"
    )
    t_start = time.perf_counter()
    startup_cpu = measure_startup_cpu(base)
    rows: list[tuple[Ceiling, Engine]] = []
    for i, w in enumerate(ws):
        # alternate which side goes first, so drift over the run hits both alike
        if i % 2 == 0:
            c = measure_ceiling(base, w, args.concurrency, ceil_s)
            e = measure_engine(base, w, runs, args.concurrency, args.timeout)
        else:
            e = measure_engine(base, w, runs, args.concurrency, args.timeout)
            c = measure_ceiling(base, w, args.concurrency, ceil_s)
        rows.append((c, e))
        print(
            f"  W={w}: ceiling {c.commits_per_s:.0f} commits/s · engine "
            f"{e.cycles_per_s:.0f} cycles/s ({e.cycles} cycles in {e.wall_s:.2f} s; "
            f"{e.spawn_wall_s:.2f} s from spawn) · claimed {e.claimed}, lost {e.lost}",
            flush=True,
        )
    load1 = os.getloadavg()
    e0 = rows[0][1]
    print()
    print(
        f"engine per cycle: {e0.checkpoints_per_cycle:.2f} checkpoints, "
        f"{e0.events_per_cycle:.1f} events, cycle checkpoint row {e0.checkpoint_bytes:.0f} B "
        f"(state + record), plus per run an effect journaled in 2 writes, a claim and a lease "
        f"release; ceiling: 1 commit, {EVENTS_PER_CYCLE} events, "
        f"{STATE_BYTES + RECORD_BYTES} B"
    )
    print(
        f"a worker's start-up and exit: {startup_cpu * 1000:.0f} ms CPU (subtracted below); "
        f"CPU busy: the whole machine's, all {os.cpu_count()} CPUs, during each measurement"
    )
    print()
    hdr = (
        f"{'W':>2} | {'ceiling commits/s':>17} | {'engine cycles/s':>15} | {'ratio':>5} | "
        f"{'from spawn':>10} | {'all W busy':>10} | {'wall s':>6} | {'CPU busy eng/ceil':>17} | "
        f"{'worker CPU ms/cycle':>19}"
    )
    print(hdr)
    print("-" * len(hdr))
    for c, e in rows:
        print(
            f"{e.workers:>2} | {c.commits_per_s:>17.0f} | {e.cycles_per_s:>15.0f} | "
            f"{e.cycles_per_s / c.commits_per_s:>5.2f} | {e.spawn_cycles_per_s:>10.0f} | "
            f"{_num(e.all_up_cycles_per_s):>10} | {e.wall_s:>6.2f} | "
            f"{_pct(e.cpu_busy) + ' / ' + _pct(c.cpu_busy):>17} | "
            f"{(e.worker_cpu_s - e.workers * startup_cpu) * 1000 / e.cycles:>19.2f}"
        )
    print()
    print(
        f"load average before {load0[0]:.2f}, after {load1[0]:.2f} (1 min); "
        f"total {time.perf_counter() - t_start:.0f} s"
    )
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "server": server,
                    "cpus": os.cpu_count(),
                    "load_before": load0,
                    "load_after": load1,
                    "runs": runs,
                    "concurrency": args.concurrency,
                    "ceiling_seconds": ceil_s,
                    "worker_startup_cpu_s": startup_cpu,
                    "rows": [{"ceiling": asdict(c), "engine": asdict(e)} for c, e in rows],
                },
                fh,
                indent=2,
            )
    print("workers_cycles_per_second=" + ",".join(f"{e.cycles_per_s:.1f}" for _, e in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
