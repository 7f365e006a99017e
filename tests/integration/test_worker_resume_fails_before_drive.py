"""A run whose resume fails for good before its drive is skipped by a worker, saying why, not
claimed again at every poll (review49a), SQLite and PostgreSQL.

Since review48 a resume hands its lease back when a read under it fails (a damaged checkpoint:
``StoreCorruptError``; a bug in loopwright: any other exception). The worker counted the run
``lost`` ("another worker owns it") or ``errors`` and claimed it again at its next poll: the
same failure, for ever, with nothing recorded on the run. ``loopwright worker --once`` never
ended. Now the run is skipped (its why on the run and in the worker's stats) and left alone
for a while, as a run with no loop here is.

The failure is placed at a fixed point: every read of the run's latest checkpoint.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from doc_loop import TASK
from test_approval_card_reuse_listed import _cli, _words
from test_lease_handed_back import _loop

import loopwright as lw
from loopwright._worker import Worker


@pytest.mark.parametrize(
    "failure",
    [lw.StoreCorruptError("checkpoint 3 is damaged (injected)"), ValueError("a bug (injected)")],
)
def test_a_run_that_fails_before_its_drive_is_claimed_once(
    url: str, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    loops = {"handed-back": _loop()}
    with lw.Runtime(url) as rt:
        rec, _ = rt.create(loops["handed-back"], TASK, task_key="A")
        reads: list[str] = []

        def damaged(run_id: str) -> Any:
            reads.append(run_id)
            raise failure

        monkeypatch.setattr(rt.store, "latest_checkpoint", damaged)
        worker = Worker(rt, loops=loops, poll_s=0.001)
        # (max_runs bounds the spin this test would otherwise hang in, before the fix)
        stats = asyncio.run(worker.run(once=True, max_runs=5))
        assert stats.claimed == 1, stats  # before: 5 (claimed at every poll, failing alike)
        assert reads == [rec.run_id]
        got = rt.store.get_run(rec.run_id)
        assert got.status == "pending"  # left as it was, resumable once repaired
        assert (got.lease_owner, got.lease_expires_at) == (None, None)  # handed back
        # why, on the run (before: nothing)
        [skipped] = [e for e in rt.store.events(rec.run_id) if e.kind == "worker_skipped"]
        assert str(failure) in skipped.data["why"]
        if isinstance(failure, lw.StoreError):
            assert (stats.skipped, stats.lost) == (1, 0), stats  # before: lost 5
            assert "damaged" in stats.skipped_why[rec.run_id]
        else:
            assert stats.errors == 1, stats


def test_a_run_whose_resume_is_refused_for_its_loop_says_why_on_the_run(url: str) -> None:
    # The worker's loop for the run's name is another loop: the resume refuses it
    # (ConfigError). It was counted and said to on_skip only; nothing on the run told
    # ``loopwright show`` why the worker left it.
    loop = _loop()
    with lw.Runtime(url) as rt:
        rec, _ = rt.create(loop, TASK, task_key="A")
        other = lw.Loop(
            name="another", actor=loop.actor, verifiers=loop.verifiers, contract=loop.contract
        )
        said: list[tuple[str, str]] = []
        worker = Worker(
            rt,
            loops={"handed-back": other},
            poll_s=0.001,
            on_skip=lambda r, e: said.append((r, str(e))),
        )
        stats = asyncio.run(worker.run(once=True, max_runs=5))
        assert stats.claimed == 1 and stats.skipped == 1, stats
        assert [r for r, _ in said] == [rec.run_id]
        got = rt.store.get_run(rec.run_id)
        assert got.status == "pending" and got.lease_owner is None  # handed back, as it was
        # before: no worker_skipped event
        [skipped] = [e for e in rt.store.events(rec.run_id) if e.kind == "worker_skipped"]
        assert "is loop 'another', not run" in skipped.data["why"], skipped.data
        assert skipped.data["owner"] == rt.owner
        shown = _words(_cli(url, "show", rec.run_id))
        assert f"Skipped by worker {rt.owner}: loop: is loop 'another', not run" in shown, shown
        # driven since, the skip is not said any more
        assert rt.resume_sync(rec.run_id, loop).status == "accepted"
    assert "Skipped by worker" not in _words(_cli(url, "show", rec.run_id))
