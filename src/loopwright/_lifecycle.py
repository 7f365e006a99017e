"""A runtime's end: ``drain`` (its runs stop at their next cycle boundary) and ``close`` (its
owner name freed, its own store closed), ``with`` and ``async with`` ending in ``close``.

``close`` first waits for a person's operations awaited off the event loop that are under
way in a store thread (``_person_async``), and refuses those not started yet: the store closed
under one cut it off half-written (a cancel without its audit record, an edit without its
event; async55b). From ``async with`` the wait is made on the event loop, which those
operations do not need, so that the loop's other work goes on meanwhile.
"""

from __future__ import annotations

import asyncio

from ._host import RuntimeHost
from ._live_owners import release_owner

__all__ = ["Lifecycle"]


class Lifecycle(RuntimeHost):
    """``drain``, ``close`` and the ends of ``with`` and ``async with`` (mixed into
    ``Runtime``)."""

    _draining: bool
    _owns_store: bool

    def drain(self) -> None:
        """Finish the cycle in flight of every run, then stop before the next (graceful
        shutdown: runs stay resumable, leases are released). A person's operation under way
        goes on to its end; ``close`` waits for it."""
        self._draining = True

    def close(self) -> None:
        """Frees the owner name and closes the store this runtime opened, once a person's
        operations under way in a store thread (``cancel_async`` ...) have ended; those
        not started yet are refused (``StoreError``), nothing of them done. Called on an
        event loop, it blocks that loop until then: ``async with`` waits without blocking."""
        self._person_ops.close()
        self._closed()

    def _closed(self) -> None:
        release_owner(self.owner, self)
        if self._owns_store:
            self.store.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._person_ops.aclose()
        except asyncio.CancelledError:
            self.close()  # (waited for here, then the cancellation raised)
            raise
        self._closed()
