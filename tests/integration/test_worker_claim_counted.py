"""A run a worker has claimed counts as executed by its runtime from the claim (lifecycle55):
a person's operation through that runtime between the claim and the drive's start (the drive a
task not run yet) found the run undriven and took its lease again, the same owner, so the
worker's resume was fenced out (``lost``) before its first cycle. Now it is refused as while
the run is driven (an edit: ``ConflictError``; a cancel: asked, the run stopping itself). The
operation is made at that fixed point (the worker's ``_drive_run`` entered); nothing is timed.
Both stores: a person's async operation reads and writes in a store thread on PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import loopwright as lw
from loopwright._worker import Worker

TASK = {"artifacts": {"doc": {"done": False}}}


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    done = bool(state.artifacts["doc"].values().get("done"))
    return lw.Verdict(passed=done, score=1.0 if done else 0.0)


def _loop(actor: Any) -> lw.Loop:
    return lw.Loop(
        name="claimed",
        actor=actor,
        verifiers=[lw.Check(fn=_check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


LOOP = _loop(lambda ctx: lw.Proposal.edit("doc", {"done": True}))


def _between_claim_and_drive(url: str, op: str) -> tuple[Any, Any, lw.RunRecord]:
    """A worker's one run, ``op`` asked of its runtime between its claim and its drive: what
    the operation answered, the worker's counts, the run as it ends."""
    with lw.Runtime(url) as rt:
        run_id = rt.create(LOOP, TASK, task_key="k")[0].run_id
        w = Worker(rt, loops={"claimed": LOOP}, concurrency=1, poll_s=0.01)
        drive = w._drive_run
        answered: list[Any] = []

        async def held(rid: str, token: int) -> None:
            if not answered:  # (at the first claim only: one fenced out is claimed again)
                try:
                    if op == "edit":
                        answered.append(await rt.edit_async(rid, "doc/done", True, by="ops"))
                    else:
                        answered.append(rt.cancel(rid, by="ops"))
                except lw.LoopwrightError as exc:
                    answered.append(exc)
            await drive(rid, token)

        w._drive_run = held  # type: ignore[method-assign]
        stats = asyncio.run(w.run(once=True))
        return answered[0], stats, rt.store.get_run(run_id)


def test_an_edit_between_a_workers_claim_and_its_drive_is_refused(url: str) -> None:
    answered, stats, rec = _between_claim_and_drive(url, "edit")
    assert isinstance(answered, lw.ConflictError), answered
    assert stats.lost == 0 and stats.ended.get("accepted") == 1
    assert rec.status == "accepted" and rec.fencing_token == 1  # (one lease: the worker's)


def test_a_cancel_between_a_workers_claim_and_its_drive_is_asked(url: str) -> None:
    answered, stats, rec = _between_claim_and_drive(url, "cancel")
    assert not isinstance(answered, Exception)
    assert stats.lost == 0 and rec.status == "cancelled"
    assert rec.fencing_token == 1  # (the worker's execution stopped it at its boundary)


def test_a_worker_of_a_drained_runtime_claims_nothing(url: str) -> None:
    # A runtime drained (``rt.drain()``, or ``close`` begun: it drains first) winds its runs
    # down at their next boundary; its worker kept claiming, each run claimed drained at once
    # and handed back, claimed again: a claim loop until the runtime closed. It stops claiming.
    with lw.Runtime(url) as rt:
        run_id = rt.create(LOOP, TASK, task_key="k")[0].run_id
        rt.drain()
        w = Worker(rt, loops={"claimed": LOOP}, concurrency=1, poll_s=0.01)
        stats = asyncio.run(w.run(max_runs=5))
        assert stats.claimed == 0
        assert rt.store.get_run(run_id).status == "pending"


def test_an_edit_in_another_thread_between_a_workers_claim_and_its_count_is_refused(
    url: str,
) -> None:
    """The runs a worker claims count as driven by its runtime in one step with the claim: a
    person's synchronous edit of that runtime in another thread, made after the claim and
    before a count that followed it, found the run free, took its lease again (the same owner)
    and made its edit; the worker's execution was fenced out (``lost``, review56a). The edit is
    made at that fixed point (the store's claim returned to the worker); it waits there for the
    claim to end (where it waits, the test goes on), then finds the run driven: refused. The
    worker's cycle waits for the edit's answer, so that the run is driven when it comes."""
    answered: list[Any] = []
    done = threading.Event()  # (the edit answered)

    def act(ctx: lw.Context) -> lw.Proposal:
        assert done.wait(60)
        return lw.Proposal.edit("doc", {"done": True})

    loop = _loop(act)
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, TASK, task_key="k")[0].run_id
        w = Worker(rt, loops={"claimed": loop}, concurrency=1, poll_s=0.01)
        go_on = threading.Event()  # (the edit answered, or waits for the claim to end)

        def edit() -> None:
            try:
                answered.append(rt.edit(run_id, "doc/done", True, by="ops"))
            except lw.LoopwrightError as exc:
                answered.append(exc)
            finally:
                done.set()
                go_on.set()

        editing = threading.Thread(target=edit, daemon=True)
        settled = getattr(rt, "_settled", None)
        if settled is not None:  # (where the edit waits for a claim in flight to end)

            def told() -> None:
                if threading.current_thread() is editing:
                    go_on.set()
                settled()

            rt._settled = told  # type: ignore[method-assign]
        claim = rt.store.claim_runs

        def claimed(**kw: Any) -> Any:
            taken = claim(**kw)
            if taken and editing.ident is None:
                editing.start()
                assert go_on.wait(60)
            return taken

        rt.store.claim_runs = claimed  # type: ignore[method-assign]
        stats = asyncio.run(w.run(once=True))
        editing.join(60)
        rec = rt.store.get_run(run_id)
    assert isinstance(answered[0], lw.ConflictError), answered
    assert stats.lost == 0 and stats.ended.get("accepted") == 1
    assert rec.status == "accepted" and rec.fencing_token == 1  # (one lease: the worker's)
