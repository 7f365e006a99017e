"""A commit that is durable but whose answer is lost (the connection drops after the server
committed, before the client read "COMMIT"): the run is as the store holds it.

Found by attacking workers on PostgreSQL through a proxy that drops the connection instead of
forwarding a COMMIT's answer (pg52): when that commit was the one that ended the run, the
worker counted the run ``interrupted`` ("left resumable") and never reported it as ended — no
``on_result``, nothing under ``ended`` — though it was accepted, and no worker would ever take
it again; ``Runtime.run`` raised "resume it when the store is back" for a run that had ended.

The fault is placed in-process, at a deterministic point: each store write that commits runs,
then, the first time the store holds the run ended (or parked), raises the
``StoreUnavailableError`` a dropped connection raises. SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import loopwright as lw
from loopwright import StoreUnavailableError

TASK = {"artifacts": {"doc": {"a": 0}}}
WRITES = ("commit", "commit_request", "commit_many")


def _loop(*, ask: bool = False) -> tuple[lw.Loop, list[str]]:
    """The loop, and the keys its effect was executed under."""
    paid: list[str] = []

    @lw.effect("send", key=lambda a: a["to"])
    def notify(to: str, *, key: str) -> dict[str, Any]:
        paid.append(key)
        return {"sent": key}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "a", 1),), effects=(notify.call(to="x"),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.artifacts["doc"].values()["a"] == 1)

    loop = lw.Loop(
        name="lostack",
        actor=actor,
        verifiers=[check],
        effects=[notify],
        approvals=lw.ApprovalPolicy(
            (lw.PolicyRule(kind="send", action="require" if ask else "allow"),)
        ),
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    return loop, paid


def _lose_the_answer(rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch, ends: set[str]) -> list[str]:
    """Every commit goes through; the first one after which the store holds a run in one of
    ``ends`` then fails as a dropped connection does. Returns the runs it failed for."""
    store = rt.store
    lost: list[str] = []

    def wrap(name: str) -> None:
        real = getattr(store, name)

        def write(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            if not lost:
                for rec in store.list_runs():
                    if rec.status in ends:
                        lost.append(rec.run_id)
                        raise StoreUnavailableError(
                            f"{store.url}: OperationalError: the connection was lost after COMMIT"
                        )
            return out

        monkeypatch.setattr(store, name, write)

    for name in WRITES:
        if hasattr(store, name):
            wrap(name)
    return lost


@pytest.mark.parametrize("ask", [False, True], ids=["ended", "parked"])
def test_a_worker_reports_a_run_its_lost_commit_ended(
    url: str, monkeypatch: pytest.MonkeyPatch, ask: bool
) -> None:
    loop, paid = _loop(ask=ask)
    want = "awaiting_approval" if ask else "accepted"
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, TASK, task_key="t")[0].run_id
        lost = _lose_the_answer(rt, monkeypatch, {want})
        results: list[lw.RunResult] = []
        worker = lw.Worker(rt, loops={"lostack": loop}, concurrency=2, on_result=results.append)
        stats = asyncio.run(worker.run(once=True))
        assert lost == [run_id]  # the fault was placed
        rec = rt.store.get_run(run_id)
        assert rec.status == want
        assert rec.lease_owner is None  # handed back
        assert stats.interrupted == 0, stats.to_dict()
        assert dict(stats.ended) == {want: 1}, stats.to_dict()
        assert [r.status for r in results] == [want]
        assert paid == ([] if ask else ["notify:x"])  # once


def test_run_returns_the_result_its_lost_commit_ended(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, paid = _loop()
    with lw.Runtime(url) as rt:
        lost = _lose_the_answer(rt, monkeypatch, {"accepted"})
        result = rt.run_sync(loop, TASK, task_key="t")
        assert len(lost) == 1 and result.run_id == lost[0]
        assert result.status == "accepted" and result.state.artifacts["doc"].values() == {"a": 1}
        assert paid == ["notify:x"]


def test_a_lost_commit_that_did_not_end_the_run_still_fails(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run still running in the store: the failure is the store's, said as before (the
    run left resumable), and a resume finishes it."""
    loop, paid = _loop()
    with lw.Runtime(url) as rt:
        lost = _lose_the_answer(rt, monkeypatch, {"running"})
        with pytest.raises(StoreUnavailableError, match="resume it"):
            rt.run_sync(loop, TASK, task_key="t")
        monkeypatch.undo()
        assert rt.store.get_run(lost[0]).status == "running"
        assert rt.resume_sync(lost[0], loop).status == "accepted"
        assert paid == ["notify:x"]
