"""Feedback memory's text, rule and source are masked once on their way into the store: by
``FeedbackMemory.add`` (which must hand back the item as stored), not again by
``Store.memory_add``, whose own screen is for callers that come to the store straight (those
keep it: test_memory_store). A reflection's text was masked four times before (the engine's
clip, ``reflect``'s comparison, ``add``, the store); it is masked by the engine's clip and by
``reflect``, and stored as ``add`` would store it (stop 53)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright import _memory
from loopwright._memory import FeedbackMemory

SECRET = "sk-" + "Zq81xLm4w" * 4


@pytest.fixture
def screens(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times ``_memory`` masked each text, rule and source it was given."""
    seen: Counter[str] = Counter()
    text, obj = _memory.redact_text, _memory.redact

    def counted_text(t: str) -> str:
        seen[t.strip()] += 1
        return text(t)

    def counted(o: Any) -> Any:
        seen[repr(o)] += 1
        return obj(o)

    monkeypatch.setattr(_memory, "redact_text", counted_text)
    monkeypatch.setattr(_memory, "redact", counted)
    return seen


def test_add_masks_each_field_once_and_stores_it_masked(
    tmp_path: Path, screens: Counter[str]
) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        mem = FeedbackMemory(rt.store)
        item = mem.add(
            scope="task",
            scope_key="k",
            signal="correction",
            text=f" use {SECRET} ",
            rule={"avoid": SECRET},
            source={"why": SECRET},
            by="ann",
        )
        [row] = rt.store.memory_query()
    assert screens == {
        f"use {SECRET}": 1,
        repr({"avoid": SECRET}): 1,
        repr({"why": SECRET}): 1,
    }
    assert (row["text"], row["rule"], row["source"]) == (
        "use ***",
        {"avoid": "***"},
        {"why": "***"},
    )
    assert item.to_dict() == {**row, "history": item.to_dict()["history"]}


def test_a_reflection_is_masked_once_by_memory(tmp_path: Path, screens: Counter[str]) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        mem = FeedbackMemory(rt.store)
        for _ in range(2):  # the second time: the same note, kept once
            mem.reflect(task_key="k", text=f"the key {SECRET} failed ", source={"c": 1}, keep=3)
        [row] = rt.store.memory_query()
    assert screens[f"the key {SECRET} failed"] == 2  # once a call: its comparison and its row
    assert screens[repr({"c": 1})] == 1
    assert row["text"] == "the key *** failed"


def test_the_store_still_screens_a_row_given_to_it_straight(
    tmp_path: Path, screens: Counter[str]
) -> None:
    row = {
        "memory_id": "m1",
        "scope": "task",
        "scope_key": "k",
        "signal": "correction",
        "strength": 1.0,
        "text": f"use {SECRET}",
        "rule": None,
        "source": {"why": SECRET},
        "by": "ann",
        "status": "active",
        "created_at": 1.0,
        "updated_at": 1.0,
        "history": [],
    }
    with lw.Runtime(tmp_path / "s.db") as rt:
        rt.store.memory_add(row)
        rt.store.memory_add(_memory._Screened({**row, "memory_id": "m2"}))  # add's own mark
        got = {r["memory_id"]: (r["text"], r["source"]) for r in rt.store.memory_query()}
    assert got["m1"] == ("use ***", {"why": "***"})
    assert got["m2"] == (f"use {SECRET}", {"why": SECRET})  # marked screened: taken as it is
