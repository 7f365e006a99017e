"""JSON written as it is read: a long run's export without the run in memory.

``json.dump`` wants the whole document built first; a 3,000-cycle run of 20 KB values held
as Python objects, then as one string, took more than ten times its size. ``write_json``
writes the text ``json.dumps(doc, indent=2, default=str)`` would make, byte for byte, but a
``Lazy`` list inside the document is written item by item as its iterator yields them (read
from the store page by page), and an ``Open`` container is written member by member so that
the lazy lists inside it are reached. The standard library has no streaming encoder, and the
output must stay what ``--json`` printed before, so this small writer is ours.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Lazy", "Open", "write_json"]

_PAD = "  "


class Lazy:
    """A list whose items are produced while it is written (each one read, written, dropped)."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items


class Open:
    """A dict or list written member by member: what holds a ``Lazy`` somewhere inside."""

    __slots__ = ("value",)

    def __init__(self, value: dict[str, Any] | list[Any]) -> None:
        self.value = value


def write_json(doc: Any, write: Callable[[str], object]) -> None:
    """Write ``doc`` as ``json.dumps(doc, indent=2, default=str)`` would, ``Lazy`` lists read
    as they are written."""
    _write(doc, write, 0)


def _write(obj: Any, write: Callable[[str], object], level: int) -> None:
    if isinstance(obj, Open):
        obj = obj.value
        if isinstance(obj, dict):
            _members(((json.dumps(str(k)) + ": ", v) for k, v in obj.items()), "{}", write, level)
        else:
            _members((("", v) for v in obj), "[]", write, level)
    elif isinstance(obj, Lazy):
        _members((("", v) for v in obj.items), "[]", write, level)
    else:
        text = json.dumps(obj, indent=2, default=_other)
        # json.dumps escapes a newline inside a string, so every newline here is layout
        write(text.replace("\n", "\n" + _PAD * level) if level else text)


def _other(obj: Any) -> str:
    """What ``default=str`` writes, but never a stream's repr: a ``Lazy`` or ``Open`` inside a
    plain container is a mistake of the caller (its parents must be ``Open``)."""
    if isinstance(obj, (Lazy, Open)):
        raise TypeError(f"a {type(obj).__name__} inside a plain container: make it Open")
    return str(obj)


def _members(
    members: Iterable[tuple[str, Any]], brackets: str, write: Callable[[str], object], level: int
) -> None:
    inner = "\n" + _PAD * (level + 1)
    sep = brackets[0] + inner
    for head, value in members:
        write(sep + head)
        _write(value, write, level + 1)
        sep = "," + inner
    write(brackets if sep[0] == brackets[0] else "\n" + _PAD * level + brackets[1])
