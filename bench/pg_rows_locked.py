"""A worker's runs on PostgreSQL, paying in every cycle, on a small connection pool, while
another session holds some of their rows locked for a while (evloop53b): what becomes of the
other runs, their leases and their payments.

    PYTHONPATH=src python bench/pg_rows_locked.py PG_BASE_URL [RUNS] [LOCKED] [POOL] [HOLD_S] [AT]

Makes (and drops) a schema of its own. ``LOCKED`` runs each have their row locked by one other
connection when their first payment is made (``AT`` = ``pay``, the default), or before they
start, so that their lease take waits on it (``AT`` = ``take``, stop 54), held ``HOLD_S``
seconds, then let go. Prints each run's outcome, the pool's failed requests (its 30 s
timeout), the most runs not locked whose lease had lapsed at once while they ran, payments made
more than once, and how many runs not locked ended while the lock was held.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

import psycopg

import loopwright as lw


def main() -> None:
    base = sys.argv[1]
    runs, locked_n, pool, hold_s = (
        [int(a) for a in sys.argv[2:5]] + [40, 5, 3][len(sys.argv[2:5]) :]
    ) + [float(sys.argv[5]) if len(sys.argv) > 5 else 35.0]
    at = sys.argv[6] if len(sys.argv) > 6 else "pay"
    schema = f"lw_bench_locked_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in base else "?"
    url = f"{base}{sep}schema={schema}&pool_max={pool}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    lock = psycopg.connect(base)
    lock.execute(f'SET search_path TO "{schema}"')
    paid: Counter[str] = Counter()
    held: list[str] = []
    first_held: list[float] = []
    let_go: list[bool] = []
    free_ended_held = 0

    def let_go_now() -> None:
        if not let_go:
            let_go.append(True)  # (first: a run ending meanwhile is not counted as held)
            lock.rollback()

    @lw.effect("spend", name="pay", key=lambda a: a["invoice"])
    def pay(invoice: str, run: str, hold: bool) -> dict[str, Any]:
        paid[invoice] += 1
        if hold and at == "pay" and run not in held:
            lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run,)).fetchall()
            held.append(run)
            first_held.append(time.monotonic())
        return {"paid": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        n = ctx.task["n"]
        return lw.Proposal(
            edits=(lw.Edit("doc", "b", ctx.cycle),),
            effects=(pay.call(invoice=f"i{n}-{ctx.cycle}", run=ctx.run_id, hold=n < locked_n),),
        )

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        ok = state.artifacts["doc"].values()["b"] >= 2
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.5)

    loop = lw.Loop(
        name="locked",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        effects=(pay,),
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=4)),
    )
    lapsed_most = 0

    async def watch(done: asyncio.Event) -> None:
        nonlocal lapsed_most
        with psycopg.connect(base, autocommit=True) as w:
            w.execute(f'SET search_path TO "{schema}"')
            while not done.is_set():
                if first_held and time.monotonic() - first_held[0] > hold_s:
                    let_go_now()
                [(k,)] = w.execute(
                    "SELECT count(*) FROM runs WHERE status = 'running' AND NOT run_id = ANY(%s)"
                    " AND lease_expires_at < extract(epoch from clock_timestamp())",
                    (held,),
                ).fetchall()
                lapsed_most = max(lapsed_most, k)
                await asyncio.sleep(0.25)

    try:
        with lw.Runtime(url, lease_ttl_s=6) as rt:

            def task(i: int) -> dict[str, Any]:
                return {"n": i, "artifacts": {"doc": {"b": 0}}}

            async def one(i: int) -> Any:
                nonlocal free_ended_held
                out = await rt.run(loop, task(i), task_key=f"t{i}")
                if i >= locked_n and held and not let_go:
                    free_ended_held += 1
                return out

            if at == "take":  # (the locked runs' rows held before any run starts)
                for i in range(locked_n):
                    run_id = rt.create(loop, task(i), task_key=f"t{i}")[0].run_id
                    lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))
                    held.append(run_id)
                first_held.append(time.monotonic())
                # let go from a thread: a take waiting on the event loop stops the watcher too
                threading.Timer(hold_s, let_go_now).start()

            async def drive() -> list[Any]:
                done = asyncio.Event()
                watcher = asyncio.create_task(watch(done))
                try:
                    return await asyncio.gather(
                        *(one(i) for i in range(runs)), return_exceptions=True
                    )
                finally:
                    done.set()
                    await watcher

            t0 = time.monotonic()
            out = asyncio.run(drive())
            took = time.monotonic() - t0
            stats = rt.store._pool.get_stats()  # type: ignore[attr-defined]
        outcomes = Counter(
            type(r).__name__ if isinstance(r, BaseException) else r.status for r in out
        )
        print(
            f"runs {runs}, locked {locked_n} at {at} for {hold_s:.0f} s, pool_max {pool}: "
            f"{took:.1f} s"
        )
        print(f"  outcomes: {dict(outcomes)} ({len(held)} runs' rows locked)")
        print(f"  pool requests failed (timeout): {stats.get('requests_errors', 0)}")
        print(f"  most runs not locked with a lapsed lease at once: {lapsed_most}")
        print(f"  payments made more than once: {sum(1 for v in paid.values() if v > 1)}")
        print(f"  runs not locked that ended while the lock was held: {free_ended_held}")
    finally:
        lock.close()
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
