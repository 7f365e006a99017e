"""Keywords a release added to a Store method, passed only when used (``with_newer``), so that
a third-party store written against the older method keeps working (docs/storage.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["with_newer"]


def with_newer(fn: Callable[..., Any], kwargs: Mapping[str, Any], newer: Mapping[str, Any]) -> Any:
    """``fn(**kwargs)`` plus the keywords of ``newer`` that are set (not None), or None when a
    store's method has an older signature (a ``TypeError`` naming one of them): the caller
    then applies them itself. Keywords a release added to a Store method are passed so, and
    only when used, so a third-party store written against the older method keeps working."""
    extra = {k: v for k, v in newer.items() if v is not None}
    if extra.keys() & kwargs.keys():
        raise TypeError(f"with_newer: {sorted(extra.keys() & kwargs.keys())} given twice")
    if not extra:
        return fn(**kwargs)
    try:
        return fn(**kwargs, **extra)
    except TypeError as exc:
        if not any(f"'{k}'" in str(exc) for k in extra):
            raise
        return None
