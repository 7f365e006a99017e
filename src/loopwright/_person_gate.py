"""How many of a person's operations awaited off the event loop (``_person_async``) may hold a
store thread, and a store's pooled connection, at once; and what a runtime's ``close`` waits
for (async55b).

Such an operation waits for a row another session holds locked (a person in psql, the
dashboard) as its synchronous form does, holding its store thread and a pooled connection for
the whole wait. Thirty-two of them at once took every store thread (``_store_threads``) and
ten every connection of a PostgreSQL store's default pool: the cycle commits, lease renewals
and releases of runs whose rows were free found neither, and every run of the process stalled
with them. At most ``PERSON_THREADS`` (half the store threads) hold a thread at once, and at
most half a store's connections (``Store.connections``) one of its connections; the others
wait on their event loop, holding neither, in the order they came.

``PersonOps``: a runtime's operations in flight, synchronous and awaited (``_person_turn``).
``close`` waits for those under way to end, whole (the store closed under one cut it off
half-written), and refuses those not started yet (waiting for a thread or their turn, or
called after), which have done nothing.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._errors import StoreError
from ._in_flight import InFlight
from ._store_threads import STORE_THREADS, loop_running

if TYPE_CHECKING:
    from .store import Store

__all__ = ["PERSON_THREADS", "Gate", "PersonOps", "gates"]

# Half the store threads: the other half is left to the cycle commits, lease renewals and
# releases of the runs the operations wait beside.
PERSON_THREADS = STORE_THREADS // 2


class Gate:
    """At most ``most`` holders at once, across threads and event loops; one that waits for a
    place waits on its event loop (no thread held: ``enter``) or in its thread
    (``enter_here``), in the order it came."""

    def __init__(self, most: int) -> None:
        self.most = max(1, most)
        self.held = 0
        self._lock = threading.Lock()
        self._waiting: deque[
            tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | threading.Event
        ] = deque()

    def enter_here(self, busy: Callable[[], BaseException]) -> None:
        """``enter``, waited for in this thread; on a thread that runs an event loop a place
        not free at once is refused (``busy()``): one that waits there behind an awaited
        holder, or a waiter given the place before its task ran, waited for ever."""
        on_loop = loop_running()
        with self._lock:
            if self.held < self.most and not self._waiting:
                self.held += 1
                return
            if on_loop:
                raise busy()
            place = threading.Event()
            self._waiting.append(place)
        try:
            place.wait()  # (given: held for it by ``leave``)
        except BaseException:  # (Ctrl-C in the wait: the place, if given, is the next one's)
            with self._lock:
                if place in self._waiting:
                    self._waiting.remove(place)
                    raise
            self.leave()
            raise

    async def enter(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.held < self.most and not self._waiting:
                self.held += 1
                return
            place: asyncio.Future[None] = loop.create_future()
            self._waiting.append((loop, place))
        try:
            await place
        except asyncio.CancelledError:
            with self._lock:
                if (loop, place) in self._waiting:
                    self._waiting.remove((loop, place))
                    raise
            if place.done() and not place.cancelled():
                self.leave()  # (given a place, then cancelled: it is the next one's)
            raise  # (else ``_give`` finds it cancelled and passes the place on)

    def leave(self) -> None:
        """The place held handed to the first that waits, or given back."""
        while True:
            with self._lock:
                if not self._waiting:
                    self.held -= 1
                    return
                first = self._waiting.popleft()
            if isinstance(first, threading.Event):
                first.set()
                return
            loop, place = first
            try:
                loop.call_soon_threadsafe(self._give, place)
                return
            except RuntimeError:
                continue  # (its event loop closed: nobody waits there any more)

    def _give(self, place: asyncio.Future[None]) -> None:
        if place.done():  # (cancelled meanwhile)
            self.leave()
        else:
            place.set_result(None)


_STORE_GATES: weakref.WeakKeyDictionary[Store, Gate] = weakref.WeakKeyDictionary()
_GATES_LOCK = threading.Lock()
_THREADS_GATE = Gate(PERSON_THREADS)


def gates(store: Store) -> tuple[Gate, ...]:
    """The gates an operation on ``store`` passes: the store threads', then the store's
    connections' (when it has a pool of a known size)."""
    if store.connections is None:
        return (_THREADS_GATE,)
    with _GATES_LOCK:
        gate = _STORE_GATES.get(store)
        if gate is None:
            gate = _STORE_GATES[store] = Gate(store.connections // 2)
    return (_THREADS_GATE, gate)


class PersonOps(InFlight[str]):
    """A runtime's person's operations in flight, each under its name, synchronous and awaited
    (``working``; what ``close`` waits for); the runs they hold counted as driven, each with
    the name of the operation (``runs``: a resume refused meanwhile says so); and each run's
    turns (``turn``: one operation on a run at a time, ``_person_turn``)."""

    def __init__(self, owner: str, where: str = "") -> None:
        super().__init__()
        self.owner = owner
        self.where = where  # the store's address, for the refusal's words
        self.runs: dict[str, str] = {}
        self._turns: weakref.WeakValueDictionary[str, Gate] = weakref.WeakValueDictionary()
        self._turns_lock = threading.Lock()

    def turn(self, run_id: str) -> Gate:
        """The run's turns: one operation on it at a time, the others waiting in the order
        they came (kept while a holder or a waiter holds it)."""
        with self._turns_lock:
            gate = self._turns.get(run_id)
            if gate is None:
                gate = self._turns[run_id] = Gate(1)
            return gate

    @property
    def working(self) -> int:
        return sum(self.held.values())

    def start_op(self, name: str) -> None:
        """One more operation under way (``_person_turn``), unless ``close`` was called: then
        refused, nothing of it done."""
        self.start(name, lambda: self._refused(name))

    def _refused(self, name: str) -> StoreError:
        # (the words of the store's own refusal after close, ``SQLStore._open``, with what
        # was not done: the common case is a Runtime used after its `with` block ended)
        store = f"; the store {self.where} is closed" if self.where else ""
        return StoreError(
            f"{name} was not started: this runtime ({self.owner}) is closed (its close() "
            f"has begun){store}: a Runtime closes its store in close() and at the end of its "
            "`with` block; use it inside the block, or open a new Runtime; nothing of it was done"
        )
