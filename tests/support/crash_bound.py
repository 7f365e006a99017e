"""The crash bound's tests (crash53, crash54): a loop that edits ``doc.n`` to the cycle and is
accepted at 3, a run's lease let lapse with no waiting, and an executor stalled past its lease
in a thread of its own until the test has acted."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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
