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

import itertools
import json
import math
from collections.abc import Callable, Iterable
from json.encoder import encode_basestring_ascii
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
        parts: list[str] = []
        _encode(obj, parts.append, "\n" + _PAD * level)
        write("".join(parts))


def _encode(o: Any, put: Callable[[str], object], nl: str) -> None:
    """Put the text ``json.dumps(o, indent=2, default=str)`` makes (every line after the first
    indented by ``nl``, a newline and the level's pad): the standard library's own indenting
    encoder is its pure-Python one, a generator a level (``show --json`` of a 3,000-cycle run
    spent two thirds of its time there). The same tests in the same order (``str`` before
    ``int``, ``True`` before ``int``, ``list``/``tuple`` then ``dict`` then ``default``), the
    same scalar encoders."""
    if isinstance(o, str):
        put(_string(o))
    elif o is None:
        put("null")
    elif o is True:
        put("true")
    elif o is False:
        put("false")
    elif isinstance(o, int):
        put(_int(o))
    elif isinstance(o, float):
        put(_float(o))
    elif isinstance(o, list | tuple):
        if o:
            _container(zip(itertools.repeat(""), o), "[]", put, nl)
        else:
            put("[]")
    elif isinstance(o, dict):
        if o:
            _container(zip(map(_head, o), o.values(), strict=True), "{}", put, nl)
        else:
            put("{}")
    else:
        _encode(_other(o), put, nl)


def _container(
    members: Iterable[tuple[str, Any]], brackets: str, put: Callable[[str], object], nl: str
) -> None:
    """A list's or a dict's members (each its head, ``""`` or its key's, and its value)."""
    inner = nl + _PAD
    sep = brackets[0] + inner
    for head, v in members:
        scalar = _SCALARS.get(type(v))  # (an exact type: the common leaf, no call a level)
        if scalar is not None:
            put(sep + head + scalar(v))
        else:
            put(sep + head)
            _encode(v, put, inner)
        sep = "," + inner
    put(nl + brackets[1])


def _head(k: Any) -> str:
    return _string(k if type(k) is str else _key(k)) + ": "


_string = encode_basestring_ascii
_int = int.__repr__


def _float(o: float) -> str:
    # json's ``floatstr`` with ``allow_nan``
    if math.isnan(o):
        return "NaN"
    if o == math.inf:
        return "Infinity"
    if o == -math.inf:
        return "-Infinity"
    return float.__repr__(o)


def _literal(o: Any) -> str:
    return "null" if o is None else "true" if o is True else "false"


def _key(k: Any) -> str:
    # json's keys: text as it is; a float, a literal or an integer as JSON writes it
    if isinstance(k, str):
        return k
    if isinstance(k, float):
        return _float(k)
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        return _int(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


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


# each exact scalar type's text (a subclass takes ``_encode``'s tests, in json's order)
_SCALARS: dict[type, Callable[[Any], str]] = {
    str: _string,
    int: _int,
    float: _float,
    bool: _literal,
    type(None): _literal,
}
