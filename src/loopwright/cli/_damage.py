"""Store damage found after the store was opened, as a ``StoreCorruptError``.

Opening a store checks its schema; a row that no longer decodes, or a table dropped since, is
found only when read, as a driver or JSON error. Raised from the store's code, that is damage
to the store, not a bug: the CLI shows it as one line naming the table (and row), exit 2.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from .._errors import StoreCorruptError
from ..store._damage import driver_damage, value_damage

__all__ = ["store_damage"]

_STORE_CODE = f"{os.sep}loopwright{os.sep}store{os.sep}"
# The store's row readers, by the table their rows come from.
_TABLES = {
    "_run": "runs",
    "_approval": "approvals",
    "_journal": "journal",
    "_memory_dict": "memory",
    "_checkpoint_rows": "checkpoints",
    "_version_rows": "versions",
    "events": "events",
}


def store_damage(exc: BaseException) -> StoreCorruptError | None:
    """The ``StoreCorruptError`` ``exc`` stands for, or None when it is not store damage."""
    frames = [
        (frame.f_code.co_name, frame.f_locals)
        for frame, _ in traceback.walk_tb(exc.__traceback__)
        if _STORE_CODE in frame.f_code.co_filename
    ]
    if not frames:
        return None  # not raised while the store read or wrote: not for this module to judge
    import json

    if isinstance(exc, json.JSONDecodeError):  # orjson's decode error is one too
        table = next((_TABLES[name] for name, _ in reversed(frames) if name in _TABLES), None)
        where = f"table {table}" if table else "a table"
        return value_damage(None, f"{where}{_row(frames, table)}", exc.msg)
    if type(exc) in (ValueError, TypeError) and frames[-1][0] in _TABLES:
        # a row reader found a value of the wrong kind (text where a number belongs)
        table = _TABLES[frames[-1][0]]
        return value_damage(None, f"table {table}{_row(frames, table)}", str(exc))
    if driver_damage(exc):  # (the stores raise these as StoreCorruptError where they can)
        return StoreCorruptError(
            f"store: {exc}; the store is damaged (or was changed by something other than "
            "loopwright): restore it from a backup"
        )
    return None


def _row(frames: list[tuple[str, dict[str, Any]]], table: str | None) -> str:
    """Where the damaged value is (", run R, row K"): the run the row belongs to and the
    row's first column (its id, or its sequence number in the run), as the readers' locals
    tell."""
    key = run = None
    for _, local in reversed(frames):
        row = local.get("row", local.get("r"))
        if key is None and isinstance(row, tuple | list) and row:
            key = row[0]
        if run is None and isinstance(local.get("run_id"), str):
            run = local["run_id"]
    if table == "runs" or run is None:
        return "" if key is None else f", row {key!r}"
    return f", run {run!r}" + ("" if key is None else f", row {key!r}")
