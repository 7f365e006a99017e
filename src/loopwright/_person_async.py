"""A person's operations awaited off the event loop: ``cancel_async``, ``rollback_async``,
``edit_async``, ``settle_effect_async``, ``approve_async``, ``deny_async``, ``answer_async``,
``pause_async``, ``unpause_async`` and ``fork_async`` (async55).

Each is its synchronous form (``_cancel_rollback``, ``_fork``, ``_settle``, ``_people``,
``_pause``) run whole in a store thread (``_store_threads``), awaited: the same checks,
writes, audit records, result and errors, nothing of it written twice. A write of the
synchronous form waits for a row another session holds locked (a person in psql, the
dashboard) where it is made: called from async code that drives runs, it held every run of the
event loop; in a store thread it holds only its caller. It waits there for the lock as the
synchronous form does (``BRIEF_LOCK_WAITS`` off for it: a person's operation of several
writes is not tried again whole after some of them were made).

It takes its turn on the run first (``_person_turn``: one operation of this runtime's on a
run at a time, synchronous or awaited), waited for on the event loop. The run operated on is
counted as driven by this runtime (``_driving``) from before the thread starts until the
operation has ended (let go in its thread), unless the runtime drives it already (then the
operation finds it so, as the synchronous form does): a ``resume`` of this runtime made
meanwhile is refused (``ConflictError``), as it is while the operation holds the run's lease
for another executor; otherwise it took the lease between the operation's check and its take
(the store lets an owner take its own lease again), and one fenced the other out (attack47).
A caller cancelled while the operation is under way waits for its end (a write in a thread
no cancellation stops), then is cancelled: whatever it did is done.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from ._cancel_rollback import CancelRollback
from ._fork import Forking
from ._host import RuntimeHost
from ._pause import Pausing
from ._people import Decisions
from ._person_gate import Gate
from ._person_gate import gates as person_gates
from ._person_turn import begin, let_go, run_of, within
from ._settle import Settling
from ._store_threads import in_store_thread, store_threads, uncancelled
from .store._protocol_commit import BRIEF_LOCK_WAITS

__all__ = ["PersonAsync", "off_the_loop"]

_P = ParamSpec("_P")
_T = TypeVar("_T")
_H = TypeVar("_H", bound=RuntimeHost)


async def off_the_loop(
    rt: RuntimeHost,
    run_id: object,
    op: Callable[[], _T],
    *,
    leased: bool,
    name: str = "the operation",
) -> _T:
    """``op()`` (a person's operation ``name`` on ``run_id``, as given: an id or its prefix)
    in a store thread, awaited, once its turn on the run has come (``_person_turn``) and a
    place is free for it (``_person_gate``), both waited for on the event loop; the run
    counted as driven meanwhile when the operation takes its lease (``leased``; the module's
    words). Started, it is waited for by the runtime's ``close``; refused by it before."""
    rid = None
    if isinstance(run_id, str) and not rt._person_ops.closing:
        rid = await in_store_thread(run_of, rt, run_id)
    turn = None if rid is None else rt._person_ops.turn(rid)
    entered: list[Gate] = []
    try:
        if turn is not None:  # (first: a place is not held while the turn is waited for)
            await turn.enter()
            entered.append(turn)
        for gate in person_gates(rt.store):
            await gate.enter()
            entered.append(gate)
        # From here to the thread's start nothing is awaited: ``close`` (on this event loop,
        # or in another thread) finds it started, and waits for it, or refuses it.
        driven = begin(rt, rid, name, leased=leased)
        if turn is not None:
            entered.remove(turn)  # (the operation's now: let go as it ends, ``let_go``)
        try:
            # The thread's call awaited as it is, in no task of its own: every task cancelled
            # at once (``asyncio.run``'s teardown), a task awaiting it ended at once, the run
            # let go while the operation still held its lease (review55b); so all it holds is
            # let go in the thread as it ends. (No write of it is refused on a row lock,
            # ``_waiting``: nothing to try again.)
            call = asyncio.get_running_loop().run_in_executor(
                store_threads(), functools.partial(_waiting, rt, driven, name, turn, op)
            )
        except BaseException:
            let_go(rt, driven, name, turn)  # (never handed to a thread)
            raise
        return await uncancelled(call)
    finally:
        for gate in reversed(entered):
            gate.leave()


def _waiting(
    rt: RuntimeHost, driven: str | None, name: str, turn: Gate | None, op: Callable[[], _T]
) -> _T:
    """``op()`` here (a store thread), its writes waiting for a row lock as long as the
    synchronous form's do (``within``: the operation ``begin`` counted, all it held let go as
    it ends)."""
    BRIEF_LOCK_WAITS.on = False
    try:
        return within(rt, driven, name, turn, op)
    finally:
        BRIEF_LOCK_WAITS.on = True


def _awaited(
    op: Callable[Concatenate[_H, _P], _T], *, leased: bool
) -> Callable[Concatenate[_H, _P], Coroutine[Any, Any, _T]]:
    """The async form of a person's operation ``op`` (its first argument the run; ``leased``:
    it takes the run's lease)."""
    name = f"{op.__name__}_async"

    @functools.wraps(op)
    async def run(self: _H, /, *args: _P.args, **kw: _P.kwargs) -> _T:
        run_id = args[0] if args else kw.get("run_id")
        return await off_the_loop(
            self, run_id, functools.partial(op, self, *args, **kw), leased=leased, name=name
        )

    run.__name__, run.__qualname__ = name, f"Runtime.{name}"
    run.__doc__ = (
        f"``{op.__name__}``, awaited: run in a store thread, so that a write waiting on a row "
        "another session holds locked holds no other run of the event loop. The same "
        f"arguments, result, errors and audit records as ``Runtime.{op.__name__}``.\n\n"
        f"{op.__doc__ or ''}"
    )
    return run


class PersonAsync(RuntimeHost):
    """The async forms of a person's operations (mixed into ``Runtime``)."""

    cancel_async = _awaited(CancelRollback.cancel, leased=True)
    rollback_async = _awaited(CancelRollback.rollback, leased=True)
    edit_async = _awaited(Forking.edit, leased=True)
    fork_async = _awaited(Forking.fork, leased=False)
    settle_effect_async = _awaited(Settling.settle_effect, leased=True)
    approve_async = _awaited(Decisions.approve, leased=False)
    deny_async = _awaited(Decisions.deny, leased=False)
    answer_async = _awaited(Decisions.answer, leased=False)
    pause_async = _awaited(Pausing.pause, leased=True)
    unpause_async = _awaited(Pausing.unpause, leased=False)
