"""``true``, ``1`` and ``1.0`` are three values to the store (written and read back as three),
but ``set_part`` compared a new value with ``==``, for which ``True == 1 == 1.0`` (stall51). A
proposal setting a part from ``1`` to ``True`` was dropped as no change: the checks judged the
``1``, the proposal was taken for the no-change proposal rejected before, a person's edit to
``True`` was refused as "the current value already", and writing ``True`` over an accepted
``1`` was not an overwrite. A value is unchanged now only when it is equal and every number in
it is of the same kind, as the store writes it."""

from __future__ import annotations

from typing import Any

import pytest

import loopwright as lw
from loopwright._decide import effective_digest
from loopwright._state import TaskState, same_value


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        (1, 1, True),
        (1, True, False),
        (1, 1.0, False),
        (0, False, False),
        (1.0, 1.0, True),
        ({"x": 1, "y": [1, "a"]}, {"x": 1, "y": [1, "a"]}, True),
        ({"x": 1}, {"x": True}, False),
        ([1, 2], [1, 2.0], False),
        ({"x": [{"z": 0}]}, {"x": [{"z": False}]}, False),
        ("1", "1", True),
        (None, None, True),
    ],
)
def test_a_value_is_unchanged_only_with_its_numbers_of_one_kind(
    old: Any, new: Any, same: bool
) -> None:
    assert same_value(old, new) is same
    state = TaskState(task={})
    state.set_part("doc", "a", old, 0)
    # the digest of what a proposal changes: its own while it writes a new value, else that
    # of a proposal without the write (which a rejected no-change proposal matches)
    proposal = lw.Proposal.edit("doc", {"a": new})
    effective = effective_digest(state, proposal, proposal.digest())
    assert (effective == proposal.digest()) is not same
    assert state.set_part("doc", "a", new, 1) is not same
    assert repr(state.part("doc/a").value) == repr(old if same else new)  # type: ignore[union-attr]


def test_a_proposal_of_true_over_1_is_judged_not_taken_for_no_change(url: str) -> None:
    proposed = iter([1, 1.0, True, 1])
    seen: list[Any] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": next(proposed, 2)})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        seen.append(state.values()["doc"]["a"])
        return lw.Verdict(passed=False, score=0.1)

    loop = lw.Loop(
        name="kinds",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=5)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="k")
        records = [d for _s, _c, d in rt.store.iter_records(r.run_id) if d and "proposal" in d]
        versions = rt.result(r.run_id).state.part("doc/a").versions  # type: ignore[union-attr]
    # each judged as proposed (1.0 and True are values of their own); 1 again is a duplicate
    assert [repr(v) for v in seen] == ["1", "1.0", "True", "1", "2"]
    assert [bool(d.get("duplicate")) for d in records] == [False, False, False, True, False]
    assert [repr(v.value) for v in versions][:4] == ["0", "1", "1.0", "True"]


def test_a_persons_edit_to_true_over_1_is_a_change(url: str) -> None:
    loop = lw.Loop(
        name="edit-kinds",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": 1}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="k")
        assert r.status == "accepted"
        with pytest.raises(lw.ConfigError, match="current value already"):
            rt.edit(r.run_id, "doc/a", 1, by="ana")
        rt.edit(r.run_id, "doc/a", True, by="ana")
        assert rt.result(r.run_id).state.values()["doc"]["a"] is True


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        ({1: "x"}, {True: "x"}, False),  # written {"1": "x"} and {"true": "x"}
        ({1: "x"}, {1.0: "x"}, False),  # {"1.0": "x"}
        ({"k": {0: 1}}, {"k": {False: 1}}, False),
        ({1: "x"}, {1: "x"}, True),
        ({True: [1]}, {True: [1]}, True),
        ({1: 1}, {1: True}, False),
    ],
)
def test_keys_equal_in_python_but_written_apart_are_a_change(
    old: Any, new: Any, same: bool
) -> None:
    """``{1: x}`` and ``{True: x}`` are one mapping to Python, two to JSON: what the store
    writes is what is judged (same_value took them for one value, and ``set_part`` dropped
    the write)."""
    assert same_value(old, new) is same
    state = TaskState(task={})
    state.set_part("doc", "a", old, 0)
    assert state.set_part("doc", "a", new, 1) is not same


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_a_deeply_nested_value_written_again_is_compared(tmp_path: Any) -> None:
    """``same_value`` recursed two frames a level: a value nested 400 deep, which a proposal
    may hold (the store writes it, ``==`` compares it), written again in the next cycle raised
    RecursionError out of ``run_sync`` (review51b). It is no change, as before stall51; the
    same value with a number of another kind is one."""
    deep = _nested(400, 0)
    assert same_value(_nested(400, 0), deep)
    assert not same_value(_nested(400, 0.0), deep)
    loop = lw.Loop(
        name="deep",
        actor=lambda ctx: lw.Proposal(edits=(lw.Edit("a", "x", _nested(400, 0)),)),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.0), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        done = rt.run_sync(loop, {"artifacts": {"a": {"x": 0}}}, task_key="t")
        assert done.status == "stopped"
        part = rt.store.latest_checkpoint(done.run_id).task_state().part("a/x")
        assert part is not None and part.count == 2  # (written once: the same value after)
