"""PostgreSQL: a worker driving many runs, each paying in every cycle, on a small connection
pool, while another session holds some of its runs' rows locked (a cancel or the dashboard
frozen inside its transaction, a person in ``psql``): the other runs go to their end meanwhile,
and every run, once the lock goes, each payment made once (evloop53b).

The locked runs' journal writes each waited for its row holding a pooled connection; with as
many of them as the pool has connections, every other write and read of the worker waited for
one, and failed after the pool's 30 s: runs interrupted (``StoreUnavailableError``) and lease
renewals refused, where the lock should only have held its own runs."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from test_redo_keys import ALLOW

import loopwright as lw

pytestmark = pytest.mark.postgres

RUNS = 40
LOCKED = 5  # more than the pool's connections
POOL = 3
PATIENCE = 120.0  # a bound that only a hang reaches (never a measurement)


def test_runs_locked_elsewhere_hold_only_themselves(
    pg_url: str, pg_schema: tuple[str, str]
) -> None:
    import psycopg

    base, schema = pg_schema
    paid: Counter[str] = Counter()
    lock = psycopg.connect(base)
    lock.execute(f'SET search_path TO "{schema}"')
    held: list[str] = []

    @lw.effect("spend", name="pay", key=lambda a: a["invoice"])
    def pay(invoice: str, run: str, hold: bool) -> dict[str, Any]:
        paid[invoice] += 1
        if (
            hold and run not in held
        ):  # (its result's journal write comes next, and waits on the lock)
            lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run,)).fetchall()
            held.append(run)
        return {"paid": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        n = ctx.task["n"]
        hold = n < LOCKED
        return lw.Proposal(
            edits=(lw.Edit("doc", "b", ctx.cycle),),
            effects=(pay.call(invoice=f"i{n}-{ctx.cycle}", run=ctx.run_id, hold=hold),),
        )

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        ok = state.artifacts["doc"].values()["b"] >= 2
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.5)

    loop = lw.Loop(
        name="locked-elsewhere",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        effects=(pay,),
        approvals=ALLOW,
        contract=lw.Contract(budget=lw.Budget(max_cycles=4)),
    )
    tasks = [{"n": i, "task_key": f"t{i}", "artifacts": {"doc": {"b": 0}}} for i in range(RUNS)]

    async def others_accepted() -> None:
        """Until every run but the locked ones is accepted; then the lock goes."""
        try:
            with psycopg.connect(base, autocommit=True) as watch:
                watch.execute(f'SET search_path TO "{schema}"')
                for _ in range(int(PATIENCE * 20)):
                    [(k,)] = watch.execute(
                        "SELECT count(*) FROM runs WHERE status = 'accepted'"
                    ).fetchall()
                    if k >= RUNS - LOCKED and len(held) == LOCKED:
                        [(locked,)] = watch.execute(
                            "SELECT count(*) FROM runs WHERE status = 'accepted' "
                            "AND run_id = ANY(%s)",
                            (held,),
                        ).fetchall()
                        assert locked == 0  # (their writes wait on the lock)
                        return
                    await asyncio.sleep(0.05)
            raise AssertionError("the other runs were not accepted while the lock held")
        finally:
            lock.rollback()

    with lw.Runtime(pg_url + f"&pool_max={POOL}") as rt:

        async def main() -> list[lw.RunResult]:
            out, _ = await asyncio.gather(
                rt.run_many(loop, tasks, concurrency=RUNS), others_accepted()
            )
            return out

        try:
            results = asyncio.run(main())
        finally:
            lock.close()
        assert [r.status for r in results] == ["accepted"] * RUNS
        assert set(paid.values()) == {1}  # each payment made once
        assert len(paid) >= RUNS
        for r in results:
            journal = rt.store.journal(r.run_id, kind="effect")
            assert journal and {e.status for e in journal} == {"done"}


def test_a_worker_goes_on_while_an_expired_requests_run_is_held_elsewhere(
    pg_url: str, pg_schema: tuple[str, str]
) -> None:
    """Run P parked on a request that has expired, its row held locked by another session (a
    person deciding it, the dashboard); run Q to drive. The worker's poll records expired
    requests before it claims: recording P's waited on P's row on the event loop, and the
    worker claimed and drove nothing (its runs in flight stalled with it) until the lock went
    (evloop53b). Now P's is left to a later poll and Q is driven to its end meanwhile."""
    import threading

    import psycopg
    from test_worker_expired_requests import _expired, _park

    from loopwright._worker import Worker

    base, schema = pg_schema
    q_loop = lw.Loop(
        name="q",
        actor=lambda ctx: lw.Proposal(edits=(lw.Edit("doc", "b", 1),)),
        verifiers=[
            lw.Check(fn=lambda s, p: lw.Verdict(passed=s.artifacts["doc"].values()["b"] == 1))
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(pg_url) as rt:
        p, p_loop, bank = _park(rt)
        req = rt.pending_approval(p.run_id)
        assert req is not None
        _expired(rt.store, req.approval_id)
        q, _ = rt.create(q_loop, {"artifacts": {"doc": {"b": 0}}}, task_key="q")
        loops = {p_loop.name: p_loop, q_loop.name: q_loop}
        lock = psycopg.connect(base)
        lock.execute(f'SET search_path TO "{schema}"')
        lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (p.run_id,)).fetchall()
        stats: list[Any] = []

        def work() -> None:
            stats.append(asyncio.run(Worker(rt, loops=loops, poll_s=0.001).run(once=True)))

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            # Q accepted while P's row stays locked (until `finally`): behind P's expiry it
            # never is, and PATIENCE, a bound only that hang reaches, fails the test
            for _ in range(int(PATIENCE * 20)):
                if rt.store.get_run(q.run_id).status == "accepted":
                    break
                worker.join(0.05)
            else:
                raise AssertionError("Q was not driven while P's row was held")
            assert rt.store.get_run(p.run_id).status == "awaiting_approval"
        finally:
            lock.rollback()
            lock.close()
        worker.join(PATIENCE)
        assert not worker.is_alive() and stats[0].errors == 0, stats
        # the lock gone, a poll records P's expiry and concludes P (expiry escalates): the
        # same worker's, if it polled again after the lock went, else another's
        if rt.store.get_run(p.run_id).status == "awaiting_approval":
            asyncio.run(Worker(rt, loops=loops, poll_s=0.001).run(once=True))
        assert rt.store.get_run(p.run_id).status == "escalated"
        assert bank.executed == []


def test_interrupted_word_waits_out_a_row_lock(pg_url: str, pg_schema: tuple[str, str]) -> None:
    """An execution that stops alive says so (``interrupted``, ``_said_alive``) from a store
    thread. Refused on its run's row held by another session (``RowLocked``), the word is tried
    again once the lock goes: swallowed there, it was never written, and resuming the run
    counted a crash of it (``crashes_at``)."""
    import functools

    import psycopg

    from loopwright._lease_life import _said_alive
    from loopwright._store_threads import in_store_thread
    from loopwright.store import open_store

    base, schema = pg_schema
    store = open_store(pg_url)
    lock = psycopg.connect(base)
    try:
        rec, _ = store.create_run(
            run_id="run-said", task_key="k", loop_name="l", project="p", spec_ref=None,
            loop_version=None, contract={"budget": {"max_cycles": 1}}, task={"x": 1},
            initial_state={"cycle": 0},
        )  # fmt: skip
        token = store.acquire_lease(rec.run_id, "me", 60)
        lock.execute(f'SET search_path TO "{schema}"')
        lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (rec.run_id,))
        rests: list[bool] = []

        def resting(on: bool) -> None:
            rests.append(on)
            if on:  # refused on the lock: the lock goes, the word is tried again
                lock.rollback()

        asyncio.run(
            in_store_thread(
                functools.partial(_said_alive, store, rec.run_id, token, 0, "KeyboardInterrupt"),
                resting=resting,
            )
        )
        assert rests[:1] == [True]
        said = [e for e in store.events(rec.run_id) if e.kind == "interrupted"]
        assert [e.data["lease"] for e in said] == [token]
    finally:
        lock.close()
        store.close()


def test_a_held_runs_expired_requests_cost_one_lock_wait_a_poll(
    pg_url: str, pg_schema: tuple[str, str]
) -> None:
    """A parked run with several expired requests, its row held by another session: a poll
    waits for that row once (``RowLocked``) and leaves the run's other requests to a later
    poll with it. Each request waited its own lock wait, so a run with many (up to the poll's
    ``EXPIRE_BATCH``) held the worker's claims for that many waits at every poll."""
    import psycopg
    from test_worker_expired_requests import _expired
    from test_worker_expired_requests import _request as request_of

    from loopwright._store_threads import in_store_thread
    from loopwright._worker import Worker
    from loopwright.store._protocol_commit import RowLocked

    base, schema = pg_schema
    n = 4
    with lw.Runtime(pg_url) as rt:
        store = rt.store
        rec, _ = store.create_run(
            run_id="run-held", task_key="k", loop_name="l", project="p", spec_ref=None,
            loop_version=None, contract={"budget": {"max_cycles": 1}}, task={"x": 1},
            initial_state={"cycle": 0},
        )  # fmt: skip
        token = store.acquire_lease(rec.run_id, "me", 60)
        store.commit(
            rec.run_id, token, seq=1, cycle=1, state={"cycle": 1}, record={"cycle": 1},
            events=[], run={"cycle": 1, "status": "awaiting_approval"},
            approvals=[request_of(rec.run_id, i) for i in range(n)],
        )  # fmt: skip
        store.release_lease(rec.run_id, token)
        for i in range(n):
            _expired(store, f"ap-{rec.run_id}-{i}")
        refused: list[str] = []
        real = store.decide_approval

        def decide_approval(approval_id: str, **kw: Any) -> Any:
            try:
                return real(approval_id, **kw)
            except RowLocked:
                refused.append(approval_id)
                raise

        store.decide_approval = decide_approval  # type: ignore[method-assign]
        lock = psycopg.connect(base)
        try:
            lock.execute(f'SET search_path TO "{schema}"')
            lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (rec.run_id,))
            worker = Worker(rt, loops={})
            assert asyncio.run(in_store_thread(worker._expire_batch)) is None
            assert len(refused) == 1, refused
        finally:
            lock.rollback()
            lock.close()
        assert asyncio.run(in_store_thread(worker._expire_batch)) is None
        assert store.expired_requests(limit=10) == []  # the lock gone: all recorded
