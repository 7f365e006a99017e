"""Counting a profiled stretch's Python calls without the event loop's own.

How many times the event loop goes round while it waits for user code run in a thread (an
actor, a check, an effect) depends on when that thread ends, so on the machine's load: a
count that includes the loop's machinery moves by tens of calls a cycle on a busy CI machine
(a notes-window test read 1,767.5 calls a cycle where a quiet run reads 1,693.1). What a cycle
itself does is counted: the engine's functions and the standard library's that it calls
(``copy.deepcopy`` was the notes regression) — not builtins, not asyncio, selectors,
threading or concurrent.futures."""

from __future__ import annotations

import cProfile

# (the modules whose functions run once more each time the loop goes round)
_LOOP_MACHINERY = ("/asyncio/", "/selectors.py", "/threading.py", "/concurrent/futures/")


def work_calls(prof: cProfile.Profile) -> int:
    """The calls of Python functions a profile holds, the event loop's machinery left out
    (one entry per code object: pstats would merge generated functions sharing a label)."""
    total = 0
    for entry in prof.getstats():
        code = entry.code
        if isinstance(code, str):  # a builtin: called by the loop's machinery as by the cycle
            continue
        if any(part in code.co_filename.replace("\\", "/") for part in _LOOP_MACHINERY):
            continue
        total += entry.callcount
    return total
