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
        self._lock = threading.Lock()

    def commit_many(self, reqs: list[Any]) -> list[bool]:
        with self._lock:
            first = not self.written
            self.written.extend((r.run_id, r.seq) for r in reqs)
        if first:
            assert self.gate.wait(PATIENCE)
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
    assert asyncio.run(main()) == [("a", 1), ("a", 2)]


async def _await(fut: asyncio.Future[bool]) -> None:
    await fut
