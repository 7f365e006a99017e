"""A run's task is stored once, in its row: a snapshot of the state does not write it again.
Before, every snapshot (every ``snapshot_every`` checkpoints) carried the whole task, so a task
holding a large document cost its size again every few cycles."""

from __future__ import annotations

import loopwright as lw
from loopwright.store import Store

BODY = "lorem ipsum dolor sit amet " * 4_000  # 108 KB, never edited
TASK = {"goal": "fix the title", "artifacts": {"doc": {"body": BODY, "title": "t"}}, "n": 7}


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        assert ctx.task["n"] == 7  # the actor is shown the task
        return lw.Proposal.edit("doc", {"title": f"t{ctx.cycle}"})

    def verify(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        assert state.task["n"] == 7
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "title"),))

    return lw.Loop(
        name="big-task",
        actor=actor,
        verifiers=[lw.Check(fn=verify, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _states(store: Store, run_id: str) -> list[str]:
    mark = store._MARK  # type: ignore[attr-defined]
    with store._conn() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            f"SELECT state FROM checkpoints WHERE run_id={mark}", (run_id,)
        ).fetchall()
    return [r[0] if isinstance(r[0], str) else str(r[0]) for r in rows]


def test_snapshots_do_not_write_the_task_again(url: str) -> None:
    with lw.Runtime(url, snapshot_every=4) as rt:
        r = rt.run_sync(_loop(12), TASK, task_key="k")
        assert r.cycles == 12
        states = _states(rt.store, r.run_id)
        assert len(states) > 12
        # before: the first checkpoint and every snapshot (4 of them here) held the body
        assert not any("lorem ipsum" in s for s in states)
        assert sum(len(s) for s in states) < len(BODY)
        # every reader still gets the task with the state
        assert r.state.task == TASK
        assert rt.result(r.run_id).state.task == TASK
        cks = rt.store.checkpoints(r.run_id)
        assert all(ck.state["task"] == TASK for ck in (cks[0], cks[5], cks[-1]))
        assert rt.store.latest_checkpoint(r.run_id).state["task"] == TASK
    with lw.Runtime(url) as again:  # a fresh runtime reads it from the run's row
        assert again.result(r.run_id).state.task == TASK


def test_the_runs_row_written_every_cycle_does_not_hold_the_task(url: str) -> None:
    # SQLite writes a row whole when any column changes, and the run's row changes every
    # cycle: a task held there was copied with the cycle's counters (≈ 4 ms a cycle for a
    # 2 MB task). It is in run_tasks, written once; every reader gets it as before.
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(3), TASK, task_key="k")
        store = rt.store
        mark = store._MARK  # type: ignore[attr-defined]
        with store._conn() as conn:  # type: ignore[attr-defined]
            (in_row,) = conn.execute(
                f"SELECT CAST(task AS TEXT) FROM runs WHERE run_id={mark}", (r.run_id,)
            ).fetchone()
            (kept,) = conn.execute(
                f"SELECT CAST(task AS TEXT) FROM run_tasks WHERE run_id={mark}", (r.run_id,)
            ).fetchone()
        assert len(in_row) < 10 and "lorem" in kept
        assert store.get_run(r.run_id).task == TASK
        assert store.get_run("k").task == TASK
        assert [x.task for x in store.list_runs() if x.run_id == r.run_id] == [TASK]
        fork = rt.fork(r.run_id, at_cycle=1, task_key="k-fork")
        assert fork.task == TASK and store.get_run(fork.run_id).task == TASK


def test_a_task_read_is_the_readers_own(url: str) -> None:
    # The store keeps the tasks of the runs it read last (a run's task never changes): what
    # it hands out is a copy, so a reader changing it changes neither the store's nor another
    # reader's (before, the RunRecord's task was the one kept, and every state resolved from
    # the store shared it: a resume works from the state latest_checkpoint resolves).
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(2), TASK, task_key="k")
        rt.store.get_run(r.run_id).task["goal"] = "changed by a reader"
        first = rt.store.latest_checkpoint(r.run_id).state["task"]
        assert first == TASK
        first["goal"] = "changed by another reader"
        assert rt.store.latest_checkpoint(r.run_id).state["task"] == TASK
        assert rt.store.checkpoints(r.run_id)[-1].state["task"] == TASK
        assert rt.result(r.run_id).state.task == TASK
        assert rt.store.get_run(r.run_id).task == TASK
