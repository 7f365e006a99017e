"""A run's metrics are folded over its checkpoints and events a page at a time
(``Store.iter_fields``, ``Store.iter_events``): the same numbers as the run read whole
(``run_metrics`` over ``checkpoints``, ``events``), and memory that does not grow with the run
(a 20,000-cycle run read whole took 376 MB: bench/RESULTS.md, stop 37)."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields, part_check
from support.long_loops import rejecting_loop

import loopwright as lw
from loopwright._metrics import compute_metrics, run_metrics, summarize
from loopwright._run_metrics import fork_base
from loopwright.store import Store, open_store

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "invoice_exceptions" / "loop.toml"
TASKS = ROOT / "examples" / "invoice_exceptions" / "tasks.jsonl"


class Crash(BaseException):
    """Stands in for a process dying mid-cycle."""


def _loop(
    actor: Callable[[lw.Context], lw.Proposal], verifiers: Any = (fields,), **kw: Any
) -> lw.Loop:
    return lw.Loop(
        name="m",
        version="v1",
        actor=actor,
        verifiers=list(verifiers),
        contract=lw.Contract(budget=lw.Budget(max_cycles=6), **kw),
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.001, jitter=False),
    )


def fixer(ctx: lw.Context) -> lw.Proposal:
    """Repairs one part a cycle, charged as a model call."""
    doc = ctx.artifacts["doc"]
    for part, value in TARGET.items():
        if doc.get(part) != value:
            return lw.Proposal.edit("doc", {part: value}, usage=lw.Usage(0.1, 40))
    return lw.Proposal(note="look", usage=lw.Usage(0.1, 40))


def _mixed_store(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs with effects, approvals (approved, denied, answered), held-out checks, model
    calls, a rollback, a fork, a crash and a retry, a regression and a person's edits."""
    monkeypatch.setenv("INVOICE_LEDGER", str(tmp_path / "payments.jsonl"))
    tasks = [json.loads(x) for x in TASKS.read_text(encoding="utf-8").splitlines() if x]
    spec = lw.load_spec(SPEC)
    with lw.Runtime(url) as rt:
        demo = asyncio.run(rt.run_many(spec, tasks, key_of=lambda t, i: f"b/{t['id']}"))
        parked = [r for r in demo if r.status == "awaiting_approval"]
        assert len(parked) >= 2
        rt.approve(parked[0].run_id, by="ann")
        rt.deny(parked[1].run_id, by="bob")
        for r in parked[:2]:
            rt.resume_sync(r.run_id, spec)

        # a question answered, then a rollback to the cycle before it, then a fork
        def asking(ctx: lw.Context) -> lw.Proposal:
            if ctx.cycle == 2 and not any(n.get("kind") == "answer" for n in ctx.notes):
                return lw.Proposal(question=lw.Question("Which PO?", choices=("PO-1", "PO-2")))
            return fixer(ctx)

        asked = rt.run_sync(_loop(asking), TASK, task_key="asked")
        assert asked.status == "awaiting_approval"
        rt.answer(asked.run_id, "PO-2", by="ann")
        done = rt.resume_sync(asked.run_id, _loop(asking))
        assert done.cycles >= 3
        rt.rollback(asked.run_id, 1, by="dave")
        rt.resume_sync(asked.run_id, _loop(asking))
        fork = rt.fork(asked.run_id, at_cycle=2, task_key="asked~2")
        rt.resume_sync(fork.run_id, _loop(asking))  # its first cycle compared with cycle 2

        # a regression; a person's edits
        steps = [{"a": 1}, {"a": 7, "b": 2}, {"a": 1, "c": 3}]
        regress = _loop(
            lambda ctx: lw.Proposal.edit("doc", steps[ctx.cycle - 1], usage=lw.Usage(0.1)),
            verifiers=(part_check("a", 1), part_check("b", 2)),
            success=lw.Success(accept_parts="on_success"),
        )
        rt.run_sync(regress, TASK, task_key="regress")
        stuck = _loop(
            lambda ctx: lw.Proposal.edit("doc", {"a": 1, "b": 2}, usage=lw.Usage(0.1)),
            no_progress=lw.NoProgress(cycles=2),
        )
        first = rt.run_sync(stuck, TASK, task_key="edited")
        rt.edit(first.run_id, "doc/c", 30, by="ana", note="a slip")
        rt.edit(first.run_id, "doc/c", 3, by="ana")
        rt.resume_sync(first.run_id, stuck)

    # a crash mid-cycle, then a transient error: resumed in another runtime
    crash_at, flaky = {2}, {3}

    def crashy(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle in crash_at:
            crash_at.clear()
            raise Crash
        if ctx.cycle in flaky:
            flaky.clear()
            raise lw.TransientError("429")
        return fixer(ctx)

    with lw.Runtime(url) as rt1, pytest.raises(Crash):
        rt1.run_sync(_loop(crashy), TASK, task_key="crashy")
    with lw.Runtime(url) as rt2:
        rt2.resume_sync(rt2.store.get_run("crashy").run_id, _loop(crashy))


def _read_whole(st: Store) -> list[Any]:
    """Each run's metrics from its rows read whole (the computation before streaming)."""
    runs = st.list_runs()
    proven = st.first_accepted(sorted({r.loop_name for r in runs}))
    return [
        run_metrics(
            r,
            st.checkpoints(r.run_id),
            st.events(r.run_id),
            st.approvals(run_id=r.run_id),
            workflow_proven_at=None
            if r.loop_version is None
            else proven.get((r.loop_name, r.loop_version)),
            fork_base=fork_base(st, r),
        )
        for r in runs
    ]


def test_streamed_metrics_equal_the_run_read_whole(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _mixed_store(url, tmp_path, monkeypatch)
    with open_store(url) as st:
        whole = _read_whole(st)
        streamed = compute_metrics(st)
    assert [r.to_dict() for r in streamed.per_run] == [r.to_dict() for r in whole]
    assert streamed == summarize(whole, selection=streamed.selection)
    rows = {r.task_key: r for r in streamed.per_run}
    # the mix is what it claims to be: every figure the fold keeps is exercised
    assert any(r.approval_waits_s for r in streamed.per_run)
    assert any(r.held_out_passed is not None for r in streamed.per_run)
    assert rows["regress"].regressions
    assert rows["edited"].edits == 2
    assert rows["crashy"].failures
    assert rows["asked~2"].inherited_usd > 0
    fork = rows["asked~2"]
    assert fork.verified_cycles and fork.regression_checked_cycles == fork.verified_cycles
    assert rows["asked"].context_reuse_cycles > 0
    assert any(r.last_improvement_cycle is not None for r in streamed.per_run)
    assert any(r.accepted_parts for r in streamed.per_run)


VALUE_BYTES = 4_000


def _long_loop(cycles: int) -> lw.Loop:
    """Five parts written in turn with 4 KB values, a located finding each cycle, a
    reviewer's note now and then: a run whose rows grow with every cycle."""
    return rejecting_loop(
        cycles,
        lambda n: {f"p{n % 5}": f"{n:06d}" + "x" * VALUE_BYTES},
        usage=lw.Usage(0.01, 10),
    )


def test_metrics_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """Four times the cycles, not four times the memory: the peak while computing a run's
    metrics is a page of rows, the accumulators and the final state. (Read whole, 40 → 160
    cycles of 4 KB values took about 4× the memory.)"""
    peaks: dict[int, int] = {}
    for cycles in (40, 160):
        url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_long_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            assert r.cycles == cycles
        with open_store(url) as st:
            compute_metrics(st)  # warm: statements prepared, modules imported
            tracemalloc.start()
            try:
                m = compute_metrics(st)
                peaks[cycles] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert m.per_run[0].cycles == cycles
    assert peaks[160] < 2 * peaks[40], peaks


def test_iter_fields_pages_are_what_checkpoints_give(url: str) -> None:
    """The paged ``iter_fields`` of the SQL stores gives each checkpoint's record and fields as
    ``Store.iter_fields`` (over ``checkpoints``) does: across pages, snapshots, a rollback and a
    person's edit."""
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_long_loop(75), {"artifacts": {"doc": {}}}, task_key="paged")
        rt.rollback(r.run_id, 40, by="dave")
        rt.edit(r.run_id, "doc/p1", "by hand", by="ana")
        paged = list(rt.store.iter_fields(r.run_id))
        whole = list(Store.iter_fields(rt.store, r.run_id))
    assert len(paged) > 2 * 32
    assert [(s, c, rec, dict(f)) for s, c, rec, f in paged] == [
        (s, c, rec, dict(f)) for s, c, rec, f in whole
    ]
