"""Whether writing one value over another changes nothing as the store writes them: equal, and
each number of one JSON kind (``true``, ``1`` and ``1.0`` are three values)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import _json

__all__ = ["same_value"]


def _kind(value: Any) -> str | None:
    """A number's JSON kind (``true``, ``1``, ``1.0``), else ``None``."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return None


def kinds_agree(a: Any, b: Any) -> bool:
    """Of two equal values (``a == b``), whether every number in them is of one kind in both.
    Walked with a list, not by recursion: two frames a level (a call and its generator) raised
    RecursionError on a value nested 330 deep that a proposal may hold and ``==`` compares
    (the run ended in an internal error; review51b)."""
    pairs = [(a, b)]
    while pairs:
        a, b = pairs.pop()
        if a is b:
            continue
        ka, kb = _kind(a), _kind(b)
        if ka is not None or kb is not None:
            if ka != kb:
                return False
        elif isinstance(a, Mapping) and isinstance(b, Mapping):
            if any(type(k) is not str for k in a):
                # A key that is no text is written as JSON's text of it: ``1`` as "1", ``True``
                # as "true", ``1.0`` as "1.0", though Python takes them for one key. Judged as
                # the store writes both (their round trips hold text keys only).
                sa, sb = _json.round_trip(a), _json.round_trip(b)
                if sa != sb:
                    return False
                pairs.append((sa, sb))
            else:
                pairs.extend((v, b[k]) for k, v in a.items())
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
            pairs.extend(zip(a, b, strict=False))
    return True


def same_value(a: Any, b: Any) -> bool:
    """Whether writing ``b`` over a part holding ``a`` changes nothing: equal, and each number
    of the same kind, as the store writes them (``true``, ``1`` and ``1.0`` are three values
    in JSON and read back as three; Python's ``==`` takes ``True == 1 == 1.0``; so are the keys
    ``1`` and ``True``, written ``"1"`` and ``"true"``). A proposal
    setting ``1`` to ``True`` was dropped as no change: the checks judged the ``1``, and the
    proposal was taken for the no-change one rejected before (stall51)."""
    return a is b or (a == b and kinds_agree(a, b))
