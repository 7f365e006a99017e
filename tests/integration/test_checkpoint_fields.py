"""A checkpoint's ``fields`` (its state without the parts) are read from its deltas, and the
readers of every checkpoint of a run use them: listing a long run with many parts costs its
checkpoints, not each checkpoint's every part (issue 14: a cycle, and so a checkpoint, costs
the same at cycle 5,000 as at cycle 5). The tests count full-state resolutions, never time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import loopwright as lw
from loopwright._metrics import run_metrics
from loopwright._people import concluded_at
from loopwright.replay._sources import trace_of_run
from loopwright.store import Store
from loopwright.trace._run_cycles import list_cycles
from loopwright.trace._spans import run_spans
from loopwright.web._views import chart_points, timeline

PARTS = 12
CYCLES = 30


@lw.effect("notify", name="ping", requires_success=False)
def ping(n: int) -> dict[str, Any]:
    return {"n": n}


def _loop() -> lw.Loop:
    """One part written a cycle, a located finding on it; every 4th cycle runs an effect (a
    write-ahead commit with ``pending`` set), every 6th a note is left for the next cycle."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        effects = (ping.call(n=ctx.cycle),) if ctx.cycle % 4 == 0 else ()
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {f"p{ctx.cycle % PARTS}": f"v{ctx.cycle}"}).edits,
            effects=effects,
            usage=lw.Usage(0.01, 10),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        [edit] = proposal.changes()
        score = 0.3 + 0.02 * int(str(edit.value)[1:])  # improves every cycle
        return lw.Verdict(
            passed=False,
            score=min(score, 0.89),
            findings=(lw.Finding("open", "doc", edit.part, "t"),),
            checked=(edit.ref,),
        )

    return lw.Loop(
        name="fields",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
        effects=[ping],
    )


TASK = {"goal": "g", "artifacts": {"doc": {f"p{i}": "" for i in range(PARTS)}}}


@pytest.fixture
def run(url: str) -> Iterator[tuple[Store, str]]:
    with lw.Runtime(url, snapshot_every=4) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="k")
        assert (r.cycles, r.stop_reason) == (CYCLES, "budget_cycles")
        yield rt.store, r.run_id


def test_fields_are_the_states_without_parts_and_resolve_nothing(
    run: tuple[Store, str], resolved: list[int]
) -> None:
    from loopwright.store._base import own_fields

    store, rid = run
    cks = store.checkpoints(rid)
    fields = [dict(c.fields) for c in cks]
    assert resolved[0] == 0  # read from the deltas alone
    assert any(f.get("pending") for f in fields)  # the effects' write-ahead commits
    assert len({f["cycle"] for f in fields}) == CYCLES + 1
    for f in fields:
        assert not {"artifacts", "parts", "best_parts", "retries"} & set(f)
    states = [c.state for c in store.checkpoints(rid)]
    # (the task is the run's, in its row: a state has it, a head's fields do not)
    assert fields == [{k: v for k, v in own_fields(s).items() if k != "task"} for s in states]
    # read out of order: the same
    again = store.checkpoints(rid)
    assert [dict(again[i].fields) for i in (17, 3, 29, 30, 0)] == [
        fields[i] for i in (17, 3, 29, 30, 0)
    ]


def test_checkpoints_after_a_seq_read_what_the_run_gained(
    run: tuple[Store, str], resolved: list[int]
) -> None:
    store, rid = run
    whole = store.checkpoints(rid)
    for i in (0, 1, 4, 5, 13, len(whole) - 2, len(whole) - 1):
        ck = whole[i]
        for given in (ck.fields, None):  # folded on from what the reader has, or read anew
            after = store.checkpoints_after(rid, ck.seq, given)
            assert [c.seq for c in after] == [c.seq for c in whole[i + 1 :]]
            assert [c.record for c in after] == [c.record for c in whole[i + 1 :]]
            assert [dict(c.fields) for c in after] == [dict(c.fields) for c in whole[i + 1 :]]
    assert resolved[0] == 0
    # a state is still read when asked for
    tail = store.checkpoints_after(rid, whole[9].seq, whole[9].fields)
    assert tail[0].state == whole[10].state and tail[-1].state == whole[-1].state


def test_readers_of_every_checkpoint_resolve_no_state_each(
    run: tuple[Store, str], resolved: list[int]
) -> None:
    """What they read of a state is a field (``pending``, ``spent``, ``notes``, ``task``,
    ``best_score``): a long run's trace, metrics, chart, timeline, replay and rollback target
    cost its checkpoints, not cycles × parts."""
    store, rid = run
    rec = store.get_run(rid)
    readers = {
        "trace": lambda cks: run_spans(store, rid),
        "metrics": lambda cks: run_metrics(
            rec, cks, store.events(rid), store.approvals(run_id=rid)
        ),
        "concluded_at": lambda cks: concluded_at(cks, rid, 7, "to_cycle"),
        "chart": chart_points,
        "timeline": timeline,
        "replay": lambda cks: trace_of_run(store, rec),
    }
    counts = {}
    for name, read in readers.items():
        resolved[0] = 0
        read(store.checkpoints(rid))
        counts[name] = resolved[0]
    # metrics read the last state's parts (accepted parts, revisions): one state, not one a
    # checkpoint
    assert counts == dict.fromkeys(readers, 0) | {"metrics": 1}
    # ... and they read what the states hold
    cks = store.checkpoints(rid)
    assert concluded_at(cks, rid, 8, "to_cycle").cycle == 8  # cycle 8 had an effect: pending
    points = chart_points(cks)
    assert [p.cycle for p in points] == list(range(1, CYCLES + 1))
    assert points[-1].spent == pytest.approx(rec.cost_usd)
    assert points[-1].best == rec.best_score


def test_eval_cases_read_the_states_they_show_and_pending_from_fields(
    run: tuple[Store, str], resolved: list[int]
) -> None:
    """An eval case shows each cycle's context (every part's value before it): those states
    are read, one a cycle; a write-ahead checkpoint's ``pending`` (the proposal a cycle
    parked or ran effects with) is a field, its state is not read."""
    store, rid = run
    cks = store.checkpoints(rid)
    resolved[0] = 0
    cycles = list_cycles(cks, "loop", keep=set(range(len(cks))))
    assert [c.cycle for c in cycles] == list(range(1, CYCLES + 1))
    assert resolved[0] == CYCLES + 1  # the state each cycle started from, and the last one
    assert sum(1 for c in cks if (c.record or {}).get("decision") == "effects") == CYCLES // 4
    # an eval case keeps the contexts' ids alone: the same states read, none kept
    resolved[0] = 0
    lean = list_cycles(cks, "loop", keep=None)
    assert [c.context_id for c in lean] == [c.context_id for c in cycles]
    assert all(c.context is None and c.after is None for c in lean)
    assert resolved[0] <= CYCLES + 1
