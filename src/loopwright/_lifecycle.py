"""A runtime's end: ``drain`` (its runs stop at their next cycle boundary) and ``close`` (its
owner name freed, its own store closed), ``with`` and ``async with`` ending in ``close``.

``close`` first drains the runs this runtime executes (``resume``, ``run``, a worker's) and
waits for them to wind down: each ends its cycle in flight, commits it, says ``drained`` and
hands its lease back, the run left resumable. The store closed under them cut a cycle off
half-written (lifecycle55), as ``asyncio.TaskGroup`` or a Temporal worker's shutdown waits for
what it started. A resume that starts once ``close`` has begun is refused (``ConflictError``,
its lease handed back). Called on the event loop that runs some of them, ``close`` cannot wait
(they need that loop): refused, naming them, nothing done; ``async with`` waits on the loop.

It then waits for a person's operations under way, awaited off the event loop in a store
thread (``_person_async``) or synchronous in another thread (``_person_turn``), and refuses
those not started yet and those called after: the store closed under one cut it off
half-written (a cancel without its audit record, an edit without its event; async55b,
inflight56). From ``async with`` both waits are made on the event loop, which those operations
do not need, so that the loop's other work goes on meanwhile; cancelled, each goes on to its
end, then the store is closed and the cancellation raised (inflight56: cancelled with every
task by ``asyncio.run``'s teardown, it closed the store under the runs winding down, their
leases left held).

``drain`` refuses nothing: a person's operation (``cancel_async`` ...) started after it is
carried out, as a resume is, which drains at its first boundary; a drained runtime is still
one to operate on (a worker stopped, its runtime's person answering an approval). Only
``close`` ends that.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from ._errors import ConflictError
from ._host import RuntimeHost
from ._in_flight import InFlight
from ._live_owners import release_owner

__all__ = ["Lifecycle", "Running"]


class Running(InFlight[tuple[str, asyncio.AbstractEventLoop]]):
    """The runs a runtime executes now, each with the event loops driving it; what ``close``
    waits for."""

    def __init__(self, owner: str) -> None:
        super().__init__()
        self.owner = owner

    @property
    def runs(self) -> Counter[tuple[str, asyncio.AbstractEventLoop]]:
        return self.held

    def start_run(self, run_id: str) -> tuple[str, asyncio.AbstractEventLoop]:
        """``run_id`` executed here on the running event loop from now (until ``end``);
        refused once ``close`` has begun."""
        key = (run_id, asyncio.get_running_loop())
        self.start(key, lambda: self._refused(run_id))
        return key

    def _refused(self, run_id: str) -> ConflictError:
        return ConflictError(
            f"resume of run {run_id} was not started: this runtime ({self.owner}) is "
            "closing; resume it with another runtime"
        )

    def close_runs(self, drain: Callable[[], None]) -> None:
        """No run started from now on; those running drained (``drain()``) and waited for,
        unless some run on the caller's own event loop: then ``ConflictError``, nothing done."""
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None

        def check(runs: Counter[tuple[str, asyncio.AbstractEventLoop]]) -> None:
            mine = sorted({rid for rid, loop in runs if loop is here})
            if mine:
                raise ConflictError(
                    f"close() was called on the event loop that executes run(s) "
                    f"{', '.join(mine)} of this runtime ({self.owner}): it cannot wait for them "
                    "there; await them first (drain() stops them at their next cycle "
                    "boundary), or end the runtime with `async with`"
                )

        self.close(check, drain)


class Lifecycle(RuntimeHost):
    """``drain``, ``close`` and the ends of ``with`` and ``async with`` (mixed into
    ``Runtime``)."""

    _draining: bool
    _owns_store: bool

    @property
    def _running(self) -> Running:
        """The runs this runtime executes now (``resume``); made at the first use."""
        made: Running | None = self.__dict__.get("_running_")
        if made is None:
            made = self.__dict__.setdefault("_running_", Running(self.owner))
        return made

    def drain(self) -> None:
        """Finish the cycle in flight of every run, then stop before the next (graceful
        shutdown: runs stay resumable, leases are released). A person's operation under way
        goes on to its end, and one started later is carried out; ``close`` waits for them."""
        self._draining = True

    def close(self) -> None:
        """Drains the runs this runtime executes and waits for them to wind down (their cycle
        in flight committed, their leases handed back), then for a person's operations under
        way (``cancel`` in another thread, ``cancel_async`` ...); those not started yet, and
        those called after, are refused (``StoreError``), nothing of them done; then frees the
        owner name and closes the store this runtime opened. Called on an event loop that
        executes some of the runs it cannot wait for them: ``ConflictError`` naming them,
        nothing done (``async with`` waits there). It blocks an event loop it is called on
        while a person's operation ends."""
        self._running.close_runs(self.drain)
        self._person_ops.close()
        self._closed()

    def _closed(self) -> None:
        release_owner(self.owner, self)
        if self._owns_store:
            self.store.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aexit__(self, *exc: object) -> None:
        # Each wait, cancelled, goes on to its end and then raises the cancellation (``InFlight``):
        # the store is closed once nothing of this runtime's is in flight.
        try:
            await self._running.aclose(self.drain)
        finally:
            try:
                await self._person_ops.aclose()
            finally:
                self._closed()
