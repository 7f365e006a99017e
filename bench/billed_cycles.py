"""A cycle whose actor reports usage (a cost and tokens, as every model-driven loop's does)
against one whose actor reports none, on SQLite (WAL, ``synchronous=FULL``: the default).

Usage:  python bench/billed_cycles.py [--cycles 10,1000,5000] [--repeats 3] [--base SRC]

A billed call is journaled before its cycle commits (invariant 7: a cycle killed before its
commit still owes it), so a billed cycle writes more. For each run length and both actors this
prints, in the steady state (from the first actor call to the last, so a run's start and
finish are left out):

* ``us_cycle``: wall µs a cycle; ``cpu_us_cycle``: CPU µs a cycle (median of ``--repeats`` runs);
* ``stmts_cycle``: SQL statements a cycle (SQLite's trace callback, on the store's connection);
* ``fsyncs_cycle``, ``pwrites_cycle``: fsync/fdatasync and pwrite64 calls a cycle (counted by
  ``strace``, when there is one; SQLite writes a WAL frame as two: its header, its page).

``--base SRC``: a second source tree (``git archive <rev> | tar -x -C DIR``; pass ``DIR/src``)
measured the same way, printed side by side with this tree's (``src`` beside this script).
Each figure comes from a child process (``--child``), so both trees run in the same way; the
timed runs alternate between the trees.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def child(cycles: int, billed: bool, count: bool) -> dict[str, Any]:
    """One run of ``cycles`` cycles in this process; its steady-state figures as JSON."""
    import loopwright as lw

    marks: dict[str, float] = {}
    stmts = [0]

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle in (2, cycles):  # the steady state, from the second call to the last
            which = "a" if ctx.cycle == 2 else "b"
            marks[f"wall_{which}"] = time.perf_counter()
            marks[f"cpu_{which}"] = time.process_time()
            marks[f"stmts_{which}"] = stmts[0]
            os.getppid()  # a mark strace sees (nothing else here makes this call)
        usage = lw.Usage(0.001, 120) if billed else None
        return lw.Proposal.edit("doc", {"p1": f"value {ctx.cycle}"}, usage=usage)

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("open", "doc", "p1", "content"),)
        )

    loop = lw.Loop(
        name="billed",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )
    task = {"goal": "bench", "artifacts": {"doc": {f"p{i}": "x" * 400 for i in range(4)}}}
    workdir = Path(tempfile.mkdtemp(prefix="billed-"))
    try:
        with lw.Runtime(f"sqlite:///{workdir / 'b.db'}") as rt:
            if count:

                def traced(_sql: str) -> None:
                    stmts[0] += 1

                rt.store._db.set_trace_callback(traced)  # type: ignore[attr-defined]
            result = rt.run_sync(loop, task) if hasattr(rt, "run_sync") else _run(rt, loop, task)
            if result.cycles != cycles:
                raise RuntimeError(f"run ended early: {result.to_dict()}")
            spent = result.state.spent.cost_usd
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if billed and abs(spent - 0.001 * cycles) > 1e-9:
        raise RuntimeError(f"billed {cycles} cycles, spent {spent}")
    steps = cycles - 2
    return {
        "us_cycle": 1e6 * (marks["wall_b"] - marks["wall_a"]) / steps,
        "cpu_us_cycle": 1e6 * (marks["cpu_b"] - marks["cpu_a"]) / steps,
        "stmts_cycle": (marks["stmts_b"] - marks["stmts_a"]) / steps if count else None,
    }


def _run(rt: Any, loop: Any, task: Any) -> Any:
    import asyncio

    return asyncio.run(rt.run(loop, task))


def syscalls_between_marks(trace: Path) -> tuple[int, int]:
    """fsync/fdatasync calls and pwrite64 calls between the two ``getppid`` marks of an
    ``strace`` log."""
    inside, syncs, writes = False, 0, 0
    for line in trace.read_text().splitlines():
        call = line.split(None, 1)[-1] if line[:1].isdigit() else line
        if call.startswith("getppid("):
            inside = not inside
        elif inside and call.startswith(("fsync(", "fdatasync(")):
            syncs += 1
        elif inside and call.startswith("pwrite64("):
            writes += 1
    return syncs, writes


def _cmd(cycles: int, billed: bool) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", str(cycles)] + (
        ["--billed"] if billed else []
    )


def _once(src: Path, cmd: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def measure(
    trees: dict[str, Path], cycles: int, billed: bool, repeats: int
) -> dict[str, dict[str, Any]]:
    """Each tree's figures; the timed runs alternate between the trees (ABAB), so that a
    machine's drift (another job starting) hits them alike."""
    timed: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(repeats):
        for name, src in trees.items():
            timed[name].append(_once(src, _cmd(cycles, billed)))
    got: dict[str, dict[str, Any]] = {}
    for name, src in trees.items():
        counted = _once(src, [*_cmd(cycles, billed), "--count"])
        syncs = writes = None
        if shutil.which("strace"):
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "strace.log"
                calls = "trace=fsync,fdatasync,pwrite64,getppid"
                cmd = ["strace", "-f", "-qq", "-e", calls, "-o", str(log), *_cmd(cycles, billed)]
                env = {**os.environ, "PYTHONPATH": str(src)}
                subprocess.run(cmd, env=env, capture_output=True, check=True)
                n_syncs, n_writes = syscalls_between_marks(log)
                syncs, writes = n_syncs / (cycles - 2), n_writes / (cycles - 2)
        got[name] = {
            "us_cycle": statistics.median(t["us_cycle"] for t in timed[name]),
            "cpu_us_cycle": statistics.median(t["cpu_us_cycle"] for t in timed[name]),
            "stmts_cycle": counted["stmts_cycle"],
            "fsyncs_cycle": syncs,
            "pwrites_cycle": writes,
        }
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cycles", default="10,1000,5000", help="run lengths, comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per figure (median)")
    ap.add_argument("--base", type=Path, default=None, help="another tree's src to compare")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--billed", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.billed, args.count)))
        return 0
    lengths = [int(c) for c in args.cycles.split(",")]
    if min(lengths) < 3 or args.repeats < 1:
        ap.error("--cycles must each be 3 or more, --repeats 1 or more")
    trees = {"branch": HERE.parent / "src"}
    if args.base is not None:
        if not (args.base / "loopwright" / "__init__.py").is_file():
            ap.error(f"--base {args.base}: no loopwright package there (pass the tree's src)")
        trees = {"base": args.base.resolve(), **trees}
    rows: list[dict[str, Any]] = []
    print(
        "| tree | cycles | actor | µs/cycle | CPU µs/cycle | statements/cycle | fsyncs/cycle "
        "| pwrites/cycle |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for n in lengths:
        for billed in (False, True):
            for name, got in measure(trees, n, billed, args.repeats).items():
                rows.append({"tree": name, "cycles": n, "billed": billed, **got})
                fs, pw = (
                    ("-", "-")
                    if got["fsyncs_cycle"] is None
                    else (f"{got['fsyncs_cycle']:.2f}", f"{got['pwrites_cycle']:.1f}")
                )
                print(
                    f"| {name} | {n} | {'usage' if billed else 'none'} | {got['us_cycle']:.0f} "
                    f"| {got['cpu_us_cycle']:.0f} | {got['stmts_cycle']:.1f} | {fs} | {pw} |",
                    flush=True,
                )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
