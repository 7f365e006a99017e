"""Artifacts made of parts, parts made of versions, and the references that name a part.

A part holds in memory only the versions the engine needs; its older versions are in the
store, read on demand through a loader (invariant 8). ``TaskState`` (``_state``) holds the
artifacts; ``_copy_on_read`` copies them for a detached state.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from . import _json
from ._errors import ConfigError

__all__ = [
    "Artifact",
    "Part",
    "PartStatus",
    "Version",
    "VersionLoader",
    "match_any",
    "part_ref",
    "split_ref",
]

PartStatus = Literal["candidate", "accepted", "rejected"]
# ref -> that part's versions (from the store): how a state reads versions it does not hold.
VersionLoader = Callable[[str], Iterable["Version"]]
PART_STATUSES = ("candidate", "accepted", "rejected")


def part_ref(artifact: str, part: str) -> str:
    """The canonical name of a part: ``artifact/part``."""
    return f"{artifact}/{part}"


def split_ref(ref: str) -> tuple[str, str]:
    """Split ``artifact/part`` into its two names."""
    if not isinstance(ref, str):
        raise ConfigError(
            f"a part reference is text that looks like 'artifact/part', not {type(ref).__name__}"
        )
    artifact, sep, part = ref.partition("/")
    if not sep or not artifact or not part:
        raise ConfigError(f"part reference {ref!r} must look like 'artifact/part'")
    return artifact, part


def match_any(ref: str, patterns: Iterable[str]) -> bool:
    """Whether a part reference matches any glob pattern (``invoice/*``, ``*/payment``)."""
    return any(fnmatch.fnmatchcase(ref, p) for p in patterns)


@dataclass(slots=True)
class Version:
    """One version of a part. Versions are never deleted: limits never throw work away."""

    n: int
    value: Any
    cycle: int
    status: PartStatus = "candidate"
    # The serialised form, kept: a checkpoint serialises every version of every part, and all
    # but the current one never change. Rebuilt when the status changed (n, value and cycle
    # never do; a value replaced by hand is noticed too). Read-only: callers of to_dict() must
    # not mutate what it returns.
    _dict: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = self._dict
        if d is None or d["status"] != self.status or d["value"] is not self.value:
            d = self._dict = {
                "n": self.n,
                "value": self.value,
                "cycle": self.cycle,
                "status": self.status,
            }
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Version:
        return cls(int(d["n"]), d["value"], int(d["cycle"]), cast(PartStatus, d["status"]))


class Part:
    """A named, separately repairable and separately acceptable piece of an artifact.

    A part has ``count`` versions, numbered from 1. In memory it holds only the versions the
    engine needs (the current one, the latest accepted one, the best one, and any not yet
    committed): a long run's older versions live in the store's append-only ``versions`` rows
    and ``versions`` / ``version(n)`` load them on demand through ``loader`` (invariant 8:
    memory and per-cycle work do not grow with the number of cycles).
    """

    __slots__ = ("_known", "_owner", "count", "loader", "name")

    def __init__(
        self,
        name: str,
        versions: Iterable[Version] = (),
        *,
        count: int | None = None,
        loader: Callable[[], Iterable[Version]] | None = None,
    ) -> None:
        self.name = name
        self._known: dict[int, Version] = {v.n: v for v in versions}
        self.count = count if count is not None else max(self._known, default=0)
        self.loader = loader
        # The state that may change this part in place (copy on write: ``TaskState.fork``
        # shares parts between the copies, and the first change in either copies the part).
        self._owner: object | None = None

    def __repr__(self) -> str:
        return f"Part({self.name!r}, count={self.count}, known={sorted(self._known)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Part):
            return NotImplemented
        return self.name == other.name and self.versions == other.versions

    __hash__ = None  # type: ignore[assignment]

    @property
    def versions(self) -> list[Version]:
        """Every version, oldest first (older ones are read from the store when needed)."""
        if len(self._known) < self.count:
            self._load()
        return [self._known[n] for n in range(1, self.count + 1)]

    @property
    def known(self) -> dict[int, Version]:
        """The versions held in memory, by number (read-only)."""
        return self._known

    @property
    def current(self) -> Version:
        return self._known[self.count]

    @property
    def value(self) -> Any:
        return self._known[self.count].value

    @property
    def status(self) -> PartStatus:
        return self._known[self.count].status

    @property
    def accepted(self) -> Version | None:
        # The latest accepted version is always held in memory (see ``trim``).
        known, count = self._known, self.count
        if count in known and (cur := known[count]).status == "accepted":
            return cur  # the common case, without looking at the others
        found: Version | None = None
        for n, v in known.items():
            if v.status == "accepted" and (found is None or n > found.n):
                found = v
        return found

    def version(self, n: int) -> Version:
        if n not in self._known:
            if not 1 <= n <= self.count:
                raise IndexError(f"part {self.name!r} has no version {n} (1..{self.count})")
            self._load()
        return self._known[n]

    def add(self, value: Any, cycle: int) -> Version:
        v = Version(self.count + 1, value, cycle)
        self._known[v.n] = v
        self.count = v.n
        return v

    def trim(self, keep: Iterable[int] = ()) -> None:
        """Forget the in-memory copies of versions the engine no longer needs (they are in the
        store): keeps the current, the latest accepted and those in ``keep``. Only when the
        part can load them again."""
        if self.loader is None or len(self._known) <= 2:
            return
        acc = self.accepted
        wanted = {self.count, *keep, *((acc.n,) if acc is not None else ())}
        drop = []
        for n in self._known:  # (a loop: no comprehension a cycle)
            if n not in wanted:
                drop.append(n)
        for n in drop:
            del self._known[n]

    def _load(self) -> None:
        if self.loader is None:
            raise LookupError(
                f"part {self.name!r}: older versions are in the store and this state has no "
                "loader (read it through the runtime or the store)"
            )
        self.fill(self.loader())

    def fill(self, versions: Iterable[Version]) -> None:
        """Hold ``versions`` (read from the store) beside those held already: afterwards every
        version up to ``count`` is in memory, or ``LookupError`` says which are missing."""
        for v in versions:
            if v.n <= self.count:  # a rollback's abandoned versions lie beyond the count
                self._known.setdefault(v.n, v)  # held versions are newer truth (status)
        missing = [n for n in range(1, self.count + 1) if n not in self._known]
        if missing:
            raise LookupError(f"part {self.name!r}: versions {missing[:5]} are missing")

    def fork(self) -> Part:
        """A copy whose current version can change status without touching this one."""
        known = dict(self._known)
        cur = known.get(self.count)
        if cur is not None:
            known[self.count] = Version(cur.n, cur.value, cur.cycle, cur.status)
        # (built by plain slot stores: ``Part(name, count=..., loader=...)`` goes through a
        # dict of its keywords and a comprehension over no versions; a cycle forks a part)
        p: Part = object.__new__(Part)
        p.name = self.name
        p._known = known
        p.count = self.count
        p.loader = self.loader
        p._owner = None
        return p

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "versions": [v.to_dict() for v in self.versions]}

    def to_known_dict(self) -> dict[str, Any]:
        """Compact form: the versions held in memory and the count."""
        return {
            "name": self.name,
            "count": self.count,
            "versions": [self._known[n].to_dict() for n in sorted(self._known)],
        }

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], loader: Callable[[], Iterable[Version]] | None = None
    ) -> Part:
        vs = [Version.from_dict(v) for v in d["versions"]]
        count = d.get("count")
        return cls(str(d["name"]), vs, count=None if count is None else int(count), loader=loader)


@dataclass(slots=True)
class Artifact:
    """A deliverable made of named parts (a page of panels, an invoice's fields, a program)."""

    name: str
    parts: dict[str, Part] = field(default_factory=dict)
    # The parts' current values, and the accepted values of those that have one, in part
    # order: every cycle's context shows them, so they are kept up to date by
    # ``TaskState.set_part`` / ``set_status`` and copied (a C-level dict copy) rather than
    # rebuilt part by part. None: not built yet (or dropped by ``TaskState.reindex``).
    _values: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    _accepted: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    # A detached copy's original (``TaskState.detached``): its values are copied from there in
    # one JSON round trip when first read, not part by part. Forgotten once a part changes.
    _source: Artifact | None = field(default=None, init=False, repr=False, compare=False)

    def values(self) -> dict[str, Any]:
        vals = self._values
        if vals is None and self._source is not None:
            vals = self._values = _json.round_trip(self._source.values())
        elif vals is None or len(vals) != len(self.parts):
            vals = self._values = {name: p.value for name, p in self.parts.items()}
        return dict(vals)

    def accepted_values(self) -> dict[str, Any]:
        """The latest accepted value of each part that has one."""
        acc = self._accepted
        if acc is None and self._source is not None:
            acc = self._accepted = _json.round_trip(self._source.accepted_values())
        elif acc is None:
            acc = self._accepted = {
                name: a.value for name, p in self.parts.items() if (a := p.accepted) is not None
            }
        return dict(acc)

    def _value_changed(self, name: str, p: Part) -> None:
        """Keep the cached values right after part ``name`` (now ``p``) got a version (a new
        part is the last one in both; its new version is not accepted yet)."""
        self._source = None
        if self._values is not None:
            self._values[name] = p.value

    def _status_changed(self, name: str, p: Part) -> None:
        """Keep the cached accepted values right after part ``name``'s status changed."""
        self._source = None
        cache = self._accepted
        if cache is None:
            return
        if name not in cache and p._known[p.count].status != "accepted":
            # no accepted version before (the cache says so), and the current one is not: none
            # now (``p.accepted`` looks at every version held, to find none)
            return
        acc = p.accepted
        if name in cache:
            if acc is None:
                del cache[name]
            else:
                cache[name] = acc.value
        elif acc is not None:
            if next(reversed(self.parts)) == name:
                cache[name] = acc.value  # the last part: the cache stays in part order
            else:
                self._accepted = None  # rebuilt in part order when next read

    def _forked(self) -> Artifact:
        out = Artifact(self.name, dict(self.parts))
        out._values = None if self._values is None else dict(self._values)
        out._accepted = None if self._accepted is None else dict(self._accepted)
        return out

    def to_dict(self, *, held: bool = False) -> dict[str, Any]:
        return {
            "name": self.name,
            "parts": [p.to_known_dict() if held else p.to_dict() for p in self.parts.values()],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], loader: VersionLoader | None = None) -> Artifact:
        name = str(d["name"])
        parts = [
            Part.from_dict(
                p, None if loader is None else bind(loader, part_ref(name, str(p["name"])))
            )
            for p in d["parts"]
        ]
        return cls(name, {p.name: p for p in parts})


def bind(loader: VersionLoader, ref: str) -> Callable[[], Iterable[Version]]:
    return lambda: loader(ref)
