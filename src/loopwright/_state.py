"""The structured execution truth of a run: artifacts made of parts, findings, the plan.

A run's state is never the chat transcript. It is plain, JSON-serialisable data that the engine
checkpoints after every cycle and rebuilds on resume. Held-out verdicts never enter it: that is
how invariant 3 (held-out isolation) holds by construction — the actor's context is built only
from this state.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast, get_args

from . import _json
from . import _shapes as shapes
from ._errors import ConfigError
from ._frozen import quick_init
from ._usage import Usage

__all__ = [
    "Artifact",
    "Digests",
    "Finding",
    "Part",
    "PartStatus",
    "PlanStep",
    "StepStatus",
    "TaskState",
    "Version",
    "copied_on_read",
    "part_ref",
    "split_ref",
]

PartStatus = Literal["candidate", "accepted", "rejected"]
# ref -> that part's versions (from the store): how a state reads versions it does not hold.
VersionLoader = Callable[[str], Iterable["Version"]]
StepStatus = Literal["pending", "in_progress", "done", "blocked"]
STEP_STATUSES: tuple[StepStatus, ...] = get_args(StepStatus)
_PART_STATUSES = ("candidate", "accepted", "rejected")


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
                p, None if loader is None else _bind(loader, part_ref(name, str(p["name"])))
            )
            for p in d["parts"]
        ]
        return cls(name, {p.name: p for p in parts})


@quick_init
@dataclass(frozen=True, slots=True)
class Finding:
    """A located problem: which artifact, which part, which dimension, and what is wrong.

    Attributes:
        message: what is wrong, in words the actor (and a person) can act on.
        artifact: the artifact it concerns, if any.
        part: the part it concerns, if any.
        dimension: what kind of problem (``"amount"``, ``"evidence"``, ``"legibility"``...).
        severity: ``"error"`` blocks acceptance; ``"warning"`` does not.
        verifier: the verifier that raised it (filled in by the engine).
        evidence: supporting data (expected and actual values, a test's output).
    """

    message: str
    artifact: str | None = None
    part: str | None = None
    dimension: str = "general"
    severity: Literal["error", "warning"] = "error"
    verifier: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a verifier that parsed a model's answer may pass None or a number: say so here, not
        # a cycle later inside the engine (loopwright._shapes)
        if (
            type(self.message) is not str
            or (self.artifact is not None and type(self.artifact) is not str)
            or (self.part is not None and type(self.part) is not str)
            or type(self.dimension) is not str
            or type(self.verifier) is not str
            or self.severity
            not in ("error", "warning")  # a tuple: an unhashable value is refused too
            or (type(self.evidence) is not dict and not isinstance(self.evidence, Mapping))
        ):
            shapes.text(self.message, "Finding.message")
            shapes.optional(self.artifact, str, "Finding.artifact")
            shapes.optional(self.part, str, "Finding.part")
            shapes.text(self.dimension, "Finding.dimension")
            shapes.text(self.verifier, "Finding.verifier")
            if self.severity not in ("error", "warning"):
                raise ConfigError(
                    f"must be 'error' or 'warning', got {self.severity!r}",
                    field="Finding.severity",
                )
            if not isinstance(self.evidence, Mapping):
                raise ConfigError(
                    f"must be a mapping, got {type(self.evidence).__name__}",
                    field="Finding.evidence",
                )

    @property
    def ref(self) -> str | None:
        if self.artifact is None:
            return None
        return part_ref(self.artifact, self.part) if self.part else self.artifact

    def touches(self, artifact: str, part: str) -> bool:
        """Whether this finding is about the given part (an artifact-wide finding touches all)."""
        if self.artifact is None:
            return True
        return self.artifact == artifact and (self.part is None or self.part == part)

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "artifact": self.artifact,
            "part": self.part,
            "dimension": self.dimension,
            "severity": self.severity,
            "verifier": self.verifier,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        return shapes.stored(  # as recorded: checked when it was made
            cls,
            str(d["message"]),
            d.get("artifact"),
            d.get("part"),
            str(d.get("dimension", "general")),
            d.get("severity", "error"),
            str(d.get("verifier", "")),
            dict(d.get("evidence") or {}),
        )


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of the plan. A step that lists parts is done when all of them are accepted.

    Immutable: the engine replaces a step whose status changes (``TaskState.set_step_status``),
    so a state and its forks share their steps and a cycle copies none of them."""

    id: str
    title: str = ""
    depends_on: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()
    status: StepStatus = "pending"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "depends_on": list(self.depends_on),
            "parts": list(self.parts),
            "status": self.status,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlanStep:
        status = d.get("status", "pending")
        if status not in STEP_STATUSES:
            raise ConfigError(f"unknown step status {status!r}", field=f"plan.{d.get('id')}")
        return cls(
            id=str(d["id"]),
            title=str(d.get("title", "")),
            depends_on=tuple(d.get("depends_on", ())),
            parts=tuple(d.get("parts", ())),
            status=cast(StepStatus, status),
        )


REJECTED_WINDOW = 128
"""The newest rejected digests a live state holds in memory (at most twice this many, trimmed
in one step); older ones are asked about from the store, one indexed read each."""

_FILTER_BITS = 1 << 17  # 16 KiB: under 2 % of misses asked about at 10,000 digests let go
_FILTER_MASK = _FILTER_BITS - 1


def _filter_bits(digest: str) -> tuple[int, int]:
    """The two bits of the digest filter that stand for ``digest`` (set and tested alike)."""
    h = hash(digest)
    return h & _FILTER_MASK, (h >> 17) & _FILTER_MASK


class Digests(list[str]):
    """The digests of rejected proposals: a list (in order) that answers ``in`` from a set,
    so the duplicate check costs the same at cycle 5,000 as at cycle 5. Memory stays bounded
    too (invariant 8): once ``lookup`` (an indexed read of the store) is attached, the digests
    the store holds (``durable``) beyond the newest ``REJECTED_WINDOW`` leave memory. ``in``
    asks ``lookup`` about a digest not held only where the store may have it: a digest that
    left memory sets two bits of a fixed-size filter (a Bloom filter, 16 KiB), and one whose
    bits are not both set never left it; a state loaded from a store (``stored``: it holds
    only the digests added since) asks about every one. The list holds the digests from
    ``gone`` on; ``since(n)``: those added after the first ``n``."""

    # (class defaults: most states never let a digest go; a verifier's copy is made a cycle)
    gone = 0  # how many of the first digests left memory (the store holds them)
    _filter: bytearray | None = None  # those digests' bits (none left: None)

    def __init__(
        self,
        items: Iterable[str] = (),
        lookup: Callable[[str], bool] | None = None,
        *,
        stored: bool = True,
    ) -> None:
        super().__init__(items)
        self._set = set(self)
        self.lookup = lookup
        # What a digest not held needs: 0 nothing (no store, or none let go of), 1 the
        # filter's bits, 2 the store's answer (it may hold digests this process never added).
        self._mode = 0 if lookup is None else 2 if stored else 0

    def append(self, item: str) -> None:
        super().append(item)
        self._set.add(item)

    def __contains__(self, item: object) -> bool:
        if item in self._set:
            return True
        mode = self._mode
        if not mode or not isinstance(item, str):
            return False
        if mode == 1:
            # (a process's own string hash: the filter never leaves the process)
            f = self._filter
            assert f is not None  # (mode 1: some digests left memory)
            a, b = _filter_bits(item)
            if not (f[a >> 3] >> (a & 7)) & 1 or not (f[b >> 3] >> (b & 7)) & 1:
                return False  # never let go of: not rejected
        lookup = self.lookup
        assert lookup is not None  # (modes 1 and 2 have one)
        return lookup(item)

    def since(self, n: int) -> tuple[list[str], int]:
        """The digests added after the first ``n`` (never ones that left memory: only digests
        the store holds leave it, and ``n`` counts those written), and how many were added."""
        gone = self.gone
        return self[n - gone :], gone + len(self)

    def durable(self, n: int) -> None:
        """The store holds the first ``n`` digests: past twice the window (the caller asks),
        those of them older than the newest ``REJECTED_WINDOW`` leave memory (a step per
        ``REJECTED_WINDOW`` appends, so O(1) a digest), their bits set in the filter."""
        if self.lookup is None:
            return
        drop = min(n - self.gone, len(self) - REJECTED_WINDOW)
        if drop <= 0:
            return
        if self._mode != 2:  # (mode 2 asks the store of every digest not held: no filter)
            f = self._filter
            if f is None:
                f = self._filter = bytearray(_FILTER_BITS >> 3)
            for d in self[:drop]:
                a, b = _filter_bits(d)
                f[a >> 3] |= 1 << (a & 7)
                f[b >> 3] |= 1 << (b & 7)
            self._mode = 1
        del self[:drop]
        self._set = set(self)
        self.gone += drop


@dataclass(slots=True)
class TaskState:
    """Everything a run knows, checkpointed after every cycle.

    The first group of fields is the task; the second is the work; the third is the engine's
    accounting, kept here so that one atomic checkpoint restores all of it.
    """

    goal: str = ""
    task_key: str = ""
    project: str = ""
    task: dict[str, Any] = field(default_factory=dict)

    artifacts: dict[str, Artifact] = field(default_factory=dict)
    plan: list[PlanStep] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # A note is never changed in place once here: heads and forks share the entries.
    notes: list[dict[str, Any]] = field(default_factory=list)
    next_action: str = ""
    retries: dict[str, int] = field(default_factory=dict)

    cycle: int = 0
    spent: Usage = field(default_factory=Usage)
    # The priced part of ``spent`` that held-out checks spent: counted by the contract, left
    # out of what the actor is shown (a model reviewer's cost can tell its verdict).
    held_out_spent: Usage = field(default_factory=Usage)
    score: float | None = None
    best_score: float | None = None
    best_cycle: int = 0
    best_parts: dict[str, int] = field(default_factory=dict)
    # What the last material improvement reached: the level the next must beat by the
    # no-progress rule's min_delta (``best_score`` follows every rise; this only material ones).
    progress_score: float | None = None
    stall: int = 0
    rejected: list[str] = field(default_factory=Digests)
    approved: list[str] = field(default_factory=list)  # the newest; every one is a request
    passed_checks: list[str] = field(default_factory=list)
    pending: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    # Bookkeeping, not the state's value (never stored, never compared). Invariant 8 for
    # states with many parts: a cycle's work follows the parts it changed, not how many there
    # are. ``fork`` shares parts (copy on write: a part whose ``_owner`` is this token may be
    # changed in place, any other is copied first); ``_dirty`` names the parts changed since
    # the engine last took them (``take_changes``: what the next checkpoint writes);
    # ``_open`` lists every part whose current version may not be accepted (a superset: a
    # part is appended when it becomes open and dropped when the list is next compacted;
    # None: not computed yet). Append-only between compactions, it is shared by forks, like
    # ``rejected``: a part another fork appended is checked against this state's parts.
    _token: object = field(default_factory=object, init=False, repr=False, compare=False)
    _dirty: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _open: list[str] | None = field(default=None, init=False, repr=False, compare=False)
    _open_size: int = field(default=0, init=False, repr=False, compare=False)
    # Likewise the parts whose version count may differ from ``best_parts`` (None: any), and
    # what the last ``mark_best`` changed, from which ``best_parts`` (``best_diff``).
    _best_hint: list[str] | None = field(default=None, init=False, repr=False, compare=False)
    _best_size: int = field(default=0, init=False, repr=False, compare=False)
    _best_diff: tuple[dict[str, int], dict[str, int], list[str]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    # What is derived from the plan (``_PlanTrack``): positions by id, the steps changed
    # since the next checkpoint last took them, where the first open step may be, and the
    # open steps that wait on parts, so that a cycle's plan work follows what it changed.
    _track: _PlanTrack | None = field(default=None, init=False, repr=False, compare=False)

    # --- reading -------------------------------------------------------------------------
    def part(self, ref: str) -> Part | None:
        # (several times a cycle: ``split_ref``'s test and the look-ups written out, no call)
        artifact, sep, name = ref.partition("/")
        if not sep or not artifact or not name:
            split_ref(ref)  # raises, naming the reference
        arts = self.artifacts
        if artifact in arts:
            parts = arts[artifact].parts
            if name in parts:
                return parts[name]
        return None

    def iter_parts(self) -> Iterator[tuple[str, Part]]:
        for art in self.artifacts.values():
            for p in art.parts.values():
                yield part_ref(art.name, p.name), p

    def values(self) -> dict[str, dict[str, Any]]:
        """Current values of every artifact: ``{artifact: {part: value}}``."""
        out: dict[str, dict[str, Any]] = {}
        for name, art in self.artifacts.items():  # (a loop: the context asks every cycle)
            out[name] = art.values()
        return out

    def accepted_values(self) -> dict[str, dict[str, Any]]:
        """The accepted value of every part that has one: ``{artifact: {part: value}}``."""
        out: dict[str, dict[str, Any]] = {}
        for name, art in self.artifacts.items():  # (a loop: the context asks every cycle)
            acc = art.accepted_values()
            if acc:
                out[name] = acc
        return out

    def best_values(self) -> dict[str, dict[str, Any]]:
        """The best candidate so far: each part at the version it had in the best cycle."""
        out: dict[str, dict[str, Any]] = {}
        for ref, p in self.iter_parts():
            n = self.best_parts.get(ref, p.count)
            artifact, name = split_ref(ref)
            out.setdefault(artifact, {})[name] = p.version(min(n, p.count)).value
        return out

    @property
    def completed_steps(self) -> list[str]:
        return [s.id for s in self.plan if s.status == "done"]

    def next_step(self) -> PlanStep | None:
        """The first step not yet done whose dependencies are all done."""
        if not self.plan:
            return None  # most loops keep no plan: no bookkeeping to look at (twice a cycle)
        t = self._plan()
        plan, ids = self.plan, t.ids
        while t.lo < len(plan) and plan[t.lo].status == "done":
            t.lo += 1  # the steps before are all done: no need to look at them again
        for i in range(t.lo, len(plan)):
            s = plan[i]
            if s.status in ("pending", "in_progress") and all(
                (j := ids.get(d)) is not None and plan[j].status == "done" for d in s.depends_on
            ):
                return s
        return None

    def step(self, step_id: str) -> PlanStep | None:
        """The plan's step ``step_id``."""
        i = self._plan().ids.get(step_id)
        return None if i is None else self.plan[i]

    # --- writing (engine only) -----------------------------------------------------------
    def set_part(self, artifact: str, part: str, value: Any, cycle: int) -> bool:
        """Write a new version of a part; returns False when the value did not change."""
        art = self.artifacts.setdefault(artifact, Artifact(artifact))
        p = art.parts.get(part)
        if p is None:
            p = art.parts[part] = Part(part, [Version(1, value, cycle)])
            p._owner = self._token
        elif p._known[p.count].value == value:  # (``p.value``)
            return False
        else:
            p = self._own(art, part, p)
            p.add(value, cycle)
        art._value_changed(part, p)
        ref = f"{artifact}/{part}"  # (``part_ref``)
        self._dirty.add(ref)
        self._opened(ref)
        hint = self._best_hint  # (noted as ``_opened`` notes ``_open``)
        if hint is not None:
            hint.append(ref)
            if len(hint) > 2 * self._best_size + 64:
                self._best_hint = sorted(set(hint))  # deduplicated
                self._best_size = len(self._best_hint)
        return True

    def mark_best(self) -> None:
        """This is the best state so far: ``best_parts`` becomes every part's version count,
        looking only at the parts changed since it was last set (a new dict: ``best_parts``
        is replaced, never changed in place, so forks share it)."""
        old, hint = self.best_parts, self._best_hint
        if hint is None:
            new = {ref: p.count for ref, p in self.iter_parts()}
            self._best_diff = None
        else:
            new = dict(old)
            changed = []
            for ref in sorted(set(hint)):
                p = self.part(ref)
                if p is not None and new.get(ref) != p.count:
                    new[ref] = p.count
                    changed.append(ref)
            self._best_diff = (old, new, changed)
        self.best_parts = new
        self._best_hint, self._best_size = [], 0

    def best_diff(self, before: Mapping[str, int]) -> list[str] | None:
        """The parts whose ``best_parts`` entries differ from ``before`` (an earlier
        ``best_parts``), where the last ``mark_best`` made the current one from it (else
        None: not known)."""
        d = self._best_diff
        if d is None or d[0] is not before or d[1] is not self.best_parts:
            return None
        return d[2]

    def set_status(self, ref: str, status: PartStatus) -> None:
        """Mark the current version of part ``ref`` (the engine's verdict on it)."""
        if status not in _PART_STATUSES:
            raise ConfigError(f"unknown part status {status!r} (one of {_PART_STATUSES})")
        artifact, name = split_ref(ref)
        art = self.artifacts.get(artifact)
        p = None if art is None else art.parts.get(name)
        if art is None or p is None:
            raise LookupError(f"no part {ref!r}")
        if p._known[p.count].status == status:  # (``p.status``)
            return
        p = self._own(art, name, p)
        p._known[p.count].status = status
        art._status_changed(name, p)
        self._dirty.add(ref)
        if status != "accepted":
            self._opened(ref)

    def _own(self, art: Artifact, name: str, p: Part) -> Part:
        """``p`` (part ``name`` of ``art``), safe to change: copied first if shared."""
        if p._owner is not self._token:
            p = p.fork()
            p._owner = self._token
            art.parts[name] = p
        return p

    def open_refs(self) -> set[str]:
        """The parts whose current version is not accepted."""
        hint = self._open
        if hint is None:
            out = {ref for ref, p in self.iter_parts() if p.status != "accepted"}
        else:
            out = set()
            arts = self.artifacts
            for ref in hint:  # (``is_open`` written out: no call a part, a loop a cycle)
                artifact, _, name = ref.partition("/")
                if artifact in arts:
                    parts = arts[artifact].parts
                    if name in parts:
                        p = parts[name]
                        if p._known[p.count].status != "accepted":
                            out.add(ref)
        self._open, self._open_size = sorted(out), len(out)
        return out

    def is_open(self, ref: str) -> bool:
        """Whether part ``ref`` exists and its current version is not accepted."""
        artifact, _, name = ref.partition("/")
        arts = self.artifacts
        if artifact not in arts:
            return False
        parts = arts[artifact].parts
        if name not in parts:
            return False
        p = parts[name]
        return p._known[p.count].status != "accepted"  # (``p.status``, without the call)

    def _opened(self, ref: str) -> None:
        # ``ref`` noted in a shared log of parts (``_open``; ``set_part`` does the same for
        # ``_best_hint``), compacted (a new list for this state: other forks keep theirs) when
        # it has doubled since it last was, which keeps the cost of a log a constant per change.
        # Written out where it is used: a function of its own cost a call, three a cycle.
        log = self._open
        if log is not None:
            log.append(ref)
            if len(log) > 2 * self._open_size + 64:
                self.open_refs()  # compacts it

    def take_changes(self) -> set[str]:
        """The parts changed (``set_part``, ``set_status``) since the last call."""
        out, self._dirty = self._dirty, set()
        return out

    def reindex(self) -> None:
        """Forget what is derived from the parts (recomputed when next needed): after parts
        were changed other than through ``set_part`` / ``set_status``."""
        self._open = self._best_hint = self._best_diff = None
        for art in self.artifacts.values():
            art._values = art._accepted = art._source = None

    def refresh_plan(self) -> None:
        """Mark steps whose parts are all accepted as done (looking only at open steps that
        list parts)."""
        if not self.plan:
            return  # nothing to mark (the bookkeeping is made good when next asked)
        t = self._plan()
        if t.watch is None:
            t.watch = [i for i, s in enumerate(self.plan) if s.status != "done" and s.parts]
        keep = []
        for i in t.watch:
            s = self.plan[i]
            if s.status == "done":
                continue
            parts = [self.part(r) for r in s.parts]
            if all(p is not None and p.status == "accepted" for p in parts):
                self._replace_step(i, "done")
            else:
                keep.append(i)
        t.watch = keep

    def add_step(self, step: PlanStep) -> bool:
        """Append ``step`` to the plan; False (nothing added) when a step has its id."""
        t = self._plan()
        if step.id in t.ids:
            return False
        self.plan.append(step)
        self._plan()  # indexes it
        return True

    def set_step_status(self, step_id: str, status: StepStatus) -> bool:
        """Set step ``step_id``'s status (a new step replaces it); False when there is no
        such step. ``ConfigError`` for an unknown status."""
        if status not in STEP_STATUSES:
            raise ConfigError(f"unknown step status {status!r}", field=f"plan.{step_id}")
        i = self._plan().ids.get(step_id)
        if i is None:
            return False
        if self.plan[i].status != status:
            self._replace_step(i, status)
        return True

    def take_plan_changes(self) -> list[int] | None:
        """The positions of the steps changed or added since the last call, in order (None:
        not known — the plan was replaced or built anew; every step may have changed)."""
        t = self._plan()
        out = None if t.dirty is None else sorted(t.dirty.union(range(t.taken, len(self.plan))))
        t.dirty, t.taken = set(), len(self.plan)
        return out

    def _replace_step(self, i: int, status: StepStatus) -> None:
        t = self._plan()
        old = self.plan[i]
        self.plan[i] = dataclasses.replace(old, status=status)
        if t.dirty is not None:
            t.dirty.add(i)
        if status != "done":
            t.lo = min(t.lo, i)
            if t.watch is not None and old.parts and i not in t.watch:
                t.watch = sorted([*t.watch, i])

    def _plan(self) -> _PlanTrack:
        """The plan's bookkeeping, made good for ``self.plan`` as it is: built anew when the
        list was replaced, extended over steps appended to it."""
        t = self._track
        if t is None or t.seen is not self.plan:
            t = self._track = _PlanTrack(self.plan)
        plan = self.plan
        if t.n != len(plan):
            if t.n > len(plan):  # shortened in place: start again
                t = self._track = _PlanTrack(plan)
            for i in range(t.n, len(plan)):
                s = plan[i]
                t.ids.setdefault(s.id, i)
                if t.watch is not None and s.status != "done" and s.parts:
                    t.watch.append(i)
            t.n = len(plan)
        return t

    def attach(self, loader: VersionLoader) -> None:
        """Let parts that cannot yet read their older versions read them through ``loader``."""
        for ref, p in self.iter_parts():
            if p.loader is None:
                p.loader = _bind(loader, ref)

    def trim(self, refs: Iterable[str] | None = None, loader: VersionLoader | None = None) -> None:
        """Hold in memory only the versions the engine needs (current, accepted, best) of
        parts that can read the others from the store (invariant 8: bounded memory): of the
        parts ``refs`` (those a commit changed), else of all. ``loader``: the store's, now
        that it holds these parts' versions: a part made since the state was loaded (an
        actor's edit of a part the task did not have) reads its older versions through it,
        and so is trimmed too (without one it held every version it ever had)."""
        if refs is not None:
            for ref in refs:  # (a loop: a commit trims the parts it changed, every cycle)
                self._trim_part(ref, self.part(ref), loader)
            return
        for ref, p in self.iter_parts():
            self._trim_part(ref, p, loader)

    def _trim_part(self, ref: str, p: Part | None, loader: VersionLoader | None) -> None:
        if p is not None:
            if p.loader is None and loader is not None:
                p.loader = _bind(loader, ref)
            b = self.best_parts.get(ref)
            p.trim(() if b is None else (b,))

    # --- copying -------------------------------------------------------------------------
    def fork(self) -> TaskState:
        """An independent copy to build a cycle's candidate on: every container is new; the
        parts are shared until one of the copies changes one (``set_part``, ``set_status``
        copy it first), and part values, earlier versions and the task are immutable data
        the engine never changes in place. Costs the same whatever the number of parts'
        versions, and a C-level dict copy per artifact for the parts."""
        self._token = object()  # from here on this state shares its parts too
        artifacts: dict[str, Artifact] = {}
        for name, a in self.artifacts.items():  # (a loop: no comprehension a cycle)
            artifacts[name] = a._forked()
        out = self._like(
            task=self.task,
            artifacts=artifacts,
            plan=list(self.plan),  # steps are immutable: shared
            findings=list(self.findings),
            notes=list(self.notes),  # entries are never changed in place: shared
            # Replaced, never changed in place (``mark_best``): shared, like the hints below.
            best_parts=self.best_parts,
            # Shared, append-only: a copy per cycle would cost O(cycles) (invariant 8).
            rejected=self.rejected,
            pending=None if self.pending is None else dict(self.pending),
            history=list(self.history),
        )
        out._dirty = set(self._dirty)
        out._open, out._open_size = self._open, self._open_size
        out._best_hint, out._best_size = self._best_hint, self._best_size
        out._best_diff = self._best_diff
        out._track = self._plan().forked(out.plan)
        return out

    def detached(self, loader: VersionLoader | None = None, *, light: bool = False) -> TaskState:
        """A copy that shares nothing its user could change with this one: what a held-out
        verifier judges, so that nothing it does reaches the actor's next context (invariant
        3). Each part is copied the first time the copy's user reads it (its versions, and
        containers in their values by a JSON round trip; strings and numbers are immutable and
        shared), so the copy costs what the verifier reads, not the number of parts; the
        task's entries likewise. Findings, notes and the plan are copied at once. Older
        versions are read through ``loader`` (fresh objects from the store); rejected digests
        are answered (``in``) by this state's, never copied (they grow with the run).

        Not a snapshot: a part not yet read is read from this state when first read, so the
        copy is valid while this state does not change — for the checks of one cycle, which
        run before the candidate is committed or changed. Never keep one past a commit."""
        if light:
            # What visible checks judge, every cycle: the parts and the task copied as read
            # (what a check is most likely to change, and what is committed); findings, notes
            # and history only as lists, their entries shared (documented: not to be changed)
            # — a copy of every entry cost about a fifth of a trivial cycle.
            findings, notes, history = list(self.findings), list(self.notes), list(self.history)
            pending = None if self.pending is None else dict(self.pending)
        else:  # one round trip through orjson (C both ways)
            raw, notes, pending, history = _json.round_trip(
                [[f.to_dict() for f in self.findings], self.notes, self.pending, self.history]
            )
            findings = [Finding.from_dict(f) for f in raw]
        artifacts: dict[str, Artifact] = {}
        for name, a in self.artifacts.items():  # (a loop: no comprehension a cycle)
            artifacts[name] = _detached_artifact(a, loader)
        return self._like(
            task=_CopyOnRead(self.task, _json_copy),
            artifacts=artifacts,
            plan=list(self.plan),  # immutable steps
            findings=findings,
            notes=notes,
            best_parts=dict(self.best_parts),
            rejected=Digests((), self.rejected.__contains__),  # (lookup: by position)
            pending=pending,
            history=history,
        )

    def _like(
        self,
        *,
        task: dict[str, Any],
        artifacts: dict[str, Artifact],
        plan: list[PlanStep],
        findings: list[Finding],
        notes: list[dict[str, Any]],
        best_parts: dict[str, int],
        rejected: list[str],
        pending: dict[str, Any] | None,
        history: list[dict[str, Any]],
    ) -> TaskState:
        """A state with this one's scalar fields (small lists copied) and the containers given,
        its bookkeeping new. Built by plain slot stores: the generated ``__init__`` tests each
        of its dozen defaulted fields against its factory's marker, and this runs twice a cycle
        (the candidate, a check's copy). Every slot is set here (``tests/unit/test_state.py``
        compares it with the generated ``__init__``'s)."""
        out: TaskState = object.__new__(TaskState)
        out.goal = self.goal
        out.task_key = self.task_key
        out.project = self.project
        out.task = task
        out.artifacts = artifacts
        out.plan = plan
        out.findings = findings
        out.notes = notes
        out.next_action = self.next_action
        out.retries = dict(self.retries)
        out.cycle = self.cycle
        out.spent = self.spent
        out.held_out_spent = self.held_out_spent
        out.score = self.score
        out.best_score = self.best_score
        out.best_cycle = self.best_cycle
        out.best_parts = best_parts
        out.progress_score = self.progress_score
        out.stall = self.stall
        out.rejected = rejected
        out.approved = list(self.approved)
        out.passed_checks = list(self.passed_checks)
        out.pending = pending
        out.history = history
        out._token = object()
        out._dirty = set()
        out._open = None
        out._open_size = 0
        out._best_hint = None
        out._best_size = 0
        out._best_diff = None
        out._track = None
        return out

    # --- serialisation -------------------------------------------------------------------
    def to_dict(self, *, held: bool = False) -> dict[str, Any]:
        """Everything, every version of every part included (read from the store where not
        held in memory); ``held=True``: only the versions held, with each part's ``count``
        (what ``from_dict`` reads back with a loader, at a cost that does not grow)."""
        return {
            "goal": self.goal,
            "task_key": self.task_key,
            "project": self.project,
            "task": self.task,
            "artifacts": [a.to_dict(held=held) for a in self.artifacts.values()],
            "plan": [s.to_dict() for s in self.plan],
            "findings": [f.to_dict() for f in self.findings],
            "notes": self.notes,
            "next_action": self.next_action,
            "retries": self.retries,
            "cycle": self.cycle,
            "spent": self.spent.to_dict(),
            "held_out_spent": _priced(self.held_out_spent),
            "score": self.score,
            "best_score": self.best_score,
            "best_cycle": self.best_cycle,
            "best_parts": self.best_parts,
            "progress_score": self.progress_score,
            "stall": self.stall,
            "rejected": self.rejected,
            "approved": self.approved,
            "passed_checks": self.passed_checks,
            "pending": self.pending,
            "history": self.history,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], loader: VersionLoader | None = None) -> TaskState:
        """Read ``to_dict()``'s form, or a stored head resolved by the store (whose parts hold
        only some versions and a ``count``; ``loader`` reads the others on demand)."""
        arts = [Artifact.from_dict(a, loader) for a in d.get("artifacts", ())]
        return cls(
            goal=str(d.get("goal", "")),
            task_key=str(d.get("task_key", "")),
            project=str(d.get("project", "")),
            task=dict(d.get("task") or {}),
            artifacts={a.name: a for a in arts},
            plan=[PlanStep.from_dict(s) for s in d.get("plan", ())],
            findings=[Finding.from_dict(f) for f in d.get("findings", ())],
            notes=list(d.get("notes", ())),
            next_action=str(d.get("next_action", "")),
            retries=dict(d.get("retries") or {}),
            cycle=int(d.get("cycle", 0)),
            spent=Usage.from_dict(d.get("spent")),
            held_out_spent=_held_out_spent(d.get("held_out_spent")),
            score=d.get("score"),
            best_score=d.get("best_score"),
            best_cycle=int(d.get("best_cycle", 0)),
            best_parts=dict(d.get("best_parts") or {}),
            # a state stored before it existed: its best score was moved by material rises only
            progress_score=d["progress_score"] if "progress_score" in d else d.get("best_score"),
            stall=int(d.get("stall", 0)),
            rejected=Digests(d.get("rejected", ())),
            approved=list(d.get("approved", ())),
            passed_checks=list(d.get("passed_checks", ())),
            pending=d.get("pending"),
            history=list(d.get("history", ())),
        )

    @classmethod
    def from_task(
        cls, task: Mapping[str, Any], *, task_key: str = "", project: str = ""
    ) -> TaskState:
        """The default initial state: ``goal``, ``artifacts`` and ``plan`` read from the task.

        ``artifacts`` is ``{artifact: {part: value}}``; ``plan`` is a list of step mappings.
        """
        state = cls(
            goal=str(task.get("goal", "")),
            task_key=task_key,
            project=project or str(task.get("project", "")),
            task=dict(task),
        )
        arts = task.get("artifacts") or {}
        if not isinstance(arts, Mapping):
            raise ConfigError(
                "must be a table of {artifact: {part: value}}", field="task.artifacts"
            )
        for aname, parts in arts.items():
            if not isinstance(parts, Mapping):
                raise ConfigError(
                    "must be a table of {part: value}", field=f"task.artifacts.{aname}"
                )
            for pname, value in parts.items():
                state.set_part(str(aname), str(pname), value, 0)
        for i, step in enumerate(task.get("plan") or ()):
            if not isinstance(step, Mapping) or "id" not in step:
                raise ConfigError("each step needs an 'id'", field=f"task.plan[{i}]")
            state.plan.append(PlanStep.from_dict(step))
        return state


def person_edit(s: TaskState, ref: str) -> dict[str, Any] | None:
    """The ``edit`` note (``Runtime.edit``) of the person who wrote part ``ref``'s current
    version, if a person did."""
    part = s.part(ref)
    if part is None:
        return None
    for note in reversed(s.notes):
        if note.get("kind") == "edit" and note.get("part") == ref:
            return dict(note) if note.get("version") == part.count else None
    return None


_V = TypeVar("_V")


@dataclass(slots=True)
class _PlanTrack:
    """What ``TaskState`` derives from its plan, for the list ``seen`` (a state whose plan
    list is replaced starts a new one). Steps are only appended or replaced, never removed,
    so positions stay valid."""

    seen: list[PlanStep]
    n: int = 0  # the steps indexed (``seen[:n]``)
    ids: dict[str, int] = field(default_factory=dict)  # step id -> position
    # Positions changed since ``take_plan_changes`` last ran (None: unknown, all), and how
    # many steps there were then (those appended since are changes too).
    dirty: set[int] | None = None
    taken: int = 0
    lo: int = 0  # no step before this position is open (``next_step`` starts here)
    watch: list[int] | None = None  # open steps that list parts (``refresh_plan``; None: all)

    def forked(self, plan: list[PlanStep]) -> _PlanTrack:
        """This bookkeeping for ``plan``, a copy of ``seen`` (C-level copies of the index)."""
        return _PlanTrack(
            plan,
            self.n,
            dict(self.ids),
            None if self.dirty is None else set(self.dirty),
            self.taken,
            self.lo,
            None if self.watch is None else list(self.watch),
        )


class _CopyOnRead(dict[str, _V]):
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
        if self._copy is _json_copy and stale:
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


def _detached_artifact(a: Artifact, loader: VersionLoader | None) -> Artifact:
    out = Artifact(a.name, _CopyOnRead(a.parts, _part_copier(a.name, loader)))
    out._source = a
    return out


def _json_copy(_key: str, value: Any) -> Any:
    return _json.round_trip(value) if isinstance(value, dict | list) else value


def copied_on_read(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (a part's values, the task) as user code is handed them: each list or dict
    copied the first time it is read, so that changing what was read in place changes
    nothing of the run's state, and the copy costs what is read."""
    return _CopyOnRead(values, _json_copy)


def _part_copier(artifact: str, loader: VersionLoader | None) -> Callable[[str, Part], Part]:
    def copy(name: str, p: Part) -> Part:
        """A copy of ``p`` that shares no changeable object with it."""
        bound = p.loader if loader is None else _bind(loader, part_ref(artifact, name))
        q = Part(p.name, count=p.count, loader=bound)
        for n, v in p.known.items():
            q.known[n] = Version(v.n, _json_copy(name, v.value), v.cycle, v.status)
        return q

    return copy


def _priced(u: Usage) -> list[Any] | None:
    """A held-out spend as stored: ``[cost_usd, tokens]``, or None for none (most runs)."""
    return [u.cost_usd, u.tokens] if u.cost_usd or u.tokens else None


def _held_out_spent(stored: Any) -> Usage:
    if not stored:
        return Usage()
    cost, tokens = stored
    return Usage._stored(cost, tokens, 0.0)


def _bind(loader: VersionLoader, ref: str) -> Callable[[], Iterable[Version]]:
    return lambda: loader(ref)


def match_any(ref: str, patterns: Iterable[str]) -> bool:
    """Whether a part reference matches any glob pattern (``invoice/*``, ``*/payment``)."""
    return any(fnmatch.fnmatchcase(ref, p) for p in patterns)
