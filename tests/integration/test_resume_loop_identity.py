"""``Runtime.resume(run, loop)`` with another loop is refused, as ``fork(loop=other)`` is: before,
another loop's actor and contract went on with the run's state without a word. A loop is the
run's own by its name, or, renamed, by the spec file it was loaded from (``_loop.other_loop``):
a spec that only renamed its loop does not strand its runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw
from loopwright._spec import load_spec
from loopwright.store import open_store

MODULE = """
import loopwright as lw

def actor(ctx):
    return lw.Proposal.edit("doc", {"a": ctx.artifacts["doc"]["a"] + 1})

def check(state, proposal):
    a = state.artifacts["doc"].values()["a"]
    return lw.Verdict(passed=a >= 2, score=min(1.0, a / 2))
"""

SPEC = """
name = "{name}"
[actor]
ref = "mod.py:actor"
[[verifiers]]
ref = "mod.py:check"
[contract.budget]
max_cycles = 5
"""

TASK = {"artifacts": {"doc": {"a": 0}}}


def spec_loop(where: Path, name: str, file: str = "loop.toml") -> lw.Loop:
    (where / "mod.py").write_text(MODULE)
    (where / file).write_text(SPEC.format(name=name))
    return load_spec(where / file)


def test_resume_with_another_loop_is_refused_and_the_run_stays_resumable(url: str) -> None:
    def other_actor(ctx: lw.Context) -> lw.Proposal:
        raise AssertionError("another loop's actor must not run")

    own = lw.Loop(
        name="own",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": ctx.artifacts["doc"]["a"] + 1}),
        verifiers=[lambda s, p: lw.Verdict(passed=s.artifacts["doc"].values()["a"] >= 2)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=5)),
    )
    other = lw.Loop(name="other", actor=other_actor, verifiers=own.verifiers, contract=own.contract)
    with lw.Runtime(store=open_store(url)) as rt:
        rec, _ = rt.create(own, TASK, task_key="t1")
        with pytest.raises(lw.ConfigError) as exc:
            rt.resume_sync(rec.run_id, other)
        assert exc.value.field == "loop"
        assert "'other'" in str(exc.value) and "'own'" in str(exc.value)
        after = rt.store.get_run(rec.run_id)
        assert (after.status, after.cycle) == ("pending", 0)
        assert after.lease_owner is None  # nothing held: any worker may take it
        assert rt.resume_sync(rec.run_id, own).status == "accepted"


def test_a_spec_that_renamed_its_loop_still_resumes_its_runs(url: str, tmp_path: Path) -> None:
    before = spec_loop(tmp_path, "invoices")
    with lw.Runtime(store=open_store(url)) as rt:
        rec, _ = rt.create(before, TASK, task_key="t1")
        renamed = spec_loop(tmp_path, "invoice-exceptions")  # the same file, edited
        assert renamed.version != before.version  # the spec's hash moved with the rename
        assert rt.resume_sync(rec.run_id, renamed).status == "accepted"
        # starting the task key again with the renamed spec finds the same run
        assert rt.run_sync(renamed, TASK, task_key="t1").run_id == rec.run_id


def test_another_spec_file_with_another_name_is_refused(url: str, tmp_path: Path) -> None:
    first = spec_loop(tmp_path, "invoices")
    with lw.Runtime(store=open_store(url)) as rt:
        rec, _ = rt.create(first, TASK, task_key="t1")
        elsewhere = spec_loop(tmp_path, "payroll", file="payroll.toml")
        with pytest.raises(lw.ConfigError, match="is loop 'payroll', not run"):
            rt.resume_sync(rec.run_id, elsewhere)
        with pytest.raises(lw.ConfigError, match="is loop 'payroll', not run"):
            rt.fork(rec.run_id, 0, loop=elsewhere)
        assert rt.store.get_run(rec.run_id).status == "pending"
