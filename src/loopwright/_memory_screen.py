"""Feedback memory's held-out screen (invariant 3): the reserved ``held_out`` key and its
spellings, and the walk that refuses a rule or source holding a held-out marker, too deep or not
JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from ._errors import ConfigError

if TYPE_CHECKING:
    from ._memory import MemoryItem

__all__ = ["HELD_OUT_KEY", "MAX_DEPTH", "held_out_in", "held_out_name"]


# Deeper rules and sources are refused: JSON's encoder (and the store's masking) recurse, and
# Python's stack ends near 1,000 levels (a RecursionError, not a ConfigError); the tasks
# file's bound (``cli/_tasks.MAX_DEPTH``).
MAX_DEPTH = 100

HELD_OUT_KEY = "held_out"
"""A task's reserved key for what only held-out checks read (hidden tests, expected answers)."""
# The names a held-out marker goes by, compared lower-cased with ``-`` and spaces read as ``_``:
# the task's reserved key and a check's flag.
_HELD_OUT_NAMES = frozenset({"held_out", "heldout"})


def _check_depth(value: object, name: str) -> None:
    """Refuse ``value`` nested deeper than ``MAX_DEPTH`` (a cycle is too): one iterative walk,
    depth first, so it stops at the first branch too deep, whatever the value's breadth."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, Mapping | list | tuple):
            if d > MAX_DEPTH:
                raise ConfigError(f"nested deeper than {MAX_DEPTH} levels", field=name)
            items = v.values() if isinstance(v, Mapping) else v
            stack.extend((x, d + 1) for x in items)


def held_out_name(key: object) -> bool:
    """Whether ``key`` names the held-out marker, however spelled: ``held_out`` in any case,
    ``held-out``, ``heldOut``, ``held out``."""
    return str(key).lower().replace("-", "_").replace(" ", "_") in _HELD_OUT_NAMES


def _held_out_at(value: Any) -> str | None:
    """Where a JSON value (dicts, lists, scalars: what ``check_json`` returns) holds a
    held-out marker: a key named ``held_out`` (any case; ``held-out``, ``heldOut``) whose value
    is not empty or false, at any depth (``verdicts[0].held_out``); None where none does. One
    iterative walk, each value visited once; ``check_json`` bounds the depth."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, at = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                here = f"{at}.{k}" if at else str(k)
                if x and held_out_name(k):
                    return here
                if isinstance(x, dict | list):
                    stack.append((x, here))
        elif isinstance(v, list):
            stack.extend((x, f"{at}[{i}]") for i, x in enumerate(v) if isinstance(x, dict | list))
    return None


def check_json(value: object, name: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(f"must be a JSON object (a dict), not {type(value).__name__}", field=name)
    _check_depth(value, name)
    try:
        text = json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"must be JSON-serialisable ({exc})", field=name) from None
    return cast("dict[str, Any]", json.loads(text))


def no_held_out(value: Any, name: str) -> None:
    """Invariant 3's screen of what ``add`` keeps: a rule or source holding a held-out marker
    anywhere is refused (docs/memory.md says what it does and does not catch)."""
    at = _held_out_at(value)
    if at is not None:
        raise ConfigError(
            f"held-out verdicts never enter memory ({name} marked held out at {at})", field=name
        )


def held_out_in(item: MemoryItem) -> str | None:
    """Where a stored item's rule or source holds a held-out marker (``rule.verdicts[0]
    .held_out``), None where neither does: ``add``'s screen, walked again at recall for rows
    written before it (or past it, straight into the store), which never reach an actor."""
    for name, value in (("rule", item.rule), ("source", item.source)):
        at = _held_out_at(value)
        if at is not None:
            return f"{name}.{at}"
    return None
