"""At most half the store threads are held by a person's operations awaited off the event loop
(``_person_gate``; async55b): forty edits held at a fixed point in their threads (each a wait
on a row lock, in kind) leave the store threads' other work its threads; before, they took all
32 and a lease renewal, a cycle's commit, waited behind them. Nothing is timed: each is held
until the test lets it go."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from support.row_locks import capped_loop, until

import loopwright as lw
from loopwright import _store_threads
from loopwright._store_threads import in_store_thread

LOOP = capped_loop("gated", lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}), 2)
TASK = {"artifacts": {"doc": {"a": 0}}}
THREADS = getattr(_store_threads, "STORE_THREADS", 32)  # (32 before async55b named it)
MANY = THREADS + 8


def test_many_operations_held_in_threads_leave_the_store_threads_other_work_a_thread(
    tmp_path: Path,
) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        runs = [rt.create(LOOP, TASK, task_key=f"t{i}")[0].run_id for i in range(MANY)]
        latest = rt.store.latest_checkpoint
        go = threading.Event()
        lock = threading.Lock()
        inside: list[int] = [0, 0]  # now, most at once

        def held(rid: str) -> Any:
            if threading.current_thread() is not threading.main_thread():
                with lock:
                    inside[0] += 1
                    inside[1] = max(inside)
                assert go.wait(60)
                with lock:
                    inside[0] -= 1
            return latest(rid)

        rt.store.latest_checkpoint = held  # type: ignore[method-assign]

        async def main() -> tuple[bool, list[Any]]:
            edits = [asyncio.ensure_future(rt.edit_async(r, "doc/a", 7, by="ops")) for r in runs]
            # every thread the edits may hold, held (or, before, every store thread)
            assert await until(lambda: inside[0] >= min(MANY, THREADS // 2))
            other = asyncio.ensure_future(in_store_thread(rt.store.get_run, runs[0]))
            served = await until(other.done)  # (a stall runs out the patience: False)
            go.set()
            return served, await asyncio.gather(*edits)

        served, edited = asyncio.run(main())
        rt.store.latest_checkpoint = latest  # type: ignore[method-assign]
        assert served  # a store thread was free for it while the edits were held
        assert inside[1] == THREADS // 2  # half of them at most, at once
        assert [e.run_id for e in edited] == runs  # every edit ended, in turn


def test_a_gate_cancelled_while_waiting_or_given_a_place_passes_it_on() -> None:
    from loopwright import _person_gate

    gate = _person_gate.Gate(1)

    async def main() -> list[str]:
        seen: list[str] = []
        await gate.enter()

        async def take(name: str) -> None:
            await gate.enter()
            seen.append(name)
            gate.leave()

        b, c, d = (asyncio.ensure_future(take(n)) for n in "bcd")
        assert await until(lambda: len(gate._waiting) == 3)
        b.cancel()  # cancelled while it waits: out of the line
        await asyncio.sleep(0)
        gate.leave()  # the place to c ...
        c.cancel()  # ... cancelled before it resumes: passed on to d
        await asyncio.wait([b, c, d])
        return seen

    assert asyncio.run(main()) == ["d"] and gate.held == 0
