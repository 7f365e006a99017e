"""A run's lease renewal does not wait behind user work in the event loop's default executor
(review52a). pg52 moved the renewal off the event loop into ``asyncio.to_thread``: the
default executor, which a sandboxed check (``python_tests_verifier`` runs its tests there), an
image load or a user's own ``run_in_executor`` fill. With every thread of it busy longer than
the lease, the renewals queued behind them, the lease ran out under the live run and another
worker took it over mid-cycle, as pg52 fixed for a renewal stalled on the event loop."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

PATIENCE = 120.0  # a bound that only ends a failing test: a renewal comes within a TTL


def _done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=state.values()["doc"]["body"] == "done")


def test_a_renewal_is_not_queued_behind_the_default_executors_busy_threads(
    tmp_path: Path,
) -> None:
    tmp_path.mkdir(exist_ok=True)
    renewed = threading.Event()
    pools: list[ThreadPoolExecutor] = []

    async def actor(ctx: lw.Context) -> lw.Proposal:
        # Every thread of the event loop's default executor busy with user work (here its
        # one thread) until the run's lease is renewed.
        loop = asyncio.get_running_loop()
        pools.append(ThreadPoolExecutor(max_workers=1))
        loop.set_default_executor(pools[-1])
        ok = await loop.run_in_executor(None, renewed.wait, PATIENCE)
        return lw.Proposal.edit("doc", {"body": "done" if ok else "lease never renewed"})

    once = lw.Contract(budget=lw.Budget(max_cycles=1))
    loop = lw.Loop(name="busy-pool", actor=actor, verifiers=[_done], contract=once)
    with lw.Runtime(tmp_path / "s.db", lease_ttl_s=0.3) as rt:
        rt.store.renew_lease = _then(rt.store.renew_lease, renewed.set)  # type: ignore[method-assign]
        result = rt.run_sync(loop, {"artifacts": {"doc": {"body": ""}}}, task_key="k")
    assert pools, "the actor never ran"
    assert result.state.values()["doc"]["body"] == "done"
    assert result.status == "accepted"


def _then(fn: Callable[..., Any], after: Callable[[], None]) -> Callable[..., Any]:
    """``fn``, calling ``after`` once it has returned."""

    def both(*args: Any, **kw: Any) -> Any:
        out = fn(*args, **kw)
        after()
        return out

    return both


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_renews_its_leases_in_threads_of_its_own(tmp_path: Path) -> None:
    # The renewal threads outlive a run, idle; a child forked then has the pool without them,
    # and a renewal handed to it waited for ever. The child's run must be renewed as the
    # parent's was (each blocks its default executor until its lease is renewed).
    test_a_renewal_is_not_queued_behind_the_default_executors_busy_threads(tmp_path / "p")
    pid = os.fork()
    if pid == 0:  # the child: its exit status says how its run went
        code = 1
        try:
            test_a_renewal_is_not_queued_behind_the_default_executors_busy_threads(tmp_path / "c")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
