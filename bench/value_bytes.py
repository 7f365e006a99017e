"""What does a cycle write beyond its new work, when the work is not tiny? (issue 14: bytes)

Usage:  python bench/value_bytes.py [--sizes 100,5000,50000] [--cycles 300] [--dir DIR]
        python bench/value_bytes.py --task-kb 2000 [--cycles 300]

``bench/long_runs.py`` writes a few bytes of value a cycle, so it cannot see a value stored
twice. Here, for each value size S (characters of text), one ``Runtime.run`` of ``--cycles``
cycles on the embedded SQLite store (default durability), a fresh database each: the actor
writes a new S-character draft of one part every cycle, the verifier rejects it with one
located finding. Per size it prints the database's growth per cycle (after a WAL checkpoint),
the value bytes a cycle makes (the draft as JSON), their difference — what the engine writes
beyond the work — and CPU µs per cycle. The last line is

    excess_bytes_per_cycle_max=<int>    the largest difference over the sizes    target ≤ 2 KB

``--task-kb K`` asks the other question: the task holds a K KB document the loop never edits
(a part's starting value), and the actor rewrites a short title every cycle. Then nothing a
cycle writes should depend on K; it prints the same columns for the task without and with the
document, and ``task_bytes_per_cycle_ratio=<with ÷ without>`` and
``task_cpu_per_cycle_ratio=`` last (targets ≈ 1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import loopwright as lw

TASK = {"goal": "long drafts", "artifacts": {"doc": {"body": "", "title": "a title"}}}
_WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit "


def draft(cycle: int, size: int) -> str:
    head = f"draft {cycle}: "
    return (head + _WORDS * (size // len(_WORDS) + 1))[:size]


def make_loop(cycles: int, size: int, part: str = "body") -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {part: draft(ctx.cycle, size)})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still open", "doc", part, "text"),)
        )

    return lw.Loop(
        name="drafts",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _db_bytes(path: Path) -> int:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def one(size: int, cycles: int, folder: Path, task_kb: int | None = None) -> dict[str, float]:
    path = folder / f"values-{size}-{task_kb}.db"
    task: dict[str, object] = TASK
    part = "body"
    if task_kb is not None:  # an unedited document in the task; the title is rewritten
        task = {"goal": "retitle", "artifacts": {"doc": {"body": draft(0, task_kb * 1000)}}}
        task["artifacts"]["doc"]["title"] = "a title"  # type: ignore[index]
        part = "title"
    with lw.Runtime(path) as rt:
        rt.create(make_loop(cycles, size, part), {"goal": "warm"}, task_key="warm")
        empty = _db_bytes(path)
        cpu0 = time.process_time()
        r = asyncio.run(rt.run(make_loop(cycles, size, part), task, task_key="run"))
        cpu = time.process_time() - cpu0
        if (r.cycles, r.stop_reason) != (cycles, "budget_cycles"):
            raise RuntimeError(f"benchmark run ended unexpectedly: {r.to_dict()}")
    grown = _db_bytes(path) - empty
    values = sum(len(json.dumps(draft(c, size))) for c in range(1, cycles + 1)) / cycles
    for p in folder.glob(path.name + "*"):
        p.unlink()
    return {"db": grown / cycles, "values": values, "cpu": cpu / cycles * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sizes", default="100,5000,50000")
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--dir", help="folder for the databases (default: a temp folder)")
    ap.add_argument("--task-kb", type=int, help="an unedited document of this size in the task")
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        print(f"--sizes: a comma-separated list of integers, got {args.sizes!r}", file=sys.stderr)
        return 2
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lw-values-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"# loopwright · Python {platform.python_version()} · {args.cycles} cycles a run")
    if args.task_kb is not None:
        # What the run writes once (the document's first version, the task, the packet at
        # the end) cancels out: the figures are the difference of a long and a 10-cycle run.
        print(f"{'task KB':>11} {'DB B/cyc':>10} {'CPU µs':>8}   (cycles {args.cycles} - 10)")
        rows = []
        for kb in (0, args.task_kb):
            long, short = one(20, args.cycles, base, kb), one(20, 10, base, kb)
            n = args.cycles - 10
            r = {k: (long[k] * args.cycles - short[k] * 10) / n for k in ("db", "cpu")}
            rows.append(r)
            print(f"{kb:>11} {r['db']:>10.0f} {r['cpu']:>8.0f}", flush=True)
        print(f"task_bytes_per_cycle_ratio={rows[1]['db'] / rows[0]['db']:.2f}")
        print(f"task_cpu_per_cycle_ratio={rows[1]['cpu'] / rows[0]['cpu']:.2f}")
        return 0
    print(f"{'value chars':>11} {'DB B/cyc':>10} {'value B/cyc':>12} {'beyond':>8} {'CPU µs':>8}")
    worst = 0.0
    for size in sizes:
        r = one(size, args.cycles, base)
        beyond = r["db"] - r["values"]
        worst = max(worst, beyond)
        print(
            f"{size:>11} {r['db']:>10.0f} {r['values']:>12.0f} {beyond:>8.0f} {r['cpu']:>8.0f}",
            flush=True,
        )
    print(f"excess_bytes_per_cycle_max={round(worst)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
