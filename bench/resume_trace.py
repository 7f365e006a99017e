"""What the first commit of a resumed, live-traced session costs at two run lengths (issue 14).

Usage:  python bench/resume_trace.py [--cycles 100,1000]

Per run length N: a trivial loop (one part, a verifier that flags it) runs N cycles traced
live through the OpenTelemetry SDK (in-memory exporter) and is drained there; a new
``Runtime`` resumes it, traced too, and its tracer's first commit (``LiveTracer.committed``)
is counted: Python function calls (cProfile), events the span tree is built from, spans built,
rows the store's reads return, SQLite VM steps (in 1,000s) and statements, and its wall ms.
Counts, not seconds, are the measure; the ms are shown for the reader. Flat is the goal.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.trace import _live

TASK = {"goal": "g", "artifacts": {"doc": {"body": ""}}}


def loop(budget: int, drain: Any = None) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if drain is not None and ctx.cycle == budget - 1:
            drain()
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        found = (lw.Finding("open", "doc", "body", "t"),)
        return lw.Verdict(passed=False, score=0.5, findings=found)

    return lw.Loop(
        name="resume-trace",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=budget)),
    )


def provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return p


_READS = ("events", "events_tail", "event_positions", "checkpoints", "checkpoints_after")
_READS += ("approvals", "approval", "cycle_starts", "in_cycle", "next_start")


def measure(n: int) -> dict[str, float]:
    db = Path(tempfile.mkdtemp(prefix="lw-resume-trace-")) / "s.db"
    with lw.Runtime(str(db), tracer_provider=provider()) as rt:
        r = rt.run_sync(loop(n + 1, rt.drain), TASK)
    if r.cycles != n:
        raise RuntimeError(f"the run ended unexpectedly: {r.to_dict()}")
    work: Counter[str] = Counter()
    on = [False]
    prof = cProfile.Profile()
    with lw.Runtime(str(db), tracer_provider=provider()) as rt:
        store, tracer = rt.store, rt._live
        assert tracer is not None
        for name in _READS:
            real = getattr(store, name, None)
            if real is None:
                continue

            def read(*a: Any, _real: Any = real, **k: Any) -> Any:
                got = _real(*a, **k)
                if on[0]:
                    rows = got[1] if isinstance(got, tuple) else got
                    work["store rows"] += len(rows) if isinstance(rows, list | dict) else 1
                return got

            setattr(store, name, read)
        conn = getattr(store, "_db", None)
        if conn is not None:

            def step() -> int:
                work["vm_steps_k"] += on[0]
                return 0

            conn.set_progress_handler(step, 1000)
            conn.set_trace_callback(lambda sql: work.update({"statements": on[0]}))
        real_build = _live.build_window

        def build(*a: Any, **k: Any) -> Any:
            spans, after = real_build(*a, **k)
            if on[0]:
                work["events built from"] += len(a[1])
                work["spans built"] += len(spans)
            return spans, after

        real_committed = tracer.committed

        def committed(*a: Any, **k: Any) -> None:
            first = "calls" not in work
            on[0] = first
            t0 = time.perf_counter()
            if first:
                prof.enable()
            try:
                real_committed(*a, **k)
            finally:
                if first:
                    prof.disable()
                    work["ms"] = int((time.perf_counter() - t0) * 1e6) / 1e3  # type: ignore[assignment]
                    work["calls"] = pstats.Stats(prof).total_calls  # type: ignore[attr-defined]
                on[0] = False

        tracer.committed = committed  # type: ignore[method-assign]
        _live.build_window = build
        try:
            done = rt.resume_sync(r.run_id, loop(n + 1))
        finally:
            _live.build_window = real_build
    if done.cycles != n + 1:
        raise RuntimeError(f"the resume ended unexpectedly: {done.to_dict()}")
    return dict(work)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", default="100,1000")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.cycles.split(",")]
    out = {n: measure(n) for n in sizes}
    keys = ["calls", "events built from", "spans built", "store rows", "statements"]
    keys += ["vm_steps_k", "ms"]
    print(
        f"{'first commit of the resumed session':<36}" + "".join(f"{f'N={n}':>12}" for n in sizes)
    )
    for k in keys:
        print(f"{k:<36}" + "".join(f"{out[n].get(k, 0):>12}" for n in sizes))
    a, b = out[sizes[0]]["calls"], out[sizes[-1]]["calls"]
    print(f"calls_ratio={b / a:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
