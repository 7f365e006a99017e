"""``quick_init`` (``loopwright._frozen``): a frozen slots dataclass built with plain slot
stores is the same class as the one ``dataclass`` generates — signature, defaults, frozen
fields, equality, hash, repr, ``replace``, pickling, ``__post_init__``, subclasses."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright import Edit, Finding, Proposal, Usage, Verdict
from loopwright._frozen import quick_init, twin_of
from loopwright._proposal import Context, Remaining
from loopwright._shapes import stored
from loopwright.store._base import CommitRequest, NewEvent


def _post(self: Any) -> None:
    if self.a < 0:
        raise ValueError("a must be ≥ 0")
    if type(self.d) is not tuple:
        object.__setattr__(self, "d", tuple(self.d))


@quick_init
@dataclass(frozen=True, slots=True)
class QUICK:
    a: int
    b: str = "b"
    c: dict[str, Any] = field(default_factory=dict)
    d: tuple[int, ...] = field(default=(), kw_only=True)
    e: list[int] = field(default_factory=list, kw_only=True)

    def __post_init__(self) -> None:
        _post(self)


@dataclass(frozen=True, slots=True)
class PLAIN:  # the same class as dataclass generates it
    a: int
    b: str = "b"
    c: dict[str, Any] = field(default_factory=dict)
    d: tuple[int, ...] = field(default=(), kw_only=True)
    e: list[int] = field(default_factory=list, kw_only=True)

    def __post_init__(self) -> None:
        _post(self)


_values = st.one_of(st.integers(), st.text(max_size=5), st.none())
_kwargs = st.fixed_dictionaries(
    {"a": st.integers(min_value=0, max_value=10)},
    optional={
        "b": st.text(max_size=5),
        "c": st.dictionaries(st.text(max_size=3), _values, max_size=3),
        "d": st.lists(st.integers(), max_size=3),
        "e": st.lists(st.integers(), max_size=3),
    },
)


def _hash(obj: object) -> object:
    try:
        return hash(obj)
    except TypeError as exc:  # a dict field: unhashable in both
        return str(exc)


def _set_other(obj: object) -> str:
    try:
        obj.other = 1  # type: ignore[attr-defined]
    except Exception as exc:  # (3.11: a TypeError from the generated __setattr__'s super())
        return type(exc).__name__
    return "set"


@given(_kwargs)
def test_a_quick_instance_is_the_generated_one(kw: dict[str, Any]) -> None:
    q, p = QUICK(**kw), PLAIN(**kw)
    assert type(q) is QUICK
    assert dataclasses.asdict(q) == dataclasses.asdict(p)
    assert repr(q).replace("QUICK", "") == repr(p).replace("PLAIN", "")
    assert q == QUICK(**copy.deepcopy(kw)) and _hash(q) == _hash(p)
    for name in ("a", "b", "c", "d", "e"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(q, name, 1)
    assert _set_other(q) == _set_other(p)  # what assigning a name that is no field raises
    assert pickle.loads(pickle.dumps(q)) == q
    assert copy.deepcopy(q) == q and copy.copy(q) == q
    assert dataclasses.replace(q, a=kw["a"] + 1) == QUICK(**{**kw, "a": kw["a"] + 1})
    assert dataclasses.replace(q, a=kw["a"] + 1).a == kw["a"] + 1


def test_the_signature_defaults_and_errors_are_the_generated_ones() -> None:
    sq, sp = inspect.signature(QUICK), inspect.signature(PLAIN)
    assert [(p.name, p.kind, p.annotation) for p in sq.parameters.values()] == [
        (p.name, p.kind, p.annotation) for p in sp.parameters.values()
    ]
    assert str(sq) == str(sp)  # a factory's default reads <factory> in both
    assert QUICK(1).c == {} and QUICK(1).c is not QUICK(1).c  # a fresh one each time
    assert QUICK(1, d=[1, 2]).d == (1, 2)  # __post_init__ ran on the built instance
    with pytest.raises(ValueError, match="a must be"):
        QUICK(-1)
    with pytest.raises(TypeError):
        QUICK()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        QUICK(1, "b", {}, ())  # type: ignore[misc]  # (d is keyword-only)
    with pytest.raises(TypeError):
        QUICK(1, z=2)  # type: ignore[call-arg]


def test_a_subclass_is_built_by_the_generated_init() -> None:
    class Sub(QUICK):
        pass

    s = Sub(3, "x")
    assert type(s) is Sub and s.a == 3 and s.b == "x" and s.c == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.a = 4


@pytest.mark.parametrize(
    "cls",
    [NewEvent, CommitRequest, Context, Remaining, Usage, Verdict, Finding, Proposal, Edit],
)
def test_the_classes_a_cycle_builds_are_quick(cls: type) -> None:
    """Each frozen class the engine or user code builds every cycle takes ``quick_init``
    (issue 14, engine CPU: their generated ``__init__`` was about a tenth of a bare cycle)."""
    assert twin_of(cls) is not None
    assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"


def test_sums_and_stored_values_are_their_class_and_frozen() -> None:
    u = Usage(0.5, 2, 1.0)
    for v in (u + u, u.add_seconds(0.25), Usage._stored(0.5, 2, 0.0)):
        assert type(v) is Usage
        with pytest.raises(dataclasses.FrozenInstanceError):
            v.tokens = 1  # type: ignore[misc]
    assert u + u == Usage(1.0, 4, 2.0) and u.add_seconds(0.25) == Usage(0.5, 2, 1.25)
    f = stored(Finding, "m", "doc", "body", "general", "error", "v", {})
    assert type(f) is Finding and f == Finding("m", "doc", "body", verifier="v")
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.message = "x"  # type: ignore[misc]
