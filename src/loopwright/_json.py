"""JSON for the stores: orjson's speed with the standard library's exactness.

Every checkpoint serialises the whole run state, so encoding is a large share of a cycle's CPU
(≈ 10× less with orjson). orjson differs from ``json`` in three ways that matter here, and each
is handled so that what is stored reads back the same:

* integers beyond 64 bits: orjson refuses to encode them (we fall back to ``json``) and decodes
  them as floats (so text holding a run of 19+ digits is decoded by ``json``: exact);
* non-str keys and other types orjson refuses: fall back to ``json`` (``default=str`` in both);
* ``NaN``/``Infinity``: not JSON; orjson writes ``null`` (as PostgreSQL's ``jsonb`` requires),
  and legacy text holding them is decoded by ``json``.

Dataclasses and datetimes are passed to ``default=str`` as ``json`` does, not encoded natively.
"""

from __future__ import annotations

import json
import re
from typing import Any

try:  # a core dependency; the fallback keeps a --no-deps install working, only slower
    import orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    orjson = None  # type: ignore[assignment]

__all__ = ["dumps", "loads"]

_BIG_INT = re.compile(r"\d{19}")
_BIG_INT_B = re.compile(rb"\d{19}")
_OPTS = 0 if orjson is None else orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _std_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def dumps(value: Any) -> str:
    """Compact JSON text (non-JSON objects as ``str(obj)``)."""
    if orjson is None:
        return _std_dumps(value)
    try:
        return orjson.dumps(value, default=str, option=_OPTS).decode()
    except TypeError:  # a big int, a non-str key...: the standard library handles them
        return _std_dumps(value)


def loads(text: str | bytes) -> Any:
    """Parse JSON text; integers of any size come back exact."""
    big = _BIG_INT.search(text) if isinstance(text, str) else _BIG_INT_B.search(text)
    if orjson is None or big:
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN/Infinity written by older versions
        return json.loads(text)
