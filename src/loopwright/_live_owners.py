"""The lease owners this process's open runtimes hold: one ``Runtime`` per owner name.

The store lets an owner take its own lease again (a restarted process resumes its runs at
once). Two live runtimes given one ``owner=`` are thus one holder to the store: each takes
the other's leases, and a run one of them executes is fenced out mid-cycle
(``StaleLeaseError``) by an edit, cancel or resume through the other (holders48). The second
is refused at ``Runtime(...)``; a closed (or collected) runtime frees its name.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable

from ._errors import ConfigError

__all__ = ["hold_owner", "release_owner"]

_LIVE: dict[str, weakref.ref[object]] = {}
_LOCK = threading.Lock()


def hold_owner(owner: str, runtime: object) -> None:
    """Record ``runtime`` as the holder of ``owner``; ``ConfigError`` while another runtime of
    this process, not closed, holds it."""
    with _LOCK:
        other = _holder(owner)
        if other is not None and other is not runtime:
            # one no longer referenced, kept only by a reference cycle, is collected (this
            # frame's own reference dropped first)
            other = None
            gc.collect()
            other = _holder(owner)
        if other is not None and other is not runtime:
            # (the error's traceback keeps this frame: a notebook's last error would keep the
            # other runtime, and so its name, held after the user let it go)
            del other
            raise ConfigError(
                f"another Runtime of this process has owner {owner!r} and is not closed: two "
                "runtimes with one owner take each other's leases, fencing each other's runs "
                "out mid-cycle. Close the other first (`rt.close()`, or open each in a `with` "
                "block; a notebook cell run again makes the new one before the old is let "
                "go), give each its own owner (unique per process, across every host on the "
                "store), or leave owner out for a unique one",
                field="owner",
            )
        _LIVE[owner] = weakref.ref(runtime, _forget(owner))


def _forget(owner: str) -> Callable[[weakref.ref[object]], None]:
    """The callback that drops ``owner``'s entry when its runtime is collected unclosed: each
    stayed, a dead reference, until that name was held again (a process making a runtime per
    job, each with its own owner and none closed, grew the map by one a job)."""

    def gone(ref: weakref.ref[object]) -> None:
        # (no lock: called by the collector, maybe inside ``hold_owner``'s own gc.collect()
        # with the lock held; one dict operation is atomic, and an entry held anew since is
        # another reference, left alone)
        if _LIVE.get(owner) is ref:
            _LIVE.pop(owner, None)

    return gone


def _holder(owner: str) -> object | None:
    held = _LIVE.get(owner)
    return held() if held is not None else None


def release_owner(owner: str, runtime: object) -> None:
    """Free ``owner`` if ``runtime`` holds it (a close; a second close does nothing)."""
    with _LOCK:
        holder = _holder(owner)
        if owner in _LIVE and (holder is None or holder is runtime):
            _LIVE.pop(owner, None)  # (a collected runtime's callback may have dropped it)
