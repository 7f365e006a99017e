"""Running the CLI's event loop so that Ctrl-C winds the runs down once.

``asyncio.run`` turns the first Ctrl-C into a cancellation (each run stops at an await and
releases its lease), but raises ``KeyboardInterrupt`` wherever the next one lands, in the middle
of that winding down: an impatient second Ctrl-C printed asyncio's tracebacks ("Task exception
was never retrieved") and could cut a lease release short. Here the first Ctrl-C cancels and
every later one is ignored; the process still ends with ``KeyboardInterrupt`` (exit 130).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, with the first Ctrl-C cancelling ``main`` and later ones ignored."""
    interrupted = False

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def first() -> None:
            nonlocal interrupted
            interrupted = True
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the process ends
            if task is not None:
                task.cancel()

        # no signals here (not the main thread, Windows): asyncio's own handling
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, first)
        return await main

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
