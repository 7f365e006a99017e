"""One resume's saying of the words a runtime kept for stops alive its store refused
(``LeaseLife._say_unsaid``), as the runtime's other resumes wait for it in whatever event loop
or thread they run: its end is a ``concurrent.futures.Future``, set by whoever ends the saying
last, the saying itself or the store thread whose write outlived it (a saying cancelled by
``asyncio.run``'s teardown, its write going on). Before, it was a future of the saying's event
loop, which a resume in another loop did not wait for (polish55).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

from .store._protocol_commit import RowLocked

__all__ = ["Saying"]

Word = tuple[str, int, int, str, Any]  # (run, lease, cycle, why, what it spent: crash55b)


class Saying:
    """``words`` said in order by a resume in event loop ``loop``; ``on_end`` is called once
    when it ends, before ``done`` is set."""

    def __init__(
        self, words: list[Word], loop: asyncio.AbstractEventLoop, on_end: Callable[[], None]
    ) -> None:
        self.words = words
        self.loop = loop
        self.done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._on_end = on_end
        self._lock = threading.Lock()
        self._started = 0  # the words whose write began (written, or under way)
        self._writing = False  # a write under way (in a store thread, or here)
        self._stopped = False  # no write starts any more
        self._orphaned = False  # stopped while a write went on: that write ends it

    def say(self, i: int, fn: Callable[..., bool], *args: Any) -> bool:
        """``fn(*args)``, the write of word ``i``, where ``written`` runs it (a store thread or
        here): not made once the saying stopped (the word is kept for the next saying)."""
        with self._lock:
            if self._stopped:
                return True  # (kept by ``stop``: not written here)
            self._started, self._writing = i + 1, True
        ok = False
        try:
            ok = fn(*args)
            return ok
        except RowLocked:
            raise  # (nothing of it written: tried again, or kept)
        finally:
            with self._lock:
                if not ok:  # refused, or nothing written: kept, not dropped
                    self._started = min(self._started, i)
                self._writing = False
                end = self._orphaned
            if end:
                self._end()

    def stop(self) -> list[Word]:
        """Stop it (said, refused, cancelled, or left in an event loop that runs no more): the
        words not written, which the runtime keeps (once: ``[]`` after). It ends now, or when
        a write still under way ends."""
        with self._lock:
            if self._stopped:
                return []
            self._stopped = True
            kept = self.words[self._started :]
            self._orphaned = self._writing
        if not self._orphaned:
            self._end()
        return kept

    def gone(self, here: asyncio.AbstractEventLoop) -> bool:
        """Whether its event loop runs no more, from a resume in ``here``: closed, or stopped
        with the saying suspended in it (a loop of this thread's is not running while this
        one runs). Waiting for it would never end."""
        return self.loop is not here and not self.loop.is_running()

    def _end(self) -> None:
        self._on_end()
        if not self.done.done():
            self.done.set_result(None)
