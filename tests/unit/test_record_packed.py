"""A cycle's record built in its stored form: the packed builders make exactly what ``pack``
makes of the whole record (same keys, same order, same values and types), so what a cycle
writes is what it wrote when the whole record was built and pruned (bench/RESULTS.md,
"stop 41")."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

import loopwright as lw
from loopwright import _record_codec as rc
from loopwright._question import Question


def _items(d: Any) -> Any:
    """A dict as its ordered items, each value's type beside it (``0`` is not ``0.0``)."""
    if isinstance(d, dict):
        return [(k, type(v).__name__, _items(v)) for k, v in d.items()]
    if isinstance(d, list):
        return [(type(v).__name__, _items(v)) for v in d]
    return repr(d)  # (``-0.0`` apart from ``0.0``)


# What a spec's key may hold: its default, values equal to it of another type or sign, and
# ordinary values.
_TRICKY: tuple[Any, ...] = (
    None,
    False,
    True,
    0,
    0.0,
    -0.0,
    1.5,
    "",
    "error",
    "x",
    {},
    [],
    {"a": 1},
    [1],
)

_SPECS = {
    "record": (rc._RECORD, rc._DROP_RECORD, rc.packed_record),
    "proposal": (rc._PROPOSAL, rc._DROP_PROPOSAL, rc.packed_proposal),
    "verdict": (rc._VERDICT, rc._DROP_VERDICT, rc.packed_verdict),
    "usage": (rc._USAGE, rc._DROP_USAGE, rc.packed_usage),
}


@pytest.mark.parametrize("name", sorted(_SPECS))
def test_a_packed_builder_makes_what_its_dropper_makes(name: str) -> None:
    spec, drop, build = _SPECS[name]
    keys = [k for k, _ in spec]
    for i, key in enumerate(keys):  # each key through every tricky value, the others default
        base = [d if d is not rc._KEEP else f"kept {k}" for k, d in spec]
        for v in _TRICKY:
            values = [*base[:i], v, *base[i + 1 :]]
            whole = dict(zip(keys, values, strict=True))
            assert _items(build(*values)) == _items(drop(whole)), (name, key, v)


def test_a_packed_finding_leaves_out_its_verdicts_name_as_pack_does() -> None:
    keys = [k for k, _ in rc._FINDING]
    combos = itertools.product(("error", "warning", 0), ("check", "other", None), ({}, {"n": 1}))
    for severity, verifier, evidence in combos:
        values = ["m", "doc", "body", "text", severity, verifier, evidence]
        whole = dict(zip(keys, values, strict=True))
        packed = rc.packed_finding(*values, "check")
        assert _items(packed) == _items(rc._pack_finding("check", whole))


def _proposals() -> list[lw.Proposal]:
    return [
        lw.Proposal.edit("doc", {"body": "draft"}),
        lw.Proposal(
            edits=(lw.Edit("doc", "body", ["a", 1]), lw.Edit("doc", "t", {"k": 0.0})),
            note="why",
            usage=lw.Usage(0.0, 0, 0.0),
            plan={"s1": "done"},
            new_steps=(lw.PlanStep("s2", "a step"),),
            effects=(lw.EffectCall("deploy", {"to": "prod"}),),
        ),
        lw.Proposal(replace={"doc": {"body": "all new"}}, escalate="help"),
        lw.Proposal(question=Question("which one?")),
        lw.Proposal(usage=lw.Usage(0.25, 3, 1.0)),
    ]


def test_a_proposal_packed_is_its_dict_packed() -> None:
    for p in _proposals():
        assert _items(p.to_packed_dict()) == _items(rc._DROP_PROPOSAL(p.to_dict())), p
        assert json.dumps(p.to_packed_dict()) == json.dumps(rc._DROP_PROPOSAL(p.to_dict()))


def _verdicts() -> list[lw.Verdict]:
    f = lw.Finding
    return [
        lw.Verdict(False, 0.5, (f("still open", "doc", "body", "text"),)),
        lw.Verdict(True),  # no score: 1.0
        lw.Verdict(False),  # no score: 0.0
        lw.Verdict(
            False,
            0,
            (
                f("a", "doc", "body", "text", "warning", "check"),  # its verdict's name
                f("b", "doc", None, "style", "error", "other", {"line": 3}),
                f("c", None, None, "text", "warning", ""),
            ),
            evidence={"log": "x"},
            usage=lw.Usage(0.0, 0, 0.0),
            checked=("doc/body",),
        ),
        lw.Verdict(True, 1.0, (), {}, lw.Usage(0.5, 2, 0.25), ()),
    ]


def test_a_verdict_packed_is_its_dict_packed() -> None:
    for v in _verdicts():
        for name in ("check", "other"):
            got = v.to_packed_dict(name)
            assert _items(got) == _items(rc._pack_verdict(name, v.to_dict())), (v, name)


def test_a_packed_record_is_a_fixed_point_of_pack() -> None:
    # the record that ends a run (marked ``ended``) is packed again: that changes nothing
    v = _verdicts()[3]
    record = rc.packed_record(
        3,
        _proposals()[1].to_packed_dict(),
        "d1g3st",
        False,
        {"check": v.to_packed_dict("check")},
        {},
        0.0,
        False,
        "revise",
        [],
        [],
        rc.packed_calls([{"who": "actor", "cost_usd": 0.0, "tokens": 0}, "odd"]),
        rc.packed_usage(0.0, 0, 0.5),
    )
    again = rc.pack({**record, "ended": True})
    assert _items(again) == _items({**record, "ended": True})
    assert rc.unpack(again)["held_out"] == {} and rc.unpack(again)["duplicate"] is False
