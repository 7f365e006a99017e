"""Group commit: the cycle commits of many runs sharing one event loop, in one transaction.

Each run's commit is queued with a future; a committer task takes everything queued since its
last batch and writes it with ``Store.commit_many`` in a thread — one transaction and one sync
to disk for the whole batch — while the event loop goes on with the other runs (a batch of one
is written on the event loop's thread, SQLite's: see ``_write``; a store whose writes can wait on
a row lock, PostgreSQL's, has every batch written in a thread, and other runs' batches go on
while one waits: ``_start_batches``). A run waits
for its future before anything that depends on the checkpoint being durable (the next cycle,
an effect, its return), so "a cycle continues only once the batch holding its checkpoint is
durable". Written by hand because the batching must follow our own durability points; no
library batches a store's fenced commits across coroutines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

from ._errors import StoreError
from ._memory_search import RECALL_RANKED
from ._recall import RECALL_LIMIT, recall_searches
from ._store_threads import in_store_thread
from .store import CommitRequest, Store
from .store._protocol_commit import RunBusy, after_failed
from .store._records import MemoryFound, MemoryRecall

__all__ = ["GroupCommitter", "GroupRecall"]

Scopes = list[tuple[str, str | None]]

# Batches being written at once, at most, to a store of concurrent writers (each holds a pooled
# connection): one whose run's row another session holds locked waits, and the others go on.
IN_FLIGHT = 4


class GroupCommitter:
    def __init__(self, store: Store, *, together: bool = True) -> None:
        self.store = store
        self.loop = asyncio.get_running_loop()
        self._queue: list[tuple[CommitRequest, asyncio.Future[bool]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # clear while the committer task writes a batch itself (not a store of concurrent
        # writers: ``_run``), so that ``close`` waits for it too
        self._idle = asyncio.Event()
        self._idle.set()
        # A store whose writes can wait on another session's row lock (PostgreSQL:
        # ``Store.concurrent_writers``): every batch is written in a thread, and batches of
        # other runs go on while one waits (evloop53). Its batch of one written on the event
        # loop waited there, and every run of the process with it; one batch at a time, the
        # other runs' commits queued behind the one that waited.
        self.threads = store.concurrent_writers
        # ``together``: the commits of runs ready in one turn go in one batch; False (the
        # runtime's ``group_commit=False``), each its own (written in a thread all the same).
        self.together = together
        self._writing: set[asyncio.Task[None]] = set()
        # of those, the batches pausing before they are tried again, refused on a row another
        # session holds locked (``RowLocked``): holding no connection, they are not in flight,
        # and the others' batches go on (evloop53b: four runs whose rows were held took every
        # batch in flight, and the worker's every run waited)
        self._resting = 0
        # the runs of the batches being written (a run left out of one, ``RunBusy``, is in
        # the batch it is written in alone before that one ends)
        self._busy: Counter[str] = Counter()
        self.batches = 0
        self.commits = 0
        # (run_id, token) → the first commit of the run that failed, and why: a later one
        # queued before the run learnt of it is a delta on it, refused in a later batch as
        # the store refuses it in the same one (written, the run's checkpoint chain had a
        # hole). Forgotten when the run commits that checkpoint again (``_settle`` undid it).
        self._failed: dict[tuple[str, int], tuple[int, StoreError]] = {}

    def submit(self, req: CommitRequest) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = self.loop.create_future()
        self._queue.append((req, fut))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._run(), name="loopwright-group-commit")
        return fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            # Let the runs that are ready this turn add their commits to the batch.
            await asyncio.sleep(0)
            if self.threads:
                self._start_batches()
                continue
            batch, self._queue = self._queue, []
            if batch:
                self._idle.clear()
                runs = [req.run_id for req, _ in batch]
                self._busy.update(runs)  # (``settle``: a run's batch being written)
                # Written in a call of its own, so that nothing here holds the batch while the
                # committer waits for the next: each request goes when its run has settled it,
                # among the objects its next cycle makes. Held here until the next batch, a
                # hundred runs' requests (about 40 objects each) were freed in one lump a
                # batch; the collector's young generation then saw thousands of objects
                # made and kept a batch, and collected (and promoted) them at every turn.
                try:
                    await self._write(batch)
                finally:
                    self._idle.set()
                    self._busy.subtract(runs)
                    self._busy = +self._busy  # (the runs ended: none left at 0)
                del batch, runs

    def _start_batches(self) -> None:
        """The queued commits of runs with none being written, as batches written each in a
        thread (at most ``IN_FLIGHT`` at once); a run's later commit waits in the queue until
        the batch holding its earlier one has ended, so a run's commits are written in order
        (and one after a failed one is refused: ``_after_failed``)."""
        while self._queue and len(self._writing) - self._resting < IN_FLIGHT:
            batch: list[tuple[CommitRequest, asyncio.Future[bool]]] = []
            left: list[tuple[CommitRequest, asyncio.Future[bool]]] = []
            held = set(self._busy)
            for item in self._queue:
                run_id = item[0].run_id
                if run_id in held or (batch and not self.together):
                    held.add(run_id)  # (its later commits after this one, not before)
                    left.append(item)
                else:
                    held.add(run_id)
                    batch.append(item)
            self._queue = left
            if not batch:
                return
            self._spawn(batch)

    def _spawn(self, batch: list[tuple[CommitRequest, asyncio.Future[bool]]]) -> None:
        """``batch`` written by a task of its own, its runs busy until it ends."""
        runs = [req.run_id for req, _ in batch]
        self._busy.update(runs)
        task = self.loop.create_task(self._write(batch), name="loopwright-commit-batch")
        self._writing.add(task)
        task.add_done_callback(lambda t: self._batch_ended(t, runs))

    def _batch_ended(self, task: asyncio.Task[None], runs: list[str]) -> None:
        self._writing.discard(task)
        self._busy.subtract(runs)
        for run_id in runs:
            if self._busy.get(run_id, 1) <= 0:
                del self._busy[run_id]
        if self._queue:
            self._wake.set()

    async def _write(self, batch: list[tuple[CommitRequest, asyncio.Future[bool]]]) -> None:
        if self._failed:
            batch = self._after_failed(batch)
            if not batch:
                return
        try:
            reqs = [r for r, _ in batch]
            # A batch of one amortises nothing, and a thread costs more than the overlap
            # it buys: both threads run Python, so every statement hands the GIL across
            # and back (bench/RESULTS.md: two concurrent runs took 1,050 µs a cycle with
            # the hop, 740 µs without; and 100 runs gained too). Written here, at once.
            if self.threads:
                results = await in_store_thread(self.store.commit_many, reqs, resting=self._rest)
            elif len(reqs) == 1:
                results = self.store.commit_many(reqs)
            else:
                results = await asyncio.to_thread(self.store.commit_many, reqs)
        except BaseException as exc:  # the store failed: every waiter learns it
            for req, fut in batch:
                self._note_failed(req, exc)
                if not fut.done():
                    fut.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self.batches += 1
        self.commits += len(batch)
        for (req, fut), res in zip(batch, results, strict=True):
            if isinstance(res, RunBusy) and len(batch) > 1:
                # its run's row locked by another session: nothing of it written; alone, in a
                # batch of its own, it waits there while the rest of this batch goes on
                self.commits -= 1
                self._spawn([(req, fut)])
            elif isinstance(res, BaseException):
                self._note_failed(req, res)
                if not fut.done():
                    fut.set_exception(res)
            elif not fut.done():
                fut.set_result(res)

    def _rest(self, resting: bool) -> None:
        self._resting += 1 if resting else -1
        if resting and self._queue:
            self._wake.set()

    def _note_failed(self, req: CommitRequest, exc: BaseException) -> None:
        key = (req.run_id, req.token)
        if isinstance(exc, StoreError) and (
            key not in self._failed or self._failed[key][0] > req.seq
        ):
            self._failed[key] = (req.seq, exc)

    def _after_failed(
        self, batch: list[tuple[CommitRequest, asyncio.Future[bool]]]
    ) -> list[tuple[CommitRequest, asyncio.Future[bool]]]:
        """``batch`` less the commits of runs whose earlier commit failed (each refused)."""
        kept = []
        for req, fut in batch:
            key = (req.run_id, req.token)
            first = self._failed.get(key)
            if first is not None:
                if req.seq > first[0]:
                    if not fut.done():
                        fut.set_exception(after_failed(req, first[1], batch=False))
                    continue
                del self._failed[key]  # that checkpoint written again: the run goes on from it
            kept.append((req, fut))
        return kept

    def holds(self, run_id: str) -> bool:
        """Whether a commit of the run is queued or being written."""
        return self._busy.get(run_id, 0) > 0 or any(r.run_id == run_id for r, _ in self._queue)

    async def settle(self, run_id: str) -> None:
        """Wait until none of the run's commits is queued or being written (each written, or
        refused), neither raising their outcome nor cancelling them. A run's winding down
        waits here before it hands its lease back: a commit of its queued when it was
        cancelled (its future cancelled with it, the request still queued) was written after
        the release, by the committer, while other runs went on (crash53b)."""
        while self.holds(run_id):
            if (self._task is None or self._task.done()) and not self._writing:
                return  # (nothing would take them: not waited for ever)
            waits: set[asyncio.Future[Any]] = set(self._writing)
            waits |= {f for r, f in self._queue if r.run_id == run_id and not f.done()}
            idle = None if self._idle.is_set() else self.loop.create_task(self._idle.wait())
            if idle is not None:
                waits.add(idle)
            if not waits:  # queued, its future cancelled: the committer takes it within a turn
                await asyncio.sleep(0)
                continue
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if idle is not None:
                    idle.cancel()

    async def close(self) -> None:
        """Wait for what is queued and being written, then stop the committer task. A queued
        commit whose run was cancelled at its durability point (its future cancelled with it)
        is still written, and waited for: its cancellation is its run's. Awaited here, it was
        raised into the run that closes, skipping the rest of its winding down (its heartbeat's
        cancel, its lease's release; review53a)."""
        while self._queue or self._writing or not self._idle.is_set():
            waits: set[asyncio.Future[Any]] = {f for _, f in self._queue if not f.done()}
            waits |= self._writing
            idle = None if self._idle.is_set() else self.loop.create_task(self._idle.wait())
            if idle is not None:
                waits.add(idle)
            if waits:  # (``wait``: neither raises their outcome nor cancels them)
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if idle is not None:
                        idle.cancel()
            elif self._task is None or self._task.done():
                break  # (nothing would take them: not waited for ever)
            else:  # queued, each future cancelled: the committer takes them within a turn
                await asyncio.sleep(0)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


class GroupRecall:
    """Feedback-memory reads of the runs sharing one event loop: one store call per loop turn.

    Every cycle's context carries the memory of its task and project, read when the cycle
    starts (so a correction a person adds is seen at the next cycle). A hundred runs each
    reading on their own would put a hundred blocking store round trips a turn on the event
    loop; instead the first read of a turn schedules one ``memory_recall`` call carrying the
    recall of every run that asks during that turn (one connection, one probe per side for
    all their scopes, one statement per search, each ranked in the database): people's
    feedback, and the reflections of the runs whose people's feedback came back short of a
    context's slots (``_recall.recall``: reflections only fill the slots left). Same rows,
    same freshness.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.loop = asyncio.get_running_loop()
        self._waiting: list[tuple[MemoryRecall, asyncio.Future[MemoryFound]]] = []
        self.queries = 0

    def fetch(
        self,
        scopes: Scopes,
        query: str = "",
        ranked: int | None = RECALL_RANKED,
        limit: int = RECALL_LIMIT,
    ) -> asyncio.Future[MemoryFound]:
        """A recall's rows (``Store.memory_recall``): its people's-feedback search's
        (``_recall.recall_searches``), best first, and its reflections' search's where those
        came back short of the ``limit`` slots: ``_recall.recall``'s ``found``; ``ranked``:
        ``memory_search``'s."""
        fut: asyncio.Future[MemoryFound] = self.loop.create_future()
        people, loop = recall_searches(scopes, query, limit, ranked)
        self._waiting.append(((people, loop, limit), fut))
        if len(self._waiting) == 1:
            # after the callbacks already ready this turn: the other runs ask first
            self.loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        try:
            found = self.store.memory_recall([asked for asked, _ in waiting])
            self.queries += 1
            if len(found) != len(waiting):
                raise ValueError(f"{len(found)} answers to {len(waiting)} memory recalls")
        except Exception as exc:  # every waiter learns it (recall is best effort there)
            for _, fut in waiting:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, fut), mine in zip(waiting, found, strict=True):
            if not fut.done():
                fut.set_result(mine)
