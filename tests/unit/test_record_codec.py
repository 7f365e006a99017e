"""The stored form of a cycle's record (``_record_codec``): defaults left out on write, put
back on read, so that every reader sees the record exactly as the engine built it (same
values of the same types, same key order)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import loopwright as lw
from loopwright import _record_codec as codec
from loopwright._effects import EffectCall
from loopwright._state import Finding


def _keys(spec: tuple[tuple[str, Any], ...]) -> list[str]:
    return [k for k, _ in spec]


def test_the_specs_follow_the_engines_dicts() -> None:
    """A field added to ``to_dict`` without the codec knowing it would still round-trip (it is
    kept), but in another place; this test says to update the spec."""
    assert _keys(codec._PROPOSAL) == list(lw.Proposal().to_dict())
    assert _keys(codec._VERDICT) == list(lw.Verdict(passed=True).to_dict())
    assert _keys(codec._FINDING) == list(Finding("m").to_dict())
    assert _keys(codec._USAGE) == list(lw.Usage().to_dict())


# Values where a default and a look-alike differ only by type: 0 / 0.0 / False / "" / None.
_tricky = st.sampled_from([0, 0.0, False, True, "", None, 1, 0.5, "x", [], {}])
_text = st.text(max_size=8)
_name = st.text(min_size=1, max_size=8)  # a part's name is never empty (Edit refuses it)
_usage = st.builds(
    lambda c, t, s: {"cost_usd": c, "tokens": t, "seconds": s},
    st.sampled_from([0.0, 0, 0.25]),
    st.sampled_from([0, 0.0, 7]),
    st.sampled_from([0.0, 0, 1.5]),
)
_finding = st.builds(
    lambda m, sev, ver, ev, part: Finding(
        m, "doc", part, "general", sev, ver, {"k": ev} if ev is not None else {}
    ).to_dict(),
    _text,
    st.sampled_from(["error", "warning"]),
    st.sampled_from(["check", "other", ""]),
    st.one_of(st.none(), _tricky),
    st.one_of(st.none(), _text),
)


@st.composite
def _verdict(draw: st.DrawFn) -> dict[str, Any]:
    d = lw.Verdict(
        passed=draw(st.booleans()),
        score=draw(st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0]))),
        evidence=draw(st.one_of(st.just({}), st.dictionaries(_text, _tricky, max_size=2))),
        usage=draw(st.one_of(st.none(), st.just(lw.Usage(0.1, 3, 0.0)))),
        checked=draw(st.one_of(st.none(), st.just(("doc/a",)))),
    ).to_dict()
    d["findings"] = draw(st.lists(_finding, max_size=3))
    return d


@st.composite
def _record(draw: st.DrawFn) -> dict[str, Any]:
    proposal = lw.Proposal(
        edits=tuple(
            lw.Edit("doc", p, v) for p, v in draw(st.lists(st.tuples(_name, _tricky), max_size=2))
        ),
        plan=draw(st.one_of(st.just({}), st.just({"s1": "done"}))),
        note=draw(st.sampled_from(["", "why", "***"])),
        usage=draw(st.one_of(st.none(), st.just(lw.Usage(0.0, 0, 0.0)))),
        escalate=draw(st.one_of(st.none(), st.just("ask"))),
        effects=tuple(draw(st.lists(st.just(EffectCall("pay", {"n": 1})), max_size=1))),
    ).to_dict()
    names = draw(st.lists(st.sampled_from(["check", "other"]), unique=True, max_size=2))
    return {
        "cycle": draw(st.integers(1, 10_000)),
        "proposal": proposal,
        "digest": draw(_text),
        "duplicate": draw(st.sampled_from([False, True, 0])),
        "visible": {n: draw(_verdict()) for n in names},
        "held_out": draw(st.one_of(st.just({}), st.builds(lambda v: {"held": v}, _verdict()))),
        "score": draw(st.sampled_from([0.0, 0.5, None])),
        "improved": draw(st.booleans()),
        "decision": draw(st.sampled_from(["revise", "accepted", "rollback"])),
        "effects": draw(st.sampled_from([[], [{"name": "pay"}]])),
        "memory": draw(st.sampled_from([[], ["m1"]])),
        "calls": draw(
            st.lists(
                st.builds(
                    lambda who, c, t: {"who": who, "cost_usd": c, "tokens": t},
                    st.sampled_from(["actor", "check"]),
                    st.sampled_from([0.0, 0, 0.01]),
                    st.sampled_from([0, 0.0, 12]),
                ),
                max_size=3,
            )
        ),
        "usage": draw(_usage),
    }


@settings(max_examples=300, deadline=None)
@given(_record())
def test_a_record_reads_back_exactly_as_written(rec: dict[str, Any]) -> None:
    before = json.dumps(rec)
    packed = codec.pack(rec)
    assert json.dumps(rec) == before  # the engine's record is not changed
    back = codec.unpack(json.loads(json.dumps(packed)))  # as the store reads it
    # Same keys in the same order at every level, same values of the same types.
    assert json.dumps(back) == before
    assert _typed(back) == _typed(rec)
    assert len(json.dumps(packed)) <= len(before)


def _typed(x: Any) -> Any:
    """``x`` with each scalar paired with its type (``0 == 0.0 == False`` in Python)."""
    if isinstance(x, dict):
        return [(k, _typed(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [_typed(v) for v in x]
    return (type(x).__name__, x)


@settings(max_examples=200, deadline=None)
@given(_record())
def test_pack_is_the_generic_walk_written_out(rec: dict[str, Any]) -> None:
    """``pack`` calls each spec's dropper directly (every cycle); it gives what the walk
    ``unpack`` shares gives with the spec's rule written as a plain loop: same keys, order,
    values and types."""
    got = codec.pack(rec)
    want = codec._each_part(rec, _reference_drop, codec._pack_finding)
    assert json.dumps(got) == json.dumps(want) and _typed(got) == _typed(want)


@settings(max_examples=100, deadline=None)
@given(_record())
def test_a_record_stored_whole_reads_as_it_was(rec: dict[str, Any]) -> None:
    """Stores written before the codec hold whole records: reading one changes nothing."""
    assert json.dumps(codec.unpack(json.loads(json.dumps(rec)))) == json.dumps(rec)


def test_other_records_pass_through() -> None:
    effects_stage = {"cycle": 3, "decision": "effects", "held_out": {}}
    assert codec.pack(effects_stage) is effects_stage
    assert codec.unpack(effects_stage) is effects_stage


def test_a_trivial_cycle_stores_much_less() -> None:
    rec = {
        "cycle": 7,
        "proposal": lw.Proposal(edits=(lw.Edit("doc", "body", "d7"),)).to_dict(),
        "digest": "ab" * 8,
        "duplicate": False,
        "visible": {
            "check": lw.Verdict(
                passed=False, score=0.5, findings=(Finding("bad", "doc", "body", verifier="check"),)
            ).to_dict()
        },
        "held_out": {},
        "score": 0.5,
        "improved": False,
        "decision": "revise",
        "effects": [],
        "memory": [],
        "calls": [{"who": "actor", "cost_usd": 0.0, "tokens": 0}],
        "usage": lw.Usage().to_dict(),
    }
    packed = codec.pack(rec)
    assert packed["visible"]["check"]["findings"] == [
        {"message": "bad", "artifact": "doc", "part": "body", "dimension": "general"}
    ]
    assert "duplicate" not in packed and "plan" not in packed["proposal"]
    assert len(json.dumps(packed)) < 0.6 * len(json.dumps(rec))
    assert json.dumps(codec.unpack(packed)) == json.dumps(rec)


def test_unknown_keys_and_negative_zero_survive() -> None:
    """A field added to a ``to_dict`` before the spec knows it is kept (after the known keys),
    and ``-0.0`` is not taken for the ``0.0`` default."""
    rec = {
        "cycle": 1,
        "proposal": {**lw.Proposal().to_dict(), "hint": "new field"},
        "digest": "d",
        "duplicate": False,
        "visible": {
            "check": {
                **lw.Verdict(passed=False).to_dict(),
                "findings": [{**Finding("m", verifier="check").to_dict(), "hint": 1}],
            }
        },
        "held_out": {},
        "score": 0.0,
        "improved": False,
        "decision": "revise",
        "effects": [],
        "memory": [],
        "calls": [{"who": "actor", "cost_usd": -0.0, "tokens": 0}],
        "usage": {"cost_usd": -0.0, "tokens": 0, "seconds": 0.0},
        "extra_key": [1],
    }
    back = codec.unpack(json.loads(json.dumps(codec.pack(rec))))
    assert back == rec and _typed(back) == _typed(rec)
    assert str(back["calls"][0]["cost_usd"]) == "-0.0"
    assert str(back["usage"]["cost_usd"]) == "-0.0"


def _reference_drop(d: dict[str, Any], spec: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """What a spec's dropper means, written as the plain loop over the spec: a key goes when it holds
    its default, of the default's type, and is not ``-0.0``."""
    out = dict(d)
    for k, dflt in spec:
        if dflt is codec._KEEP or k not in out:
            continue
        v = out[k]
        if type(v) is type(dflt) and v == dflt and not (type(v) is float and str(v) == "-0.0"):
            del out[k]
    return out


#: each spec with the dropper ``pack`` calls for it
_SPECS = [
    (codec._RECORD, codec._DROP_RECORD),
    (codec._PROPOSAL, codec._DROP_PROPOSAL),
    (codec._VERDICT, codec._DROP_VERDICT),
    (codec._FINDING, codec._DROP_FINDING),
    (codec._CALL, codec.DROP_CALL),
    (codec._USAGE, codec._DROP_USAGE),
]
_odd = st.sampled_from([0, 0.0, -0.0, False, True, "", "error", "x", None, [], {}, [0], {"a": 1}])


@given(st.sampled_from(_SPECS), st.data())
def test_the_written_out_drop_is_the_specs_rule(
    spec_drop: tuple[tuple[tuple[str, Any], ...], Callable[[Any], dict[str, Any]]],
    data: st.DataObject,
) -> None:
    """``pack`` runs a function written from each spec (every cycle, for each dict of the
    record): it leaves out exactly what the spec's rule says, for any value under any key."""
    spec, drop = spec_drop
    keys = [k for k, _ in spec] + ["unknown"]
    d = data.draw(st.dictionaries(st.sampled_from(keys), _odd, max_size=len(keys)))
    got = drop(d)
    want = _reference_drop(d, spec)
    assert got == want and list(got) == list(want)
    assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
    assert [str(v) for v in got.values()] == [str(v) for v in want.values()]  # -0.0 kept


_BIG = "x" * codec.REFER_MIN_CHARS


def _edits(*values: Any) -> dict[str, Any]:
    return {
        "cycle": 3,
        "proposal": {
            "kind": "edit",
            "edits": [{"artifact": "a", "part": f"p{i}", "value": v} for i, v in enumerate(values)],
        },
        "digest": "d",
    }


def test_a_large_edit_value_names_the_version_written_with_it() -> None:
    big, small, listed = _BIG + "1", "short", [1, 2]
    rec = _edits(big, small, listed, _BIG[:-1])
    rows = [("a/p0", 4, 3, "candidate", big), ("a/p1", 2, 3, "candidate", small),
            ("a/p2", 7, 3, "candidate", listed), ("a/p3", 1, 3, "candidate", _BIG[:-1])]  # fmt: skip
    stored = codec.refer_versions(rec, rows)
    assert (
        stored["proposal"]["edits"]
        == [
            {"artifact": "a", "part": "p0", "version": 4},
            {"artifact": "a", "part": "p1", "value": "short"},  # small: kept
            {"artifact": "a", "part": "p2", "version": 7},
            {"artifact": "a", "part": "p3", "value": _BIG[:-1]},  # one character short of the size
        ]
    )
    assert rec == _edits(big, small, listed, _BIG[:-1])  # the engine's record is not changed
    assert codec.referred_versions(stored) == [("a/p0", 4), ("a/p2", 7)]
    back = codec.fill_versions(
        json.loads(json.dumps(stored)), {("a/p0", 4): big, ("a/p2", 7): listed}
    )
    assert back == rec


def test_an_edit_names_only_a_version_holding_that_very_value() -> None:
    big = _BIG + "2"
    equal_copy = big[:-1] + big[-1:]  # equal, another object (what was applied may differ)
    assert equal_copy == big and equal_copy is not big
    rec = _edits(big)
    for rows in (
        [],
        [("a/p0", 4, 3, "candidate", equal_copy)],
        [("a/other", 4, 3, "candidate", big)],  # another part's version
    ):
        assert codec.refer_versions(rec, rows) is rec
    assert codec.refer_versions(rec, [("a/p0", 4, 3, "candidate", big)]) is not rec


def test_a_version_the_store_lacks_leaves_the_edit_as_stored() -> None:
    rows = [("a/p0", 9, 3, "candidate", _BIG)]
    stored = codec.refer_versions(_edits(_BIG), rows)
    again = codec.fill_versions(json.loads(json.dumps(stored)), {})
    assert again["proposal"]["edits"] == [{"artifact": "a", "part": "p0", "version": 9}]


def _replacing(parts: dict[str, Any]) -> dict[str, Any]:
    return {
        "cycle": 2,
        "proposal": {"kind": "replace", "edits": [], "replace": {"a": parts, "b": {"q": 1}}},
        "digest": "d",
    }


def test_a_large_replaced_value_names_its_version_and_keeps_the_parts_order() -> None:
    big, listed, small = _BIG + "r", [3, 4], "short"
    rec = _replacing({"p0": big, "p1": small, "p2": listed})
    rows = [("a/p0", 5, 2, "candidate", big), ("a/p1", 5, 2, "candidate", small),
            ("a/p2", 2, 2, "candidate", listed), ("b/q", 8, 2, "candidate", 1)]  # fmt: skip
    stored = codec.refer_versions(rec, rows)
    assert stored["proposal"]["replace"] == {"a": {"p0": None, "p1": "short", "p2": None},
                                             "b": {"q": 1}}  # fmt: skip
    assert stored["proposal"]["replace_versions"] == {"a": {"p0": 5, "p2": 2}}
    assert rec == _replacing({"p0": big, "p1": small, "p2": listed})  # not changed
    assert codec.referred_versions(stored) == [("a/p0", 5), ("a/p2", 2)]
    read = codec.unpack(json.loads(json.dumps(codec.pack(stored))))
    back = codec.fill_versions(read, {("a/p0", 5): big, ("a/p2", 2): listed})
    whole = codec.unpack(codec.pack(rec))  # the record as any reader sees one stored whole
    assert back == whole
    assert list(back["proposal"]) == list(whole["proposal"])  # no key of the store's left
    assert list(back["proposal"]["replace"]["a"]) == ["p0", "p1", "p2"]


def test_a_replaced_value_the_store_lacks_stays_named() -> None:
    rows = [("a/p0", 5, 2, "candidate", _BIG), ("a/p1", 6, 2, "candidate", [1])]
    stored = codec.refer_versions(_replacing({"p0": _BIG, "p1": [1]}), rows)
    again = codec.fill_versions(json.loads(json.dumps(stored)), {("a/p1", 6): [1]})
    assert again["proposal"]["replace"]["a"] == {"p0": None, "p1": [1]}
    assert again["proposal"]["replace_versions"] == {"a": {"p0": 5}}


def test_a_replaced_value_the_clean_test_refuses_stays_in_the_record() -> None:
    secret, plain = _BIG + "secret", _BIG + "plain"
    rows = [("a/p0", 1, 2, "candidate", secret), ("a/p1", 1, 2, "candidate", plain)]
    stored = codec.refer_versions(
        _replacing({"p0": secret, "p1": plain}), rows, lambda v: "secret" not in json.dumps(v)
    )
    assert stored["proposal"]["replace"]["a"] == {"p0": secret, "p1": None}
    assert stored["proposal"]["replace_versions"] == {"a": {"p1": 1}}


def test_a_replaced_value_is_tested_clean_under_its_names() -> None:
    # In the record a replaced value sits under its artifact's and part's names, which the
    # redaction net reads too (a part named ``token`` is masked whatever it holds).
    other = _BIG + "x"
    rows = [("a/token", 1, 2, "candidate", _BIG), ("a/p1", 2, 2, "candidate", other)]
    given: list[Any] = []

    def clean(v: Any) -> bool:
        given.append(v)
        return "token" not in json.dumps(v)

    stored = codec.refer_versions(_replacing({"token": _BIG, "p1": other}), rows, clean)
    assert stored["proposal"]["replace"]["a"] == {"token": _BIG, "p1": None}
    assert stored["proposal"]["replace_versions"] == {"a": {"p1": 2}}
    assert given == [{"a": {"token": _BIG}}, {"a": {"p1": other}}]
