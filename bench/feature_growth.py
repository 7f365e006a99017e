"""Does a cycle cost the same late in a long run as early, feature by feature? (invariant 8)

Usage:  python bench/feature_growth.py [--cycles 1000] [--features effect,heldout,...]
                                       [--store sqlite|postgresql://…] [--resumes 3]

``long_runs.py`` measures the trivial loop and ``growth.py`` four features (reflector, retries,
plan, approval every cycle). This script runs one loop per feature the others leave out, each
in a fresh child process (so peak RSS is the feature's own), every cycle rejected so the run
lasts its whole ``--cycles`` budget:

* ``effect``   — an effect every cycle, with a business idempotency key (``key=``);
* ``heldout``  — a held-out check beside the visible one, every cycle;
* ``findings`` — the visible check returns 40 located findings a cycle;
* ``parts``    — a task of 12 parts, 4 of them edited each cycle;
* ``plan``     — a plan step added and the previous one marked done each cycle;
* ``memory``   — a correction added to feedback memory every 5 cycles (recalled every cycle);
* ``reflect``  — a reflector writes a note after every cycle;
* ``approve``  — a risk rule parks the run every 25th cycle; approved, then resumed;
* ``model``    — ``ChatActor`` and ``ChatReviewer`` against ``loopwright.testing.FakeOpenAI``
  (priced, so every call is billed and journaled);
* ``timeout``  — a sync actor with ``actor_timeout_s`` (run in a worker thread);
* ``usage``    — actor and verifier report a cost and tokens (billed calls journaled);
* ``otel``     — live tracing to an OpenTelemetry SDK provider whose exporter drops the spans.

Per feature it prints, for an early window (cycles w..2w, w = min(300, cycles/10)) and the last
w cycles: process CPU µs a cycle (all threads: the group-commit writer and the fake model
server's too) and wall µs a cycle, their late ÷ early ratio; SQLite bytes a cycle written to the
database in each window (page count × page size, read at the window's ends); RSS growth
between the early window and the end (KB a cycle); peak RSS; rows a cycle left in the tables
that should not grow (``journal``); and the time to load the run's latest state from a fresh
process (median of ``--resumes``). The last line is ``worst_growth=<largest CPU late ÷ early>``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import pstats
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import loopwright as lw

FEATURES = (
    "effect",
    "heldout",
    "findings",
    "parts",
    "plan",
    "memory",
    "reflect",
    "approve",
    "model",
    "timeout",
    "usage",
    "otel",
)
PARTS = [f"p{i}" for i in range(12)]


class Probe:
    """What a cycle's stamp records: CPU and wall time, and at the window's ends the database's
    size and the process's RSS."""

    def __init__(self, n: int, db: Path | None, url: str | None = None) -> None:
        self.url = url
        self.w = min(300, max(10, n // 10))
        self.n = n
        self.cpu: list[float] = []
        self.sys: list[float] = []  # the kernel's share (fsync's path)
        self.wall: list[float] = []
        self.marks: dict[int, tuple[int, int]] = {}
        self.db = db
        self.server: Any = None
        self.last: Any = None  # called at the last cycle measured (the run is drained there)
        self.steps = [0, 0]  # SQLite VM steps (in 1,000s) and statements, all the run's
        self.counts: list[tuple[int, int]] = []
        # Python calls a cycle, counted by cProfile over 100 cycles after the early window and
        # 100 before the late one (not inside the timed windows: profiling slows a cycle).
        self.k = min(100, w := self.w)
        self.spans = {"early": (2 * w, 2 * w + self.k), "late": (n - w - self.k, n - w)}
        self.prof = {name: cProfile.Profile() for name in self.spans}

    def count(self, db: sqlite3.Connection) -> None:
        """Count what the store's connection does: VM steps and statements (machine-independent,
        unlike seconds)."""

        def step() -> int:
            self.steps[0] += 1
            return 0

        def stmt(sql: str) -> None:
            self.steps[1] += 1

        db.set_progress_handler(step, 1000)
        db.set_trace_callback(stmt)

    def stamp(self) -> None:
        self.cpu.append(time.process_time())
        self.sys.append(os.times().system)
        self.wall.append(time.perf_counter())
        self.counts.append((self.steps[0], self.steps[1]))
        cycle = len(self.cpu)  # the verifier runs once a cycle
        if cycle == self.n and self.last is not None:
            self.last()
        for name, (a, b) in self.spans.items():
            if cycle == a:
                self.prof[name].enable()
            elif cycle == b:
                self.prof[name].disable()
        if cycle in (self.w, 2 * self.w, self.n - self.w, self.n):
            self.marks[cycle] = (self._db_bytes(), _rss_kb())
        if self.server is not None and len(self.server.requests) > 100:
            self.server.requests.clear()  # the fake server records requests: a test's memory

    def _db_bytes(self) -> int:
        if self.url is not None:  # PostgreSQL: every table's and index's pages
            import psycopg

            with psycopg.connect(self.url) as pg:
                row = pg.execute(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
                ).fetchone()
            return int(row[0] or 0) if row else 0
        if self.db is None:
            return 0
        db = sqlite3.connect(self.db)
        try:
            [(pages,)] = db.execute("PRAGMA page_count").fetchall()
            [(free,)] = db.execute("PRAGMA freelist_count").fetchall()
            [(size,)] = db.execute("PRAGMA page_size").fetchall()
        finally:
            db.close()
        return int((pages - free) * size)


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _task(feature: str) -> dict[str, Any]:
    has = set(feature.split("+"))
    parts = PARTS if "parts" in has else ["body"]
    return {"goal": "write the document", "artifacts": {"doc": dict.fromkeys(parts, "")}}


def make_loop(feature: str, budget: int, probe: Probe, rt: lw.Runtime) -> lw.Loop:
    has = set(feature.split("+"))  # features combine: "otel+reflect"
    memory = lw.FeedbackMemory(rt.store)

    @lw.effect("notify", key=lambda a: f"note-{a['n']}", requires_success=False)
    def notify(n: int, *, key: str) -> dict[str, Any]:
        return {"sent": n}

    def actor(ctx: lw.Context) -> lw.Proposal:
        c = ctx.cycle
        if "memory" in has and c % 5 == 0:
            memory.add(
                scope="task",
                scope_key="bench",
                signal="correction",
                text=f"cycle {c}: open with fact {c * 7919 % 997}",
                by="bench",
            )
        edits: tuple[lw.Edit, ...] = (lw.Edit("doc", "body", f"draft {c}"),)
        if "parts" in has:
            edits = tuple(lw.Edit("doc", PARTS[(c * 4 + i) % 12], f"v{c}.{i}") for i in range(4))
        step = lw.PlanStep(f"s{c}", f"step {c}: revise the opening")
        return lw.Proposal(
            edits=edits,
            effects=(notify.call(n=c),) if "effect" in has else (),
            new_steps=(step,) if "plan" in has else (),
            plan={f"s{c - 1}": "done"} if "plan" in has and c > 1 else {},
            usage=lw.Usage(cost_usd=0.0001, tokens=150) if "usage" in has else None,
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        probe.stamp()
        # a part no failing finding names is accepted: every part written is named
        names = PARTS if "parts" in has else ["body"]
        k = 40 if "findings" in has else len(names)
        findings = tuple(
            lw.Finding(
                f"issue {i} at cycle {state.cycle}",
                "doc",
                names[i % len(names)],
                dimension=f"d{i % 7}",
            )
            for i in range(k)
        )
        usage = lw.Usage(cost_usd=0.0002, tokens=80) if "usage" in has else None
        return lw.Verdict(passed=False, score=0.5, findings=findings, usage=usage)

    def held(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.cycle % 3 == 0, score=0.4)

    def reflector(ctx: lw.Context, visible: Any) -> str:
        return f"cycle {ctx.cycle}: still open; try opening {ctx.cycle * 7919 % 997}"

    def every_25(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        k = len(probe.cpu)  # this cycle's number (its verifier ran); the last one never parks
        return "a periodic review" if k % 25 == 0 and k < probe.n - 1 else None

    verifiers = [lw.Check(fn=check, name="check")]
    extra: dict[str, Any] = {}
    risk: tuple[lw.RiskRule, ...] = ()
    if "heldout" in has:
        verifiers.append(lw.Check(fn=held, name="held", held_out=True))
    if "reflect" in has:
        extra["reflector"] = reflector
    if "effect" in has:
        extra["effects"] = (notify,)
    if "approve" in has:
        risk = (lw.RiskRule(name="review", check=every_25),)
    if "timeout" in has:
        extra["actor_timeout_s"] = 30.0
    chosen = actor
    if "model" in has:
        from loopwright.adapters import ChatActor, ChatReviewer

        url = probe.server.base_url
        chosen = ChatActor("writer", base_url=url, price="1,2")
        judge = ChatReviewer("judge", base_url=url, rubric="Plain English.", price="1,2")
        verifiers.append(lw.Check(fn=judge, name="review"))
    return lw.Loop(
        name="feature-" + feature.replace("+", "-"),
        actor=chosen,
        verifiers=verifiers,
        contract=lw.Contract(budget=lw.Budget(max_cycles=budget), risk=risk),
        **extra,
    )


def _serve(probe: Probe) -> Any:
    from loopwright.testing import FakeOpenAI, Reply, Request, ok

    server = FakeOpenAI().__enter__()
    count = {"n": 0}

    def write(req: Request) -> Reply:
        count["n"] += 1
        value = f"draft {count['n']}"
        return ok({"edits": [{"artifact": "doc", "part": "body", "value": value}]})

    def judge(req: Request) -> Reply:
        finding = {"message": "the opening is weak", "artifact": "doc", "part": "body"}
        return ok({"score": 0.5, "passed": False, "summary": "open", "findings": [finding]})

    server.script(write, model="writer")
    server.script(judge, model="judge")
    probe.server = server
    return server


def _tracer() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        spans = 0

        def export(self, spans: Any) -> SpanExportResult:
            Drop.spans += len(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    return provider


def child(feature: str, n: int, store: str) -> dict[str, Any]:
    db = Path(store) if "://" not in store else None
    has = set(feature.split("+"))
    probe = Probe(n, db, store if db is None else None)
    server = _serve(probe) if "model" in has else None
    tracer = _tracer() if "otel" in has else None
    try:
        with lw.Runtime(store, tracer_provider=tracer) as rt:
            # a cycle more in the budget: the run is drained after cycle n, left to resume
            loop = make_loop(feature, n + 1, probe, rt)
            probe.last = rt.drain
            if hasattr(rt.store, "_db"):
                probe.count(rt.store._db)
            r = asyncio.run(rt.run(loop, _task(feature), task_key="bench"))
            parks = 0
            while r.status == "awaiting_approval":
                rt.approve(r.run_id, by="bench")
                parks += 1
                r = asyncio.run(rt.resume(r.run_id, loop))
            if r.cycles != n or r.stop_reason is not None:
                raise RuntimeError(f"{feature}: the run ended unexpectedly: {r.to_dict()}")
            rows = _rows(rt.store, r.run_id)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    w = probe.w

    def per(xs: list[float], a: int, b: int) -> float:
        return (xs[b - 1] - xs[a - 1]) / (b - a) * 1e6

    m = probe.marks

    def counted(k: int, a: int, b: int) -> float:
        return (probe.counts[b - 1][k] - probe.counts[a - 1][k]) / (b - a)

    def calls(name: str) -> float:
        return float(pstats.Stats(probe.prof[name]).total_calls) / probe.k  # type: ignore[attr-defined]

    return {
        "calls_early": calls("early"),
        "calls_late": calls("late"),
        "steps_early": counted(0, w, 2 * w),
        "steps_late": counted(0, n - w, n),
        "stmts_early": counted(1, w, 2 * w),
        "stmts_late": counted(1, n - w, n),
        "run_id": r.run_id,
        "cpu_early": per(probe.cpu, w, 2 * w),
        "cpu_late": per(probe.cpu, n - w, n),
        "sys_early": per(probe.sys, w, 2 * w),
        "sys_late": per(probe.sys, n - w, n),
        "wall_early": per(probe.wall, w, 2 * w),
        "wall_late": per(probe.wall, n - w, n),
        "bytes_early": (m[2 * w][0] - m[w][0]) / w,
        "bytes_late": (m[n][0] - m[n - w][0]) / w,
        "rss_growth_kb": (m[n][1] - m[2 * w][1]) / (n - 2 * w),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "journal_rows": rows,
        "parks": parks,
    }


def _rows(store: Any, run_id: str) -> int:
    return len(list(store.journal(run_id))) if hasattr(store, "journal") else -1


_LOAD = """
import sys, time
from loopwright.store import open_store
import loopwright.store.sqlite, loopwright.store.postgres
t1 = time.perf_counter()
st = open_store(sys.argv[1])
state = st.latest_checkpoint(sys.argv[2]).task_state()
assert state.cycle == int(sys.argv[3]), state.cycle
t2 = time.perf_counter()
st.close()
print((t2 - t1) * 1000)
"""


_RESUME = """
import asyncio, sys, time
sys.path.insert(0, sys.argv[1])
import feature_growth as fg
import loopwright as lw
import loopwright._engine, loopwright.store.sqlite, loopwright.store.postgres, loopwright.trace._live
if "model" in sys.argv[2].split("+"):
    import openai, loopwright.adapters  # imports are not the resume
feature, n, store, run_id = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
probe = fg.Probe(n + 1, None)
server = fg._serve(probe) if "model" in feature.split("+") else None
tracer = fg._tracer() if "otel" in feature.split("+") else None
t0 = time.perf_counter()
with lw.Runtime(store, tracer_provider=tracer) as rt:
    loop = fg.make_loop(feature, n + 1, probe, rt)
    r = asyncio.run(rt.resume(run_id, loop))
t1 = time.perf_counter()
assert (r.cycles, r.stop_reason) == (n + 1, "budget_cycles"), r.to_dict()
print((probe.wall[0] - t0) * 1000, (t1 - t0) * 1000)  # to its cycle's verdict; to the end
"""


def resume_run_ms(feature: str, store: str, run_id: str, n: int) -> tuple[float, float]:
    """Wall ms, in a fresh process, of ``Runtime.resume`` of the drained run: open the store,
    load the run and run its one cycle left up to its verdict; and to the end of the run
    (imports not counted)."""
    here = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", _RESUME, here, feature, str(n), store, run_id],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"{feature}: the resume failed: {done.stderr.strip()[-500:]}")
    first, end = done.stdout.strip().splitlines()[-1].split()
    return float(first), float(end)


def resume_ms(store: str, run_id: str, n: int, times: int) -> float:
    out = []
    for _ in range(times):
        done = subprocess.run(
            [sys.executable, "-c", _LOAD, store, run_id, str(n)],
            check=True,
            capture_output=True,
            text=True,
        )
        out.append(float(done.stdout.strip()))
    return statistics.median(out)


def _fresh_pg(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP SCHEMA public CASCADE")
        c.execute("CREATE SCHEMA public")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--features", default=",".join(FEATURES))
    ap.add_argument(
        "--store",
        default="sqlite",
        help="sqlite (a temp file) or the URL of a PostgreSQL database of its own: it is "
        "emptied before each feature (DROP SCHEMA public CASCADE)",
    )
    ap.add_argument("--resumes", type=int, default=3)
    ap.add_argument("--child", nargs=3, metavar=("FEATURE", "N", "STORE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.child[2])))
        return 0
    if args.cycles < 100:
        raise SystemExit(f"feature_growth.py: --cycles takes at least 100, got {args.cycles}")
    chosen = [f for f in args.features.split(",") if f]
    unknown = [f for f in chosen if not set(f.split("+")) <= set(FEATURES)]
    if unknown or not chosen:
        raise SystemExit(
            f"feature_growth.py: --features takes {', '.join(FEATURES)}; got {unknown}"
        )
    n = args.cycles
    folder = Path(tempfile.mkdtemp(prefix="lw-features-"))
    print(f"# loopwright · Python {platform.python_version()} · {n} cycles · {args.store}")
    print(
        f"{'feature':>9} {'CPU µs e→l':>15} {'l÷e':>5} {'wall µs e→l':>15} {'l÷e':>5} "
        f"{'py calls e→l':>15} {'kVM steps e→l':>15} {'SQL e→l':>9} "
        f"{'DB B/cyc e→l':>13} {'RSS KB/cyc':>10} {'peak MB':>8} {'journal':>7} {'load ms':>7} {'resume ms':>9} {'+end ms':>7}"
    )
    worst = 0.0
    for feature in chosen:
        if args.store == "sqlite":
            store = str(folder / f"{feature}.db")
        else:
            _fresh_pg(args.store)
            store = args.store
        me = [sys.executable, __file__, "--child", feature, str(n), store]
        done = subprocess.run(me, check=False, capture_output=True, text=True)
        if done.returncode:
            print(f"{feature:>9} failed: {done.stderr.strip().splitlines()[-1:]}", flush=True)
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        res = resume_ms(store, r["run_id"], n, args.resumes)
        res_run = resume_run_ms(feature, store, r["run_id"], n)
        g_cpu = r["cpu_late"] / r["cpu_early"]
        g_wall = r["wall_late"] / r["wall_early"]
        worst = max(worst, g_cpu)
        print(
            f"{feature:>9} {r['cpu_early']:>7.0f}→{r['cpu_late']:<7.0f} {g_cpu:>5.2f} "
            f"{r['wall_early']:>7.0f}→{r['wall_late']:<7.0f} {g_wall:>5.2f} "
            f"{r['calls_early']:>7.0f}→{r['calls_late']:<7.0f} "
            f"{r['steps_early']:>7.1f}→{r['steps_late']:<7.1f} "
            f"{r['stmts_early']:>4.0f}→{r['stmts_late']:<4.0f} "
            f"{r['bytes_early']:>6.0f}→{r['bytes_late']:<6.0f} {r['rss_growth_kb']:>10.2f} "
            f"{r['peak_rss_mb']:>8.1f} {r['journal_rows']:>7} {res:>7.2f} {res_run[0]:>9.2f} {res_run[1]:>7.1f}",
            flush=True,
        )
        for p in folder.glob(f"{feature}.db*"):
            p.unlink()
    print(f"worst_growth={worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
