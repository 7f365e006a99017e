"""A run state's accounting in its stored form, read back: the held-out spend, the calls
billed, the paid cycles and the cycle cap's checks (``TaskState.to_dict`` / ``from_dict``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._usage import Usage


def priced_row(u: Usage) -> list[Any] | None:
    """A held-out spend as stored: ``[cost_usd, tokens]``, or None for none (most runs)."""
    return [u.cost_usd, u.tokens] if u.cost_usd or u.tokens else None


def billed_of(stored: Any) -> dict[str, bool]:
    if not isinstance(stored, Mapping):
        return {}
    return {str(k): bool(v) for k, v in stored.items()}


def paid_cycles_of(stored: Any) -> list[int] | None:
    """The stored counts, or None (not counted: a state stored before they were)."""
    if not isinstance(stored, list) or len(stored) != 3:
        return None
    return [int(x) for x in stored]


def held_out_of(stored: Any) -> Usage:
    if not stored:
        return Usage()
    cost, tokens = stored
    return Usage._stored(cost, tokens, 0.0)


def cap_checks_of(d: Mapping[str, Any]) -> int | None:
    """``cap_checks`` as stored; None for a state stored before it was counted."""
    v = d.get("cap_checks")
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
