"""A fork's eval case holds the cycles it inherited: its origin's as they stood when the fork
was made. Which of the origin's checkpoints the fork started from was found by time (the
origin's checkpoints written no later than the fork's run), so with two hosts' clocks apart (a
fork made on another machine) an origin that concluded the fork's cycle again after the fork
gave the fork that later cycle, which it never had. The fork now records the origin's
checkpoint (its ``seq``, in its ``run_created`` event) and the case reads up to it; a fork made
before that (no seq recorded) is still found by time.

(The engine numbers the cycles after a rollback on from the run's last, so an origin rolled
back and run again concludes no cycle number twice: the tests that need it renumber a redone
cycle in the store, as a store of its own or one written otherwise may hold it.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.store.sqlite import SQLiteStore
from loopwright.trace import eval_case

TASK = {"artifacts": {"doc": {"body": ""}}}


def _loop(era: list[str], cycles: int) -> lw.Loop:
    """Cycle N proposes ``<era>-N``: the cycles an origin redoes after a rollback differ."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if era[0] == "a" and ctx.cycle > 5:
            return lw.Proposal(escalate="the first era ends at cycle 5")
        return lw.Proposal.edit("doc", {"body": f"{era[0]}-{ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("no", "doc", "body"),))

    return lw.Loop(
        name="seq",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _sql(store: Any, statement: str, *args: Any) -> None:
    with store._tx() as conn:
        conn.execute(store._q.p(statement), args)


def _bodies(case: dict[str, Any]) -> list[tuple[int, str]]:
    return [(c["cycle"], c["proposal"]["edits"][0]["value"]) for c in case["inherited_cycles"]]


def _forked_then_redone(rt: lw.Runtime, skew_s: float, *, twice: bool = False) -> str:
    """An origin of 5 cycles (``a-1`` .. ``a-5``), forked at 3 on a host whose clock is
    ``skew_s`` from the origin's, then rolled back to 2 and run again (``b-6`` .. ``b-8``).
    ``twice``: its cycle ``b-6`` renumbered 3 in the store, a second conclusion of cycle 3."""
    era = ["a"]
    origin = rt.run_sync(_loop(era, 8), TASK, task_key="origin")
    assert (origin.status, origin.cycles) == ("escalated", 5)
    fork = rt.fork(origin.run_id, at_cycle=3, task_key="fork")
    _sql(
        rt.store,
        "UPDATE runs SET created_at = created_at + ? WHERE run_id = ?",
        skew_s,
        fork.run_id,
    )
    rt.rollback(origin.run_id, 2, by="dave")
    era[0] = "b"
    again = rt.resume_sync(origin.run_id, _loop(era, 8))
    assert again.state.part("doc/body").value == "b-8"  # type: ignore[union-attr]
    if twice:
        (seq,) = [
            s
            for s, _cycle, rec in rt.store.iter_records(origin.run_id)
            if rec and "proposal" in rec and rec["proposal"]["edits"][0]["value"] == "b-6"
        ]
        record = (
            "json_set(record, '$.cycle', 3)"
            if isinstance(rt.store, SQLiteStore)
            else "jsonb_set(record::jsonb, '{cycle}', '3')::json"
        )
        _sql(
            rt.store,
            f"UPDATE checkpoints SET cycle = 3, record = {record} WHERE run_id = ? AND seq = ?",
            origin.run_id,
            seq,
        )
    return fork.run_id


SKEWS = pytest.mark.parametrize(
    "skew_s", [-3600.0, 0.0, 3600.0], ids=["fork-host-behind", "same-clock", "fork-host-ahead"]
)
RIGHT = [(1, "a-1"), (2, "a-2"), (3, "a-3")]


@SKEWS
def test_a_forks_inherited_cycles_after_its_origin_was_rolled_back(url: str, skew_s: float) -> None:
    with lw.Runtime(url) as rt:
        fork_id = _forked_then_redone(rt, skew_s)
        case = eval_case(rt.store, fork_id)
    assert _bodies(case) == RIGHT
    assert [c["cycle"] for c in case["cycles"]] == []  # (the fork was not run)


@SKEWS
def test_an_origin_that_concluded_the_forks_cycle_again_whatever_the_clocks(
    url: str, skew_s: float
) -> None:
    """Before: with the fork's clock an hour behind or ahead, its case held ``b-6`` as its
    cycle 3 (the origin's later conclusion of that cycle)."""
    with lw.Runtime(url) as rt:
        fork_id = _forked_then_redone(rt, skew_s, twice=True)
        assert _bodies(eval_case(rt.store, fork_id)) == RIGHT
        made = rt.store.events_of_kinds(fork_id, ("run_created",))
        assert made[0].data["forked_from"]["seq"] > 0  # the origin's checkpoint, recorded


def test_a_fork_made_before_the_seq_was_recorded_is_found_by_time(tmp_path: Path) -> None:
    """A store on disk holds forks with no seq in their ``run_created`` event: with clocks
    that agree, they read the cycles they started from as before."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        fork_id = _forked_then_redone(rt, 0.0, twice=True)
        _sql(
            rt.store,
            "UPDATE events SET data = json_remove(data, '$.forked_from.seq') "
            "WHERE run_id = ? AND kind = 'run_created'",
            fork_id,
        )
        made = rt.store.events_of_kinds(fork_id, ("run_created",))
        assert made[0].data["forked_from"] == {
            "run": rt.store.get_run(fork_id).forked_from,
            "cycle": 3,
            "inherited": made[0].data["forked_from"]["inherited"],
        }
        assert _bodies(eval_case(rt.store, fork_id)) == RIGHT


def test_a_store_whose_create_run_predates_the_seq_still_forks(tmp_path: Path) -> None:
    """A store of one's own written against the older ``create_run`` (no ``fork_seq``) is
    forked as before, its copies made in the store; its fork is found by time."""
    asked: list[set[str]] = []

    class OwnStore(SQLiteStore):
        def create_run(self, **kw: Any) -> Any:  # type: ignore[override]
            asked.append(set(kw))
            if "fork_seq" in kw:
                raise TypeError("create_run() got an unexpected keyword argument 'fork_seq'")
            return super().create_run(**kw)

    with lw.Runtime(OwnStore(tmp_path / "own.db")) as rt:
        fork_id = _forked_then_redone(rt, 0.0, twice=True)
        assert "fork_seq" in asked[-2] and "fork_seq" not in asked[-1]
        assert {"copy_versions", "copy_effects", "copy_rejected"} <= asked[-1]
        made = rt.store.events_of_kinds(fork_id, ("run_created",))
        assert "seq" not in made[0].data["forked_from"]
        assert _bodies(eval_case(rt.store, fork_id)) == RIGHT
