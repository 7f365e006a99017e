"""Shape checks for the values user code builds (proposals, verdicts, findings, contracts).

A wrong shape is said where it is made, as a ``ConfigError`` naming the field: inside an actor
or verifier that is an exception the engine escalates with its message, where a shape accepted
silently would fail cycles later inside the engine, blamed on loopwright. Each check takes the
common shape in a type test or two: proposals and verdicts are built every cycle.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, cast

from ._errors import ConfigError
from ._frozen import twin_of

# The rounding of a float sum or weighted mean, allowed for where a number is compared with a
# limit (relative to the limit, at least this much): 0.1 + 0.1 + 0.1 > 0.3, (0.1 + 0.2) / 0.3 > 1.
# ``_decide``'s budgets and min_score, and a verdict's score range, share it.
FLOAT_SLACK = 1e-9

__all__ = ["optional", "stored", "takes", "text", "tuple_of"]

T = TypeVar("T")


def stored(cls: type[T], *values: Any) -> T:
    """An instance of the frozen dataclass ``cls`` from its field values as recorded (a store,
    a trace), in field order: not checked again, so what an older release accepted (a finding
    of severity "info", an effect key that is a number) still loads."""
    twin = twin_of(cls)
    if twin is None:
        obj = object.__new__(cls)
        for name, value in zip(_names(cls), values, strict=True):
            object.__setattr__(obj, name, value)
        return obj
    # built as its twin (``_frozen.quick_init``): plain attribute stores, then its own class
    built = object.__new__(twin)
    for name, value in zip(_names(cls), values, strict=True):
        setattr(built, name, value)
    built.__class__ = cls
    return cast(T, built)


_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def tuple_of(value: Any, kind: type, field: str) -> tuple[Any, ...]:
    """``value`` as a tuple of ``kind`` items (a list or other iterable is fine)."""
    if type(value) is tuple and all(isinstance(x, kind) for x in value):
        return value
    name = kind.__name__
    if isinstance(value, kind):
        raise ConfigError(
            f"takes a tuple of {name}; wrap the single one: ({name}(...),)", field=field
        )
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigError(
            f"must be a tuple of {name}, got {type(value).__name__}: {_short(value)}",
            field=field,
        )
    items = tuple(value)
    for x in items:
        if not isinstance(x, kind):
            raise ConfigError(
                f"must hold {name} items, got {type(x).__name__}: {_short(x)}", field=field
            )
    return items


def optional(value: Any, kind: type | tuple[type, ...], field: str) -> None:
    """``value`` is ``None`` or a ``kind``."""
    if value is not None and not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ConfigError(
            f"must be {names} or None, got {type(value).__name__}: {_short(value)}", field=field
        )


def text(value: Any, field: str, *, empty: bool = True) -> None:
    """``value`` is a string (non-empty unless ``empty``)."""
    if not isinstance(value, str):
        raise ConfigError(
            f"must be a string, got {type(value).__name__}: {_short(value)}", field=field
        )
    if not empty and not value:
        raise ConfigError("must not be empty", field=field)


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def takes(fn: Any, count: int, shape: str, field: str) -> None:
    """Refuse a callable that cannot be called the way the engine calls it, with ``count``
    positional arguments: a verifier written ``def check(state)`` passed ``loopwright check``
    and failed in every run, after the actor's (paid) call, escalating each. A callable whose
    signature cannot be read (some builtins) is let through, to be called as it is."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(count))
    except TypeError as exc:
        if _outer_takes(fn, count):
            return
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        name = name.rsplit("<locals>.", 1)[-1]  # a function made in a function: its own name
        bare = signature.replace(  # its parameters as written, without annotations
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        raise ConfigError(
            f"{name}{bare} must take {shape}, the arguments it is called with ({exc})",
            field=field,
        ) from None


def _outer_takes(fn: Any, count: int) -> bool:
    """Whether a decorated ``fn`` (``functools.wraps``: its signature read is the wrapped
    function's) takes ``count`` positional arguments by its own parameters: a decorator that
    supplies an argument (``wrapper(ctx)`` calling ``fn(ctx, client)``) was refused for the
    wrapped function's shape. A wrapper of only ``*args, **kwargs`` says nothing of its own:
    the wrapped function's shape stands."""
    if getattr(fn, "__wrapped__", None) is None:
        return False
    try:
        own = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return False
    passing = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    if all(p.kind in passing for p in own.parameters.values()):
        return False
    try:
        own.bind(*range(count))
    except TypeError:
        return False
    return True
