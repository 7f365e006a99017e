"""A rollback gives the cycles after it back: proposals those cycles tried (and that did not
pass) may be tried again without counting as duplicates — as in a fork at the same cycle.
Before, a rolled-back run redoing its improving edits saw each one as ``duplicate``, counted
no progress while its score rose, and stopped ``no_progress`` with an older best candidate."""

from __future__ import annotations

import pytest

import loopwright as lw
from loopwright.store import open_store

PARTS = ("a", "b", "c")


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        todo = [p for p in PARTS if doc.get(p) != "good"]
        return lw.Proposal.edit("doc", {todo[0]: "good"} if todo else {"a": "good"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        doc = state.artifacts["doc"].values()
        bad = [lw.Finding(f"{p} is bad", "doc", p) for p in PARTS if doc.get(p) != "good"]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / len(PARTS), findings=tuple(bad))

    return lw.Loop(
        name="redo",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0),
            no_progress=lw.NoProgress(cycles=1),
            budget=lw.Budget(max_cycles=20),
        ),
    )


def _decisions(url: str, run_id: str, after: int) -> list[tuple[int, bool, bool]]:
    with open_store(url) as st:
        return [
            (c.record["cycle"], bool(c.record.get("duplicate")), bool(c.record.get("improved")))
            for c in st.checkpoints(run_id)
            if c.record and "proposal" in c.record and c.record["cycle"] > after
        ]


def test_a_rolled_back_run_redoes_its_cycles_as_a_fork_does(url: str) -> None:
    task = {"artifacts": {"doc": dict.fromkeys(PARTS, "bad")}}
    loop = _loop()
    with lw.Runtime(url) as rt:
        first = rt.run_sync(loop, task, task_key="redo")
        assert (first.status, first.cycles) == ("accepted", 3)
        fork = rt.fork(first.run_id, at_cycle=1, task_key="redo-fork")
        rt.rollback(first.run_id, 1, by="ops")
        rolled = rt.resume_sync(first.run_id, loop)
        forked = rt.resume_sync(fork.run_id, loop)
    assert (forked.status, forked.stop_reason) == ("accepted", "success")
    assert (rolled.status, rolled.stop_reason) == ("accepted", "success")
    assert rolled.best_score == forked.best_score == 1.0
    # the two redone cycles improved, as the fork's did; none is a duplicate
    redone = _decisions(url, first.run_id, after=3)
    assert [(dup, imp) for _c, dup, imp in redone] == [(False, True), (False, True)]
    # the rollback forgot only what came after its cycle: the first run's rows are kept
    # for the cycles before it, and a proposal rejected again later counts again
    with open_store(url) as st:
        cycles = sorted(c for _d, c in st.rejected_rows(first.run_id))
    assert all(c <= 1 or c > 3 for c in cycles), cycles


def test_show_puts_a_rollback_and_an_edit_in_the_timeline(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``loopwright show`` (text) lists who rolled the run back and who edited which part,
    where it happened: before, the redone cycles and the edit's effect came out of nowhere."""
    from loopwright.cli import main

    task = {"artifacts": {"doc": dict.fromkeys(PARTS, "bad")}}
    with lw.Runtime(url) as rt:
        first = rt.run_sync(_loop(), task, task_key="shown")
        rt.rollback(first.run_id, 1, by="dave")
        rt.edit(first.run_id, "doc/c", "good", by="carol")
    for columns in ("200", "70"):  # the wide table and the narrow blocks
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("COLUMNS", columns)
            assert main(["show", first.run_id, "--store", url]) == 0
        out = capsys.readouterr().out
        assert "rolled back by dave" in out
        assert "back to cycle 1" in out
        assert "edited by carol" in out
        assert "edit: doc/c v" in out
