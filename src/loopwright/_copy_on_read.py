"""Copies that cost what their user reads: the mappings of a ``TaskState.detached`` copy
(an artifact's parts, the task) and the values user code is handed (``copied_on_read``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from . import _json
from ._parts import Artifact, Part, Version, VersionLoader, bind, part_ref

__all__ = ["copied_on_read"]

_V = TypeVar("_V")


class CopyOnRead(dict[str, _V]):
    """A mapping of a ``TaskState.detached`` copy (an artifact's parts, the task): each entry
    is replaced by ``copy(key, value)`` the first time it is read (``[]``, ``get``, ``items``,
    ``values``, copies), so that nothing read through it is shared with the state it came
    from, and the copy costs what its user reads. Written by hand: a lazy deep copy of our own
    objects, which no copying library does."""

    __slots__ = ("_copy", "_fresh")

    def __init__(self, data: Mapping[str, _V], copy: Callable[[str, _V], _V]) -> None:
        dict.__init__(self, data)  # (not ``super()``: a super object built five times a cycle)
        self._copy = copy
        self._fresh: set[str] = set()

    def _take(self, key: str) -> _V:
        v = dict.__getitem__(self, key)
        if key not in self._fresh:
            v = self._copy(key, v)
            dict.__setitem__(self, key, v)
            self._fresh.add(key)
        return v

    def _all(self) -> None:
        stale = [k for k in dict.keys(self) if k not in self._fresh]
        if self._copy is json_copy and stale:
            # Values: every container copied in one JSON round trip, not one each (an actor
            # that puts the whole context in a prompt reads every part, every cycle).
            get = dict.__getitem__
            held = [k for k in stale if isinstance(get(self, k), dict | list)]
            if held:
                copies = _json.round_trip([get(self, k) for k in held])
                for k, v in zip(held, copies, strict=True):
                    dict.__setitem__(self, k, v)
            self._fresh.update(stale)
            return
        for key in stale:
            self._take(key)

    def __getitem__(self, key: str) -> _V:
        return self._take(key)

    def __setitem__(self, key: str, value: _V) -> None:
        dict.__setitem__(self, key, value)
        self._fresh.add(key)

    def __iter__(self) -> Iterator[str]:
        # Overridden so that dict(self) and {**self} copy through ``[]`` (CPython copies a
        # dict subclass's storage directly only while its ``__iter__`` is dict's own).
        return dict.__iter__(self)

    def get(self, key: str, default: Any = None) -> Any:
        return self._take(key) if dict.__contains__(self, key) else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self._take(key)
        self[key] = default
        return default

    def pop(self, key: str, *default: Any) -> Any:
        if dict.__contains__(self, key):
            self._take(key)
        self._fresh.discard(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, _V]:
        self._all()
        return dict.popitem(self)

    def values(self) -> Any:
        self._all()
        return dict.values(self)

    def items(self) -> Any:
        self._all()
        return dict.items(self)

    def copy(self) -> dict[str, _V]:
        self._all()
        return dict(dict.items(self))


def detached_artifact(a: Artifact, loader: VersionLoader | None) -> Artifact:
    out = Artifact(a.name, CopyOnRead(a.parts, _part_copier(a.name, loader)))
    out._source = a
    return out


def json_copy(_key: str, value: Any) -> Any:
    return _json.round_trip(value) if isinstance(value, dict | list) else value


def copied_on_read(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (a part's values, the task) as user code is handed them: each list or dict
    copied the first time it is read, so that changing what was read in place changes
    nothing of the run's state, and the copy costs what is read."""
    return CopyOnRead(values, json_copy)


def _part_copier(artifact: str, loader: VersionLoader | None) -> Callable[[str, Part], Part]:
    def copy(name: str, p: Part) -> Part:
        """A copy of ``p`` that shares no changeable object with it."""
        bound = p.loader if loader is None else bind(loader, part_ref(artifact, name))
        q = Part(p.name, count=p.count, loader=bound)
        for n, v in p.known.items():
            q.known[n] = Version(v.n, json_copy(name, v.value), v.cycle, v.status)
        return q

    return copy
