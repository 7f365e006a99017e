"""Writes v18_store/loopwright.db with the release at SQLite schema v18 (the layout before any
change to the pages a cycle writes; issue 14).

Run from a checkout of that release (``git worktree add /tmp/v18 18af09f``):
``PYTHONPATH=/tmp/v18/src python tests/data/v18_store/make_fixture.py OUT.db``. The database it
made is committed beside this script; tests/integration/test_migration_v18_fixture.py reads a
copy. Three runs: ``accepted`` (ended; its accepted cycle 4 did a keyed ``note`` effect: a journal
entry and a store-wide claim), ``stopped`` (budget), ``parked`` (awaiting a person's answer to
a question after two cycles: an approval row, resumable by later code).
"""

from __future__ import annotations

import sys

import loopwright as lw


@lw.effect("note", name="note", key=lambda a: f"note:{a['n']}")
def note(n: int, *, key: str) -> dict[str, object]:
    return {"noted": n, "key": key}


def actor(ctx: lw.Context) -> lw.Proposal:
    n = ctx.cycle
    if ctx.task.get("ask") and n == 3:
        return lw.Proposal(question=lw.Question("which title?"))
    edits = {"body": f"draft {n}"}
    if not ctx.is_accepted("doc", "title"):
        edits["title"] = f"t{n}"
    effects = (note.call(n=n),) if ctx.task.get("note") and n == 4 else ()
    return lw.Proposal(edits=lw.Proposal.edit("doc", edits).edits, effects=effects)


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


def make_loop() -> lw.Loop:
    return lw.Loop(
        name="fixture",
        actor=actor,
        verifiers=[check],
        effects=(note,),
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )


def main(path: str) -> None:
    loop = make_loop()
    task = {"artifacts": {"doc": {"body": "", "title": ""}}}
    with lw.Runtime(path) as rt:
        rt.run_sync(loop, {**task, "target": 4, "note": True}, task_key="accepted")
        rt.run_sync(loop, {**task, "target": 99}, task_key="stopped")
        rt.run_sync(loop, {**task, "target": 5, "ask": True}, task_key="parked")


if __name__ == "__main__":
    main(sys.argv[1])
