"""A person's operations awaited (``Runtime.cancel_async`` ... ``fork_async``; async55): each
gives what its synchronous form gives (result, error, audit records, events) on twin runs of
one SQLite store, and a run the runtime drives meanwhile is left to it as the synchronous
form leaves it."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.row_locks import capped_loop, until

import loopwright as lw

LOOP = capped_loop("twins", lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}), 2)
TASK = {"artifacts": {"doc": {"a": 0}}}

Op = Callable[..., Any]


def _shape(x: Any) -> Any:
    """``x`` with what differs between twins (run and request ids, times, lease tokens) out."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        x = {
            f.name: getattr(x, f.name)
            for f in dataclasses.fields(x)
            if not f.name.endswith("_at")
            and f.name not in ("at", "fencing_token", "lease_owner", "approval_id", "audit_id")
            and f.name not in ("action_hash", "task_key", "last_seq", "seconds", "created_by")
        }
    if isinstance(x, dict):
        return {k: _shape(v) for k, v in x.items() if k not in ("request", "run", "seconds")}
    if isinstance(x, list | tuple):
        return [_shape(v) for v in x]
    if isinstance(x, str):
        return re.sub(r"\b[0-9a-f]{12,32}\b", "ID", x)  # (run and request ids)
    return x


def _after(rt: lw.Runtime, run_id: str) -> Any:
    audit = rt.store.audit(target=f"run {run_id}")
    events = [e.kind for e in rt.store.events(run_id)]
    return _shape([(a.actor, a.action, a.outcome, a.detail) for a in audit]), events


def _twins(
    tmp_path: Path, setup: Callable[[lw.Runtime, str], None], sync: Op, awaited: Op
) -> tuple[Any, Any]:
    """``sync(rt, run)`` on one run, ``awaited(rt, run)`` on its twin, each set up alike: what
    each gave (its result or its error) and what it left, the runs' ids out."""
    seen = []
    with lw.Runtime(tmp_path / "s.db") as rt:
        for i, op in enumerate((sync, awaited)):
            rid = rt.create(LOOP, TASK, task_key=f"t{i}")[0].run_id
            setup(rt, rid)
            try:
                got = op(rt, rid)
                if asyncio.iscoroutine(got):
                    got = asyncio.run(got)
                out: Any = ("ok", _shape(got))
            except lw.LoopwrightError as exc:
                out = ("error", type(exc).__name__, _shape(str(exc)))
            seen.append((out, _after(rt, rid)))
    return seen[0], seen[1]


def _nothing(rt: lw.Runtime, run_id: str) -> None:
    pass


def _ended(rt: lw.Runtime, run_id: str) -> None:
    assert rt.resume_sync(run_id, LOOP).status == "stopped"


def _paused(rt: lw.Runtime, run_id: str) -> None:
    rt.pause(run_id, by="ops", note="look first")


def _held_elsewhere(rt: lw.Runtime, run_id: str) -> None:
    rt.store.acquire_lease(run_id, "another-host", 600)


RUN = object()  # (stands for the run's id in a case's arguments)

# (name, setup, operation, arguments, keywords): the operation on a run set up so, given the
# arguments (``RUN``: the run's id), in its synchronous and its async form
CASES: list[tuple[str, Callable[[lw.Runtime, str], None], str, tuple[Any, ...], dict[str, Any]]] = [
    ("cancel", _nothing, "cancel", (RUN,), {"by": "ops", "loop": LOOP}),
    ("cancel ended", _ended, "cancel", (RUN,), {"by": "ops"}),
    ("cancel held elsewhere, by a prefix", _held_elsewhere, "cancel", ("PREFIX",), {"by": "ops"}),
    ("rollback", _ended, "rollback", (RUN, 1), {"by": "ops", "loop": LOOP}),
    ("rollback out of range", _ended, "rollback", (RUN, 9), {"by": "ops"}),
    ("rollback unknown run, no name", _nothing, "rollback", ("nope", 1), {"by": " "}),
    ("edit", _ended, "edit", (RUN, "doc/a", 7), {"by": "ops", "note": "seven"}),
    ("edit held elsewhere", _held_elsewhere, "edit", (RUN, "doc/a", 7), {"by": "ops"}),
    (
        "edit unknown run",
        _nothing,
        "edit",
        (),
        {"run_id": "nope", "ref": "doc/a", "value": 7, "by": "ops"},
    ),
    ("settle not in doubt", _ended, "settle_effect", (RUN, "pay:1"), {"done": True, "by": "o"}),
    ("settle not a bool", _ended, "settle_effect", (RUN, "pay:1"), {"done": "yes", "by": "o"}),
    ("pause", _nothing, "pause", (RUN,), {"by": "ops", "note": "wait"}),
    ("unpause", _paused, "unpause", (RUN,), {"by": "ops"}),
    ("approve", _paused, "approve", (RUN,), {"by": "ops", "note": "fine"}),
    ("deny", _paused, "deny", (RUN,), {"by": "ops"}),
    ("answer no question", _paused, "answer", (RUN, "yes"), {"by": "ops"}),
    ("approve nothing pending", _nothing, "approve", (RUN,), {"by": "ops"}),
    ("fork", _ended, "fork", (RUN, 1), {"by": "ops"}),
]


def _form(name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Op:
    def op(rt: lw.Runtime, run_id: str) -> Any:
        given = [run_id if a is RUN else run_id[:10] if a == "PREFIX" else a for a in args]
        return getattr(rt, name)(*given, **kw)

    return op


@pytest.mark.parametrize(
    ("setup", "name", "args", "kw"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_async_form_gives_what_the_sync_form_gives(
    tmp_path: Path,
    setup: Callable[[lw.Runtime, str], None],
    name: str,
    args: tuple[Any, ...],
    kw: dict[str, Any],
) -> None:
    was, now = _twins(tmp_path, setup, _form(name, args, kw), _form(f"{name}_async", args, kw))
    assert now == was


def test_every_async_form_is_a_coroutine_function_named_for_its_sync_form() -> None:
    import inspect

    for name in ("cancel", "rollback", "edit", "fork", "settle_effect", "approve", "deny",
                 "answer", "pause", "unpause"):  # fmt: skip
        form = getattr(lw.Runtime, f"{name}_async")
        assert inspect.iscoroutinefunction(form), name
        assert form.__name__ == f"{name}_async"
        sync = inspect.signature(getattr(lw.Runtime, name))
        assert inspect.signature(form).parameters == sync.parameters


def test_a_cancel_of_a_run_this_runtime_drives_asks_it_to_stop_at_its_boundary(
    tmp_path: Path,
) -> None:
    """Driven by the runtime awaiting the cancel: the run is not taken from its own execution
    (the lease is this runtime's): it stops itself at its next boundary, as with ``cancel``."""
    said: list[lw.RunRecord] = []

    async def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            said.append(await rt.cancel_async(ctx.run_id, by="ops"))
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    loop = capped_loop("driven", actor, 5)
    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = rt.create(loop, TASK, task_key="d")[0].run_id
        got = rt.resume_sync(run_id, loop)
        assert [r.status for r in said] == ["running"] and said[0].cancel_requested
        assert (got.status, got.cycles) == ("cancelled", 2)
        assert not rt._driving  # (nothing left counted as driven)


@contextmanager
def _held_off_the_main_thread(rt: lw.Runtime) -> Iterator[tuple[threading.Event, threading.Event]]:
    """While inside: a read of a run's latest checkpoint from a thread other than the main one
    (an async operation's) sets ``entered`` and waits there until ``go`` is set. On leaving:
    ``go`` set and the store's read put back."""
    entered, go = threading.Event(), threading.Event()
    latest = rt.store.latest_checkpoint

    def slow(rid: str) -> Any:
        if threading.current_thread() is not threading.main_thread():
            entered.set()
            assert go.wait(60)
        return latest(rid)

    rt.store.latest_checkpoint = slow  # type: ignore[method-assign]
    try:
        yield entered, go
    finally:
        go.set()
        rt.store.latest_checkpoint = latest  # type: ignore[method-assign]


def test_a_resume_while_an_async_operation_holds_the_run_is_refused(tmp_path: Path) -> None:
    """While an awaited edit is under way in its thread, the run counts as this runtime's: a
    resume of it here is refused, not let take the lease the edit holds (the store lets an
    owner take its own lease again, and one fenced the other out)."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = rt.create(LOOP, TASK, task_key="e")[0].run_id
        with _held_off_the_main_thread(rt) as (entered, go):

            async def main() -> tuple[Any, BaseException | None]:
                editing = asyncio.create_task(rt.edit_async(run_id, "doc/a", 7, by="ops"))
                assert await until(entered.is_set)
                try:
                    await rt.resume(run_id, LOOP)
                    refused = None
                except lw.ConflictError as exc:
                    refused = exc
                go.set()
                return await editing, refused

            edited, refused = asyncio.run(main())
        # (said as what it is: a person's operation, not an execution; async55b)
        assert refused is not None and "being executed" not in str(refused)
        assert "a person's operation in progress in this runtime" in str(refused)
        assert "edit_async" in str(refused)
        assert edited.status != "running" and not rt._driving
        assert rt.resume_sync(run_id, LOOP).status in lw.RUN_STATUSES  # (not refused now)


def test_an_operation_outlived_by_its_event_loop_keeps_the_run_driven_to_its_end(
    tmp_path: Path,
) -> None:
    """Every task cancelled at once (``asyncio.run``'s teardown: a ``gather`` left running, a
    Ctrl-C), the operation's own task among them: the run stayed counted as driven only until
    that task was cancelled, not until the operation in its thread had ended (review55b). A
    resume of this runtime then took the lease the edit still held (the store lets an owner
    take its own lease again), and one fenced the other out (attack47)."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        run_id = rt.create(LOOP, TASK, task_key="t")[0].run_id
        with _held_off_the_main_thread(rt) as (entered, go):

            async def main() -> tuple[bool, bool, BaseException | None, BaseException | None]:
                editing = asyncio.create_task(rt.edit_async(run_id, "doc/a", 7, by="ops"))
                assert await until(entered.is_set)
                for task in asyncio.all_tasks():  # (as ``asyncio.run``'s teardown does)
                    if task is not asyncio.current_task():
                        task.cancel()
                for _ in range(50):  # turns of the event loop, no time: the cancellations land
                    await asyncio.sleep(0)
                ended, driven = editing.done(), run_id in rt._driving
                try:
                    await rt.resume(run_id, LOOP)
                    refused = None
                except lw.ConflictError as exc:
                    refused = exc
                finally:
                    go.set()
                try:
                    await editing
                    raised = None
                except BaseException as exc:  # (what the edit's caller is told)
                    raised = exc
                return ended, driven, refused, raised

            ended, driven, refused, raised = asyncio.run(main())
        assert not ended and driven  # waited for, the run its meanwhile
        assert refused is not None and "a person's operation in progress" in str(refused)
        assert isinstance(raised, asyncio.CancelledError)  # (cancelled once it had ended)
        assert not rt._driving
        assert rt.store.get_run(run_id).lease_owner is None  # the edit's lease handed back
        assert rt.resume_sync(run_id, LOOP).status in lw.RUN_STATUSES
