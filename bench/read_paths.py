"""Read paths on long runs: what each costs at 2,000 and at 20,000 cycles, and the ratio.

Usage:  python bench/read_paths.py [--sizes 2000,20000] [--dir DIR] [--only show,fork_5,web]
            [--src PATH] [--json OUT] [--routes '/runs/{rid},/runs/{rid}?kind=verdict'] [--mix]

One run per size, written as a user would (the loop below: five parts, every cycle rejected
with located findings, one part accepted at cycle 7, a ``send`` effect that needs a person's
approval at cycle 2 — the run parks, is approved and resumed —, a reflector's note every 50
cycles, three people's corrections in feedback memory) on the embedded SQLite store, into
``DIR`` (kept: a second call with the same ``--dir`` measures the same runs; ~70 s to write
20,000 cycles).

Then per size:

* each CLI read path in its own process (``/usr/bin/time``: wall seconds and peak RSS; the
  interpreter and imports alone are ~30 MB): ``show``, ``show --all``, ``show --json``,
  ``trace`` (jsonl, otlp-json), ``runs``, ``export eval-cases`` / ``preference-pairs``,
  ``metrics``, ``replay store``, ``replay FILE`` (the run saved as a run trace),
  ``fit-stop FILE`` (the run as five tasks), ``diff``, ``Runtime(...).result(run)`` and
  ``state.part(ref).versions`` of it, and on a copy of the store ``fork --at-cycle 5`` and
  at the cycle before the last (then ``show`` of the fork), ``rollback --to-cycle 10`` and
  to the cycle before the last, and ``resume`` after the rollback to 10;
* each dashboard route that takes a run, and the lists, in process through Starlette's
  TestClient: wall seconds of one request, then the ``tracemalloc`` peak of a second one
  (the client keeps the whole body: a streamed response's bytes count there), and
  ``served_mb``, the peak of a third one called on the app with each chunk of the body
  dropped as it is sent (what the server holds, as a socket would take it).

``--src`` runs another tree's ``src`` (``git archive`` of a commit) to compare. The last lines
give, per path, ``cpu_ratio`` (CPU seconds, user + system: steadier than wall time on
a shared machine) and ``mem_ratio`` (largest size ÷ smallest): about 10 is
linear in the run's length, more is worse than linear, about 1 is a window.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio

WORK = """
from typing import Any
import loopwright as lw

PARTS = [f"p{i}" for i in range(5)]
MIX = False  # --mix: True


@lw.effect("send", key=lambda a: f"notify/{a['to']}", requires_success=False)
def notify(to: str, text: str, *, key: str) -> dict[str, Any]:
    return {"sent": key}


def propose(ctx: lw.Context) -> lw.Proposal:
    c = ctx.cycle
    part, val = PARTS[c % 4], f"value {c} " + "x" * 40
    if c == 7:
        part, val = "p4", "ok"
    elif MIX and c % 5 == 0 and c > 7:  # a proposal rejected before, proposed again
        val = f"value {c - 4} " + "x" * 40
    p = lw.Proposal.edit("doc", {part: val}, usage=lw.Usage(cost_usd=0.0001, tokens=50))
    if c == 3:
        return lw.Proposal(edits=p.edits, usage=p.usage,
                           effects=(notify.call(to="ann", text="started"),))
    return p


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    vals = state.artifacts["doc"].values()
    n = sum(1 for v in vals.values() if v)
    bad = tuple(lw.Finding("not yet", "doc", p, "text") for p in PARTS if vals.get(p) != "ok")
    return lw.Verdict(passed=False, score=min(0.9, n / 10), findings=bad)


def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)
"""

SPEC = """
name = "long-probe"
project = "probe"
[actor]
ref = "work.py:propose"
[[verifiers]]
name = "check"
ref = "work.py:check"
[[verifiers]]
name = "audit"
ref = "work.py:audit"
held_out = true
[[effects]]
ref = "work.py:notify"
[[approvals]]
kind = "send"
action = "require"
reason = "a message leaves the building"
[contract.budget]
max_cycles = {n}
"""

MAKE = """
import dataclasses, sys
import loopwright as lw
n, db, spec = int(sys.argv[1]), sys.argv[2], sys.argv[3]
MIX = len(sys.argv) > 4
loop = dataclasses.replace(
    lw.load_spec(spec),
    reflector=lambda ctx, *a, **k: f"note at {ctx.cycle}" if ctx.cycle % 50 == 0 else None,
)
with lw.Runtime(db) as rt:
    task = {"goal": "probe", "artifacts": {"doc": {f"p{i}": "" for i in range(5)}}}
    r = rt.run_sync(loop, task, task_key=f"probe-{n}")
    rt.approve(r.run_id, by="ann", note="ok")
    r = rt.resume_sync(r.run_id, loop)
    assert r.cycles == n, r
    if MIX:  # a person's edit after the end, then its check-only cycle
        rt.edit(r.run_id, "doc/p0", "ann's p0", by="ann", note="mine")
        r = rt.resume_sync(r.run_id, loop)
    for i in range(3):
        lw.FeedbackMemory(rt.store).add(scope="task", scope_key=f"probe-{n}",
                                        signal="correction", text=f"note {i}", by="ann")
"""

RESULT = """
import sys
import loopwright as lw
with lw.Runtime(sys.argv[1]) as rt:
    r = rt.result(sys.argv[2])
    if len(sys.argv) > 3:
        print(len(r.state.part(sys.argv[3]).versions))
    else:
        print(r.cycles)
"""

REPLAY = "[contract.budget]\nmax_cycles = 100\n[contract.no_progress]\ncycles = 5\n"


def make_run(n: int, d: Path, src: str, mix: bool = False) -> Path:
    db = d / f"run{n}.db"
    if db.exists():
        return db
    (d / "work.py").write_text(WORK.replace("MIX = False", f"MIX = {mix}"))
    (d / f"loop{n}.toml").write_text(SPEC.format(n=n))
    (d / "replay.toml").write_text(REPLAY)
    env = {**os.environ, "PYTHONPATH": src}
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", MAKE, str(n), str(db), str(d / f"loop{n}.toml"), *(["mix"] * mix)],
        env=env,
        check=True,
    )
    print(f"# wrote {n} cycles in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return db


def cli_paths(rid: str, d: Path, n: int) -> list[tuple[str, list[str], bool]]:
    """(name, arguments, on a copy of the store)."""
    s = ["--store", "{db}"]
    return [
        ("show", ["show", rid, *s], False),
        ("show_all", ["show", rid, *s, "--all"], False),  # (a tree before long49: rc 2)
        ("show_json", ["show", rid, *s, "--json"], False),
        ("trace_jsonl", ["trace", rid, *s], False),
        ("trace_otlp", ["trace", rid, *s, "--format", "otlp-json"], False),
        ("runs", ["runs", *s], False),
        ("eval_cases", ["export", "eval-cases", *s], False),
        ("pref_pairs", ["export", "preference-pairs", *s], False),
        ("metrics", ["metrics", *s, "--json"], False),
        ("replay", ["replay", "store", *s, "--contract", str(d / "replay.toml"), "--json"], False),
        ("diff", ["diff", rid, rid, *s], False),
        ("fork_5", ["fork", rid, "--at-cycle", "5", *s, "--by", "ann"], True),
        ("rollback_10", ["rollback", rid, "--to-cycle", "10", *s, "--by", "ann"], True),
        # deep into the run: the cycle before its last
        ("fork_deep", ["fork", rid, "--at-cycle", str(max(n - 1, 1)), *s, "--by", "ann"], True),
        (
            "rollback_deep",
            ["rollback", rid, "--to-cycle", str(max(n - 1, 1)), *s, "--by", "ann"],
            True,
        ),
        ("fit_stop", ["fit-stop", str(d / f"fit{n}.jsonl"), "--json"], False),
        (
            "replay_traces",
            ["replay", str(d / f"traces{n}.jsonl"), "--contract", str(d / "replay.toml"), "--json"],
            False,
        ),
        ("result", ["-c", RESULT, "{db}", rid], False),
        ("part_versions", ["-c", RESULT, "{db}", rid, "doc/p0"], False),
    ]


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, float, int]:
    p = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M %U %S", *cmd],
        check=False,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    wall, rss, user, system = p.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss) / 1024, float(user) + float(system), p.returncode


def copy_of(db: Path, d: str) -> str:
    out = os.path.join(d, "copy.db")
    src = sqlite3.connect(db)
    dst = sqlite3.connect(out)
    src.backup(dst)
    src.close()
    dst.close()
    return out


def measure_cli(db: Path, d: Path, n: int, src: str, only: set[str] | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": src, "COLUMNS": "150"}
    rid = sqlite3.connect(db).execute("SELECT run_id FROM runs LIMIT 1").fetchone()[0]
    py = [sys.executable, "-m", "loopwright"]
    out: dict[str, Any] = {}
    traces = d / f"traces{n}.jsonl"  # the run as a run-trace file, for ``replay FILE``
    if not traces.exists():
        save = [*py, "replay", "store", "--store", str(db), "--contract", str(d / "replay.toml")]
        subprocess.run(
            [*save, "--save-traces", str(traces)], env=env, capture_output=True, check=True
        )
    fit = d / f"fit{n}.jsonl"  # fit-stop cross-validates by task: the run as five tasks
    if not fit.exists():
        line = json.loads(traces.read_text().splitlines()[0])
        fit.write_text(
            "".join(
                json.dumps({**line, "task_key": f"t{i}", "run_id": f"r{i}"}) + "\n"
                for i in range(5)
            )
        )
    for name, args, copy in cli_paths(rid, d, n):
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path = copy_of(db, tmp) if copy else str(db)
            cmd = [sys.executable] if args[0] == "-c" else py
            wall, rss, cpu, rc = timed([*cmd, *(a.replace("{db}", path) for a in args)], env, tmp)
            out[name] = {"s": wall, "cpu": cpu, "mb": rss, "rc": rc}
            print(f"{n} {name} {out[name]}", file=sys.stderr)
            if name == "fork_deep":  # then the fork shown: its own cycle and what it inherits
                con = sqlite3.connect(path)
                (fork,) = con.execute(
                    "SELECT run_id FROM runs WHERE run_id != ?", (rid,)
                ).fetchone()
                con.close()
                wall, rss, cpu, rc = timed([*py, "show", fork, "--store", path], env, tmp)
                out["show_fork"] = {"s": wall, "cpu": cpu, "mb": rss, "rc": rc}
                print(f"{n} show_fork {out['show_fork']}", file=sys.stderr)
    if not only or "resume" in only:
        with tempfile.TemporaryDirectory() as tmp:
            path = copy_of(db, tmp)
            back = [*py, "rollback", rid, "--to-cycle", "10", "--store", path, "--by", "ann"]
            subprocess.run(back, env=env, cwd=tmp, capture_output=True, check=True)
            wall, rss, cpu, rc = timed([*py, "resume", rid, "--store", path], env, tmp)
        out["resume"] = {"s": wall, "cpu": cpu, "mb": rss, "rc": rc}
        print(f"{n} resume {out['resume']}", file=sys.stderr)
    return out


def web_routes(rid: str, db: Path) -> list[str]:
    con = sqlite3.connect(db)
    ev = con.execute("SELECT min(id) FROM events WHERE run_id=?", (rid,)).fetchone()[0]
    con.close()
    return [
        "/",
        "/runs/{rid}",
        "/runs/{rid}?kind=verdict",
        "/api/runs/{rid}",
        "/api/runs/{rid}/calls",
        "/api/runs/{rid}/spans",
        "/api/runs/{rid}/parts/doc/p0/versions",
        f"/runs/{{rid}}/calls/{ev}",
        f"/api/runs/{{rid}}/calls/{ev}",
        "/compare?a={rid}&b={rid}",
        "/api/compare?a={rid}&b={rid}",
        "/runs/{rid}/confirm?action=rollback&cycle=10",
        "/api/runs",
        "/approvals",
        "/metrics",
        "/api/metrics",
    ]


async def _drained(app: Any, url: str) -> int:
    """GET ``url`` of ``app`` (ASGI) with each chunk of the body counted and dropped: what
    the server holds to answer, without a client keeping the body (as a socket would)."""
    path, _, query = url.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    size, asked = [0], [False]

    async def receive() -> dict[str, Any]:
        if not asked[0]:
            asked[0] = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            size[0] += len(message.get("body", b""))

    await app(scope, receive, send)
    return size[0]


def measure_web(db: Path, n: int, src: str) -> dict[str, Any]:
    sys.path.insert(0, src)
    from fastapi.testclient import TestClient

    from loopwright.web import create_app

    rid = sqlite3.connect(db).execute("SELECT run_id FROM runs LIMIT 1").fetchone()[0]
    client = TestClient(create_app(str(db), token="t" * 32), base_url="http://127.0.0.1")
    out: dict[str, Any] = {}
    keep = {r for r in os.environ.get("READ_PATHS_ROUTES", "").split(",") if r}
    for route in web_routes(rid, db):
        if keep and route not in keep:
            continue
        url = route.format(rid=rid)
        t, c = time.perf_counter(), time.process_time()
        got = client.get(url)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        tracemalloc.start()
        client.get(url)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # the server's own: the response's chunks dropped as sent (TestClient keeps the body)
        tracemalloc.start()
        anyio.run(_drained, client.app, url)
        served = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        name = "GET " + route.replace("{rid}", "RUN")
        out[name] = {
            "s": round(wall, 3),
            "cpu": round(cpu, 3),
            "mb": round(peak / 2**20, 2),
            "served_mb": round(served / 2**20, 2),
            "status": got.status_code,
            "bytes": len(got.content),
        }
        print(f"{n} {name} {out[name]}", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="2000,20000")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--only", default="", help="comma-separated path names; 'web' for the routes")
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--routes", default="", help="only these dashboard routes, as listed ('/runs/{rid}')"
    )
    ap.add_argument(
        "--mix",
        action="store_true",
        help="the loop also proposes again, every 5th cycle, a value rejected before (a "
        "duplicate), and a person edits a part once it ends (then its check-only cycle); "
        "give a --dir of its own",
    )
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    only = {s for s in a.only.split(",") if s} or None
    d = a.dir or Path(tempfile.mkdtemp(prefix="read_paths-"))
    d.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, Any]] = {}
    for n in sizes:
        db = make_run(n, d, a.src, a.mix)
        res = measure_cli(db, d, n, a.src, only)
        if not only or "web" in only:
            # in a child process: each size's app and store from a fresh interpreter
            code = (
                "import json, sys; sys.path.insert(0, sys.argv[4]); import read_paths as r; "
                "from pathlib import Path; "
                "print(json.dumps(r.measure_web(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])))"
            )
            p = subprocess.run(
                [  # argv: the store, the size, the tree's src, this directory
                    sys.executable,
                    "-c",
                    code,
                    str(db),
                    str(n),
                    a.src,
                    str(Path(__file__).parent),
                ],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": a.src, "READ_PATHS_ROUTES": a.routes},
                check=False,
            )
            sys.stderr.write(p.stderr)
            res.update(json.loads(p.stdout.strip().splitlines()[-1]))
        results[n] = res
    lo, hi = min(sizes), max(sizes)
    print(
        f"{'path':<46} {'cpu@' + str(lo):>10} {'cpu@' + str(hi):>10} {'cpu_ratio':>9} "
        f"{'MB@' + str(lo):>9} {'MB@' + str(hi):>9} {'mem_ratio':>9} "
        f"{'served@' + str(lo):>11} {'served@' + str(hi):>11}"
    )
    for name in results[lo]:
        x, y = results[lo][name], results[hi].get(name)
        if y is None:
            continue
        tr = y["cpu"] / x["cpu"] if x["cpu"] else float("nan")
        mr = y["mb"] / x["mb"] if x["mb"] else float("nan")
        # (dashboard routes: the tracemalloc peak of serving it, the body dropped as sent)
        served = f" {x['served_mb']:>11.2f} {y['served_mb']:>11.2f}" if "served_mb" in x else ""
        print(
            f"{name:<46} {x['cpu']:>10.3f} {y['cpu']:>10.3f} {tr:>9.1f} {x['mb']:>9.1f} "
            f"{y['mb']:>9.1f} {mr:>9.1f}{served}"
        )
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
