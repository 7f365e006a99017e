"""What the chat adapters' reply check (``parse_reply``: JSON, schema, nesting, lone surrogates)
refuses, and in which words, pinned reply by reply: the reason is shown back to the model in
its repair turn, so a faster check must refuse the same replies with the same reasons."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopwright._json import deeper_than
from loopwright.adapters import PROPOSAL_SCHEMA as P
from loopwright.adapters import REVIEW_SCHEMA as R
from loopwright.adapters import MalformedReplyError, parse_reply, validate

NAN = float("nan")

CASES: list[tuple[Any, dict[str, Any], str | None]] = [
    ({"edits": [{"artifact": "doc", "part": "p0", "value": 1}]}, P, None),
    (
        {
            "edits": [
                {"artifact": "doc", "part": "p0", "value": 1},
                {"artifact": "doc", "part": "", "value": 1},
            ]
        },
        P,
        "the reply does not fit the schema: $.edits[1].part: must not be empty",
    ),
    (
        {
            "edits": [
                {"artifact": "doc", "part": "p0", "value": 1},
                {"artifact": " ", "part": "x", "value": 1},
            ]
        },
        P,
        "the reply does not fit the schema: $.edits[1].artifact: must not be empty",
    ),
    (
        {"edits": [{"artifact": "doc", "part": "p0", "value": 1}, {"artifact": "doc", "value": 1}]},
        P,
        "the reply does not fit the schema: $.edits[1]: missing required key 'part'",
    ),
    (
        {
            "edits": [
                {"artifact": "doc", "part": "p0", "value": 1},
                {"artifact": "doc", "part": "x", "value": 1, "why": 2},
            ]
        },
        P,
        "the reply does not fit the schema: $.edits[1]: unexpected key 'why' (expected ['artifact', 'part', 'value'])",
    ),
    (
        {
            "edits": [
                {"artifact": "doc", "part": "p0", "value": 1},
                {"artifact": 5, "part": None, "value": None},
            ]
        },
        P,
        "the reply does not fit the schema: $.edits[1].artifact: expected string, got integer; $.edits[1].part: expected string, got null",
    ),
    (
        {"edits": [{"artifact": "doc", "part": "p0", "value": 1}, [1]]},
        P,
        "the reply does not fit the schema: $.edits[1]: expected object, got array",
    ),
    (
        {"edits": {"artifact": "doc"}},
        P,
        "the reply does not fit the schema: $.edits: expected array, got object",
    ),
    (
        {"edits": [{"artifact": "doc", "part": "p0", "value": 1}], "note": 3},
        P,
        "the reply does not fit the schema: $.note: expected string, got integer",
    ),
    (
        {"edits": [{"artifact": "doc", "part": "p0", "value": 1}], "escalate": None, "note": "n"},
        P,
        None,
    ),
    (
        {"edits": [{"artifact": "doc", "part": "p0", "value": 1}], "escalate": 1},
        P,
        "the reply does not fit the schema: $.escalate: expected string or null, got integer",
    ),
    (
        {
            "edits": [{"artifact": "doc", "part": "p0", "value": 1}],
            "question": {"text": "q", "choices": ["a", 2], "type": "date"},
        },
        P,
        "the reply does not fit the schema: $.question.choices[1]: expected string, got integer; $.question.type: must be one of ['text', 'number', 'integer', 'boolean'], got 'date'",
    ),
    (
        {
            "edits": [{"artifact": "doc", "part": "p0", "value": 1}],
            "question": {"text": "", "extra": 1},
        },
        P,
        "the reply does not fit the schema: $.question.text: must not be empty; $.question: unexpected key 'extra' (expected ['choices', 'text', 'type'])",
    ),
    ({"edits": [{"artifact": "doc", "part": "p0", "value": 1}], "question": None}, P, None),
    (
        {"edits": [{"artifact": "doc", "part": "p0", "value": 1}], "question": "why"},
        P,
        "the reply does not fit the schema: $.question: expected object or null, got string",
    ),
    (
        {
            "edits": [
                {"artifact": "doc", "part": "p0", "value": 1},
                {"artifact": "doc", "part": "p1", "value": 1},
                {"artifact": "doc", "part": "p2", "value": 1},
                {"artifact": "doc", "part": "p3", "value": 1},
                {"artifact": "doc", "part": "p4", "value": 1},
                {"artifact": "doc", "part": "p5", "value": 1},
                {"artifact": "doc", "part": "p6", "value": 1},
                {"artifact": "doc", "part": "p7", "value": 1},
                {"part": 0},
                {"part": 1},
                {"part": 2},
                {"part": 3},
                {"part": 4},
                {"part": 5},
                {"part": 6},
            ]
        },
        P,
        "the reply does not fit the schema: $.edits[8]: missing required key 'artifact'; $.edits[8]: missing required key 'value'; $.edits[8].part: expected string, got integer; $.edits[9]: missing required key 'artifact'; $.edits[9]: missing required key 'value' (+16 more)",
    ),
    ({"note": "n"}, P, "the reply does not fit the schema: $: missing required key 'edits'"),
    (
        {"edits": [{"artifact": "doc", "part": "p0", "value": 1}], "extra": True},
        P,
        "the reply does not fit the schema: $: unexpected key 'extra' (expected ['edits', 'escalate', 'note', 'question'])",
    ),
    ({"edits": [{"artifact": "doc", "part": "x", "value": {"a": [[[[]]]]}}]}, P, None),
    ({"edits": [{"artifact": "doc", "part": "x", "value": NAN}]}, P, None),
    ({"score": 0.5, "passed": False, "findings": []}, R, None),
    (
        {"score": NAN, "passed": False, "findings": []},
        R,
        "the reply does not fit the schema: $.score: must be a finite number, got nan",
    ),
    (
        {
            "score": 1,
            "passed": True,
            "findings": [{"message": "m", "severity": "fatal", "part": 3}],
        },
        R,
        "the reply does not fit the schema: $.findings[0].severity: must be one of ['error', 'warning'], got 'fatal'; $.findings[0].part: expected string or null, got integer",
    ),
    (
        {"score": -0.1, "passed": 1, "findings": [{"message": " "}]},
        R,
        "the reply does not fit the schema: $.score: must be ≥ 0, got -0.1; $.passed: expected boolean, got integer; $.findings[0].message: must not be empty",
    ),
    (
        {"score": True, "passed": True, "findings": [{}], "summary": None},
        R,
        "the reply does not fit the schema: $.score: expected number, got boolean; $.findings[0]: missing required key 'message'; $.summary: expected string, got null",
    ),
    (
        {"score": 2, "passed": True, "findings": "none"},
        R,
        "the reply does not fit the schema: $.score: must be ≤ 1, got 2; $.findings: expected array, got string",
    ),
    (
        {
            "score": 0.5,
            "passed": True,
            "findings": [{"message": "m", "artifact": None, "dimension": "d"}],
        },
        R,
        None,
    ),
]


@pytest.mark.parametrize(("reply", "schema", "reason"), CASES)
def test_a_reply_is_taken_or_refused_with_its_reason(
    reply: Any, schema: dict[str, Any], reason: str | None
) -> None:
    text = json.dumps(reply)
    if reason is None:
        assert json.dumps(parse_reply(text, schema)) == text
    else:
        with pytest.raises(MalformedReplyError) as got:
            parse_reply(text, schema)
        assert got.value.reason == reason


def _value_nested(levels: int) -> str:
    return '{"edits": [{"artifact": "d", "part": "t", "value": %s}]}' % (
        "[" * levels + "]" * levels
    )


DEEP = "the reply is nested deeper than 200 levels"


def test_nesting_is_counted_through_the_edits_and_refused_before_the_schema() -> None:
    assert parse_reply(_value_nested(198), P)["edits"][0]["part"] == "t"
    for text in (_value_nested(199), '{"edits": 5, "x": %s}' % ("[" * 300 + "]" * 300)):
        with pytest.raises(MalformedReplyError) as got:
            parse_reply(text, P)
        assert got.value.reason == DEEP


def test_a_lone_surrogate_is_refused_after_the_schema() -> None:
    with pytest.raises(MalformedReplyError, match=r"lone surrogate \(\\ud800\)"):
        parse_reply('{"edits": [], "note": "\\ud800"}', P)
    with pytest.raises(MalformedReplyError, match=r"\$\.note: expected string"):
        parse_reply('{"edits": [], "note": ["\\ud800"]}', P)


def test_many_edits_with_one_bad_one_name_it() -> None:
    edits: list[Any] = [{"artifact": "d", "part": f"p{i}", "value": [i]} for i in range(5000)]
    edits[4321] = {"artifact": "d", "part": "", "value": 1}
    with pytest.raises(MalformedReplyError) as got:
        parse_reply(json.dumps({"edits": edits}), P)
    assert (
        got.value.reason
        == "the reply does not fit the schema: $.edits[4321].part: must not be empty"
    )
    edits[4321] = {"artifact": "d", "part": "x", "value": 1}
    assert len(parse_reply(json.dumps({"edits": edits}), P)["edits"]) == 5000


def test_depth_counts_lists_tuples_and_objects_not_scalars() -> None:
    loop: list[Any] = []
    loop.extend([loop, loop])  # a value holding itself is too deep, never walked for ever
    assert deeper_than(loop, 200)
    assert not deeper_than("x" * 1000, 0) and not deeper_than([], 0) and deeper_than([1], 0)
    assert not deeper_than({"a": (1, [[]])}, 3) and deeper_than({"a": (1, [[]])}, 2)
    assert not deeper_than({"a": (1, [], {})}, 2)  # empty ones hold nothing deeper


def test_a_schema_changed_in_place_is_checked_as_it_is_now() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert validate({"a": 1}, schema) == ["$.a: expected string, got integer"]
    schema["properties"]["a"]["type"] = "integer"
    assert validate({"a": 1}, schema) == []
    assert validate({"a": "x"}, schema, "$.q") == ["$.q.a: expected integer, got string"]
