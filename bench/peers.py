"""The peer workload: the same loop of N cycles in loopwright, Burr, LangGraph and DBOS, side by
side with the plain-sqlite3 floor, on SQLite files in one folder.

Usage:  python bench/peers.py [--sizes 200,2000] [--rounds 2] [--peers-python PATH] [--dir DIR]
                              [--bare]

A cycle is what the issue that asked for this measures: an actor writes one small value, a
verifier rejects it with one finding, and the state is durable before the next cycle starts
(SQLite in WAL mode with ``synchronous=FULL`` everywhere: loopwright's default, set on the
connection each peer is given). Each framework is used as its documentation shows:

* **loopwright** — ``Runtime.run`` of a ``Loop`` (actor, one ``Check``, ``max_cycles=N``);
* **Burr** — an application of two actions (act → verify → act …) with a ``SQLitePersister``
  that saves the state after every step;
* **LangGraph** — a ``StateGraph`` of the same two nodes compiled with a ``SqliteSaver``
  (a checkpoint after every step). Its default durability, ``"async"``, writes a step's
  checkpoint while the next step runs, so the state is not durable before the next cycle starts;
  the row ``langgraph_sync`` runs it with ``durability="sync"``, which waits, as the others do;
* **DBOS** — one workflow whose loop calls two steps per cycle, SQLite as the system database
  (every step's output recorded). DBOS opens that database itself and leaves SQLite's default
  rollback journal (four fsyncs a step where WAL takes one), so the file is made in WAL mode
  first (the mode is kept in the file); its ``synchronous`` is SQLite's default, FULL;
* **floor** — plain ``sqlite3``: one small row inserted and committed per cycle.

With ``--bare`` the same loop runs **without persistence**, to compare the engines' own CPU (the
issue's reference: Burr without a persister, LangGraph without a checkpointer): Burr and
LangGraph are built without one; loopwright has no store-less mode, so its cycle commits and
memory reads are replaced by no-ops (as ``cycle_phases.py`` does) — it still builds, masks and
encodes every cycle's rows, so its figure is an upper bound on its own CPU. DBOS and the floor
are nothing without their database and are left out.

Each measurement is its own process (one framework, one size), timed from the call that runs
the loop to its return (``Runtime.run``, ``app.run``, ``invoke``, the workflow; imports and
set-up — opening the store, creating tables — excluded), the rounds alternating the order
(ABBA), so drift on a noisy machine reaches every side alike. The peers are not loopwright's
dependencies: install them in another environment and name its interpreter with
``--peers-python`` (the frameworks it cannot import are left out, and said so). Printed: µs per
cycle, its ratio to the floor of the same round, and the growth from the smallest size to the
largest. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
Span = tuple[float, float]  # seconds: wall, and CPU of the whole process (all its threads)


def _now() -> Span:
    return time.perf_counter(), time.process_time()


def _since(t0: Span) -> Span:
    t1 = _now()
    return t1[0] - t0[0], t1[1] - t0[1]


FRAMEWORKS = ("floor", "loopwright", "burr", "langgraph", "langgraph_sync", "dbos")


def _connect(path: Path) -> sqlite3.Connection:
    """A connection at loopwright's default durability, for the peers that take one."""
    db = sqlite3.connect(str(path), check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


def floor(n: int, folder: Path) -> Span:
    db = sqlite3.connect(str(folder / "floor.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, cycle INTEGER, body TEXT)")
    t0 = _now()
    for c in range(1, n + 1):
        db.execute("BEGIN")
        db.execute("INSERT INTO t(cycle, body) VALUES (?, ?)", (c, f"draft {c}"))
        db.execute("COMMIT")
    return _since(t0)


def loopwright(n: int, folder: Path, persist: bool = True) -> Span:
    import asyncio

    import loopwright as lw
    from loopwright.store import _sql

    if not persist:  # the cycle commits and memory reads as no-ops (see the module's doc)
        commit = _sql.SQLStore.commit_request

        def no_commit(self: Any, it: Any) -> bool:
            if it.record is None or it.run.get("status") not in (None, "running"):
                return bool(commit(self, it))  # the run's first and last commits
            return False

        _sql.SQLStore.commit_request = no_commit  # type: ignore[method-assign]
        _sql.SQLStore.memory_search = lambda self, s: [[] for _ in s]  # type: ignore[method-assign]

    stamps: list[float] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        stamps.append(time.perf_counter())
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def verify(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still open", "doc", "body"),)
        )

    loop = lw.Loop(
        name="peers",
        actor=actor,
        verifiers=[lw.Check(fn=verify, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=n)),
    )
    task = {"goal": "a long loop", "artifacts": {"doc": {"body": ""}}}
    begun: list[Span] = []

    async def run(rt: lw.Runtime) -> lw.RunResult:
        begun.append(_now())
        return await rt.run(loop, task, task_key="peers")

    with lw.Runtime(f"sqlite:///{folder / 'lw.db'}") as rt:
        try:
            result = asyncio.run(run(rt))
        except LookupError:  # bare: the result reads versions no commit wrote
            assert not persist and len(stamps) == n, len(stamps)
        else:
            assert result.cycles == n, result.to_dict()
        # From the call of run() to its end, as for the peers (app.run, invoke, the workflow):
        # the run's creation, lease and first commit count, as a peer's first checkpoint does.
        return _since(begun[0])


def burr(n: int, folder: Path, persist: bool = True) -> Span:
    from burr.core import ApplicationBuilder, State, default, expr
    from burr.core.action import action
    from burr.core.persistence import SQLitePersister

    @action(reads=["cycle"], writes=["cycle", "doc"])
    def act(state: State) -> State:
        c = state["cycle"] + 1
        return state.update(cycle=c, doc=f"draft {c}")

    @action(reads=["doc"], writes=["score", "findings"])
    def verify(state: State) -> State:
        return state.update(score=0.5, findings=[{"message": "still open", "part": "doc"}])

    @action(reads=[], writes=[])
    def done(state: State) -> State:
        return state

    builder = (
        ApplicationBuilder()
        .with_actions(act=act, verify=verify, done=done)
        .with_transitions(
            ("act", "verify", default),
            ("verify", "act", expr(f"cycle < {n}")),
            ("verify", "done", default),
        )
        .with_state(cycle=0, doc="", score=0.0, findings=[])
        .with_entrypoint("act")
        .with_identifiers(app_id="peers")
    )
    if persist:
        db = folder / "burr.db"
        persister = SQLitePersister(str(db), connection=_connect(db))
        persister.initialize()
        builder = builder.with_state_persister(persister)
    app = builder.build()
    t0 = _now()
    _, _, state = app.run(halt_after=["done"])
    spent = _since(t0)
    assert state["cycle"] == n, state["cycle"]
    return spent


def langgraph(n: int, folder: Path, persist: bool = True, durability: str = "async") -> Span:
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        cycle: int
        doc: str
        score: float
        findings: list[dict[str, str]]

    def act(s: S) -> dict[str, Any]:
        c = s["cycle"] + 1
        return {"cycle": c, "doc": f"draft {c}"}

    def verify(s: S) -> dict[str, Any]:
        return {"score": 0.5, "findings": [{"message": "still open", "part": "doc"}]}

    g = StateGraph(S)
    g.add_node("act", act)
    g.add_node("verify", verify)
    g.add_edge(START, "act")
    g.add_edge("act", "verify")
    g.add_conditional_edges("verify", lambda s: "act" if s["cycle"] < n else END)
    saver = SqliteSaver(_connect(folder / "langgraph.db")) if persist else None
    if saver is not None:
        saver.setup()  # its tables: set-up, as Burr's initialize() and DBOS's launch()
    app = g.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "peers"}, "recursion_limit": 2 * n + 10}
    # LangGraph's default durability, "async", writes a step's checkpoint while the next step
    # runs (all are durable when invoke returns); "sync" waits for it before the next step, as
    # the others do (langgraph_sync).
    more: Any = {"durability": durability} if persist else {}
    t0 = _now()
    out = app.invoke({"cycle": 0, "doc": "", "score": 0.0, "findings": []}, config, **more)
    spent = _since(t0)
    assert out["cycle"] == n, out["cycle"]
    return spent


def langgraph_sync(n: int, folder: Path) -> Span:
    """LangGraph with ``durability="sync"``: each step's checkpoint durable before the next."""
    return langgraph(n, folder, durability="sync")


def dbos(n: int, folder: Path) -> Span:
    from dbos import DBOS

    # DBOS opens its own SQLite engine and leaves the journal in its default mode (DELETE: a
    # rollback journal, three or four fsyncs a commit where WAL takes one). journal_mode=WAL is
    # kept in the file, so the database is made in WAL mode before DBOS opens it; synchronous is
    # SQLite's default, FULL, which DBOS does not change: the same setting as everyone else's.
    db = folder / "dbos.db"
    _connect(db).close()
    DBOS(config={"name": "peers", "system_database_url": f"sqlite:///{db}"})

    @DBOS.step()
    def act(c: int) -> str:
        return f"draft {c}"

    @DBOS.step()
    def verify(doc: str) -> dict[str, Any]:
        return {"score": 0.5, "findings": [{"message": "still open", "part": "doc"}]}

    @DBOS.workflow()
    def run(cycles: int) -> int:
        done = 0
        for c in range(1, cycles + 1):
            verify(act(c))
            done = c
        return done

    DBOS.launch()
    try:
        t0 = _now()
        got = run(n)
        spent = _since(t0)
    finally:
        DBOS.destroy()
    assert got == n, got
    with sqlite3.connect(str(db)) as check:
        mode = check.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal", mode
    return spent


BARE = ("loopwright", "burr", "langgraph")  # what runs without persistence (--bare)
MEASURE: dict[str, Callable[..., Span]] = {
    "floor": floor,
    "loopwright": loopwright,
    "burr": burr,
    "langgraph": langgraph,
    "langgraph_sync": langgraph_sync,
    "dbos": dbos,
}


def worker(name: str, n: int, persist: bool) -> None:
    """One measurement in this process; prints ``{"us": …, "cpu_us": …}`` (a cycle's wall and
    CPU µs) or ``{"missing": why}``."""
    try:
        fn = MEASURE[name]
        with tempfile.TemporaryDirectory(prefix=f"lw-peers-{name}-") as d:
            spent = fn(n, Path(d)) if persist else fn(n, Path(d), persist=False)
    except ImportError as exc:
        print(json.dumps({"missing": f"{type(exc).__name__}: {exc}"}))
        return
    print(json.dumps({"us": spent[0] / n * 1e6, "cpu_us": spent[1] / n * 1e6}))


def measure(python: str, name: str, n: int, folder: str | None, bare: bool) -> dict[str, Any]:
    env = dict(os.environ)
    if folder:
        env["TMPDIR"] = folder
    try:
        done = subprocess.run(
            [python, str(HERE), "--worker", name, str(n), *(["--bare"] if bare else [])],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    except OSError as exc:  # no such interpreter
        return {"missing": f"cannot run {python}: {exc.strerror}"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"missing": f"exit {done.returncode}: {tail[0][:200]}"}
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"want cycle counts like 200,2000, not {text!r}")
    return sizes


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"want a whole number of at least 1, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=_sizes, default=[200, 2000])
    ap.add_argument("--rounds", type=_positive, default=2)
    ap.add_argument(
        "--peers-python", default=None, help="interpreter that has burr, langgraph, dbos"
    )
    ap.add_argument("--dir", default=None, help="where the databases go (default: temp)")
    ap.add_argument(
        "--bare",
        action="store_true",
        help="without persistence: the engines' own CPU (loopwright, Burr, LangGraph)",
    )
    ap.add_argument("--worker", nargs=2, metavar=("NAME", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), persist=not args.bare)
        return 0
    frameworks = BARE if args.bare else FRAMEWORKS
    ref = "burr" if args.bare else "floor"  # what each row is divided by
    sizes: list[int] = args.sizes
    own = sys.executable
    peers = args.peers_python or own
    python = dict.fromkeys(FRAMEWORKS, peers) | {"floor": own, "loopwright": own}
    results: dict[tuple[str, int], list[float]] = {}
    cpu: dict[tuple[str, int], list[float]] = {}
    ratios: dict[tuple[str, int], list[float]] = {}
    missing: dict[str, str] = {}
    print(f"# Python {sys.version.split()[0]} · sqlite {sqlite3.sqlite_version} · peers: {peers}")
    for n in sizes:
        for r in range(args.rounds):
            order = list(frameworks) if r % 2 == 0 else list(reversed(frameworks))
            got: dict[str, float] = {}
            for name in order:
                if name in missing:
                    continue
                out = measure(python[name], name, n, args.dir, args.bare)
                if "missing" in out:
                    missing[name] = out["missing"]
                    continue
                got[name] = out["us"]
                results.setdefault((name, n), []).append(out["us"])
                cpu.setdefault((name, n), []).append(out["cpu_us"])
            for name, us in got.items():
                if ref in got:
                    ratios.setdefault((name, n), []).append(us / got[ref])
    head = f"{'framework':<16}" + "".join(f"{f'{n} cycles':>22}" for n in sizes)
    print(head)
    print(f"{'':<16}" + "".join(f"{f'µs/cycle  × {ref}':>22}" for _ in sizes))
    for name in frameworks:
        if name in missing:
            continue
        row = f"{name:<16}"
        for n in sizes:
            us = statistics.median(results.get((name, n), [float("nan")]))
            x = statistics.median(ratios.get((name, n), [float("nan")]))
            row += f"{us:>14.0f}{x:>8.2f}"
        print(row)
    # CPU of the measuring process over the same window (its background threads included: a
    # checkpointer's writer, DBOS's own): what a busy machine's queue for a core does not blur.
    print(f"{'CPU µs/cycle':<16}" + "".join(f"{f'{n} cycles':>22}" for n in sizes))
    for name in frameworks:
        if name in missing:
            continue
        row = f"{name:<16}"
        for n in sizes:
            row += f"{statistics.median(cpu.get((name, n), [float('nan')])):>22.0f}"
        print(row)
    for name, why in missing.items():
        print(f"# {name}: not measured ({why})")
    lo, hi = sizes[0], sizes[-1]
    for name in frameworks:
        if name in missing or name == "floor" or lo == hi:
            continue
        a, b = results.get((name, lo)), results.get((name, hi))
        if a and b:
            print(f"growth_{name}={statistics.median(b) / statistics.median(a):.3f}")
    if ("loopwright", hi) in ratios:
        print(f"loopwright_x_{ref}_{hi}={statistics.median(ratios[('loopwright', hi)]):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
