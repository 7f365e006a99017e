"""The small three-field loop the engine tests share: a doc whose parts a, b, c must match."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import loopwright as lw

TARGET = {"a": 1, "b": 2, "c": 3}
TASK: dict[str, Any] = {"goal": "fix doc", "artifacts": {"doc": {"a": 0, "b": 0, "c": 0}}}


def fields(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    vals = state.artifacts["doc"].values()
    found = tuple(
        lw.Finding(f"{k} should be {v}", "doc", k, "value", evidence={"expected": v})
        for k, v in TARGET.items()
        if vals.get(k) != v
    )
    return lw.Verdict(passed=not found, score=1 - len(found) / len(TARGET), findings=found)


def part_check(part: str, want: int) -> Callable[[lw.TaskState, lw.Proposal], lw.Verdict]:
    """A visible check named ``check_<part>``: the doc's ``part`` is ``want``."""

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        ok = state.artifacts["doc"].values().get(part) == want
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.0)

    check.__name__ = f"check_{part}"
    return check
