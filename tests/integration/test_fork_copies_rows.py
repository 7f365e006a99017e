"""A fork's versions are copied by the store, row to row (``create_run(copy_versions=...)``),
not read into Python and written back: a fork of a long run held its every version. The rows
a fork gets are those the older path gave (a store whose ``create_run`` predates
``copy_versions`` still gets them all as ``initial_versions``)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from support.long_loops import rejecting_loop

import loopwright as lw

PARTS = 4


def _mixed_loop(cycles: int) -> lw.Loop:
    """Edits a part a cycle; the check names two parts, so the others are accepted (versions
    of every status)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {f"p{ctx.cycle % PARTS}": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False,
            score=0.5,
            findings=(lw.Finding("open", "doc", "p0"), lw.Finding("open", "doc", "p1")),
        )

    return lw.Loop(
        name="mixed",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        approvals=lw.ApprovalPolicy(
            rules=(lw.PolicyRule(name="redo", kind="overwrite_accepted", action="allow"),)
        ),
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _rows(store: Any, run_id: str) -> dict[str, list[tuple[int, int, str, Any]]]:
    refs = [ref for ref, _part in store.latest_checkpoint(run_id).task_state().iter_parts()]
    assert refs
    return {
        ref: [(v.n, v.cycle, v.status, v.value) for v in store.versions(run_id, ref)]
        for ref in refs
    }


def _head(store: Any, run_id: str) -> dict[str, Any]:
    state = dict(store.latest_checkpoint(run_id).state)
    state.pop("task_key", None)
    return state


def test_a_fork_gets_the_rows_the_older_path_gave(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = {"artifacts": {"doc": {f"p{i}": "y" for i in range(PARTS)}}}
    with lw.Runtime(url) as rt:
        loop = _mixed_loop(30)
        r = rt.run_sync(loop, task, task_key="k")
        rt.rollback(r.run_id, 12, by="ann", loop=loop)
        rt.edit(r.run_id, "doc/p2", "by hand", by="ann")
        run_id = rt.resume_sync(r.run_id, loop).run_id
        cycles = (0, 1, 5, 12, 30)  # (13..29 were abandoned by the rollback)
        new = {n: rt.fork(run_id, at_cycle=n, task_key=f"new{n}").run_id for n in cycles}
        real = rt.store.create_run

        def older(**kw: Any) -> Any:  # a store's create_run written before copy_versions
            if "copy_versions" in kw:
                raise TypeError("create_run() got an unexpected keyword argument 'copy_versions'")
            return real(**kw)

        monkeypatch.setattr(rt.store, "create_run", older)
        old = {n: rt.fork(run_id, at_cycle=n, task_key=f"old{n}").run_id for n in cycles}
        for n in cycles:
            assert _rows(rt.store, new[n]) == _rows(rt.store, old[n]), n
            assert _head(rt.store, new[n]) == _head(rt.store, old[n]), n
        # and the fork goes on as one does
        monkeypatch.undo()
        more = lw.Contract(budget=lw.Budget(max_cycles=33))
        fork = rt.fork(run_id, at_cycle=30, contract=more)
        done = rt.resume_sync(fork.run_id, _mixed_loop(33))
        assert (done.status, done.cycles) == ("stopped", 33)
        assert done.state.part("doc/p2").version(1).value == "y"
        assert done.state.part("doc/p2").version(5).value == "by hand"


def _fork_peak(tmp_path: Path, cycles: int) -> int:
    loop = rejecting_loop(cycles, lambda n: {f"p{n % PARTS}": f"draft {n} " + "x" * 20_000})
    task = {"artifacts": {"doc": {f"p{i}": "y" for i in range(PARTS)}}}
    with lw.Runtime(str(tmp_path / f"{cycles}.db")) as rt:
        r = rt.run_sync(loop, task, task_key="k")
        rt.fork(r.run_id, at_cycle=1)  # imports and statements, before anything is counted
        tracemalloc.start()
        try:
            fork = rt.fork(r.run_id, at_cycle=cycles - 1)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        kept = [v for v in rt.store.versions(r.run_id, "doc/p0") if v.cycle < cycles]
        assert rt.store.versions(fork.run_id, "doc/p0") == kept
    return peak


def test_a_fork_of_a_long_run_does_not_hold_its_versions(tmp_path: Path) -> None:
    """2.3 MiB at 200 cycles of 20 KB values, 19.7 MiB at 2,000: every version was read into
    memory to be written to the fork. Now the store copies the rows."""
    short, long = _fork_peak(tmp_path, 40), _fork_peak(tmp_path, 400)
    assert long - short < 1_000_000, (short, long)  # was 7.3 MB more (20 KB a version held)
