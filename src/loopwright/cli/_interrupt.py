"""Running the CLI's event loop so that Ctrl-C winds the runs down once.

``asyncio.run`` turns the first Ctrl-C into a cancellation (each run stops at an await and
releases its lease), but raises ``KeyboardInterrupt`` wherever the next one lands, in the middle
of that winding down: an impatient second Ctrl-C printed asyncio's tracebacks ("Task exception
was never retrieved") and could cut a lease release short. Here the first Ctrl-C cancels and
every later one is ignored; the process still ends with ``KeyboardInterrupt`` (exit 130).
Unless the loop never took the first: user code called inline that does not return holds it,
so the second press says so and the third raises ``KeyboardInterrupt`` in that code (a Python
handler, ``signal.signal``, runs in the main thread wherever it is; asyncio's runs only in the
loop).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine, Sequence
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


_STUCK = (
    "loopwright: still waiting for user code to return (an actor or check without timeout_s "
    "holds the run); press Ctrl-C again to stop at once: the run goes on from its last finished "
    "cycle with {resume}\n"
)


def resume_command(at: str) -> str:
    """The command that continues what a Ctrl-C left: ``resume ID`` for the one run this
    command drove, else ``resume --all`` (every interrupted run; a batch's, or runs this
    command did not name, as a Ray driver's)."""
    from . import DRIVING

    if len(DRIVING) == 1:
        return f"`loopwright resume {DRIVING[0][:12]}{at}`"
    return f"`loopwright resume --all{at}`"


def run_async(main: Coroutine[Any, Any, T], runs: Sequence[str] = ()) -> T:
    """``asyncio.run(main)``, with the first Ctrl-C cancelling ``main`` and later ones ignored,
    unless the event loop never took the first: user code called inline (no ``timeout_s``)
    that does not return holds the loop, and asyncio's own handler only runs in the loop, so
    no Ctrl-C stopped it (kill -9 did). The second press then says so; the third stops at once
    (a ``KeyboardInterrupt`` raised in that code: what a finished cycle committed is kept).
    ``runs``: the runs ``main`` drives, named by the hints (``resume_command``)."""
    from . import DRIVING

    DRIVING[:] = list(runs)
    presses = 0
    taken = False  # the loop ran the first press's cancel: it is winding down
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[T] | None]] = []

    def cancel() -> None:
        nonlocal taken
        taken = True
        for _loop, task in running:
            if task is not None:
                task.cancel()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal presses
        presses += 1
        if presses == 1 and running:
            running[0][0].call_soon_threadsafe(cancel)
            return
        if taken:
            return  # winding down: later presses are ignored
        if presses == 2:
            from ._options import store_flag  # (the command it names: newuser52)

            sys.stderr.write(_STUCK.format(resume=resume_command(store_flag())))
            sys.stderr.flush()
            return
        raise KeyboardInterrupt

    async def guarded() -> T:
        running.append((asyncio.get_running_loop(), asyncio.current_task()))
        if presses:  # pressed before the loop started: nothing ran yet
            raise asyncio.CancelledError
        return await main

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: asyncio's own handling
        previous = None
    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        if presses:
            raise KeyboardInterrupt from None
        raise
    finally:
        if previous is not None:
            # pressed: ignored until the process ends (main prints its message meanwhile)
            signal.signal(signal.SIGINT, signal.SIG_IGN if presses else previous)
