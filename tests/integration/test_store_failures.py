"""A store failure is not a run failure (issue 16, item 5): a write that fails because the store
is unavailable (a dropped connection, a lock held too long, a full disk) leaves the run as its
last durable checkpoint has it — never `failed` — and a resume finishes it as an
uninterrupted run ends. Faults are placed at phase boundaries, never by timing."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

TASK = {"artifacts": {"doc": {"body": ""}}}
PATIENCE = 60.0  # seconds before a wait gives up (never expected)


def loop(calls: list[int]) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        done = state.values()["doc"]["body"] == "draft 5"
        return lw.Verdict(passed=done, score=1.0 if done else 0.5)

    return lw.Loop(
        name="sf",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=8)),
    )


def _reference(tmp_path: Path) -> lw.RunResult:
    with lw.Runtime(tmp_path / "ref.db") as rt:
        return rt.run_sync(loop([]), TASK, task_key="k")


def test_an_unavailable_store_leaves_the_run_resumable(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    calls: list[int] = []
    with lw.Runtime(db) as rt:
        real = rt.store.commit_request
        n = {"commits": 0}

        def flaky(*args: Any, **kw: Any) -> bool:
            n["commits"] += 1
            if n["commits"] == 3:
                raise lw.StoreUnavailableError("disk I/O error (injected)")
            return real(*args, **kw)

        rt.store.commit_request = flaky  # type: ignore[method-assign]
        with pytest.raises(lw.StoreUnavailableError, match="resume it"):
            rt.run_sync(loop(calls), TASK, task_key="k")
        rec = rt.store.get_run("k")
        assert rec.status == "running" and rec.stop_reason is None  # not failed
        rt.store.commit_request = real  # type: ignore[method-assign]
        done = rt.resume_sync(rec.run_id, loop(calls))
    ref = _reference(tmp_path)
    assert (done.status, done.stop_reason, done.cycles) == (ref.status, ref.stop_reason, ref.cycles)
    assert done.state.values() == ref.state.values()


def test_a_locked_sqlite_store_is_unavailable_not_a_bug(tmp_path: Path) -> None:
    """Another process holds the write lock past the busy timeout: the commit's failure is
    `StoreUnavailableError`, and nothing of it was kept."""
    import sqlite3

    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        rec, _ = rt.create(loop([]), TASK, task_key="k")
        token = rt.store.acquire_lease(rec.run_id, "me", 60)
        rt.store._db.execute("PRAGMA busy_timeout = 0")  # type: ignore[attr-defined]
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(lw.StoreUnavailableError, match="locked"):
                rt.store.commit(
                    rec.run_id,
                    token,
                    seq=1,
                    cycle=1,
                    state={"cycle": 1},
                    record=None,
                    events=[],
                    run={"cycle": 1},
                )
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert rt.store.latest_checkpoint(rec.run_id).seq == 0


@pytest.mark.postgres
def test_dropped_postgres_connections_leave_runs_resumable(pg_url: str) -> None:
    """Every connection of the run's store is terminated by the server at a cycle's
    checkpoint: the run is not failed, and a resume (new connections) finishes it."""
    import psycopg

    app = f"lw-drop-{uuid.uuid4().hex[:8]}"
    url = f"{pg_url}&application_name={app}"
    base = pg_url.split("?", maxsplit=1)[0]

    def drop_all() -> None:
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name=%s",
                (app,),
            )

    calls: list[int] = []
    seen = {"n": 0}

    def on_phase(phase: str) -> None:
        if phase == "before_checkpoint":
            seen["n"] += 1
            if seen["n"] == 3:
                drop_all()

    with lw.Runtime(url, group_commit=False) as rt:
        rt._on_phase = on_phase
        with pytest.raises(lw.StoreUnavailableError):
            rt.run_sync(loop(calls), TASK, task_key="k")
        rt._on_phase = None
        for _ in range(8):  # stale pooled connections fail one by one, then fresh ones serve
            try:
                rec = rt.store.get_run("k")
                break
            except lw.StoreUnavailableError:
                continue
        assert rec.status == "running"  # not failed
        done = None
        for _ in range(8):
            try:
                done = rt.resume_sync(rec.run_id, loop(calls))
                break
            except lw.StoreUnavailableError:
                continue
            except lw.ConflictError:  # our own unexpired lease from before the drop
                rt.store.release_lease(rec.run_id, rt.store.get_run("k").fencing_token)
    assert done is not None
    assert (done.status, done.stop_reason) == ("accepted", "success")


def test_a_renewal_the_store_failed_is_tried_again_at_the_next_beat(tmp_path: Path) -> None:
    """The heartbeat ended at the first renewal a dropped connection or a locked store failed:
    the lease was never renewed again, expired under the live run, and another worker took
    the run over and did its cycle in flight again (from probe41c). It now tries again at the
    next beat. The actor holds its cycle until the lease is renewed twice after the failure."""
    renewed = {"failed": 0, "after": 0}
    both = asyncio.Event()

    async def actor(ctx: lw.Context) -> lw.Proposal:
        try:
            await asyncio.wait_for(both.wait(), timeout=PATIENCE)  # a bound, never expected
        except TimeoutError:
            return lw.Proposal.edit("doc", {"body": "never renewed again"})
        return lw.Proposal.edit("doc", {"body": "done"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.values()["doc"]["body"] == "done")

    lp = lw.Loop(
        name="hb",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(tmp_path / "s.db", lease_ttl_s=0.3) as rt:
        real = rt.store.renew_lease

        def flaky(*args: Any, **kw: Any) -> Any:
            if not renewed["failed"]:
                renewed["failed"] = 1
                raise lw.StoreUnavailableError("connection dropped (injected)")
            renewed["after"] += 1
            if renewed["after"] == 2:
                both.set()
            return real(*args, **kw)

        rt.store.renew_lease = flaky  # type: ignore[method-assign]
        result = rt.run_sync(lp, TASK, task_key="k")
    assert renewed == {"failed": 1, "after": renewed["after"]} and renewed["after"] >= 2
    assert result.status == "accepted"
