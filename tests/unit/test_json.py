"""The stores' JSON: orjson's speed, the standard library's results."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright import _json

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # of any size: beyond 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_round_trip_equals_the_standard_library(value: Any) -> None:
    text = _json.dumps(value)
    assert _json.loads(text) == json.loads(json.dumps(value))
    assert json.loads(text) == value  # what we write is plain JSON any parser reads


def test_big_integers_stay_exact_both_ways() -> None:
    big = {"answer": 2**80 + 1, "neg": -(2**70), "edge": 2**63, "list": [10**19 + 7]}
    text = _json.dumps(big)
    assert _json.loads(text) == big
    # 19+ digits inside a string are left alone too
    assert _json.loads('{"id":"12345678901234567890","n":1}') == {
        "id": "12345678901234567890",
        "n": 1,
    }
    assert _json.loads(b'{"n":123456789012345678901}') == {"n": 123456789012345678901}


@given(
    st.lists(
        st.one_of(
            st.integers(min_value=-(10**40), max_value=10**40),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(alphabet="0123456789a é\u2028"),
        )
    )
)
def test_every_integer_reads_back_exact_whatever_surrounds_it(values: list[Any]) -> None:
    for text in (_json.dumps(values), json.dumps(values)):
        back = _json.loads(text)
        assert back == values
        assert [type(v) for v in back] == [type(v) for v in values]
        assert _json.loads(text.encode()) == values


def test_the_digit_run_test_reads_nineteen_digits_in_a_row_only() -> None:
    assert _json._may_hold_big_int("x" * 1000 + "1234567890123456789")
    assert _json._may_hold_big_int(b"[1234567890123456789]")
    assert not _json._may_hold_big_int("[123456789012345678, 1.2345678901234567]")
    assert not _json._may_hold_big_int("é" * 19 + "\udc80" + "12345678 9012345678901")


def test_a_fractions_long_digits_are_no_big_integer() -> None:
    # orjson writes a short duration as 0.00002810200021485798: 20 digits in a row, after a
    # point. Such a row (one in eight of a long run's store) went to the slow path whole.
    assert not _json._may_hold_big_int('{"seconds":0.00002810200021485798}')
    assert not _json._may_hold_big_int("[0." + "1234567890" * 5 + ",-2.0000000000000000000001]")
    # a real one is still found, before, after or between such fractions
    assert _json._may_hold_big_int('{"s":0.00002810200021485798,"n":12345678901234567890}')
    assert _json._may_hold_big_int("[-12345678901234567890,0.00002810200021485798]")
    assert _json._may_hold_big_int("[0." + "1234567890" * 5 + ",1234567890123456789]")
    assert _json._may_hold_big_int("[1e0000000000000000000005]")  # (the slow path's, as before)
    text = '{"s":0.00002810200021485798,"t":[0.0030000000000000005,1.0000000000000002]}'
    assert repr(_json.loads(text)) == repr(json.loads(text))


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values, max_size=40), st.integers(min_value=1, max_value=7))
def test_loads_all_reads_each_text_as_loads_does(values: list[Any], group: int) -> None:
    """The texts a store reads back in one go (``loads_all``, one search for a long integer
    over a group) come back as ``loads`` gives each: the same values of the same types,
    whatever long integers, fractions, NaN or escaped surrogates lie next to each other and
    wherever a group begins."""
    texts = [_json.dumps(v) for v in values] + [
        "12345678901234567890123",
        "0.1234567890123456789",
        '"12345678901234567890"',
        "[NaN, 1]",
        '"\\ud83d"',
        "[2, 1234567890123456789012]",
        "9",
    ]
    texts = texts[group:] + texts[:group]  # (the special texts at every place in turn)
    real = _json._SEARCHED_AT_ONCE
    try:
        _json._SEARCHED_AT_ONCE = group  # groups of 1 to 7 texts: every kind of neighbour
        got = _json.loads_all(texts)
    finally:
        _json._SEARCHED_AT_ONCE = real
    want = [_json.loads(t) for t in texts]
    assert repr(got) == repr(want)
    assert [type(v) for v in got] == [type(v) for v in want]
    assert repr(_json.loads_all(texts)) == repr(want)


def test_objects_json_cannot_write_become_their_str_as_before() -> None:
    @dataclasses.dataclass
    class Thing:
        x: int

    when = dt.datetime(2026, 11, 30, 9, 30, tzinfo=dt.UTC)
    value = {"thing": Thing(1), "when": when, "day": when.date(), "set": {1}}
    assert json.loads(_json.dumps(value)) == json.loads(
        json.dumps(value, separators=(",", ":"), default=str)
    )


def test_non_string_keys_fall_back_to_the_standard_library() -> None:
    assert _json.loads(_json.dumps({1: "a", None: "b"})) == {"1": "a", "null": "b"}


def test_nan_legacy_text_still_reads_and_new_text_is_standard() -> None:
    legacy = json.dumps({"x": float("nan"), "y": float("inf")})  # what older versions wrote
    back = _json.loads(legacy)
    assert math.isnan(back["x"]) and back["y"] == math.inf
    assert _json.dumps({"x": float("nan")}) == '{"x":null}'  # standard JSON
    # ...on the path json encodes too (a big int sends the value there)
    assert _json.loads(_json.dumps([float("nan"), 2**70, {1: -math.inf}])) == [
        None,
        2**70,
        {"1": None},
    ]


class Money(float):
    """A float subclass, as numpy.float64 is."""


def test_float_and_tuple_subclasses_are_written_as_json_writes_them() -> None:
    import collections

    Point = collections.namedtuple("Point", "x y")
    value = {"amount": Money(12.5), "at": Point(1, Money(2.5)), "t": (1, 2)}
    assert _json.dumps(value) == json.dumps(value, separators=(",", ":"), default=str)
    assert _json.loads(_json.dumps(value)) == {"amount": 12.5, "at": [1, 2.5], "t": [1, 2]}


def test_an_effect_key_survives_the_write_ahead_round_trip() -> None:
    """An effect's key hashes its arguments: computed from the actor's objects before a crash
    and from the stored arguments after it, it must be the same key."""
    import loopwright as lw

    @lw.effect("spend")
    def pay(amount: float, ref: list[int]) -> None: ...

    import collections

    Ref = collections.namedtuple("Ref", "a b")
    call = pay.call(amount=Money(12.5), ref=Ref(1, 2))
    stored = lw.EffectCall.from_dict(_json.loads(_json.dumps(call.to_dict())))
    assert pay.key_for("run", 3, stored) == pay.key_for("run", 3, call)


def test_unicode_round_trips() -> None:
    value = {"é": "✓ 漢字 \u2028", "emoji": "🙂"}
    assert _json.loads(_json.dumps(value)) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"a\\ud83db"', "a\ufffdb"),  # a lone high surrogate, escaped
        ('{"\\udfff": ["x\\udc00"]}', {"\ufffd": ["x\ufffd"]}),  # in a key and a list
        ('"\\ud83d\\ude00"', "\U0001f600"),  # a pair is its character
        ('{"n": 123456789012345678901234567890, "s": "\\ud800"}', None),  # big int path too
    ],
)
def test_loads_makes_a_stored_lone_surrogate_whole(text: str, expected: object) -> None:
    """Releases before lone surrogates were refused stored them escaped; read back as they
    were, no page or answer could encode them (500 for good on the run's page)."""
    got = _json.loads(text)
    if expected is None:
        assert got == {"n": 123456789012345678901234567890, "s": "\ufffd"}
    else:
        assert got == expected
    assert _json.dumps(got).encode("utf-8")  # printable again


def test_loads_keeps_a_stored_nan() -> None:
    """Only text is repaired on that path: a NaN written by an older version reads as NaN."""
    got = _json.loads('{"x": NaN, "s": "\\ud83d"}')
    assert math.isnan(got["x"]) and got["s"] == "\ufffd"


def test_owned_copy_is_what_a_store_reads_back_and_shares_nothing() -> None:
    owned_copy = _json.owned_copy
    inner = [1]
    value = {"t": (1, inner), "k": {2: "a"}, "n": float("nan"), "big": 10**30, "s": "\ud83d"}
    copy = owned_copy(value)
    assert copy == {"t": [1, [1]], "k": {"2": "a"}, "n": None, "big": 10**30, "s": "\ufffd"}
    copy["t"][1].append(2)
    assert inner == [1]
    looped: list[object] = []
    looped.append(looped)
    for bad, why in (
        ({1, 2}, "set"),
        (b"x", "bytes"),
        (dt.date(2020, 1, 1), "date"),
        ({(1, 2): "a"}, "keys must be str"),
        (looped, "contains itself"),
    ):
        with pytest.raises(ValueError, match=why):
            owned_copy({"v": bad})


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_owned_copy_equals_the_stores_round_trip(value: Any) -> None:
    assert _json.owned_copy(value) == _json.loads(_json.dumps(value))


def test_two_keys_written_alike_are_both_kept() -> None:
    """A key json refuses is written as its ``str``: a date key beside its own text wrote one
    key, and the other value was lost without a word."""
    day = dt.date(2026, 1, 1)
    for value, want in (
        ({day: 1, "2026-01-01": 2}, {"2026-01-01": 1, "2026-01-01#2": 2}),
        ({"2026-01-01": 2, day: 1}, {"2026-01-01": 2, "2026-01-01#2": 1}),
        (
            {(1, 2): "a", "(1, 2)": "b", "(1, 2)#2": "c"},
            {"(1, 2)": "a", "(1, 2)#2": "b", "(1, 2)#2#2": "c"},
        ),
    ):
        assert json.loads(_json.dumps({"e": value})) == {"e": want}


def test_a_number_key_and_its_text_are_both_kept() -> None:
    """json writes a number, bool or None key as its text: ``{1: "a", "1": "b"}`` was written
    with the key "1" twice, and read back as one (a value lost without a word)."""
    for value, want in (
        ({1: "a", "1": "b"}, {"1": "a", "1#2": "b"}),
        ({"1": "b", 1: "a"}, {"1": "b", "1#2": "a"}),
        ({None: "a", "null": "b"}, {"null": "a", "null#2": "b"}),
        ({1.5: "a", "1.5": "b"}, {"1.5": "a", "1.5#2": "b"}),
        ({True: "a", "true": "b", "true#2": "c"}, {"true": "a", "true#2": "b", "true#2#2": "c"}),
    ):
        assert _json.loads(_json.dumps({"e": value})) == {"e": want}
        assert _json.round_trip({"e": value}) == {"e": want}
