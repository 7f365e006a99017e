"""``_exec.cycle_calls`` (one walk of a concluded cycle's priced calls) gives what the three
walks it replaced give: ``calls_usage``'s sums, ``noted_calls`` of ``call_rows`` and
``packed_calls`` (bench/RESULTS.md, "stop 52")."""

from __future__ import annotations

import math
from typing import Any

import pytest

from loopwright._decide import noted_calls
from loopwright._exec import call_rows, calls_usage, cycle_calls
from loopwright._record_codec import packed_calls

ROWS: list[list[dict[str, Any]]] = [
    [],
    [{"who": "actor", "cost_usd": 0.0, "tokens": 0}],
    [
        {"who": "actor", "cost_usd": 0.0, "tokens": 0},
        {"who": "verifier:check", "cost_usd": 0.0, "tokens": 0},
    ],
    [
        {"who": "actor", "cost_usd": 0.25, "tokens": 120},
        {"who": "actor", "cost_usd": 0.0, "tokens": 7},
    ],
    [{"who": "actor", "cost_usd": -0.0, "tokens": 0}],  # -0.0 is not the default: kept
    [{"who": "actor", "cost_usd": 0, "tokens": 0}],  # an int 0 is not the float default
    [{"who": "actor", "cost_usd": 0.0, "tokens": 0.0}],  # nor a float token count
    [{"who": "effect:pay", "cost_usd": 0.0, "tokens": 0, "unknown_cost": True}],
    [{"who": "effect:pay", "cost_usd": 1.5, "tokens": 0, "unknown_cost": True}],
    [{"who": "actor"}, {"cost_usd": 0.5}, {"tokens": 3}],  # rows missing keys
    [{"who": "actor", "tokens": 0, "cost_usd": 0.0}],  # another key order
    [{"who": "actor", "cost_usd": 0.0, "tokens": 0, "extra": 1}],
    [{"cost_usd": 0.0, "tokens": 0, "note": "no who"}],  # three keys, not the free row's
    [{"who": "actor", "cost_usd": 0.0, "tokens": False}],  # a bool is not the int default
    [{"who": 7, "cost_usd": 0.0, "tokens": 0}],  # a name that is not text
    [{"who": "a", "cost_usd": 0.1, "tokens": 0}, {"who": "a", "cost_usd": 0.0, "tokens": 0}],
]
BILLED: list[dict[str, bool]] = [
    {},
    {"actor": False, "verifier:check": False},
    {"actor": True},
    {"a": False, "effect:pay": False},
]


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("billed", BILLED)
def test_one_walk_is_the_three(rows: list[dict[str, Any]], billed: dict[str, bool]) -> None:
    before = dict(billed)
    cost, tokens, noted, packed = cycle_calls(rows, billed)
    usage = calls_usage(rows)
    assert (cost, tokens) == (usage.cost_usd, usage.tokens)
    assert math.copysign(1.0, cost) == math.copysign(1.0, usage.cost_usd)
    expected = noted_calls(billed, call_rows(rows))
    assert noted == expected
    assert (noted is billed) == (expected is billed)  # a new dict only when it changes
    assert billed == before  # the state's own is never changed in place
    want = packed_calls(rows)
    assert packed == want
    for got, exp in zip(packed, want, strict=True):  # key order and value types too
        assert list(got.items()) == list(exp.items())
        assert [type(v) for v in got.values()] == [type(v) for v in exp.values()]
        assert [math.copysign(1.0, v) for v in got.values() if type(v) is float] == [
            math.copysign(1.0, v) for v in exp.values() if type(v) is float
        ]
