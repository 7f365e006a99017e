"""Per-cycle helpers that keep work from one cycle to the next give the same results as
building everything anew (the proposal digest's canonical JSON, the memory search)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from loopwright._effects import canon
from loopwright._memory import memory_search, query_terms


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [1.5, 1e16, -0.0, None, True], "ü": "naïve ✓"},
        [("doc", "body", '"quoted"'), {"z": {"y": {"x": 1}}}],
        {"when": dt.datetime(2026, 12, 1, 12, 0), "amount": Decimal("1.10")},
        "draft 15",
        float("nan"),
    ],
)
def test_canonical_json_is_what_json_dumps_writes(value: Any) -> None:
    want = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    assert canon(value) == want


def test_the_same_search_is_reused_and_cannot_change() -> None:
    first = memory_search([("task", "k"), ("global", None)], "keep the Title short")
    again = memory_search([("task", "k"), ("global", "")], "keep the Title short")
    assert again is first
    assert first.scopes == (("task", "k"), ("global", ""))
    assert list(first.terms) == query_terms("keep the Title short")
    assert isinstance(first.terms, tuple)  # shared between calls: immutable
    other = memory_search([("task", "k")], "keep the title long")
    assert other is not first and "long" in other.terms
