"""An ``async def`` effect is "running here" for as long as its coroutine runs (review48),
SQLite and PostgreSQL.

The mark that tells a taker in this process whether the intent's holder may still be executing
the call (``_effect_holders.holder``) was dropped when the effect's function returned its
coroutine, before the coroutine ran: a drive of the run taken over in this process (a token
passed by hand to ``resume``) was told the holder was gone, skipped the grace wait, heard "not
done" from the reconcile hook while the first call was still awaiting, and paid again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from doc_loop import TASK
from test_redo_keys import ALLOW

import loopwright as lw
from loopwright import _effect_journal
from loopwright._effect_holders import holder, running_here

HANG_S = 60.0  # a bound on waits that only a hang reaches (never a measurement)


def _loop(pay: lw.Effect) -> lw.Loop:
    """Pays invoice I6 in cycle 1, then is accepted."""
    return lw.Loop(
        name="async-pay",
        actor=lambda ctx: lw.Proposal(
            edits=(lw.Edit("doc", "b", ctx.cycle),), effects=(pay.call(invoice="I6"),)
        ),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="c")],
        effects=(pay,),
        approvals=ALLOW,
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )


@pytest.mark.parametrize("threads", [False, True])
@pytest.mark.parametrize("timeout_s", [None, 30.0])
def test_an_async_effect_is_running_here_while_it_awaits(
    url: str, threads: bool, timeout_s: float | None
) -> None:
    seen: list[tuple[bool, str]] = []

    with lw.Runtime(url) as rt:
        rt.calls_in_threads = threads

        @lw.effect("spend", name="pay", key=lambda a: a["invoice"], timeout_s=timeout_s)
        async def pay(invoice: str) -> dict[str, Any]:
            await asyncio.sleep(0)  # (inside the call: its coroutine is running)
            run_id = rt.store.get_run("A").run_id
            (intent,) = rt.store.journal(run_id, kind="effect")
            assert intent.status == "intent"
            mark = (run_id, intent.key)
            seen.append((running_here(mark), holder(intent.data["holder"], mark)))
            return {"paid": invoice}

        out = rt.run_sync(_loop(pay), TASK, task_key="A")
        assert out.status == "accepted", out
        assert seen == [(True, "alive")]  # before: (False, "gone")
        (done,) = rt.store.journal(out.run_id, kind="effect")
        assert done.status == "done"
        # ...and no longer once it ended
        assert not running_here((out.run_id, done.key))
        assert holder(rt.owner, (out.run_id, done.key)) == "gone"


def test_a_takeover_in_this_process_waits_for_an_async_call_in_flight(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    paid: list[str] = []  # the provider's ledger: a payment is made when the call ends
    in_flight = 0
    most = 0
    verdicts: list[str] = []

    def recording(owner: Any, mark: tuple[str, str]) -> str:
        verdicts.append(holder(owner, mark))
        asked.set()
        return verdicts[-1]

    monkeypatch.setattr(_effect_journal, "holder", recording)

    def paid_already(key: str) -> Any:
        return {"paid": key} if key in paid else None

    async def main() -> None:
        nonlocal in_flight, most
        gate = asyncio.Event()
        started = asyncio.Event()

        @lw.effect(
            "spend", name="pay", key=lambda a: a["invoice"], timeout_s=2.0, reconcile=paid_already
        )
        async def pay(invoice: str, *, key: str) -> dict[str, Any]:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            started.set()
            try:
                await gate.wait()
                paid.append(key)
                return {"paid": key}
            finally:
                in_flight -= 1

        loop = _loop(pay)
        with lw.Runtime(url) as rt:
            first = asyncio.create_task(rt.run(loop, TASK, task_key="A"))
            await asyncio.wait_for(started.wait(), HANG_S)
            # a lease of this runtime's owner taken by hand, and handed to a second drive
            run_id = rt.store.get_run("A").run_id
            token = rt.store.acquire_lease(run_id, rt.owner, rt.lease_ttl_s)
            second = asyncio.create_task(rt.resume(run_id, loop, token=token))
            await asyncio.wait_for(asked.wait(), HANG_S)
            # the second drive found the first's intent: its holder is this process, its
            # call still awaiting — alive, so it waits for the deadline before paying
            assert verdicts == ["alive"]  # before: "gone", and it paid again at once
            gate.set()  # the first call ends: the payment is made
            results = await asyncio.gather(first, second, return_exceptions=True)
            assert isinstance(results[0], lw.StaleLeaseError), results[0]
            assert isinstance(results[1], lw.RunResult), results[1]
            assert results[1].status == "accepted"
            (entry,) = rt.store.journal(run_id, kind="effect")
            assert entry.status == "done"
            assert entry.data.get("reconciled") is True  # settled by the hook, not run again

    asked = asyncio.Event()
    asyncio.run(main())
    assert len(paid) == 1, paid  # once
    assert most == 1  # never two calls in flight at once


def test_a_drive_cancelled_while_its_async_call_runs_on_leaves_it_running_here(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drive cancelled twice (a task group, a second Ctrl-C) while its effect call finishes
    its own cancellation: the call can run on after the drive has ended and handed its lease
    back (``asyncio.wait_for`` runs it as a task of its own on Python 3.11). The next resume in
    this process must find its holder alive exactly while it still runs."""
    verdicts: list[str] = []
    ended: list[bool] = []  # the effect's coroutine has returned or raised

    def recording(owner: Any, mark: tuple[str, str]) -> str:
        verdicts.append(holder(owner, mark))
        asked.set()
        return verdicts[-1]

    monkeypatch.setattr(_effect_journal, "holder", recording)
    paid: list[str] = []

    def paid_already(key: str) -> Any:
        return {"paid": key} if key in paid else None

    async def main() -> None:
        gate = asyncio.Event()
        started, cancelled = asyncio.Event(), asyncio.Event()

        @lw.effect(
            "spend", name="pay", key=lambda a: a["invoice"], timeout_s=1.0, reconcile=paid_already
        )
        async def pay(invoice: str, *, key: str) -> dict[str, Any]:
            started.set()
            try:
                try:
                    await asyncio.Event().wait()  # the provider's answer, never given
                except asyncio.CancelledError:
                    cancelled.set()
                    await gate.wait()  # the charge completes after all
                    paid.append(key)
                    raise
                raise AssertionError("unreachable")
            finally:
                ended.append(True)

        loop = _loop(pay)
        with lw.Runtime(url) as rt:
            first = asyncio.create_task(rt.run(loop, TASK, task_key="A"))
            await asyncio.wait_for(started.wait(), HANG_S)
            first.cancel()
            await asyncio.wait_for(cancelled.wait(), HANG_S)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            run_id = rt.store.get_run("A").run_id
            second = asyncio.create_task(rt.resume(run_id, loop))
            await asyncio.wait_for(asked.wait(), HANG_S)
            still = not ended  # whether the first call runs on
            gate.set()  # (first: a failed assertion must not leave a call waiting for it)
            assert verdicts == ["alive" if still else "gone"]  # before: "gone" while it ran
            out = await asyncio.wait_for(second, HANG_S)
            assert out.status == "accepted", out
            (entry,) = rt.store.journal(run_id, kind="effect")
            assert entry.status == "done"

    asked = asyncio.Event()
    asyncio.run(main())
    assert len(paid) == 1, paid  # once
