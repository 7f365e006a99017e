"""A ``*_sync`` twin called inside a running event loop (a notebook cell, an async function)
is refused naming itself and the call to write instead (api49): the message was "called a
*_sync method inside a running event loop; await the async one", naming neither; and
nothing is started or left open."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import loopwright as lw


def test_each_sync_twin_names_itself_and_its_async_one(tmp_path: Path) -> None:
    loop = lw.Loop(
        name="twins",
        actor=lambda ctx: lw.Proposal.edit("doc", {"title": "Hello"}),
        verifiers=[lw.Check(fn=lambda state, proposal: lw.Verdict(passed=True, score=1.0))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    task = {"artifacts": {"doc": {"title": "Helo"}}}

    async def in_a_cell(rt: lw.Runtime) -> list[str]:
        said = []
        for call, name in (
            (lambda: rt.run_sync(loop, task, task_key="t1"), "run"),
            (lambda: rt.run_many_sync(loop, [task]), "run_many"),
            (lambda: rt.resume_sync("t1", loop), "resume"),
        ):
            with pytest.raises(RuntimeError) as info:
                call()
            assert f"{name}_sync() was called inside a running event loop" in str(info.value)
            assert f"await rt.{name}(...)" in str(info.value)
            said.append(name)
        return said

    with lw.Runtime(tmp_path / "s.db") as rt:
        assert asyncio.run(in_a_cell(rt)) == ["run", "run_many", "resume"]
        assert rt.store.count_runs() == 0  # nothing was started
        assert rt.run_sync(loop, task, task_key="t1").status == "accepted"
