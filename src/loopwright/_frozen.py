"""``quick_init``: a frozen slots dataclass built with plain slot stores.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__``, a call
through a slot wrapper (about three times a plain attribute store); a trivial cycle builds a
dozen such objects (its events, its commit request, the actor's context, the verdicts and
their findings) with about ninety fields between them. ``quick_init`` gives the class an
``__init__`` of the same signature that stores the fields while the instance is of a
*twin*: a plain class with the same slots (the same memory layout), whose attribute stores
are plain ones; then the instance takes its own class back and runs ``__post_init__`` as the
generated one does. What the class is afterwards does not change: frozen (assigning raises
``FrozenInstanceError``), the same equality, hash, repr, ``dataclasses.replace``, pickling
and signature. An instance of a subclass is built by the generated ``__init__``, as before.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

__all__ = ["quick_init", "twin_of"]

T = TypeVar("T")

# Each class ``quick_init`` changed, with its twin.
_TWINS: dict[type, type] = {}

# Sets an object's class (the setter of ``object.__class__``, without ``object.__setattr__``'s
# look-up of the name).
_SET_CLASS = object.__dict__["__class__"].__set__


def twin_of(cls: type) -> Any:
    """The twin of a class ``quick_init`` changed (``None`` for any other): an instance built
    as one, its fields set as plain attributes, becomes a ``cls`` by ``obj.__class__ = cls``
    (what the engine's own sums and copies do, with no checks to run)."""
    return _TWINS.get(cls)


class _Factory:
    """A field's default when it has a ``default_factory`` (the generated ``__init__``'s
    own marker, which its signature shows as ``<factory>``)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def quick_init(cls: type[T]) -> type[T]:
    """``cls`` (a ``@dataclass(frozen=True, slots=True)`` class) with the ``__init__`` the
    module describes; a class this cannot do exactly (a field left out of ``__init__``, an
    ``InitVar``, a layout a twin cannot share) is returned as it is."""
    params = _quick_params(cls)
    if params is None:
        return cls
    by_position, keyword_only = params
    names = by_position + keyword_only
    twin = type(f"_{cls.__name__}Init", (), {"__slots__": tuple(cls.__dict__["__slots__"])})
    try:  # the same layout: an instance may change between the two classes
        probe: Any = object.__new__(twin)
        probe.__class__ = cls
    except TypeError:  # pragma: no cover - every class it is applied to has slots only
        return cls
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    env: dict[str, Any] = {
        "__cls": cls,
        "__twin": twin,
        "__set_class": _SET_CLASS,
        "__generated": cls.__init__,
        "__FACTORY": _FACTORY,
    }
    head: list[str] = []
    stores: list[str] = []
    star = False
    for name in names:
        f = fields[name]
        if name in keyword_only and not star:
            head.append("*")
            star = True
        if f.default_factory is not dataclasses.MISSING:
            env[f"__factory_{f.name}"] = f.default_factory
            head.append(f"{f.name}=__FACTORY")
            stores.append(
                f"self.{f.name} = __factory_{f.name}() if {f.name} is __FACTORY else {f.name}"
            )
            continue
        if f.default is not dataclasses.MISSING:
            env[f"__default_{f.name}"] = f.default
            head.append(f"{f.name}=__default_{f.name}")
        else:
            head.append(f.name)
        stores.append(f"self.{f.name} = {f.name}")
    by_name = ", ".join(
        f"{n}=(__factory_{n}() if {n} is __FACTORY else {n})"
        if f"__factory_{n}" in env
        else f"{n}={n}"
        for n in names
    )
    post = ["self.__post_init__()"] if hasattr(cls, "__post_init__") else []
    body = [
        "if type(self) is not __cls:",  # a subclass: its own layout
        f"    return __generated(self, {by_name})",
        "__set_class(self, __twin)",
        *stores,
        "self.__class__ = __cls",
        *post,
    ]
    source = f"def __init__(self, {', '.join(head)}):\n" + "".join(f"    {b}\n" for b in body)
    exec(source, env)
    init = env["__init__"]
    generated = cls.__init__
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(getattr(generated, "__annotations__", {}))
    init.__doc__ = generated.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 - (mypy: no assignment to a method)
    _TWINS[cls] = twin
    return cls


def _quick_params(cls: type) -> tuple[list[str], list[str]] | None:
    """The generated ``__init__``'s parameters, by position and keyword-only, when
    ``quick_init`` can write the same ones: every parameter a field, every field one (read
    from its code: ``inspect.signature`` would cost more than the rest at import)."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        return None
    code = getattr(cls.__init__, "__code__", None)
    if code is None or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    n, k = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    by_position, keyword_only = list(names[1:n]), list(names[n : n + k])
    fields = dataclasses.fields(cls)
    if sorted(by_position + keyword_only) != sorted(f.name for f in fields) or not all(
        f.init for f in fields
    ):
        return None
    return by_position, keyword_only
