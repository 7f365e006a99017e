"""Does a cycle cost the same with 10,000 parts as with 10? (invariant 8, by the state's width)

Usage:  python bench/many_parts.py [--parts 10,1000,10000] [--cycles 200] [--grow 2000]
                                   [--durability process|full] [--dir DIR]

Two workloads, each on the embedded SQLite store, a fresh database per run:

* **wide** — a task of P parts; each cycle the actor writes a new value of one part (in
  turn), a visible verifier rejects that part with a located finding (it checks only that
  part), and a held-out verifier judges its private copy of the whole state. Per P it prints
  µs per cycle (actor call to actor call, steady state) and the thread's CPU µs per cycle.
* **grow** — the actor adds one new part each cycle, which the verifier accepts: at cycle N
  the state has N parts (a comic growing panel by panel, a queue of items worked through).
  It prints µs per cycle over the first and the last tenth of the run.

A cycle's work should follow what it changed, not how many parts the state holds: the last
lines are

    parts_ratio=<µs/cycle at the most parts ÷ at the fewest>        (wide; 1.0 is flat)
    grow_ratio=<µs/cycle over the last tenth ÷ over the first tenth> (grow; 1.0 is flat)

What does grow with the parts is the actor's context (every part's value, copied) and a
snapshot checkpoint every ``snapshot_every`` cycles (every part's entry): both are counted.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import tempfile
import time
from pathlib import Path

import loopwright as lw


class Stamps:
    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def mark(self) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.thread_time())

    def per_cycle(self, part: slice = slice(None)) -> tuple[float, float]:
        w = [b - a for a, b in zip(self.wall, self.wall[1:], strict=False)][part]
        c = [b - a for a, b in zip(self.cpu, self.cpu[1:], strict=False)][part]
        return statistics.fmean(w) * 1e6, statistics.fmean(c) * 1e6


def wide_loop(parts: int, cycles: int, stamps: Stamps) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        stamps.mark()
        return lw.Proposal.edit("doc", {f"p{ctx.cycle % parts}": f"draft {ctx.cycle}"})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        [edit] = proposal.changes()
        return lw.Verdict(
            passed=False,
            score=0.5,
            findings=(lw.Finding("still open", "doc", edit.part, "text"),),
            checked=(edit.ref,),
        )

    def held_out(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        [edit] = proposal.changes()
        part = state.part(edit.ref)
        return lw.Verdict(passed=part is not None and part.value == edit.value, score=0.5)

    return lw.Loop(
        name="wide",
        actor=actor,
        verifiers=[
            lw.Check(fn=verifier, name="check"),
            lw.Check(fn=held_out, name="hidden", held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def grow_loop(cycles: int, stamps: Stamps) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        stamps.mark()
        return lw.Proposal.edit("doc", {f"p{ctx.cycle}": f"panel {ctx.cycle}"})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        [edit] = proposal.changes()
        # judges the new part only, with a warning (it is accepted: warnings do not block),
        # and does not pass the whole: the run goes on to its cycle budget
        nit = lw.Finding("a nit", "doc", edit.part, "style", severity="warning")
        return lw.Verdict(passed=False, score=0.5, findings=(nit,), checked=(edit.ref,))

    return lw.Loop(
        name="grow",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def run(rt: lw.Runtime, loop: lw.Loop, task: dict[str, object], key: str, cycles: int) -> None:
    r = asyncio.run(rt.run(loop, task, task_key=key))
    if (r.cycles, r.stop_reason) != (cycles, "budget_cycles"):
        raise RuntimeError(f"benchmark run ended unexpectedly: {r.to_dict()}")


def _url(path: Path, durability: str) -> str:
    return f"sqlite:///{path}" + ("" if durability == "full" else f"?durability={durability}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="10,1000,10000")
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--grow", type=int, default=2000, help="cycles of the grow run (0: skip)")
    ap.add_argument("--durability", default="process", choices=("process", "full"))
    ap.add_argument("--dir", help="folder for the databases (default: a temp folder)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.parts.split(",")]
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lw-parts-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"# loopwright · Python {platform.python_version()} · durability={args.durability}")
    print(f"{'parts':>7} {'µs/cycle':>9} {'CPU µs':>7}")
    wide: dict[int, float] = {}
    for p in sizes:
        stamps = Stamps()
        task = {"goal": "a wide state", "artifacts": {"doc": {f"p{i}": "" for i in range(p)}}}
        with lw.Runtime(_url(base / f"wide-{p}.db", args.durability)) as rt:
            run(rt, wide_loop(p, args.cycles, stamps), task, f"wide-{p}", args.cycles)
        us, cpu = stamps.per_cycle(slice(1, None))  # the first gap includes the run's start
        wide[p] = us
        print(f"{p:>7} {us:>9.0f} {cpu:>7.0f}")
    print(f"parts_ratio={wide[sizes[-1]] / wide[sizes[0]]:.3f}")
    if args.grow:
        n = args.grow
        stamps = Stamps()
        with lw.Runtime(_url(base / "grow.db", args.durability)) as rt:
            run(rt, grow_loop(n, stamps), {"goal": "a growing state"}, "grow", n)
        tenth = max(1, n // 10)
        first, first_cpu = stamps.per_cycle(slice(1, tenth))
        last, last_cpu = stamps.per_cycle(slice(-tenth, None))
        print(f"grow {n} cycles: first tenth {first:.0f} µs/cycle (CPU {first_cpu:.0f}), ")
        print(f"  last tenth ({n - tenth}..{n} parts) {last:.0f} µs/cycle (CPU {last_cpu:.0f})")
        print(f"grow_ratio={last / first:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
