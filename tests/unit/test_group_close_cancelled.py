"""The group committer's ``close`` with a commit queued whose run was cancelled (review53a).

A run cancelled while it waits at a durability point cancels its commit's future (an awaited
future is cancelled with its task); on a store of concurrent writers (PostgreSQL) that commit
can still sit in the queue, behind its run's earlier batch. ``close``, called by the last run
of the loop to end, awaited the queue's last future and so raised that cancellation into a
run that was never cancelled, or past a cancelled run's own winding down: the rest of its
``finally`` (its heartbeat's cancel, its lease's release) was skipped.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

from loopwright import _group

PATIENCE = 120.0  # a bound only a hang reaches (never a measurement)


class _GatedStore:
    """A store of concurrent writers whose first ``commit_many`` waits for ``gate``."""

    concurrent_writers = True

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.written: list[tuple[str, int]] = []
        self.finished: list[int] = []  # each write's size, once it has returned
        self._lock = threading.Lock()

    def commit_many(self, reqs: list[Any]) -> list[bool]:
        with self._lock:
            first = not self.written
            self.written.extend((r.run_id, r.seq) for r in reqs)
        if first:
            assert self.gate.wait(PATIENCE)
        self.finished.append(len(reqs))
        return [False] * len(reqs)


def _req(run_id: str, seq: int) -> Any:
    return SimpleNamespace(run_id=run_id, token=1, seq=seq)


def test_close_waits_past_a_queued_commit_whose_run_was_cancelled() -> None:
    store = _GatedStore()

    async def main() -> list[tuple[str, int]]:
        committer = _group.GroupCommitter(store)  # type: ignore[arg-type]
        first = committer.submit(_req("a", 1))
        for _ in range(1000):  # (turns until its batch is being written: a hang guard)
            if committer._writing:
                break
            await asyncio.sleep(0)
        assert committer._writing
        second = committer.submit(_req("a", 2))  # queued: its run's earlier batch is busy
        run = asyncio.create_task(_await(second))
        await asyncio.sleep(0)
        run.cancel()  # the run cancelled at its durability point: its future with it
        await asyncio.sleep(0)
        assert second.cancelled() and any(f is second for _, f in committer._queue)
        closing = asyncio.create_task(committer.close())
        await asyncio.sleep(0)
        store.gate.set()
        await asyncio.wait_for(closing, PATIENCE)  # no CancelledError out of it
        assert first.done() and not first.cancelled()
        return store.written

    # both written, in order: the cancelled run's commit still lands (as a crash after it)
    try:
        assert asyncio.run(main()) == [("a", 1), ("a", 2)]
    finally:
        store.gate.set()  # (a thread left waiting on it ends)


async def _await(fut: asyncio.Future[bool]) -> None:
    await fut


def test_close_waits_for_the_batch_being_written_whose_runs_were_cancelled() -> None:
    """SQLite's committer writes a batch of several in a thread from its own task: with every
    run of the batch cancelled (their futures with them) and nothing queued, ``close`` still
    waits for that write before it stops the committer, which cancelling mid-write left
    going in its thread after the runtime had closed."""
    store = _GatedStore()
    store.concurrent_writers = False  # type: ignore[misc]

    async def main() -> list[tuple[str, int]]:
        committer = _group.GroupCommitter(store)  # type: ignore[arg-type]
        futs = [committer.submit(_req(r, 1)) for r in ("a", "b")]  # one batch of two
        for _ in range(1000):  # (turns until the committer has taken it: a hang guard)
            if not committer._queue:
                break
            await asyncio.sleep(0)
        runs = [asyncio.create_task(_await(f)) for f in futs]
        await asyncio.sleep(0)
        for run in runs:
            run.cancel()  # its runs cancelled: their futures with them
        await asyncio.sleep(0)
        assert all(f.cancelled() for f in futs) and not committer._queue
        closing = asyncio.create_task(committer.close())
        for _ in range(20):
            await asyncio.sleep(0)
        assert not closing.done()  # the batch is still being written
        store.gate.set()
        await asyncio.wait_for(closing, PATIENCE)
        assert store.finished == [2]
        return store.written

    try:
        assert asyncio.run(main()) == [("a", 1), ("b", 1)]
    finally:
        store.gate.set()  # (a thread left waiting on it ends)
