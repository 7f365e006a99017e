"""A person's operations through one runtime, synchronous (``Runtime.cancel`` ... ``fork``) and
awaited (``cancel_async`` ..., ``_person_async``) alike (inflight56): on one run they take
turns, one at a time in the order they came, as the same calls made one after the other would
(``PersonOps.turn``); each is counted in flight from its turn to its end, which ``close``
waits for, and refused once ``close`` has begun (``StoreError``, nothing of it done); the run
of one that takes its lease counts as driven by the runtime meanwhile (a ``resume`` of it here
refused, not let take the lease the operation holds: attack47).

The synchronous forms were neither counted nor waited for: one in another thread ran on
beside ``close``, the store closed under it, cut off wherever it had got to; one started after
``close`` ran on a closed runtime whose owner name was free again. Two on one run (two
threads, or one awaited and one not) each took the run's lease (the store lets an owner take
its own lease again): the first fenced out mid-way; two awaited ones had the second refused
("is executing elsewhere"), a cancel's left undone, or an approval recorded on a request
the cancel beside it was closing.

A synchronous one called on a thread that runs an event loop does not wait for its turn there
(the operation before it may need that loop to end): refused at once if the run's turn is
taken (``ConflictError``); its ``*_async`` form waits. One called inside another (``unpause``
approving the pause, the awaited form's synchronous form in its store thread) is part of it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from ._errors import ConflictError, LoopwrightError
from ._host import RESERVED, RuntimeHost
from ._person_gate import Gate

__all__ = ["begin", "let_go", "person_op", "run_of", "within"]

_P = ParamSpec("_P")
_T = TypeVar("_T")
_H = TypeVar("_H", bound=RuntimeHost)


class _InOperation(threading.local):
    """The runtime (its ``id``) whose person's operation this thread is in (``within``): one
    of that runtime's it calls is part of it."""

    rt: int | None = None


IN_OPERATION = _InOperation()


def run_of(rt: RuntimeHost, run_id: object) -> str | None:
    """The full id of the run ``run_id`` names (an id or its prefix); None when it names none
    (the operation says why, in its own order of checks) or the runtime is closing."""
    if not isinstance(run_id, str) or rt._person_ops.closing:
        return None
    try:
        return rt.store.get_run(run_id).run_id
    except LoopwrightError:
        return None


def begin(rt: RuntimeHost, rid: str | None, name: str, *, leased: bool) -> str | None:
    """The operation ``name`` on ``rid`` (its turn held) counted in flight, refused once
    ``close`` has begun; the run counted as driven when the operation takes its lease
    (``leased``) and this runtime does not drive it already (then the operation finds it so).
    The run counted so, or None."""
    ops = rt._person_ops
    ops.start_op(name)
    if not leased or rid is None or not rt._drive_for(rid, name):
        return None
    return rid


def within(
    rt: RuntimeHost, driven: str | None, name: str, turn: Gate | None, op: Callable[[], _T]
) -> _T:
    """``op()`` here, the operation ``begin`` counted: the lease of the run it counted as
    driven its to take (``RESERVED``); then all it held let go (``let_go``)."""
    outer = IN_OPERATION.rt, RESERVED.run  # (another runtime's operation calling this one)
    IN_OPERATION.rt = id(rt)
    RESERVED.run = None if driven is None else (id(rt), driven)
    try:
        return op()
    finally:
        IN_OPERATION.rt, RESERVED.run = outer
        let_go(rt, driven, name, turn)


def let_go(rt: RuntimeHost, driven: str | None, name: str, turn: Gate | None) -> None:
    """The run no longer driven by the operation, the operation ended (``close`` may go on),
    the run's turn passed on."""
    ops = rt._person_ops
    try:
        if driven is not None:
            ops.runs.pop(driven, None)
            rt._undrive(driven)
    finally:
        ops.end(name)
        if turn is not None:
            turn.leave()


def person_op(
    *, leased: bool
) -> Callable[[Callable[Concatenate[_H, _P], _T]], Callable[Concatenate[_H, _P], _T]]:
    """A person's synchronous operation (its first argument the run; ``leased``: it takes the
    run's lease), taking its turn on the run and counted in flight (the module's words)."""

    def wrap(op: Callable[Concatenate[_H, _P], _T]) -> Callable[Concatenate[_H, _P], _T]:
        name = op.__name__

        @functools.wraps(op)
        def run(self: _H, /, *args: _P.args, **kw: _P.kwargs) -> _T:
            if IN_OPERATION.rt == id(self):
                return op(self, *args, **kw)
            rid = run_of(self, args[0] if args else kw.get("run_id"))
            turn = None if rid is None else self._person_ops.turn(rid)
            if turn is not None:
                turn.enter_here(functools.partial(_busy, self, rid, name))
            try:
                driven = begin(self, rid, name, leased=leased)
            except BaseException:
                if turn is not None:
                    turn.leave()
                raise
            return within(self, driven, name, turn, functools.partial(op, self, *args, **kw))

        return run

    return wrap


def _busy(rt: RuntimeHost, rid: str | None, name: str) -> ConflictError:
    return ConflictError(
        f"run {rid} has another person's operation in progress in this runtime ({rt.owner}); "
        f"{name}, called on an event loop, cannot wait for it there (it may need that loop to "
        f"end): await {name}_async, which waits its turn"
    )
