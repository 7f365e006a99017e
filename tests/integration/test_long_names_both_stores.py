"""A project name, a loop name or a memory item's scope key longer than a task key may be was
taken by SQLite and refused by PostgreSQL's index with a store error ("ProgramLimitExceeded",
raised as ``StoreUnavailableError``): the stores differed, and a 10,000-character project
read as a store that is down (outside probe, stop 51). Both now refuse it up front, as a
``ConfigError`` naming the field, and take one of ``MAX_KEY_CHARS`` alike."""

from __future__ import annotations

import random
import string

import pytest

import loopwright as lw
from loopwright._keys import MAX_KEY_CHARS


def _name(n: int) -> str:
    # random letters: a repeated one compresses below the index's limit on PostgreSQL
    rnd = random.Random(n)
    return "".join(rnd.choice(string.ascii_letters) for _ in range(n))


def _loop(name: str = "l", project: str = "p") -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("a", {"x": 1})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return lw.Loop(
        name=name,
        project=project,
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )


def test_a_name_past_the_key_limit_is_refused_alike(url: str) -> None:
    long = _name(10_000)
    task = {"artifacts": {"a": {"x": 0}}}
    with lw.Runtime(url) as rt:
        # refused where a new run is made (a Loop of such a name is built: a run SQLite
        # stored under one before goes on, test_stored_names_go_on)
        for loop, field in ((_loop(project=long), "project"), (_loop(name=long), "name")):
            with pytest.raises(lw.ConfigError, match="at most 256 characters") as info:
                rt.run_sync(loop, task, task_key="t")
            assert info.value.field == field
        for given in ({"project": long}, {"task": {**task, "project": long}}):
            args = {"task": task, "task_key": "t", **given}
            with pytest.raises(lw.ConfigError, match="at most 256 characters") as info:
                rt.create(_loop(), **args)
            assert info.value.field in ("project", "task.project")
        assert rt.store.count_runs() == 0
        mem = lw.FeedbackMemory(rt.store)
        for scope in ("task", "project"):
            with pytest.raises(lw.ConfigError, match="at most 256 characters") as info:
                mem.add(scope=scope, scope_key=long, signal="correction", text="t", by="ann")
            assert info.value.field == "scope_key"
        # at the limit: taken, by both stores
        most = _name(MAX_KEY_CHARS)
        r = rt.run_sync(_loop(project=most), task, task_key="t")
        assert (r.status, rt.store.get_run(r.run_id).project) == ("accepted", most)
        it = mem.add(scope="project", scope_key=most, signal="correction", text="t", by="ann")
        got = mem.retrieve(task_key="t", project=most)
        assert [i.memory_id for i in got] == [it.memory_id]
