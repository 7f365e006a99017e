"""A run cancelled while other runs share its event loop winds down whole (crash53b).

1. Its commit queued in the group commit when it was cancelled (the future cancelled with it,
   the request still queued) was written after its lease was handed back: the commit's expiry
   landed on a row with no owner, and ``loopwright runs`` showed the run running until then.
2. Cancelled again in its winding down (``asyncio.run``'s teardown after a ``gather`` that
   ended at the first cancellation), the release was skipped: the lease stayed held.

Every fault is placed at a point of the code (a hook), never by timing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from test_group_commit import _commit_of, _two_runs, store_url

import loopwright as lw
from loopwright import _group
from loopwright.store import open_store

__all__ = ["store_url"]  # (the fixture: SQLite, and PostgreSQL where one is named)


def _loop(gates: dict[str, asyncio.Event]) -> lw.Loop:
    async def actor(ctx: lw.Context) -> lw.Proposal:
        gate = gates.get(str(ctx.task.get("task_key")))
        if gate is not None:
            gates["entered_" + str(ctx.task["task_key"])].set()
            await gate.wait()
        return lw.Proposal.edit("doc", {"a": 1})

    return lw.Loop(
        name="wind-down",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )


def _run_of(rt: lw.Runtime, key: str) -> lw.RunRecord:
    (rec,) = [r for r in rt.store.list_runs() if r.task_key == key]
    return rec


def test_a_commit_queued_when_its_run_was_cancelled_lands_before_its_release(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_task: list[asyncio.Task[Any]] = []
    state: dict[str, Any] = {}
    submit, write = _group.GroupCommitter.submit, _group.GroupCommitter._write
    settle = getattr(_group.GroupCommitter, "settle", None)

    def hooked_submit(self: _group.GroupCommitter, req: Any) -> asyncio.Future[bool]:
        fut = submit(self, req)
        if a_task and asyncio.current_task() is a_task[0] and "a_id" not in state:
            state["a_id"] = req.run_id
            a_task[0].cancel()  # cancelled with its commit queued: at its durability point
        return fut

    async def hooked_write(self: _group.GroupCommitter, batch: list[Any]) -> None:
        if any(req.run_id == state.get("a_id") for req, _ in batch):
            # held until the run winds down past its commit: its task ended (before the
            # fix: its lease handed back), or it waits for the commit to settle (the fix)
            waits = [asyncio.ensure_future(e.wait()) for e in (state["a_done"], state["settling"])]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
        await write(self, batch)

    async def hooked_settle(self: _group.GroupCommitter, run_id: str) -> None:
        state["settling"].set()
        assert settle is not None
        await settle(self, run_id)

    monkeypatch.setattr(_group.GroupCommitter, "submit", hooked_submit)
    monkeypatch.setattr(_group.GroupCommitter, "_write", hooked_write)
    if settle is not None:
        monkeypatch.setattr(_group.GroupCommitter, "settle", hooked_settle)

    with lw.Runtime(store_url) as rt:

        async def go() -> None:
            gates = {"b": asyncio.Event(), "entered_b": asyncio.Event()}
            state["a_done"], state["settling"] = asyncio.Event(), asyncio.Event()
            loop = _loop(gates)
            b = asyncio.create_task(rt.run(loop, {"task_key": "b", "artifacts": {"doc": {}}}))
            await gates["entered_b"].wait()  # b is driving: the runs share the committer
            a = asyncio.create_task(rt.run(loop, {"task_key": "a", "artifacts": {"doc": {}}}))
            a_task.append(a)
            a.add_done_callback(lambda _t: state["a_done"].set())
            with pytest.raises(asyncio.CancelledError):
                await a
            gates["b"].set()
            await b

        asyncio.run(go())
        assert "a_id" in state  # (the fault was placed)
        rec = rt.store.get_run(state["a_id"])
        assert rec.status == "running"  # interrupted, resumable
        assert (rec.lease_owner, rec.lease_expires_at) == (None, None)
        kinds = [e.kind for e in rt.store.iter_events(rec.run_id)]
        assert kinds[-1] == "interrupted"  # said once its commit had landed, not before it


def test_a_commit_after_the_release_sets_no_expiry_and_a_stale_one_is_refused(
    store_url: str,
) -> None:
    """The commit's expiry is written only while the lease is held (an owner); fencing still
    refuses a commit under a lease taken over."""
    rec, _ = _two_runs(store_url)
    store = open_store(store_url)
    try:
        token = store.acquire_lease(rec.run_id, "me", 60.0)
        store.release_lease(rec.run_id, token)
        late = _commit_of(rec.run_id, token, {"cycle": 0}, run={"lease_expires_at": time.time()})
        store.commit_many([late])
        now = store.get_run(rec.run_id)
        assert (now.lease_owner, now.lease_expires_at) == (None, None)
        newer = store.acquire_lease(rec.run_id, "other", 60.0)
        assert newer > token
        stale = _commit_of(rec.run_id, token, {"cycle": 0}, seq=2)
        (res,) = store.commit_many([stale])
        assert isinstance(res, lw.StaleLeaseError)
        assert store.get_run(rec.run_id).lease_owner == "other"
    finally:
        store.close()


def test_a_run_cancelled_again_as_it_winds_down_still_hands_its_lease_back(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs cancelled, and the last, as it closes the group committer, cancelled again (as
    ``asyncio.run``'s teardown cancels what a ``gather`` left): its lease is handed back all
    the same, and the second cancellation is raised out of it."""
    runs: list[asyncio.Task[Any]] = []
    main: list[asyncio.Task[Any] | None] = []
    close = _group.GroupCommitter.close
    again: list[bool] = []

    async def hooked_close(self: _group.GroupCommitter) -> None:
        if not again:
            again.append(True)
            # every task cancelled again, as ``asyncio.run``'s teardown cancels them: the
            # runs, and whatever winds them down (this one)
            for t in asyncio.all_tasks():
                if t is not main[0]:
                    t.cancel()
            await asyncio.sleep(0)  # (where the cancellation lands)
        await close(self)

    monkeypatch.setattr(_group.GroupCommitter, "close", hooked_close)
    with lw.Runtime(store_url) as rt:

        async def go() -> None:
            main.append(asyncio.current_task())
            gates = {k: asyncio.Event() for k in ("a", "b", "entered_a", "entered_b")}
            loop = _loop(gates)
            for key in ("a", "b"):  # (b starts while a drives: its commits are grouped)
                task = {"task_key": key, "artifacts": {"doc": {}}}
                runs.append(asyncio.create_task(rt.run(loop, task)))
                await gates["entered_" + key].wait()
            for t in runs:
                t.cancel()
            done = await asyncio.gather(*runs, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in done)

        asyncio.run(go())
        assert again  # (the fault was placed)
        for key in ("a", "b"):
            rec = _run_of(rt, key)
            assert (rec.status, rec.lease_owner, rec.lease_expires_at) == ("running", None, None)
            kinds = [e.kind for e in rt.store.iter_events(rec.run_id)]
            assert kinds[-1] == "interrupted"
