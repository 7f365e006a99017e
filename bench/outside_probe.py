"""An outside tester's workload, written from the README and docs only (``import loopwright``):
one artifact of eight parts, each cycle an edit of two to four of them with values of varying
size (a dict of floats, a list of tags, short texts, a body of 20-700 characters and, every
seventh cycle, 50 KB), a visible check raising a finding on each edited part (errors, some
warnings, a pass every 997th cycle), a held-out check, an effect every fifth cycle (its own
kind, allowed: it appends a line to a file) and a usage on every proposal.

Usage:  python bench/outside_probe.py [--sizes 200,2000,5000] [--dir DIR] [--durability full]
                                      [--async]

One process per size (a fresh interpreter, a fresh store). Printed per size, one JSON line:
µs and CPU µs per cycle over the whole run; the mean µs per cycle of its first and last tenth
(``late_over_early``: growth inside one run, the same process and store); database bytes per
cycle (file + WAL at the end), the part values' own bytes per cycle and the rest
(``beyond_values``); write_bytes per cycle (/proc/self/io); the RSS at each tenth of the run
(``rss_mb``: bounded memory); and, from a fresh process, the time to read the run's latest
checkpoint and its result. Last lines: ``growth_ratio=`` (µs/cycle at the largest size ÷ at
the smallest), ``bytes_growth=`` (beyond-values bytes per cycle, largest ÷ smallest),
``rss_growth_mb=`` (the largest run's RSS at its end minus at its first tenth). Nothing here
is a test; peers: ``bench/peers.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PARTS = ("title", "body", "meta", "tags", "s1", "s2", "s3", "s4")


def _value(rng: random.Random, part: str, cycle: int) -> Any:
    if part == "body" and cycle % 7 == 0:
        return "".join(rng.choice("abcdefghij ") for _ in range(50_000))
    if part == "body":
        return f"body draft {cycle} " * rng.randint(1, 40)
    if part == "meta":
        return {"cycle": cycle, "w": [rng.random() for _ in range(rng.randint(0, 30))]}
    if part == "tags":
        return [f"t{rng.randint(0, 99)}" for _ in range(rng.randint(1, 8))]
    return f"{part}-{cycle}-{rng.randint(0, 10**6)}"


def _loop(n: int, log: Path, is_async: bool, stamps: list[float], rss: list[float]) -> Any:
    import loopwright as lw

    @lw.effect("note_out", key=lambda a: f"{a['run']}/{a['cycle']}", requires_success=False)
    def note_out(run: str, cycle: int, size: int, *, key: str) -> dict[str, str]:
        with open(log, "a") as fh:
            fh.write(json.dumps({"key": key, "size": size}) + "\n")
        return {"k": key}

    def propose(ctx: lw.Context) -> lw.Proposal:
        stamps.append(time.perf_counter())
        if ctx.cycle % max(1, n // 10) == 0:
            rss.append(_rss_mb())
        rng = random.Random(7_000_021 + ctx.cycle)
        free = [p for p in PARTS if not ctx.is_accepted("doc", p)] or [f"x{ctx.cycle % 50}"]
        parts = rng.sample(free, min(rng.randint(2, 4), len(free)))
        if ctx.cycle % 7 == 0 and "body" not in parts and "body" in free:
            parts[0] = "body"
        edits = tuple(lw.Edit("doc", p, _value(rng, p, ctx.cycle)) for p in parts)
        effects = ()
        if ctx.cycle % 5 == 0:
            effects = (note_out.call(run=ctx.run_id, cycle=ctx.cycle, size=len(parts)),)
        usage = lw.Usage(cost_usd=0.001, tokens=100 + rng.randint(0, 50))
        return lw.Proposal(edits=edits, effects=effects, usage=usage, note=f"c{ctx.cycle}")

    async def propose_async(ctx: lw.Context) -> lw.Proposal:
        return propose(ctx)

    def quality(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        vals = state.artifacts["doc"].values()
        cycle = int(proposal.note[1:]) if proposal.note.startswith("c") else 0
        h = sum(map(ord, str(vals.get("title", "")))) % 10
        found = [
            lw.Finding(
                f"{e.part} needs work",
                "doc",
                e.part,
                "style",
                severity="warning" if e.part in ("s1", "s2") and (h + cycle) % 3 == 0 else "error",
                evidence={"h": h, "cycle": cycle},
            )
            for e in proposal.edits
        ]
        if cycle % 997 == 0:
            found = [f for f in found if f.severity == "warning"]
        passed = not [f for f in found if f.severity == "error"]
        return lw.Verdict(passed=passed, score=0.5 + h / 40, findings=tuple(found))

    def held(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=len(str(state.artifacts["doc"].values().get("body", ""))) > 100)

    return lw.Loop(
        name="outside-probe",
        actor=propose_async if is_async else propose,
        verifiers=[lw.Check(fn=quality), lw.Check(fn=held, held_out=True)],
        contract=lw.Contract(
            success=lw.Success(min_score=0.98, accept_parts="on_success"),
            budget=lw.Budget(max_cycles=n),
        ),
        effects=[note_out],
    )


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _write_bytes() -> int:
    with open("/proc/self/io") as fh:
        return int(next(ln for ln in fh if ln.startswith("write_bytes")).split()[1])


def one(n: int, folder: Path, durability: str, is_async: bool) -> dict[str, Any]:
    import loopwright as lw

    db = folder / f"probe_{n}.db"
    url = f"sqlite:///{db}" + ("?durability=process" if durability == "process" else "")
    stamps: list[float] = []
    rss: list[float] = []
    loop = _loop(n, folder / f"effects_{n}.jsonl", is_async, stamps, rss)
    value_bytes = 0
    for c in range(1, n + 1):  # the values the actor writes (same seeds), outside the timing
        rng = random.Random(7_000_021 + c)
        k = rng.randint(2, 4)
        parts = rng.sample(PARTS, min(k, len(PARTS)))
        if c % 7 == 0 and "body" not in parts:
            parts[0] = "body"
        value_bytes += sum(len(json.dumps(_value(rng, p, c))) for p in parts)
    task = {"artifacts": {"doc": {"title": "t0"}}}
    w0, t0, c0 = _write_bytes(), time.perf_counter(), time.process_time()
    with lw.Runtime(url) as rt:
        result = rt.run_sync(loop, task, task_key=f"probe-{n}")
    t1, c1, w1 = time.perf_counter(), time.process_time(), _write_bytes()
    assert result.cycles == n, result.to_dict()
    size = sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())
    k = max(1, n // 10)
    early = (stamps[k] - stamps[0]) / k * 1e6
    late = (stamps[-1] - stamps[-1 - k]) / k * 1e6
    return {
        "n": n,
        "us_cycle": round((t1 - t0) / n * 1e6),
        "cpu_us_cycle": round((c1 - c0) / n * 1e6),
        "early_us": round(early),
        "late_us": round(late),
        "late_over_early": round(late / early, 2),
        "db_bytes_cycle": round(size / n),
        "value_bytes_cycle": round(value_bytes / n),
        "beyond_values": round((size - value_bytes) / n),
        "io_write_cycle": round((w1 - w0) / n),
        "rss_mb": [round(r, 1) for r in rss],
        "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "run_id": result.run_id,
        "url": url,
    }


_LOAD = """
import sys, time
import loopwright as lw
url, run = sys.argv[1], sys.argv[2]
with lw.Runtime(url) as rt:
    t = time.perf_counter(); rt.store.latest_checkpoint(run); a = time.perf_counter() - t
    t = time.perf_counter(); rt.result(run); b = time.perf_counter() - t
print(a * 1e3, b * 1e3)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200,2000,5000")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--durability", choices=("full", "process"), default="full")
    ap.add_argument("--async", dest="is_async", action="store_true")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="outside-probe-"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.one:
        print(json.dumps(one(args.one, folder, args.durability, args.is_async)))
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--one", str(n), "--dir", str(folder)]
        cmd += ["--durability", args.durability] + (["--async"] if args.is_async else [])
        row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        out = subprocess.run(
            [sys.executable, "-c", _LOAD, row["url"], row["run_id"]],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        row["latest_checkpoint_ms"], row["result_ms"] = (round(float(x), 1) for x in out)
        print(json.dumps(row), flush=True)
        rows.append(row)
    small, large = rows[0], rows[-1]
    print(f"growth_ratio={large['us_cycle'] / small['us_cycle']:.2f}")
    print(f"bytes_growth={large['beyond_values'] / small['beyond_values']:.2f}")
    print(f"rss_growth_mb={large['rss_mb'][-1] - large['rss_mb'][0]:.1f}")


if __name__ == "__main__":
    main()
