"""Render time of the dashboard's runs list: the runs page (`/`, 50 runs) and `/api/runs`
(50 summaries) for stores of 100, 1,000 and 10,000 runs, in process through Starlette's
TestClient (no network, no browser: the server's own work).

    .venv/bin/python bench/ui_pages.py               # ~2 min; last line: runs_page_p95_ms_10000=<float>
    .venv/bin/python bench/ui_pages.py --sizes 100,1000 --repeat 50
    .venv/bin/python bench/ui_pages.py --json out.json

Method (bench/README.md): each store is generated through the public Store API (create_run,
acquire_lease, commit with an end state and a packet carrying its stop cause, release_lease)
into a temp directory; one warm-up round per URL; then ``--repeat`` rounds request every URL
once in a rotating order. Measured per URL: p50 and p95 of the wall time of the request,
rendering included. Besides the first page: the page after one cursor step (keyset, so it costs
what the first one does), a search by task key and a search by stop cause text (both scan).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from loopwright import Budget, Contract, NoProgress, Success
from loopwright._packet import stop_cause
from loopwright.store import NewEvent, open_store
from loopwright.web import create_app

STATUSES = {
    "success": "accepted",
    "no_progress": "stopped",
    "budget_cycles": "stopped",
    "budget_cost": "stopped",
    "escalated": "escalated",
    "cancelled": "cancelled",
}
CAUSES = [
    "approval denied by bea: the payee is unknown",
    "the actor failed transiently 3 time(s), the retry bound; last: ConnectError: "
    "http://127.0.0.1:8000/v1/chat/completions refused the connection",
    "invoice INV-2231 was already paid by another run",
]


def make_store(path: Path, runs: int, seed: int = 0) -> str:
    """``runs`` ended runs (with packets) through the Store API; returns the store URL."""
    rng = random.Random(seed)
    contract_obj = Contract(
        success=Success(),
        budget=Budget(max_cycles=12, max_cost_usd=2.0),
        no_progress=NoProgress(cycles=3),
    )
    contract = contract_obj.to_dict()
    now = time.time()
    # Generation only: process durability (no fsync per commit); read back with the default.
    with open_store(f"sqlite:///{path}?durability=process") as st:
        for i in range(runs):
            loop = rng.choice(["invoice_exceptions", "contract_redlines", "sql_repair"])
            key = f"{loop}/customer-{rng.randrange(10**6):06d}/document-{i:05d}.json"
            rec, _ = st.create_run(
                run_id=f"{rng.getrandbits(64):016x}",
                task_key=key,
                loop_name=loop,
                project=rng.choice(["acme", "globex", "initech"]),
                spec_ref=None,
                loop_version=None,
                contract=contract,
                task={"id": key, "artifacts": {"doc": {"a": i, "b": "x" * 400}}},
                initial_state={"cycle": 0, "artifacts": {"doc": {"a": i}}},
            )
            token = st.acquire_lease(rec.run_id, "bench", 60.0)
            reason = rng.choice(list(STATUSES))
            cycles = rng.randint(1, 12)
            best = rng.random()
            cause = rng.choice(CAUSES) if reason == "escalated" else None
            spent = {"cost_usd": rng.random() * 2, "tokens": rng.randrange(10**5), "seconds": 9.0}
            packet = None
            if reason != "success":
                packet = {
                    "stop_reason": reason,
                    "cause": cause,
                    "summary": reason,
                    "recommended_action": "Review the best candidate.",
                    "best_candidate": {"cycle": cycles, "score": best, "artifacts": {"doc": {}}},
                    "unresolved_findings": [{"message": "total does not match"}] * 3,
                    "spent": spent,
                    "cycles": cycles,
                    "stop_cause": stop_cause(
                        reason,
                        contract_obj,
                        cycle=cycles,
                        best_score=best,
                        spent=spent,
                        cause=cause,
                    ),
                }
            st.commit(
                rec.run_id,
                token,
                seq=1,
                cycle=cycles,
                state={"cycle": cycles, "artifacts": {"doc": {"a": i}}},
                record={"cycle": cycles, "decision": "stop"},
                events=[NewEvent(cycles, "stopped", {"reason": reason})],
                run={
                    "status": STATUSES[reason],
                    "stop_reason": reason,
                    "cycle": cycles,
                    "best_score": best,
                    "cost_usd": spent["cost_usd"],
                    "tokens": spent["tokens"],
                    "seconds": spent["seconds"],
                    "ended_at": now - (runs - i),
                    "packet": packet,
                },
            )
            st.release_lease(rec.run_id, token)
    return str(path)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))]


def measure(store: str, repeat: int) -> dict[str, dict[str, float]]:
    c = TestClient(create_app(store, token="bench-token-0123456789"), base_url="http://127.0.0.1")
    first = c.get("/api/runs")
    cursor = first.headers.get("x-next-cursor", "")
    urls = {
        "runs_page": "/",
        "api_runs": "/api/runs",
        "runs_page_2": f"/?after={cursor}" if cursor else "/",
        "search_task": "/?q=document-00042",
        "search_cause": "/api/runs?q=payee+is+unknown",
    }
    times: dict[str, list[float]] = {k: [] for k in urls}
    for url in urls.values():  # warm-up
        assert c.get(url).status_code == 200, url
    names = list(urls)
    for i in range(repeat):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            r = c.get(urls[name])
            times[name].append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200
    out = {
        k: {"p50_ms": statistics.median(v), "p95_ms": pct(v, 95), "n": len(v)}
        for k, v in times.items()
    }
    out["api_runs"]["bytes"] = len(first.content)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ui_pages-") as tmp:
        for n in sizes:
            t0 = time.perf_counter()
            store = make_store(Path(tmp) / f"runs{n}.db", n)
            gen = time.perf_counter() - t0
            res = measure(store, args.repeat)
            results[str(n)] = res
            print(f"store of {n} runs (generated in {gen:.1f} s):")
            for name, m in res.items():
                extra = f"  {m['bytes'] / 1024:.1f} KiB" if "bytes" in m else ""
                print(f"  {name:<13} p50 {m['p50_ms']:7.1f} ms  p95 {m['p95_ms']:7.1f} ms{extra}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    big = str(max(sizes))
    print(f"runs_page_p95_ms_{big}={results[big]['runs_page']['p95_ms']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
