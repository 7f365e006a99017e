"""A run's queued group commits that fail are undone together (``Checkpoints._settle``).

A grouped run queues its next commit before the last is durable: two commits of one run can
be waiting at once. When the older fails, the newer is a delta on it and is not written
either (the store refuses it in the same batch, the committer in a later one); both are
undone, so the run commits them again from the older's sequence number, with the events and
rejected digests of both. The store here is a real SQLite one whose ``commit_many`` refuses
the first batch it is given, every commit of it, as a store refuses a value.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright import Contract, StoreError
from loopwright._exec import NO_LOOP, Execution
from loopwright._state import TaskState
from loopwright.store import CommitRequest, NewEvent


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": 1})

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.0)

    return lw.Loop(
        name="gs", actor=actor, verifiers=[check], contract=Contract(budget=lw.Budget(max_cycles=5))
    )


def _cycle(ex: Execution, n: int) -> None:
    """What cycle ``n`` leaves to commit: an event and a rejected digest."""
    ex.state.cycle = n
    ex.events.append(NewEvent(n, f"e{n}", {}))
    ex.state.rejected.append(f"d{n}")


@pytest.mark.parametrize("same_batch", [True, False])
def test_two_queued_commits_of_a_run_that_fail_are_both_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, same_batch: bool
) -> None:
    async def scenario() -> None:
        rt = lw.Runtime(str(tmp_path / "s.db"))
        st = rt.store
        rec, _ = rt.create(_loop(), {"artifacts": {"doc": {"a": 0}}}, task_key="t")
        token = st.acquire_lease(rec.run_id, "o", 60)
        ck = st.latest_checkpoint(rec.run_id)
        ex = Execution(
            rec.run_id, NO_LOOP, Contract.from_dict(rec.contract), token, ck.seq,
            TaskState.from_dict(ck.state),
        )  # fmt: skip
        ex.adopt(st, ck.state)
        ex.grouped = True
        real = st.commit_many
        refused: list[int] = []
        written = asyncio.Event()

        def commit_many(items: list[CommitRequest]) -> list[Any]:
            if refused:
                return real(items)
            refused.extend(it.seq for it in items)
            written.set()
            return [StoreError(f"checkpoint {it.seq}: a value refused") for it in items]

        monkeypatch.setattr(st, "commit_many", commit_many)
        rt._active = 2  # another run shares the loop: commits are queued
        _cycle(ex, 1)
        rt._commit(ex, None, {"status": "running"})
        if not same_batch:
            await written.wait()  # the first batch written (refused) before the next commit
        _cycle(ex, 2)
        rt._commit(ex, None, {"status": "running"})
        with pytest.raises(StoreError):
            await rt._settle(ex)
        assert refused == ([1, 2] if same_batch else [1])
        assert [c.seq for c in st.checkpoints(rec.run_id)] == [0]  # no hole written
        assert ex.seq == 0
        assert [e.kind for e in ex.events] == ["e1", "e2"]
        assert ex.rejected_written == 0
        # committed again, alone: checkpoint 1 holds both cycles' events and digests
        rt._active = 1
        rt._commit(ex, None, {"status": "running"})
        assert [c.seq for c in st.checkpoints(rec.run_id)] == [0, 1]
        assert [e.kind for e in st.events(rec.run_id)][-2:] == ["e1", "e2"]
        assert st.is_rejected(rec.run_id, "d1") and st.is_rejected(rec.run_id, "d2")
        rt.close()

    asyncio.run(scenario())
