"""Writes v3_store/loopwright.db with the release before the v4 layout (schema v3).

Run from a checkout of that release (e.g. ``git worktree add /tmp/v3 beb6e8b``):
``PYTHONPATH=/tmp/v3/src python tests/data/v3_store/make_fixture.py OUT.db``. The database it
made is committed beside this script; tests/integration/test_migration_v4.py reads a copy.
Three runs: ``accepted`` (ended), ``stopped`` (budget), ``parked`` (awaiting a person's
answer after two cycles: resumable by today's code).
"""

from __future__ import annotations

import sys

import loopwright as lw


def actor(ctx: lw.Context) -> lw.Proposal:
    n = ctx.cycle
    if ctx.task.get("ask") and n == 3:
        return lw.Proposal(question=lw.Question("which title?"))
    edits = {"body": f"draft {n}"}
    if not ctx.is_accepted("doc", "title"):
        edits["title"] = f"t{n}"
    return lw.Proposal.edit("doc", edits)


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    body = str(state.values()["doc"]["body"])
    n = int(body.rsplit(maxsplit=1)[-1]) if body[-1].isdigit() else 0
    target = int(state.task.get("target", 99))
    ok = n >= target
    return lw.Verdict(
        passed=ok,
        score=1.0 if ok else n / 10,
        findings=() if ok else (lw.Finding("too short", "doc", "body", "length"),),
    )


def main(path: str) -> None:
    loop = lw.Loop(
        name="fixture",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )
    task = {"artifacts": {"doc": {"body": "", "title": ""}}}
    with lw.Runtime(path) as rt:
        rt.run_sync(loop, {**task, "target": 4}, task_key="accepted")
        rt.run_sync(loop, {**task, "target": 99}, task_key="stopped")
        rt.run_sync(loop, {**task, "target": 5, "ask": True}, task_key="parked")


if __name__ == "__main__":
    main(sys.argv[1])
