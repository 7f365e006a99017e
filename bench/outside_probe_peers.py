"""``outside_probe.py``'s workload in Burr and LangGraph (``durability="sync"``), for side-by-side
figures: the same values (same seeds: eight parts, 50 KB every seventh cycle) and findings,
the whole state persisted after every step on SQLite (WAL, ``synchronous=FULL``), as
``peers.py`` sets the peers up. Run it with the peers' interpreter (``peers.py``'s README entry):

    /tmp/peers/bin/python bench/outside_probe_peers.py burr 2000
    /tmp/peers/bin/python bench/outside_probe_peers.py langgraph 5000

One JSON line: µs and CPU µs per cycle, database bytes per cycle, the values' bytes per cycle.
The workload's own CPU (making the values and findings) is printed as ``workload_cpu_us``: it
is in every framework's figure, loopwright's too.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
import tempfile
import time

PARTS = ("title", "body", "meta", "tags", "s1", "s2", "s3", "s4")


def _value(rng, part, cycle):
    if part == "body" and cycle % 7 == 0:
        return "".join(rng.choice("abcdefghij ") for _ in range(50_000))
    if part == "body":
        return f"body draft {cycle} " * rng.randint(1, 40)
    if part == "meta":
        return {"cycle": cycle, "w": [rng.random() for _ in range(rng.randint(0, 30))]}
    if part == "tags":
        return [f"t{rng.randint(0, 99)}" for _ in range(rng.randint(1, 8))]
    return f"{part}-{cycle}-{rng.randint(0, 10**6)}"


def edits(cycle, seed=7):
    rng = random.Random(seed * 1_000_003 + cycle)
    k = rng.randint(2, 4)
    parts = rng.sample(list(PARTS), k)
    if cycle % 7 == 0 and "body" not in parts:
        parts[0] = "body"
    return {p: _value(rng, p, cycle) for p in parts}


def findings(parts, edited, cycle):
    h = sum(map(ord, str(parts.get("title", "")))) % 10
    return [
        {
            "message": f"{p} needs work",
            "part": p,
            "severity": "warning" if p in ("s1", "s2") and (h + cycle) % 3 == 0 else "error",
            "evidence": {"h": h, "cycle": cycle},
        }
        for p in edited
    ]


def connect(path):
    db = sqlite3.connect(path, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


def burr(n, path):
    from burr.core import ApplicationBuilder, default, expr
    from burr.core.action import action
    from burr.core.persistence import SQLitePersister

    @action(reads=["cycle", "parts"], writes=["cycle", "parts", "edited"])
    def act(state):
        c = state["cycle"] + 1
        e = edits(c)
        return state.update(cycle=c, parts={**state["parts"], **e}, edited=list(e))

    @action(reads=["parts", "edited", "cycle"], writes=["score", "findings"])
    def verify(state):
        return state.update(
            score=0.5, findings=findings(state["parts"], state["edited"], state["cycle"])
        )

    @action(reads=[], writes=[])
    def done(state):
        return state

    p = SQLitePersister(path, connection=connect(path))
    p.initialize()
    app = (
        ApplicationBuilder()
        .with_actions(act=act, verify=verify, done=done)
        .with_transitions(
            ("act", "verify", default),
            ("verify", "act", expr(f"cycle < {n}")),
            ("verify", "done", default),
        )
        .with_state(cycle=0, parts={"title": "t0"}, edited=[], score=0.0, findings=[])
        .with_entrypoint("act")
        .with_identifiers(app_id="p")
        .with_state_persister(p)
        .build()
    )
    t0 = time.perf_counter()
    c0 = time.process_time()
    _, _, state = app.run(halt_after=["done"])
    assert state["cycle"] == n, state["cycle"]
    return time.perf_counter() - t0, time.process_time() - c0


def langgraph(n, path):
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        cycle: int
        parts: dict
        edited: list
        score: float
        findings: list

    def act(s):
        c = s["cycle"] + 1
        e = edits(c)
        return {"cycle": c, "parts": {**s["parts"], **e}, "edited": list(e)}

    def verify(s):
        return {"score": 0.5, "findings": findings(s["parts"], s["edited"], s["cycle"])}

    g = StateGraph(S)
    g.add_node("act", act)
    g.add_node("verify", verify)
    g.add_edge(START, "act")
    g.add_edge("act", "verify")
    g.add_conditional_edges("verify", lambda s: "act" if s["cycle"] < n else END)
    saver = SqliteSaver(connect(path))
    saver.setup()
    app = g.compile(checkpointer=saver)
    t0 = time.perf_counter()
    c0 = time.process_time()
    app.invoke(
        {"cycle": 0, "parts": {"title": "t0"}, "edited": [], "score": 0.0, "findings": []},
        {"configurable": {"thread_id": "p"}, "recursion_limit": 2 * n + 10},
        durability="sync",
    )
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    fw, n = sys.argv[1], int(sys.argv[2])
    path = os.path.join(tempfile.mkdtemp(prefix="outside-peers-"), f"{fw}.db")
    wall, cpu = {"burr": burr, "langgraph": langgraph}[fw](n, path)
    size = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    c0 = time.process_time()
    vb = 0
    for c in range(1, n + 1):
        e = edits(c)
        findings({"title": "t"}, list(e), c)
        vb += sum(len(json.dumps(v)) for v in e.values())
    work = time.process_time() - c0
    row = {
        "fw": fw,
        "n": n,
        "us_cycle": round(wall / n * 1e6),
        "cpu_us_cycle": round(cpu / n * 1e6),
        "db_bytes_cycle": round(size / n),
        "value_bytes_cycle": round(vb / n),
        "workload_cpu_us": round(work / n * 1e6),
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main()
