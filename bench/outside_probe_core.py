"""Core v2 from outside: long runs beside the floor and the peers, random SIGKILLs, long-run views.

Written from the README and docs only (public API and CLI), as issue 14's tester would:

1. ``--sizes``: the trivial loop (one part written a cycle, a verifier that never passes, a
   cycle budget) at each size, ABBA-alternated in fresh processes with a plain-sqlite3 floor
   (WAL, ``synchronous=FULL``, one commit a cycle) and, with ``--peer-python``, the same loop in
   Burr (``SQLitePersister``), LangGraph (``SqliteSaver``, ``durability="sync"``) and DBOS
   (SQLite system database): wall and CPU µs a cycle (the first and last tenth of the run),
   database bytes a cycle, write_bytes a cycle, peak RSS, and from a fresh process the time to
   open the store and load the latest state (imports excluded).
2. ``--kills``: runs of several parts (some accepted on the way, spend on every call) SIGKILLed
   at random times as real subprocesses and resumed until they end, with ``snapshot_every``
   changed between restarts, compared with an uninterrupted run of the same seed: statuses,
   stop reasons, cycles, every version of every part, plan, spend and each cycle's record.
   An interrupted cycle's calls are charged when it is redone (docs/storage.md), so spend and
   that cycle's record may differ by exactly those calls; the report says so.
3. ``--views N``: an N-cycle run; ``loopwright show --json``, ``trace`` (both formats) and the
   dashboard's ``/api/runs/{id}`` and paged versions must list every cycle and every version.

    .venv/bin/python bench/outside_probe_core.py --sizes 2000,5000 --kills 6 --views 3000
    .venv/bin/python bench/outside_probe_core.py --sizes 2000 --peer-python /tmp/peers/bin/python
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

HERE = os.path.abspath(__file__)
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
PARTS = [f"p{i}" for i in range(10)]


def _wb() -> int:
    with open("/proc/self/io") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("write_bytes"))


def _tenths(cpu: list[float], wall: list[float], out: dict[str, Any]) -> None:
    if len(cpu) > 100:
        q = len(cpu) // 10
        out["cpu_early_us"] = (cpu[10 + q] - cpu[10]) / q * 1e6
        out["cpu_late_us"] = (cpu[-1] - cpu[-1 - q]) / q * 1e6
        out["early_us"] = (wall[10 + q] - wall[10]) / q * 1e6
        out["late_us"] = (wall[-1] - wall[-1 - q]) / q * 1e6


def child_lw(mode: str, db: str, key: str, n: int, seed: int, k: int) -> dict[str, Any]:
    import loopwright as lw

    wall: list[float] = []
    cpu: list[float] = []

    def h(*a: object) -> int:
        return int(hashlib.sha256(repr((seed, *a)).encode()).hexdigest()[:12], 16)

    def trivial(ctx: lw.Context) -> lw.Proposal:
        wall.append(time.perf_counter())
        cpu.append(time.process_time())
        return lw.Proposal.edit("a", {"x": ctx.cycle})

    def rich(ctx: lw.Context) -> lw.Proposal:
        wall.append(time.perf_counter())
        cpu.append(time.process_time())
        acc = ctx.accepted.get("doc", {})
        free = [p for p in PARTS if p not in acc]
        fixes: dict[str, Any] = {}
        for i in range(1 + h("n", ctx.cycle) % 3):
            if free:
                txt = "x" * (h("l", ctx.cycle) % 300)
                fixes[free[h("p", ctx.cycle, i) % len(free)]] = {
                    "v": h("v", ctx.cycle, i) % 1000,
                    "c": ctx.cycle,
                    "txt": txt,
                }
        if "log" not in acc:
            fixes["log"] = f"cycle {ctx.cycle}"
        usage = lw.Usage(
            cost_usd=0.001 * (1 + h("u", ctx.cycle) % 3), tokens=10 + h("t", ctx.cycle) % 50
        )
        step = {ctx.next_step.id: "done"} if ctx.next_step and h("s", ctx.cycle) % 5 == 0 else {}
        return lw.Proposal(
            edits=tuple(lw.Edit("doc", p, v) for p, v in fixes.items()), plan=step, usage=usage
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        if mode == "trivial":
            return lw.Verdict(passed=False, score=0.5)
        doc = state.artifacts["doc"].values()
        bad = [
            lw.Finding(f"{p} not divisible", "doc", p, "math")
            for p in PARTS
            if not isinstance(doc.get(p), dict) or doc[p]["v"] % 37
        ]
        if mode == "rich":
            bad.append(lw.Finding("log never clean", "doc", "log", "log"))
        score = 1 - len(bad) / (len(PARTS) + 1)
        return lw.Verdict(
            passed=not bad, score=score, findings=tuple(bad), usage=lw.Usage(cost_usd=0.0005)
        )

    budget = lw.Budget(max_cycles=n, max_cost_usd=1e6)
    if mode == "trivial":
        task: dict[str, Any] = {"artifacts": {"a": {"x": 0}}}
    else:
        plan = [{"id": f"s{i}", "title": f"step {i}"} for i in range(12)]
        task = {"artifacts": {"doc": {**dict.fromkeys(PARTS), "log": ""}}, "plan": plan}
    loop = lw.Loop(
        name=f"probe-{mode}",
        actor=trivial if mode == "trivial" else rich,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=budget),
    )
    w0, t0, c0 = _wb(), time.perf_counter(), time.process_time()
    with lw.Runtime(db, snapshot_every=k) as rt:
        res = rt.run_sync(loop, task, task_key=key)
    out: dict[str, Any] = {
        "engine": "lw",
        "status": res.status,
        "stop_reason": res.stop_reason,
        "cycles": res.cycles,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "write_bytes": _wb() - w0,
    }
    _tenths(cpu, wall, out)
    return out


def child_peer(engine: str, db: str, n: int) -> dict[str, Any]:
    wall: list[float] = []
    cpu: list[float] = []

    def actor(x: int) -> int:
        wall.append(time.perf_counter())
        cpu.append(time.process_time())
        return x + 1

    def verifier(x: int) -> dict[str, Any]:
        return {"passed": False, "score": 0.5}

    w0, t0, c0 = _wb(), time.perf_counter(), time.process_time()
    if engine == "floor":
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
        con.execute("CREATE TABLE cp (cycle INT PRIMARY KEY, state TEXT)")
        x = 0
        for c in range(1, n + 1):
            x = actor(x)
            row = json.dumps({"x": x, "cycle": c, "verdict": verifier(x)})
            con.execute("BEGIN")
            con.execute("INSERT INTO cp VALUES (?, ?)", (c, row))
            con.execute("COMMIT")
        con.close()
    elif engine == "burr":
        from burr.core import ApplicationBuilder, State, action
        from burr.core.persistence import SQLitePersister

        @action(reads=["x"], writes=["x"])  # type: ignore[misc]
        def act(state: State) -> State:
            return state.update(x=actor(state["x"]))

        @action(reads=["x"], writes=["verdict"])  # type: ignore[misc]
        def verify(state: State) -> State:
            return state.update(verdict=verifier(state["x"]))

        persister = SQLitePersister(db_path=db, table_name="burr_state")
        persister.initialize()
        app = (
            ApplicationBuilder()
            .with_actions(act=act, verify=verify)
            .with_transitions(("act", "verify"), ("verify", "act"))
            .with_state(x=0, verdict=None)
            .with_identifiers(app_id="r1", partition_key="p")
            .with_state_persister(persister)
            .with_entrypoint("act")
            .build()
        )
        for _ in range(n):
            app.step()
            app.step()
    elif engine == "langgraph":
        from typing import TypedDict

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph

        class S(TypedDict):
            x: int
            verdict: dict[str, Any]

        g = StateGraph(S)
        g.add_node("act", lambda s: {"x": actor(s["x"])})
        g.add_node("verify", lambda s: {"verdict": verifier(s["x"])})
        g.add_edge(START, "act")
        g.add_edge("act", "verify")
        g.add_conditional_edges("verify", lambda s: END if s["x"] >= n else "act")
        app = g.compile(checkpointer=SqliteSaver(sqlite3.connect(db, check_same_thread=False)))
        cfg = {"configurable": {"thread_id": "r1"}, "recursion_limit": 3 * n + 10}
        app.invoke({"x": 0, "verdict": {}}, cfg, durability="sync")
    elif engine == "dbos":
        from dbos import DBOS

        DBOS(config={"name": "probe", "system_database_url": f"sqlite:///{db}"})

        @DBOS.step()  # type: ignore[misc]
        def dact(x: int) -> int:
            return actor(x)

        @DBOS.step()  # type: ignore[misc]
        def dverify(x: int) -> dict[str, Any]:
            return verifier(x)

        @DBOS.workflow()  # type: ignore[misc]
        def wf(m: int) -> int:
            x = 0
            for _ in range(m):
                x = dact(x)
                dverify(x)
            return x

        DBOS.launch()
        wf(n)
        DBOS.destroy()
    out: dict[str, Any] = {
        "engine": engine,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "write_bytes": _wb() - w0,
    }
    _tenths(cpu, wall, out)
    return out


def child_load(db: str) -> dict[str, Any]:
    import loopwright.store.sqlite  # noqa: F401  (the backend's import is not the load)
    from loopwright.store import open_store

    t0 = time.perf_counter()
    st = open_store(db)
    t1 = time.perf_counter()
    run = st.list_runs(limit=1)[0]
    state = st.latest_checkpoint(run.run_id).task_state()
    t2 = time.perf_counter()
    st.close()
    return {
        "open_ms": (t1 - t0) * 1e3,
        "latest_ms": (t2 - t1) * 1e3,
        "cycle": getattr(state, "cycle", None),
    }


def child_dump(db: str, key: str) -> dict[str, Any]:
    import loopwright as lw
    from loopwright.store import open_store

    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "seconds"}
        return [strip(v) for v in o] if isinstance(o, list) else o

    with open_store(db) as st:
        rid = next(r.run_id for r in st.list_runs(limit=100) if r.task_key == key)
        ts = st.latest_checkpoint(rid).task_state()
        parts = {
            f"{a}/{p}": [
                [v.n, v.value, str(v.status), v.cycle] for v in st.versions(rid, f"{a}/{p}")
            ]
            for a, art in ts.artifacts.items()
            for p in art.parts
        }
        records = {str(c): strip(r) for _, c, r in st.iter_records(rid) if r}
        plan = [[s.id, str(s.status)] for s in ts.plan]
    with lw.Runtime(db) as rt:
        res = rt.result(rid)
    return {
        "status": res.status,
        "stop_reason": res.stop_reason,
        "cycles": res.cycles,
        "spent": [res.spent.cost_usd, res.spent.tokens],
        "parts": parts,
        "plan": plan,
        "records": records,
    }


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", SRC))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # imports of an installed package are compiled
    env.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "lw-probe-pyc"))
    return env


def _child(py: str, *args: str) -> dict[str, Any]:
    p = subprocess.run(
        [py, HERE, "--child", *args], check=False, env=_env(), capture_output=True, text=True
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        return {"error": (p.stderr or p.stdout)[-1500:]}
    return dict(json.loads(lines[-1]))


def _fresh(db: str) -> str:
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    return db


def side_by_side(sizes: list[int], peer_py: str | None, d: str) -> None:
    engines = ["floor", "lw"] + (["burr", "langgraph", "dbos"] if peer_py else [])
    for n in sizes:
        rows: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
        for i, eng in enumerate(engines + engines[::-1]):
            db = _fresh(os.path.join(d, f"{eng}_{n}_{i}.db"))
            if eng == "lw":
                r = _child(sys.executable, "lw", "trivial", db, f"k{n}-{i}", str(n), "1", "50")
                if "error" not in r:
                    r["load"] = _child(sys.executable, "load", db)
            else:
                r = _child(peer_py or sys.executable, "peer", eng, db, str(n))
            if "error" in r:
                print(f"{eng} N={n}: failed: {r['error']}", flush=True)
                continue
            r["db_bytes"] = sum(
                os.path.getsize(db + s) for s in ("", "-wal") if os.path.exists(db + s)
            )
            rows[eng].append(r)
        floor = statistics.mean(r["wall_s"] for r in rows["floor"]) / n * 1e6
        for eng, rs in rows.items():
            if not rs:
                continue

            def m(key: str, rs: list[dict[str, Any]] = rs) -> float:
                return statistics.mean(float(r.get(key, 0.0)) for r in rs)

            us = m("wall_s") / n * 1e6
            line = (
                f"{eng:9s} N={n} us/cycle={us:7.0f} x_floor={us / floor:5.2f} "
                f"cpu_us/cycle={m('cpu_s') / n * 1e6:6.0f} cpu_first_tenth={m('cpu_early_us'):6.0f} "
                f"cpu_last_tenth={m('cpu_late_us'):6.0f} db_B/cycle={m('db_bytes') / n:6.0f} "
                f"written_B/cycle={m('write_bytes') / n:7.0f} maxrss_MB={max(r['maxrss_kb'] for r in rs) / 1024:5.1f}"
            )
            if eng == "lw":
                loads = [r["load"] for r in rs if "open_ms" in r.get("load", {})]
                line += f" open_ms={statistics.mean(x['open_ms'] for x in loads):.2f}"
                line += f" latest_state_ms={statistics.mean(x['latest_ms'] for x in loads):.2f}"
            print(line, flush=True)


def kill_compare(seed: int, mode: str, n: int, ks: list[int], kills: int, d: str) -> bool:
    key = f"task-{seed}"
    tag = "-".join(map(str, ks))
    ref = _fresh(os.path.join(d, f"ref_{seed}_{mode}_{tag}.db"))
    killed = _fresh(os.path.join(d, f"kill_{seed}_{mode}_{tag}.db"))

    def cmd(db: str, k: int) -> list[str]:
        return [sys.executable, HERE, "--child", "lw", mode, db, key, str(n), str(seed), str(k)]

    t0 = time.perf_counter()
    subprocess.run(cmd(ref, ks[0]), env=_env(), check=True, capture_output=True)
    ref_s = time.perf_counter() - t0
    rng = random.Random(seed)
    done = n_kill = starts = 0
    while not done:
        p = subprocess.Popen(
            cmd(killed, ks[starts % len(ks)]),
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        starts += 1
        if n_kill < kills:
            try:
                p.wait(timeout=rng.uniform(0.2, max(0.3, ref_s * 0.6)))
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
                n_kill += 1
                continue
        _, err = p.communicate()
        if p.returncode:
            print(f"seed={seed}: a resume failed (exit {p.returncode}): {err.decode()[-1500:]}")
            return False
        done = 1
    a, b = _child(sys.executable, "dump", ref, key), _child(sys.executable, "dump", killed, key)
    a.pop("maxrss_kb", None)
    b.pop("maxrss_kb", None)
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    explained = ""
    if diff and set(diff) <= {"spent", "records"} and "error" not in a and "error" not in b:
        # An interrupted cycle's calls are charged when it is redone: only `usage` and `calls`
        # of the cycles that were interrupted may differ.
        other = [
            c
            for c in a["records"]
            if {k for k in a["records"][c] if a["records"][c][k] != b["records"].get(c, {}).get(k)}
            - {"usage", "calls"}
        ]
        extra = round(b["spent"][0] - a["spent"][0], 9)
        if not other and extra >= 0:
            explained = f" (spend +{extra} USD: the calls of interrupted cycles, charged once each)"
            diff = []
    print(
        f"kill seed={seed} mode={mode} N={n} K={tag} kills={n_kill} starts={starts} "
        f"{a.get('stop_reason')}/{a.get('cycles')} same={not diff}{explained} {diff or ''}",
        flush=True,
    )
    return not diff


def views(n: int, d: str) -> None:
    db = _fresh(os.path.join(d, f"views_{n}.db"))
    _child(sys.executable, "lw", "rich", db, "views", str(n), "5", "50")
    env = dict(_env(), LOOPWRIGHT_STORE=db, COLUMNS="200")
    sys.path.insert(0, env["PYTHONPATH"].split(os.pathsep)[0])
    from loopwright.store import open_store

    with open_store(db) as st:
        rid = st.list_runs(limit=1)[0].run_id
        ts = st.latest_checkpoint(rid).task_state()
        truth = {
            f"{a}/{p}": len(st.versions(rid, f"{a}/{p}"))
            for a, art in ts.artifacts.items()
            for p in art.parts
        }
    cycles = list(range(1, n + 1))
    lw_cli = [sys.executable, "-m", "loopwright"]

    def timed(*args: str) -> tuple[str, float]:
        t = time.perf_counter()
        p = subprocess.run([*lw_cli, *args], check=False, env=env, capture_output=True, text=True)
        if p.returncode:
            print(f"loopwright {' '.join(args)}: exit {p.returncode}: {p.stderr[-800:]}")
        return p.stdout, time.perf_counter() - t

    out, s = timed("show", rid, "--json")
    doc = json.loads(out)
    got = {
        f"{a['name']}/{p['name']}": len(p["versions"])
        for a in doc["state"]["artifacts"]
        for p in a["parts"]
    }
    ok = [c["cycle"] for c in doc["cycles"]] == cycles and got == truth
    print(f"views N={n}: show --json every cycle and version={ok} {s:.2f} s")
    out, s = timed("show", rid)
    print(f"views N={n}: show (text) {out.count(chr(10))} lines {s:.2f} s")
    out, s = timed("trace", rid)
    started = [json.loads(ln)["cycle"] for ln in out.splitlines() if '"cycle_started"' in ln]
    print(f"views N={n}: trace cycle_started for every cycle={sorted(started) == cycles} {s:.2f} s")
    out, s = timed("trace", rid, "--format", "otlp-json")
    spans = [
        sp
        for rs in json.loads(out)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for sp in ss["spans"]
    ]
    print(f"views N={n}: trace otlp-json {len(spans)} spans {s:.2f} s")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    ui = subprocess.Popen(
        [*lw_cli, "ui", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"{base}/api/runs?limit=1", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        t = time.perf_counter()
        page = json.loads(urllib.request.urlopen(f"{base}/api/runs/{rid}", timeout=600).read())
        s = time.perf_counter() - t
        api = {a["ref"]: len(a["versions"]) for a in page["artifacts"]}
        ok = sorted(e["cycle"] for e in page["timeline"]) == cycles and api == truth
        print(f"views N={n}: /api/runs/ID every cycle and version={ok} {s:.2f} s")
        t = time.perf_counter()
        paged = {}
        for ref in truth:
            after, count = "0", 0
            while True:
                a, p = ref.split("/", 1)
                r = urllib.request.urlopen(
                    f"{base}/api/runs/{rid}/parts/{a}/{p}/versions?after={after}&limit=500"
                )
                count += len(json.loads(r.read()))
                after = r.headers.get("X-Next-Cursor")
                if not after:
                    break
            paged[ref] = count
        print(
            f"views N={n}: paged versions every one={paged == truth} {time.perf_counter() - t:.2f} s"
        )
    finally:
        ui.terminate()
        ui.wait(10)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        kind, args = sys.argv[2], sys.argv[3:]
        if kind == "lw":
            out = child_lw(args[0], args[1], args[2], int(args[3]), int(args[4]), int(args[5]))
        elif kind == "peer":
            out = child_peer(args[0], args[1], int(args[2]))
        elif kind == "load":
            out = child_load(args[0])
        else:
            out = child_dump(args[0], args[1])
        out.setdefault("maxrss_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        print(json.dumps(out, default=str), flush=True)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="2000,5000")
    ap.add_argument(
        "--peer-python",
        help="an interpreter with burr, langgraph, langgraph-checkpoint-sqlite, dbos",
    )
    ap.add_argument(
        "--kills", type=int, default=0, help="SIGKILLs per compared run (0: no kill runs)"
    )
    ap.add_argument(
        "--views", type=int, default=0, help="cycles of the run show/trace/the dashboard must list"
    )
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp(prefix="lw-outside-")
    os.makedirs(d, exist_ok=True)
    if a.sizes:
        side_by_side([int(x) for x in a.sizes.split(",")], a.peer_python, d)
    ok = True
    if a.kills:
        for seed, mode, n, ks in (
            (11, "rich", 200, [1]),
            (12, "rich", 200, [3, 50, 1, 7]),
            (13, "success", 2000, [2, 9, 50]),
            (14, "trivial", 400, [4, 50]),
        ):
            ok = kill_compare(seed, mode, n, ks, a.kills, d) and ok
        print(f"kills_same={int(ok)}")
    if a.views:
        views(a.views, d)


if __name__ == "__main__":
    main()
