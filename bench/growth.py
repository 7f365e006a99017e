"""Does a cycle cost the same late in a run as early, with the features that add something
every cycle? (invariant 8, beyond the trivial loop of ``long_runs.py``)

Usage:  python bench/growth.py [--sizes 300,3000] [--scenarios reflector,flaky,plan,approval]

Each scenario is one ``Runtime.run`` of N cycles on the embedded SQLite store (WAL,
``synchronous=FULL``; a fresh database per run) of a loop whose verifier rejects every cycle,
with one feature that writes something every cycle:

* **reflector** — a reflector writes a new note after each failed cycle (feedback memory; each
  cycle's recall ranks the task's notes);
* **flaky** — the actor's first attempt of each cycle fails with a transient error and is
  retried (the retry journal);
* **plan** — the actor adds a plan step each cycle and marks the previous one done (the plan
  grows with the run);
* **approval** — a risk rule sends every cycle's proposal to a person: the run parks, the
  script approves and resumes it (``Runtime.approve``, ``Runtime.resume``), once a cycle.

Per scenario and size it prints CPU µs a cycle over the second tenth of the run ("early"; the
first holds one-off costs) and over the last tenth ("late"), their ratio, and database bytes a
cycle (file growth after a WAL checkpoint). The last lines are ``growth_<scenario>=<late ÷
early at the largest size>`` and ``worst_growth=<the largest of them>`` (1.0: no growth).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import loopwright as lw

SCENARIOS = ("reflector", "flaky", "plan", "approval")


def _never(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(
        passed=False, score=0.5, findings=(lw.Finding("the body is still open", "doc", "body"),)
    )


def make_loop(scenario: str, n: int, stamps: list[float]) -> lw.Loop:
    tries: dict[int, int] = {}

    def actor(ctx: lw.Context) -> lw.Proposal:
        if scenario == "flaky":
            tries[ctx.cycle] = tries.get(ctx.cycle, 0) + 1
            if tries[ctx.cycle] == 1:
                raise lw.TransientError("503 from the model server")
        stamps.append(time.process_time())
        edit = lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})
        if scenario != "plan":
            return edit
        step = lw.PlanStep(f"s{ctx.cycle}", f"step {ctx.cycle}: revise the body's opening")
        done = {f"s{ctx.cycle - 1}": "done"} if ctx.cycle > 1 else {}
        return lw.Proposal(edits=edit.edits, new_steps=(step,), plan=done)

    def reflector(ctx: lw.Context, visible: Any) -> str:
        return f"cycle {ctx.cycle}: the body is still open; try opening {ctx.cycle * 7919 % 997}"

    extra: dict[str, Any] = {}
    if scenario == "reflector":
        extra["reflector"] = reflector
    if scenario == "flaky":
        extra["retry"] = lw.RetryPolicy(attempts=2, backoff_s=0.0, jitter=False)
    risk = (lw.RiskRule(name="touch", touches=("doc/body",)),) if scenario == "approval" else ()
    return lw.Loop(
        name=f"growth-{scenario}",
        actor=actor,
        verifiers=[lw.Check(fn=_never, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=n), risk=risk),
        **extra,
    )


def _db_bytes(path: Path) -> int:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def run(scenario: str, n: int, folder: Path) -> dict[str, float]:
    path = folder / f"{scenario}-{n}.db"
    stamps: list[float] = []
    task = {"goal": "write the body", "artifacts": {"doc": {"body": ""}}}
    with lw.Runtime(path) as rt:
        rt.create(make_loop(scenario, n, []), {"goal": "warm"}, task_key="warm")
        empty = _db_bytes(path)
        loop = make_loop(scenario, n, stamps)
        r = asyncio.run(rt.run(loop, task, task_key="bench"))
        while r.status == "awaiting_approval":  # the approval scenario: a person says yes
            rt.approve(r.run_id, by="bench")
            r = asyncio.run(rt.resume(r.run_id, loop))
        if (r.cycles, r.stop_reason) != (n, "budget_cycles"):
            raise RuntimeError(f"benchmark run ended unexpectedly: {r.to_dict()}")
    grown = _db_bytes(path) - empty
    for p in folder.glob(path.name + "*"):
        p.unlink()
    tenth = max(1, n // 10)

    def per_cycle(window: list[float]) -> float:
        return (window[-1] - window[0]) / max(1, len(window) - 1) * 1e6

    return {
        "early": per_cycle(stamps[tenth : 2 * tenth + 1]),
        "late": per_cycle(stamps[-tenth - 1 :]),
        "bytes": grown / n,
    }


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(s < 20 for s in sizes):
        raise SystemExit(f"growth.py: --sizes takes cycle counts of at least 20, got {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sizes", default="300,3000")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--dir", help="folder for the databases (default: a temp folder)")
    args = ap.parse_args(argv)
    sizes = _sizes(args.sizes)
    chosen = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown or not chosen:
        raise SystemExit(f"growth.py: --scenarios takes {', '.join(SCENARIOS)}; got {unknown}")
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lw-growth-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"# loopwright · Python {platform.python_version()} · {base}")
    print(f"{'scenario':>10} {'cycles':>7} {'early CPU µs':>13} {'late CPU µs':>12} "
          f"{'late÷early':>11} {'DB B/cycle':>11}")  # fmt: skip
    growth: dict[str, float] = {}
    for scenario in chosen:
        for n in sizes:
            r = run(scenario, n, base)
            print(
                f"{scenario:>10} {n:>7} {r['early']:>13.0f} {r['late']:>12.0f} "
                f"{r['late'] / r['early']:>11.2f} {r['bytes']:>11.0f}",
                flush=True,
            )
            growth[scenario] = r["late"] / r["early"]
    for scenario, g in growth.items():
        print(f"growth_{scenario}={g:.3f}")
    print(f"worst_growth={max(growth.values()):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
