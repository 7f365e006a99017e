"""A lease taken for a resume or a cancel is handed back when a store read fails before the
drive or the cancel starts (review48), SQLite and PostgreSQL.

The reads under the lease (the run again, its latest checkpoint) stood outside the ``try`` that
hands the lease back: a transient store error there left the lease held to its TTL (60 s by
default), and no other executor (a worker, another process's cancel) could take the run until
then. The release is fenced by the token: a lease taken over since is left alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from doc_loop import TASK

import loopwright as lw


def _loop() -> lw.Loop:
    return lw.Loop(
        name="handed-back",
        actor=lambda ctx: lw.Proposal(edits=(lw.Edit("doc", "b", 1),)),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )


def _fail_once(monkeypatch: pytest.MonkeyPatch, store: Any, name: str) -> list[str]:
    """``store.<name>`` raises ``StoreUnavailableError`` at its next call, then works."""
    real = getattr(store, name)
    failed: list[str] = []

    def flaky(*args: Any, **kw: Any) -> Any:
        if not failed:
            failed.append(name)
            raise lw.StoreUnavailableError("connection dropped (injected)")
        return real(*args, **kw)

    monkeypatch.setattr(store, name, flaky)
    return failed


def _free(store: lw.store.Store, run_id: str) -> None:
    """Nobody holds the run: another executor claims it at once."""
    rec = store.get_run(run_id)
    assert (rec.lease_owner, rec.lease_expires_at) == (None, None), rec.lease_owner
    taken = store.claim_runs(owner="another-worker", ttl_s=60.0, limit=5)
    assert [r for r, _t in taken] == [run_id]  # before: [] (held by the failed resume)


@pytest.mark.parametrize("handed", [False, True])
def test_a_resume_whose_store_read_fails_hands_its_lease_back(
    url: str, monkeypatch: pytest.MonkeyPatch, handed: bool
) -> None:
    loop = _loop()
    with lw.Runtime(url) as rt:
        rec, _ = rt.create(loop, TASK, task_key="A")
        token = None
        if handed:  # a worker's claim, handed to resume
            (claimed,) = rt.store.claim_runs(owner=rt.owner, ttl_s=rt.lease_ttl_s, limit=1)
            token = claimed[1]
        failed = _fail_once(monkeypatch, rt.store, "latest_checkpoint")
        with pytest.raises(lw.StoreUnavailableError):
            asyncio.run(rt.resume(rec.run_id, loop, token=token))
        assert failed == ["latest_checkpoint"]
        assert rt.store.get_run(rec.run_id).status == "pending"  # as it was
        _free(rt.store, rec.run_id)


def test_a_cancel_whose_store_read_fails_hands_its_lease_back(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = _loop()
    with lw.Runtime(url) as rt:
        rec, _ = rt.create(loop, TASK, task_key="A")
        failed = _fail_once(monkeypatch, rt.store, "latest_checkpoint")
        with pytest.raises(lw.StoreUnavailableError):
            rt.cancel(rec.run_id, by="ana")
        assert failed == ["latest_checkpoint"]
        # asked for (recorded before the lease), not done: the run stays as it was
        got = rt.store.get_run(rec.run_id)
        assert got.status == "pending"
        assert (got.lease_owner, got.lease_expires_at) == (None, None), got.lease_owner
        # a cancel again (from another process, say) is not refused as "executing elsewhere"
        with lw.Runtime(url) as other:
            assert other.cancel(rec.run_id, by="ana").status == "cancelled"


def test_a_worker_hands_a_skipped_run_back_when_its_event_cannot_be_written(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwright._worker import Worker

    with lw.Runtime(url) as rt:
        rec, _ = rt.create(_loop(), TASK, task_key="py")  # started from Python: no loop here
        failed = _fail_once(monkeypatch, rt.store, "append_events")
        stats = asyncio.run(Worker(rt).run(once=True))
        assert stats.skipped == 1
        assert failed == ["append_events"]  # the worker_skipped event
        _free(rt.store, rec.run_id)  # before: held by the worker to its TTL
