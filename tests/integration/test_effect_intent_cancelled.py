"""A run cancelled while its effect's intent is being written (crash53b).

On PostgreSQL the intent is written in a store thread (``_store_threads.written``), which a
cancellation of the run cannot stop: the intent landed, the call never started, and the run,
resumed, found an effect started and never finished — in doubt (escalated, for one neither
idempotent nor reconcilable) though it had never run. The intent's write now ends before the
cancellation is taken, and an intent whose call was never started is withdrawn.

The fault is placed by holding the intent's write in its thread on an event, never by timing.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields

import loopwright as lw
from loopwright.trace import run_spans

PATIENCE = 120.0  # a bound only a hang reaches (never a measurement)


def test_a_cancel_during_the_intent_write_leaves_no_effect_in_doubt(pg_url: str) -> None:
    executed: list[str] = []

    def pay(invoice: str, key: str) -> dict[str, Any]:
        executed.append(key)
        return {"paid": invoice}

    effect = lw.effect("spend", name="pay")(pay)

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", TARGET).edits, effects=(effect.call(invoice="A-1"),)
        )

    def make_loop() -> lw.Loop:
        return lw.Loop(
            name="fx-cancel",
            actor=actor,
            verifiers=[fields],
            contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
            effects=[effect],
            approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
        )

    entered, release = threading.Event(), threading.Event()
    with lw.Runtime(pg_url) as rt:
        put = rt.store.journal_put

        def held_put(*args: Any, **kw: Any) -> Any:
            if kw.get("status") == "intent" and not entered.is_set():
                entered.set()
                assert release.wait(PATIENCE)
            return put(*args, **kw)

        rt.store.journal_put = held_put  # type: ignore[method-assign]

        async def go() -> str:
            run = asyncio.create_task(rt.run(make_loop(), TASK, task_key="pay-1"))
            assert await asyncio.to_thread(entered.wait, PATIENCE)
            run.cancel()  # the intent's write is under way in its thread
            await asyncio.sleep(0)
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await run
            return rt.store.list_runs()[0].run_id

        try:
            run_id = asyncio.run(go())
        finally:
            release.set()
        assert executed == []  # cancelled before its call: never started
        r = rt.resume_sync(run_id, make_loop())
        assert (r.status, executed.__len__()) == ("accepted", 1)  # run once, not in doubt
        kinds = [e.kind for e in rt.store.events(run_id)]
        assert "effect_in_doubt" not in kinds and kinds.count("effect_done") == 1
        assert kinds.count("effect_withdrawn") == 1  # the attempt never started, said so
        (entry,) = rt.store.journal(run_id, kind="effect")
        assert (entry.status, entry.attempts) == ("done", 1)  # the withdrawn one not counted
        _, spans = run_spans(rt.store, run_id)
        (span,) = [s for s in spans if s.kind == "effect"]
        assert span.attributes["loopwright.effect.attempts"] == 1
