"""Who may still be executing an effect call: the calls this process is executing now
(``tracked``, ``running_here``: a sync call past its timeout runs on in its thread) and what
the executor that wrote an intent can still do (``holder``: gone, alive, or unknown on
another host). ``_effect_run.perform_effect`` asks before it settles an intent without a
result (its grace wait) and before it runs a failed call again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from ._owners import local_pid, owner_is_dead

__all__ = ["holder", "running_here", "tracked"]

# Effect calls of this process still executing, by (run, journal key): a resume in this
# process knows whether an earlier attempt here is still running. A sync call leaves only when
# its thread returns (a timed-out thread runs on).
_RUNNING: set[tuple[str, str]] = set()
_RUNNING_LOCK = threading.Lock()


def tracked(fn: Callable[[], Any], mark: tuple[str, str]) -> Callable[[], Any]:
    """``fn``, counted among this process's executing calls (``mark``: run, journal key)
    from now until it returns or raises."""
    with _RUNNING_LOCK:
        _RUNNING.add(mark)

    def run() -> Any:
        try:
            return fn()
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(mark)

    return run


def running_here(mark: tuple[str, str]) -> bool:
    """Whether this process is executing the effect call ``mark`` names (a sync call that
    timed out runs on in its thread)."""
    with _RUNNING_LOCK:
        return mark in _RUNNING


def holder(owner: Any, mark: tuple[str, str]) -> str:
    """Whether the executor that wrote an intent can still be executing it: ``gone`` (a
    process of this host that no longer exists, or this process with the call not running),
    ``alive`` (a process of this host: running, stuck or frozen) or ``unknown`` (another host,
    or not recorded)."""
    pid = local_pid(owner) if isinstance(owner, str) else None
    if pid is None:  # another host, another pid namespace, or an owner not named so
        return "unknown"
    if pid == os.getpid():
        return "alive" if running_here(mark) else "gone"
    return "gone" if owner_is_dead(owner) else "alive"
