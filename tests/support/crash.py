"""In-process crashes at deterministic points: ``Crash`` is a ``BaseException`` no engine
handler catches, so nothing after the point where it is raised is written (a process death);
``phase_hook`` raises it at the N-th time the engine reports a phase (``Runtime._on_phase``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Crash(BaseException):
    """A process death at a deterministic point: nothing after it is written."""


def phase_hook(crash: tuple[str, int] | None) -> Callable[[str], None]:
    """For ``Runtime._on_phase``: raises ``Crash`` the N-th time phase ``PHASE`` is reached
    (``crash=(PHASE, N)``); never with ``None``."""
    seen: dict[str, int] = {}

    def on_phase(phase: str) -> None:
        seen[phase] = seen.get(phase, 0) + 1
        if crash == (phase, seen[phase]):
            raise Crash(f"{phase}:{seen[phase]}")

    return on_phase


def less_owed(record: dict[str, Any], ref: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """A redone cycle's record as the uninterrupted run recorded it, and the calls it was
    charged beyond those: what the calls of its killed attempt were billed (invariant 7),
    each listed before the call made again in its place. The record's usage must add up all
    of its calls."""
    calls, want = list(record.get("calls") or ()), list(ref.get("calls") or ())
    if calls == want:
        return record, []
    kept: list[Any] = []
    owed: list[Any] = []
    for c in calls:
        if len(kept) < len(want) and c == want[len(kept)]:
            kept.append(c)
        else:
            owed.append(c)
    assert kept == want, (calls, want)
    assert abs(record["usage"]["cost_usd"] - sum(c["cost_usd"] for c in calls)) < 1e-9
    assert record["usage"]["tokens"] == sum(c["tokens"] for c in calls)
    usage = {**record["usage"], "cost_usd": ref["usage"]["cost_usd"]}
    usage["tokens"] = ref["usage"]["tokens"]
    return {**record, "calls": want, "usage": usage}, owed
