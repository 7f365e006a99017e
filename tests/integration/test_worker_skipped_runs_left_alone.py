"""A run a worker skipped is left alone by its claims, recorded on once, and a store error of
the expiry poll does not end the worker (review49c), SQLite and PostgreSQL.

Since review49a a run whose resume fails for good before its drive is skipped for ``SKIP_S``.
But the claim still took it (the oldest runs first) and handed it back at every poll: as many
skipped runs as the worker had free slots kept every newer run from it, and ``--once`` ended
with those runs never driven. Each retry after ``SKIP_S`` wrote one more ``worker_skipped``
event with the same words. And the poll that records expired requests let any store error but
a lost connection out of ``Worker.run``: one damaged request row ended the worker at once.

Faults are placed at fixed points: the checkpoint read of the first run resumed, the expiry
poll's query.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from doc_loop import TASK
from test_lease_handed_back import _loop

import loopwright as lw
from loopwright import _worker
from loopwright._worker import Worker


def _first_fails(
    monkeypatch: pytest.MonkeyPatch, store: Any, why: str = "checkpoint 1 is damaged"
) -> list[str]:
    """Every checkpoint read of the first run read fails for good (a damaged checkpoint);
    the other runs read as they are. Returns the run ids read, in order."""
    real = store.latest_checkpoint
    reads: list[str] = []

    def damaged(run_id: str) -> Any:
        reads.append(run_id)
        if run_id == reads[0]:
            raise lw.StoreCorruptError(f"{why} (injected)")
        return real(run_id)

    monkeypatch.setattr(store, "latest_checkpoint", damaged)
    return reads


def test_a_skipped_run_does_not_keep_newer_runs_from_the_worker(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loops = {"handed-back": _loop()}
    with lw.Runtime(url) as rt:
        a, _ = rt.create(loops["handed-back"], TASK, task_key="A")
        b, _ = rt.create(loops["handed-back"], TASK, task_key="B")
        reads = _first_fails(monkeypatch, rt.store)
        # one slot: the skipped run, claimed again first, took it at every poll
        stats = asyncio.run(Worker(rt, loops=loops, concurrency=1, poll_s=0.001).run(once=True))
        skipped = reads[0]
        other = b.run_id if skipped == a.run_id else a.run_id
        assert rt.store.get_run(other).status == "accepted", stats  # before: pending
        assert stats.ended["accepted"] == 1 and stats.skipped == 1, stats
        got = rt.store.get_run(skipped)
        assert got.status == "pending" and got.lease_owner is None  # as it was, handed back


def test_a_run_skipped_again_for_the_same_reason_is_recorded_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_worker, "SKIP_S", 0.0)  # tried again at the next poll
    loops = {"handed-back": _loop()}
    with lw.Runtime(url) as rt:
        rec, _ = rt.create(loops["handed-back"], TASK, task_key="A")
        _first_fails(monkeypatch, rt.store)
        stats = asyncio.run(Worker(rt, loops=loops, poll_s=0.001).run(once=True, max_runs=3))
        assert stats.claimed == 3 and stats.skipped == 3, stats  # tried each time
        said = [e for e in rt.store.events(rec.run_id) if e.kind == "worker_skipped"]
        assert len(said) == 1, said  # before: 3, one a try
        assert "damaged" in said[0].data["why"]
        # another worker of this runtime (a restart): the same reason is not said again...
        asyncio.run(Worker(rt, loops=loops, poll_s=0.001).run(once=True, max_runs=1))
        assert [e.kind for e in rt.store.events(rec.run_id)].count("worker_skipped") == 1
        # ...another one is
        _first_fails(monkeypatch, rt.store, why="checkpoint 2 is damaged")
        asyncio.run(Worker(rt, loops=loops, poll_s=0.001).run(once=True, max_runs=1))
        said = [e for e in rt.store.events(rec.run_id) if e.kind == "worker_skipped"]
        assert [e.data["why"] for e in said] == [
            "checkpoint 1 is damaged (injected)",
            "checkpoint 2 is damaged (injected)",
        ]


def test_a_store_error_of_the_expiry_poll_does_not_end_the_worker(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loops = {"handed-back": _loop()}
    with lw.Runtime(url) as rt:
        rec, _ = rt.create(loops["handed-back"], TASK, task_key="A")

        def damaged(*, limit: int) -> Any:
            raise lw.StoreCorruptError("approval row damaged (injected)")

        monkeypatch.setattr(rt.store, "expired_requests", damaged)
        # before: StoreCorruptError out of Worker.run, the run never driven
        stats = asyncio.run(Worker(rt, loops=loops, poll_s=0.001).run(once=True))
        assert rt.store.get_run(rec.run_id).status == "accepted"
        assert stats.store_errors >= 1, stats
