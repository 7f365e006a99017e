"""A person's operations on one run through one runtime take turns (inflight56), synchronous
and awaited alike: the second waits until the first has ended, then does what it would do
called after it. Before, two synchronous ones in two threads each took the run's lease (the
store lets an owner take its own lease again): the first was fenced out mid-way; of two
awaited ones the second was refused ("is executing elsewhere"), or an approval was recorded
on the request the cancel beside it closed. A synchronous one called on an event loop does not
wait there: refused if the run's turn is taken, naming its ``*_async`` form. The first
operation is held at a fixed point (a store read in its thread) until the test lets it go;
nothing is timed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from support.row_locks import capped_loop, until

import loopwright as lw

LOOP = capped_loop("turns", lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}), 2)
TASK = {"artifacts": {"doc": {"a": 0}}}


class HoldFirst:
    """The first read of a run's latest checkpoint made in a thread other than the main one
    (a synchronous operation's thread, an awaited one's store thread) held until ``go``."""

    def __init__(self, rt: lw.Runtime) -> None:
        self.entered, self.go = threading.Event(), threading.Event()
        latest = rt.store.latest_checkpoint
        lock = threading.Lock()

        def slow(rid: str) -> Any:
            with lock:
                first = threading.current_thread() is not threading.main_thread() and (
                    not self.entered.is_set()
                )
                if first:
                    self.entered.set()
            if first:
                assert self.go.wait(60)
            return latest(rid)

        rt.store.latest_checkpoint = slow  # type: ignore[method-assign]


def _waiting_turn(rt: lw.Runtime, run_id: str) -> bool:
    """Whether an operation waits for its turn on ``run_id`` (none before inflight56)."""
    ops = rt.__dict__.get("_person_ops_")
    turns = getattr(ops, "_turns", None)
    gate = None if turns is None else turns.get(run_id)
    return gate is not None and len(gate._waiting) == 1


def _kinds(rt: lw.Runtime, run_id: str) -> list[str]:
    return [e.kind for e in rt.store.events(run_id)]


def test_two_synchronous_operations_on_a_run_in_two_threads_take_turns(tmp_path: Path) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = rt.create(LOOP, TASK, task_key="s")[0].run_id
        hold = HoldFirst(rt)
        out: dict[str, Any] = {}

        def call(name: str, fn: Any) -> None:
            try:
                out[name] = fn()
            except BaseException as exc:
                out[name] = exc

        editing = threading.Thread(
            target=call, args=("edit", lambda: rt.edit(run_id, "doc/a", 7, by="ops"))
        )
        editing.start()
        assert hold.entered.wait(60)
        cancelling = threading.Thread(
            target=call, args=("cancel", lambda: rt.cancel(run_id, by="ops"))
        )
        cancelling.start()
        seen = threading.Event()
        for _ in range(6000):  # until the cancel waits its turn (or, before, has ended)
            if _waiting_turn(rt, run_id) or not cancelling.is_alive():
                break
            seen.wait(0.01)
        waited = cancelling.is_alive()
        hold.go.set()
        editing.join(60)
        cancelling.join(60)
        assert waited  # (the cancel waited for the edit to end)
        assert isinstance(out["edit"], lw.RunRecord)  # (not fenced out by the cancel's take)
        assert isinstance(out["cancel"], lw.RunRecord) and out["cancel"].status == "cancelled"
        kinds = _kinds(rt, run_id)
        assert kinds.index("edited") < kinds.index("stopped")
        assert rt.store.get_run(run_id).lease_owner is None and not rt._driving


@pytest.mark.parametrize("second", ["edit", "approve"])
def test_a_second_awaited_operation_on_a_run_waits_its_turn(tmp_path: Path, second: str) -> None:
    """``edit_async`` then ``edit_async``: both made, in order. ``cancel_async`` then
    ``approve_async`` on a paused run: the approval is refused, the request being closed by
    the cancel (before, it was recorded approved on the cancelled run)."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = rt.create(LOOP, TASK, task_key="a")[0].run_id
        if second == "approve":
            rt.pause(run_id, by="ops")
        hold = HoldFirst(rt)

        async def main() -> tuple[bool, Any, BaseException | Any]:
            if second == "edit":
                one = asyncio.ensure_future(rt.edit_async(run_id, "doc/a", 7, by="ops"))
            else:
                one = asyncio.ensure_future(rt.cancel_async(run_id, by="ops"))
            assert await until(hold.entered.is_set)
            if second == "edit":
                two = asyncio.ensure_future(rt.edit_async(run_id, "doc/a", 8, by="ops"))
            else:
                two = asyncio.ensure_future(rt.approve_async(run_id, by="ops"))
            await until(lambda: _waiting_turn(rt, run_id) or two.done())
            waited = not two.done()
            hold.go.set()
            await asyncio.wait([one, two])
            return waited, one.result(), two.exception() or two.result()

        waited, first, then = asyncio.run(main())
        assert waited
        if second == "edit":
            assert isinstance(then, lw.RunRecord)  # (not refused: made after the first)
            assert _kinds(rt, run_id).count("edited") == 2
        else:
            assert first.status == "cancelled"
            assert isinstance(then, lw.ApprovalError) and "cancelled" in str(then)
            decided = rt.store.approvals(run_id=run_id)
            assert [a.status for a in decided] == ["cancelled"]
        assert rt.store.get_run(run_id).lease_owner is None and not rt._driving


def test_a_synchronous_operation_on_the_event_loop_is_refused_while_the_run_is_taken(
    tmp_path: Path,
) -> None:
    """Waiting there, it would block the loop the operation before it may need to end."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = rt.create(LOOP, TASK, task_key="l")[0].run_id
        hold = HoldFirst(rt)

        async def main() -> tuple[BaseException | None, Any]:
            editing = asyncio.ensure_future(rt.edit_async(run_id, "doc/a", 7, by="ops"))
            assert await until(hold.entered.is_set)
            try:
                rt.cancel(run_id, by="ops")  # (on the loop, as the edit is under way)
                refused = None
            except lw.ConflictError as exc:
                refused = exc
            hold.go.set()
            return refused, await editing

        refused, edited = asyncio.run(main())
        assert refused is not None and "cancel_async" in str(refused)
        assert "another person's operation in progress" in str(refused)
        assert isinstance(edited, lw.RunRecord)
        assert "cancel_requested" not in str(_kinds(rt, run_id))  # (nothing of it done)
        assert rt.store.get_run(run_id).status != "cancelled"


class _Interrupted(threading.Event):
    """A turn's place waited for by the main thread, interrupted there (Ctrl-C)."""

    def wait(self, timeout: float | None = None) -> bool:
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        return super().wait(timeout)


def test_an_operation_interrupted_while_it_waits_its_turn_leaves_the_turn_to_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit holds the run's turn; a cancel waiting for it is interrupted (Ctrl-C in a
    REPL); a third operation waits behind it. The edit ending hands the turn to the third.
    Before, the interrupted waiter stayed queued: the turn was handed to it, nobody took it,
    and the third operation (and every one after on the run) waited for ever (review56a)."""
    from loopwright import _person_gate

    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = rt.create(LOOP, TASK, task_key="k")[0].run_id
        hold = HoldFirst(rt)
        out: dict[str, Any] = {}

        def call(name: str, fn: Any) -> None:
            try:
                out[name] = fn()
            except BaseException as exc:
                out[name] = exc

        editing = threading.Thread(
            target=call, args=("edit", lambda: rt.edit(run_id, "doc/a", 7, by="ops"))
        )
        editing.start()
        assert hold.entered.wait(60)
        monkeypatch.setattr(_person_gate.threading, "Event", _Interrupted)
        with pytest.raises(KeyboardInterrupt):
            rt.cancel(run_id, by="ops")
        monkeypatch.undo()
        gate = rt._person_ops._turns[run_id]
        queued = len(gate._waiting)
        pausing = threading.Thread(
            target=call, args=("pause", lambda: rt.pause(run_id, by="o")), daemon=True
        )
        pausing.start()
        seen = threading.Event()
        for _ in range(6000):  # until the pause waits its turn
            if len(gate._waiting) == queued + 1:
                break
            seen.wait(0.01)
        hold.go.set()
        editing.join(60)
        pausing.join(60)
        assert not pausing.is_alive()  # (before: waiting for ever, the turn given to nobody)
        assert isinstance(out["edit"], lw.RunRecord)
        assert isinstance(out["pause"], lw.Approval), out["pause"]
        assert gate.held == 0 and not gate._waiting
        assert rt.store.get_run(run_id).lease_owner is None and not rt._driving


def test_a_resume_and_an_operation_in_another_thread_never_both_drive_the_run(
    tmp_path: Path,
) -> None:
    """A resume's check that nothing of this runtime drives the run and its count of the run as
    driven are one step: between them (a thread switch), an edit in another thread found the
    run free, counted it and took its lease; the resume then took the lease again (the store
    lets an owner take its own lease) and ran its cycles under the edit, fenced out mid-way
    (review56a). The test holds the resume at that point where it exists (before: its count);
    here the edit waits for nothing and one of the two is refused or goes first."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = rt.create(LOOP, TASK, task_key="r")[0].run_id
        hold = HoldFirst(rt)
        out: dict[str, Any] = {}

        def call(name: str, fn: Any) -> None:
            try:
                out[name] = fn()
            except BaseException as exc:
                out[name] = exc

        editing = threading.Thread(
            target=call, args=("edit", lambda: rt.edit(run_id, "doc/a", 7, by="ops")), daemon=True
        )
        count = rt._count_driven

        def counted(rid: str) -> None:
            if threading.current_thread() is threading.main_thread() and not editing.is_alive():
                editing.start()  # (the resume checked the run free, not yet counted it)
                assert hold.entered.wait(60)  # (the edit holds the run's lease)
            count(rid)

        rt._count_driven = counted  # type: ignore[method-assign]
        try:
            resumed: Any = rt.resume_sync(run_id, LOOP)
        except lw.ConflictError as exc:
            resumed = exc
        hold.go.set()
        if editing.ident is not None:
            editing.join(60)
        if isinstance(resumed, lw.ConflictError):  # (refused: the edit drives the run)
            assert isinstance(out["edit"], lw.RunRecord), out["edit"]
        else:  # (the edit never started beside it, or was refused)
            assert resumed.cycles == 2
            assert "edit" not in out or isinstance(out["edit"], lw.ConflictError), out["edit"]
        assert rt.store.get_run(run_id).lease_owner is None and not rt._driving
