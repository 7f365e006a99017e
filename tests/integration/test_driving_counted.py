"""Two drives of one run in one runtime (review48), SQLite and PostgreSQL.

A token passed to ``resume`` by hand (a lease of this runtime's owner, taken with
``Store.acquire_lease``) starts a second drive of a run this runtime is executing; the first is
fenced out and ends. The runtime kept the runs it drives as a set: the first drive ending took
the run out while the second was still executing it, and the runtime then took the run's lease
from its own live execution (an edit, a cancel, a resume through it), fencing it mid-cycle.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from doc_loop import TASK

import loopwright as lw

HANG_S = 60.0  # a bound on waits that only a hang reaches (never a measurement)


def test_the_second_drive_of_a_run_still_guards_it_when_the_first_ends(url: str) -> None:
    gates = [asyncio.Event(), asyncio.Event()]
    entered = [asyncio.Event(), asyncio.Event()]
    calls = 0

    async def actor(ctx: lw.Context) -> lw.Proposal:
        nonlocal calls
        n, calls = calls, calls + 1
        entered[n].set()
        await gates[n].wait()
        return lw.Proposal(edits=(lw.Edit("doc", "b", 10 + n),))

    loop = lw.Loop(
        name="twice-driven",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )

    async def main() -> list[Any]:
        with lw.Runtime(url) as rt:
            first = asyncio.create_task(rt.run(loop, TASK, task_key="A"))
            await asyncio.wait_for(entered[0].wait(), HANG_S)
            run_id = rt.store.get_run("A").run_id
            token = rt.store.acquire_lease(run_id, rt.owner, rt.lease_ttl_s)
            second = asyncio.create_task(rt.resume(run_id, loop, token=token))
            await asyncio.wait_for(entered[1].wait(), HANG_S)
            gates[0].set()  # the first drive goes on, fenced out: it ends
            with pytest.raises(lw.StaleLeaseError):
                await asyncio.wait_for(first, HANG_S)
            # the second still executes the run here: nothing of this runtime takes its lease
            with pytest.raises(lw.ConflictError):
                rt.edit(run_id, "doc/a", 99, by="ana")  # before: edited, the drive fenced
            with pytest.raises(lw.ConflictError):
                await rt.resume(run_id, loop)
            gates[1].set()
            out = await asyncio.wait_for(second, HANG_S)  # before: StaleLeaseError
            assert out.status == "accepted", out
            assert out.state is not None
            doc = out.state.values()["doc"]
            return [doc["b"], doc["a"]]

    assert asyncio.run(main()) == [11, 0]
