"""Does live tracing, and do readers of every checkpoint, cost the same late in a run? (issue 14)

Usage:  python bench/trace_growth.py live [--parts 200] [--cycles 3000] [--off]
        python bench/trace_growth.py readers [--parts 100] [--cycles 100,3000]

* **live** — a loop of P parts (the actor writes one part a cycle, a verifier flags it) traced
  live through the OpenTelemetry SDK to an exporter that drops what it gets (``--off``: not
  traced). Prints the thread's CPU µs per cycle over the first and the last tenth of the run,
  the process's RSS growth per cycle, and the entries the tracer holds at a tenth and at the
  end. Flat is the goal: ``ratio`` about 1, RSS growth as untraced, the entries the same.
* **readers** — the same loop run to each of the ``--cycles``, then each reader of every
  checkpoint (the trace, metrics, the rollback target, the chart, the timeline, replay) timed
  once, with how many checkpoint states it resolved (every part's versions): a reader of
  ``fields`` resolves none, so its time follows the checkpoints, not checkpoints × parts.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright import _state_codec as codec


def wide_loop(parts: int, cycles: int, on_actor: Callable[[int], None] | None = None) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if on_actor is not None:
            on_actor(ctx.cycle)
        return lw.Proposal.edit("doc", {f"p{ctx.cycle % parts}": f"draft {ctx.cycle}"})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        [edit] = proposal.changes()
        found = (lw.Finding("still open", "doc", edit.part, "text"),)
        return lw.Verdict(passed=False, score=0.5, findings=found, checked=(edit.ref,))

    return lw.Loop(
        name="wide",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def task(parts: int) -> dict[str, Any]:
    return {"goal": "wide", "artifacts": {"doc": {f"p{i}": "" for i in range(parts)}}}


def rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4


def live(parts: int, cycles: int, off: bool) -> None:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = None
    if not off:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Drop()))
    cpu: list[float] = []
    rss: list[int] = []
    entries: dict[int, int] = {}
    rts: list[lw.Runtime] = []
    tenth = max(cycles // 10, 2)

    def mark(cycle: int) -> None:
        cpu.append(time.thread_time())
        rss.append(rss_kb())
        if rts and rts[0]._live is not None and cycle in (tenth, cycles):
            entries[cycle] = rts[0]._live.held()

    folder = Path(tempfile.mkdtemp(prefix="lw-trace-"))
    url = f"sqlite:///{folder / 's.db'}?durability=process"
    with lw.Runtime(url, tracer_provider=provider) as rt:
        rts.append(rt)
        r = asyncio.run(rt.run(wide_loop(parts, cycles, mark), task(parts), task_key="k"))
    if r.cycles != cycles:
        raise RuntimeError(f"benchmark run ended unexpectedly: {r.to_dict()}")
    gaps = [b - a for a, b in itertools.pairwise(cpu)]
    first, last = statistics.fmean(gaps[1:tenth]) * 1e6, statistics.fmean(gaps[-tenth:]) * 1e6
    print(f"parts={parts} cycles={cycles} traced={not off}")
    print(
        f"cpu_us_per_cycle first_tenth={first:.0f} last_tenth={last:.0f} ratio={last / first:.2f}"
    )
    grow = (rss[-1] - rss[tenth]) / (cycles - tenth)
    print(f"rss_kb cycle_{tenth}={rss[tenth]} end={rss[-1]} growth_per_cycle_kb={grow:.2f}")
    if entries:
        print(f"tracer_entries cycle_{tenth}={entries.get(tenth)} end={entries.get(cycles)}")


def readers(parts: int, sizes: list[int]) -> None:
    from loopwright._metrics import run_metrics
    from loopwright._people import concluded_at
    from loopwright.replay._sources import trace_of_run
    from loopwright.trace._spans import run_spans
    from loopwright.web._views import chart_points, timeline

    calls = [0]
    real = codec.resolve

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls[0] += 1
        return real(*args, **kwargs)

    codec.resolve = counting
    reads: dict[str, Callable[[lw.store.Store, str, list[lw.store.Checkpoint]], object]] = {
        "trace (run_spans)": lambda st, rid, cks: run_spans(st, rid),
        "metrics (run_metrics)": lambda st, rid, cks: run_metrics(
            st.get_run(rid), cks, st.events(rid), st.approvals(run_id=rid)
        ),
        "rollback (concluded_at)": lambda st, rid, cks: concluded_at(cks, rid, 3, "to_cycle"),
        "web chart_points": lambda st, rid, cks: chart_points(cks),
        "web timeline": lambda st, rid, cks: timeline(cks),
        "replay trace_of_run": lambda st, rid, cks: trace_of_run(st, st.get_run(rid)),
    }
    folder = Path(tempfile.mkdtemp(prefix="lw-readers-"))
    out: dict[tuple[int, str], tuple[float, int]] = {}
    for n in sizes:
        url = f"sqlite:///{folder / f'{n}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = asyncio.run(rt.run(wide_loop(parts, n), task(parts), task_key=f"k{n}"))
            st = rt.store
            for name, read in reads.items():
                read(st, r.run_id, st.checkpoints(r.run_id))  # warm: imports, caches
                cks = st.checkpoints(r.run_id)
                calls[0] = 0
                t0 = time.perf_counter()
                read(st, r.run_id, cks)
                out[(n, name)] = ((time.perf_counter() - t0) * 1e3, calls[0])
    print(f"parts={parts}  (ms, states resolved) at each run length")
    print(f"{'reader':<26}" + "".join(f"{f'ms@{n}':>10}{f'res@{n}':>9}" for n in sizes))
    for name in reads:
        row = "".join(f"{out[(n, name)][0]:>10.1f}{out[(n, name)][1]:>9}" for n in sizes)
        print(f"{name:<26}{row}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("live", "readers"))
    ap.add_argument("--parts", type=int, default=None)
    ap.add_argument("--cycles", default=None)
    ap.add_argument("--off", action="store_true", help="live: not traced (the baseline)")
    args = ap.parse_args(argv)
    if args.what == "live":
        live(args.parts or 200, int(args.cycles or 3000), args.off)
    else:
        readers(args.parts or 100, [int(s) for s in (args.cycles or "100,3000").split(",")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
