"""The crash bound's tests (crash53, crash54): a loop that edits ``doc.n`` to the cycle and is
accepted at 3, a run's lease let lapse with no waiting, an executor stalled past its lease in a
thread of its own until the test has acted, and runs stopped alive by the store going down."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

import loopwright as lw

TASK: dict[str, Any] = {"artifacts": {"doc": {"n": 0}}}


def doc_loop(
    name: str, fault: Callable[[lw.Context], None] | None = None, **budget: Any
) -> lw.Loop:
    """``doc.n`` edited to the cycle; accepted at 3 (ten cycles at most, ``budget`` besides).
    ``fault``, if given, is called before each actor's answer."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if fault is not None:
            fault(ctx)
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),))

    def done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        n = int(state.values()["doc"].get("n", 0))
        return lw.Verdict(passed=n == 3, score=n / 3)

    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=[done],
        contract=lw.Contract(budget=lw.Budget(max_cycles=10, **budget)),
    )


def expire(rt: lw.Runtime, run_id: str) -> None:
    """The run's lease lapsed, as it does once its holder stalls past its TTL (no waiting)."""
    store: Any = rt.store
    with store._tx() as conn:
        conn.execute(
            f"UPDATE runs SET lease_expires_at = {store._MARK} WHERE run_id = {store._MARK}",
            (store.clock() - 1, run_id),
        )


@contextmanager
def stalled_past_its_lease(
    url: str,
    rt: lw.Runtime,
    loop: lw.Loop,
    held: threading.Event,
    go: threading.Event,
    task_key: str,
) -> Iterator[str]:
    """A new run (its id yielded) driven by an executor of its own, in the thread named
    ``stalled``, held in its actor (``held`` set) until ``go`` is set; its lease let lapse.
    On leaving: ``go`` set and the executor waited for; it found its lease taken
    (``StaleLeaseError``)."""
    ended: list[BaseException | lw.RunResult] = []
    run_id = rt.create(loop, TASK, task_key=task_key)[0].run_id

    def drive() -> None:
        try:
            with lw.Runtime(url) as own:
                ended.append(own.resume_sync(run_id, loop))
        except BaseException as exc:  # (read below)
            ended.append(exc)

    t = threading.Thread(target=drive, name="stalled", daemon=True)
    t.start()
    try:
        while not held.wait(0.05):
            assert t.is_alive(), ended
        expire(rt, run_id)
        yield run_id
    finally:
        go.set()
        t.join()
    assert isinstance(ended[0], lw.StaleLeaseError), ended


def outage(rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """While ``down[0]``: the commit of cycle 3 fails, and so does a word said after it (the
    store down as the execution stops); set it False and the store answers again."""
    one, many, append = rt.store.commit_request, rt.store.commit_many, rt.store.append_events
    down = [True]

    def fails(cycle: int) -> None:
        if down[0] and cycle >= 3:
            raise lw.StoreUnavailableError("connection refused (injected)")

    def flaky_one(req: Any) -> Any:
        fails(req.cycle)
        return one(req)

    def flaky_many(reqs: list[Any]) -> Any:
        fails(max(r.cycle for r in reqs))
        return many(reqs)

    def flaky_append(run_id: str, events: Any) -> None:
        fails(max(e.cycle for e in events) + 1)  # (a word at cycle 2: said in cycle 3)
        append(run_id, events)

    monkeypatch.setattr(rt.store, "commit_request", flaky_one)
    monkeypatch.setattr(rt.store, "commit_many", flaky_many)
    monkeypatch.setattr(rt.store, "append_events", flaky_append)
    return down


def stopped_in_an_outage(
    rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch, loop: lw.Loop, *keys: str
) -> tuple[list[bool], list[str]]:
    """A run of ``loop`` for each task key of ``keys``, each stopped alive in cycle 3 by the
    store going down (``outage``: ``StoreUnavailableError`` raised), its word unsaid; the
    outage's switch and the runs' ids."""
    down = outage(rt, monkeypatch)
    ids = []
    for key in keys:
        with pytest.raises(lw.StoreUnavailableError, match="injected"):
            rt.run_sync(loop, TASK, task_key=key)
        ids.append(rt.store.get_run(key).run_id)
    return down, ids


def first_word_held(
    rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch, loop: lw.Loop
) -> tuple[list[str], threading.Event, threading.Event]:
    """Two runs of ``loop`` stopped alive in an outage (``stopped_in_an_outage``), their words
    kept, and the store answering again: the first run's word, when said, held in its write
    until ``release`` is set (``entered`` says it began). The runs' ids and the two events."""
    down, ids = stopped_in_an_outage(rt, monkeypatch, loop, "first", "second")
    assert [w[0] for w in rt._unsaid] == ids
    down[0] = False
    entered, release = threading.Event(), threading.Event()
    append = rt.store.append_events

    def held(run_id: str, events: Any) -> None:
        if run_id == ids[0] and any(e.kind == "interrupted" for e in events):
            entered.set()
            release.wait(60)  # (let go by the test; the bound: never a hang)
        append(run_id, events)

    monkeypatch.setattr(rt.store, "append_events", held)
    return ids, entered, release


async def cancelled_in_its_word(
    rt: lw.Runtime, run_id: str, loop: lw.Loop, entered: threading.Event
) -> None:
    """A resume of ``run_id`` cancelled once the write of its runtime's first kept word began
    (``first_word_held``: that write goes on in its store thread)."""
    first = asyncio.ensure_future(rt.resume(run_id, loop))
    assert await asyncio.to_thread(entered.wait, 60)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


Gates = dict[str, tuple[threading.Event, threading.Event]]


def stall_gates(n: int) -> Gates:
    """``n`` stalling executors' gates, by thread name (``stall-0`` ...): each's first event
    set once it is held, its second let it go (``held``)."""
    return {f"stall-{i}": (threading.Event(), threading.Event()) for i in range(n)}


def held(gates: Gates) -> None:
    """The calling executor held here until let go, if its thread is one of ``gates``."""
    gate = gates.get(threading.current_thread().name)
    if gate is not None:
        gate[0].set()
        gate[1].wait()


def resumer(
    url: str, run_id: str, loop: lw.Loop
) -> tuple[Callable[[], None], dict[str, BaseException | lw.RunResult]]:
    """A thread's target resuming ``run_id`` with ``loop`` in a runtime of its own, and how
    each such thread ended, by its name: its result or what it raised (read by the test)."""
    ended: dict[str, BaseException | lw.RunResult] = {}

    def drive() -> None:
        name = threading.current_thread().name
        try:
            with lw.Runtime(url) as rt:
                ended[name] = rt.resume_sync(run_id, loop)
        except BaseException as exc:  # (read by the test)
            ended[name] = exc

    return drive, ended


def notify_loop(
    name: str,
    send: Callable[[str], dict[str, str]],
    reconcile: Callable[[str], dict[str, str] | None],
    **budget: Any,
) -> lw.Loop:
    """``doc.n`` set to 1 with one call of the effect ``notify`` (kind ``send``, allowed; its
    key ``n:1``), accepted once ``doc.n`` is 1 (three cycles at most, ``budget`` besides).
    ``send(key)`` is the effect's call, ``reconcile`` its hook."""

    @lw.effect("send", name="notify", key=lambda a: f"n:{a['n']}", reconcile=reconcile)
    def notify(n: int, *, key: str) -> dict[str, str]:
        return send(key)

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "n", 1),), effects=(notify.call(n=1),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.values()["doc"].get("n") == 1, score=1.0)

    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=[check],
        effects=[notify],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=3, **budget)),
    )


def start_held(
    target: Callable[[], None], name: str, gates: Gates, ended: Mapping[str, Any]
) -> threading.Thread:
    """A thread named ``name`` running ``target``, returned once it is held at its gate of
    ``gates`` (at once when it has none); ``ended`` (how each ended) said if it ends first."""
    t = threading.Thread(target=target, name=name, daemon=True)
    t.start()
    if name in gates:
        while not gates[name][0].wait(0.05):
            assert t.is_alive(), ended
    return t


BILLED = lw.Usage(cost_usd=0.10, tokens=10)


def billed_loop(name: str, gates: Gates, **budget: Any) -> lw.Loop:
    """``doc.n`` edited to the cycle, accepted at 2, each actor call billed $0.10 and 10 tokens
    (``BILLED``); an executor of ``gates`` held at cycle 2 before it answers (``held``). Ten
    cycles at most, ``budget`` besides (``max_cost_usd`` 5.0 unless given)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            held(gates)
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),), usage=BILLED)

    def done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        n = int(state.values()["doc"].get("n", 0))
        return lw.Verdict(passed=n == 2, score=n / 2)

    limits = lw.Budget(**{"max_cycles": 10, "max_cost_usd": 5.0, **budget})
    return lw.Loop(name=name, actor=actor, verifiers=[done], contract=lw.Contract(budget=limits))
