"""A worker driving a single run whose sync actor takes longer than the lease: the call runs in
a thread, so the heartbeat goes on renewing the lease (docs/scale.md: a worker's sync actors
and verifiers run in threads). Inline, it held the event loop: no renewal, the lease expired
under the live run and another worker took it over, redoing the cycle (from probe43a)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright._worker import Worker

PATIENCE = 120.0  # a bound that only ends a failing test: two renewals come within a TTL


def _done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=state.values()["doc"]["body"] == "done")


def test_a_long_sync_actor_does_not_stop_the_workers_heartbeat(tmp_path: Path) -> None:
    renewals = {"n": 0, "at_start": -1}
    renewed_twice = threading.Event()

    def actor(ctx: lw.Context) -> lw.Proposal:  # sync: the engine decides where it runs
        renewals["at_start"] = renewals["n"]
        ok = renewed_twice.wait(timeout=PATIENCE)
        return lw.Proposal.edit("doc", {"body": "done" if ok else "lease never renewed"})

    once = lw.Contract(budget=lw.Budget(max_cycles=1))
    loop = lw.Loop(name="long-call", actor=actor, verifiers=[_done], contract=once)
    with lw.Runtime(tmp_path / "s.db", lease_ttl_s=0.3) as rt:
        real = rt.store.renew_lease

        def counted(*args: Any, **kw: Any) -> Any:
            out = real(*args, **kw)
            renewals["n"] += 1
            if renewals["at_start"] >= 0 and renewals["n"] >= renewals["at_start"] + 2:
                renewed_twice.set()
            return out

        rt.store.renew_lease = counted  # type: ignore[method-assign]
        rec, _ = rt.create(loop, {"artifacts": {"doc": {"body": ""}}}, task_key="k")
        worker = Worker(rt, loops={"long-call": loop}, concurrency=4, poll_s=0.01)
        stats = asyncio.run(worker.run(once=True))
        assert (stats.claimed, dict(stats.ended), stats.lost) == (1, {"accepted": 1}, 0)
        assert rt.store.get_run(rec.run_id).status == "accepted"


def test_a_lone_run_calls_its_sync_actor_in_a_thread_when_asked(tmp_path: Path) -> None:
    # A lone run calls a sync actor on the event loop's thread (the cheap path), so a call
    # longer than the lease stops the heartbeat; Runtime(calls_in_threads=True) is the way
    # out docs/scale.md gives (it was a class attribute a user could not pass)
    where: list[bool] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        where.append(threading.current_thread() is threading.main_thread())
        return lw.Proposal.edit("doc", {"body": "done"})

    once = lw.Contract(budget=lw.Budget(max_cycles=1))
    loop = lw.Loop(name="lone", actor=actor, verifiers=[_done], contract=once)
    task = {"artifacts": {"doc": {"body": ""}}}
    for threaded, key in ((False, "inline"), (True, "threaded")):
        with lw.Runtime(tmp_path / "s.db", calls_in_threads=threaded) as rt:
            assert rt.run_sync(loop, task, task_key=key).status == "accepted"
    assert where == [True, False]
    try:
        lw.Runtime(tmp_path / "s.db", calls_in_threads="yes")  # type: ignore[arg-type]
    except lw.ConfigError as exc:
        assert exc.field == "calls_in_threads"
    else:
        raise AssertionError("a non-bool calls_in_threads was taken")
