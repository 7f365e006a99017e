"""Damage to a store, told from its database driver's errors: one judgement for the stores
(which raise it as ``StoreCorruptError`` where a read or write fails), the CLI and the dashboard.

A damaged file ("database disk image is malformed", "file is not a database"), a table dropped
or (on PostgreSQL) a column gone, a value that no longer decodes as text. Not a lock, a full
disk or a dropped connection (the store is unavailable, not damaged: SQLite's other
``OperationalError``\\ s, PostgreSQL's ``OperationalError``), and not a constraint the store
relies on (``IntegrityError``: a duplicate is how a store tells a race or a held key). Neither
driver is imported here: an error of one that is not loaded cannot be raised.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from .._errors import StoreCorruptError

__all__ = ["damage_error", "driver_damage", "store_damage", "value_damage"]

# SQLite's OperationalError texts that mean a damaged schema or file (the others are a lock,
# a full disk, an I/O error...). A missing column is not among them: a schema other than the
# code expects is a bug's sign as much.
_MISSING = ("no such table", "could not decode")
_PG_DAMAGE = frozenset({"UndefinedTable", "UndefinedColumn", "DataCorrupted", "IndexCorrupted"})


def driver_damage(exc: BaseException) -> bool:
    """Whether ``exc``, a database driver's error, says the store is damaged."""
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and isinstance(exc, sqlite3.DatabaseError):
        if type(exc) is sqlite3.DatabaseError:
            return True  # SQLITE_CORRUPT, SQLITE_NOTADB: the file itself
        if isinstance(exc, sqlite3.OperationalError):
            return str(exc).lower().startswith(_MISSING)
        return False  # a constraint, a value too big, a closed connection: not the file
    return any(cls.__name__ in _PG_DAMAGE for cls in type(exc).__mro__)


def damage_error(store: str, exc: BaseException) -> StoreCorruptError | None:
    """The ``StoreCorruptError`` to raise, from ``exc``, for the store named ``store`` (a path,
    or a URL without its password), or None when ``exc`` is no damage."""
    if not driver_damage(exc):
        return None
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if not type(exc).__module__.startswith("sqlite3"):
        text = f"{type(exc).__name__}: {text}"  # PostgreSQL's class says more than its text
    return StoreCorruptError(
        f"store: {store} is damaged ({text}): its file or tables were truncated, overwritten "
        "or changed by something other than loopwright; restore it from a backup, or name "
        "another store"
    )


def value_damage(store: str | None, where: str, why: str) -> StoreCorruptError:
    """The ``StoreCorruptError`` for a value in one row that no longer reads as loopwright
    wrote it (text that is no JSON, JSON of another kind: changed in SQL by something else).
    ``where`` names the table and the row ("table checkpoints, run 'R', row 3"); ``store``
    the store (None where the caller does not know it: the CLI's judgement of an error)."""
    name = f"store: {store}:" if store else "store:"
    return StoreCorruptError(
        f"{name} a stored value in {where} is damaged ({why}); the store is corrupt: restore "
        "it from a backup"
    )


# --- damage found after the store was opened (the CLI's and the dashboard's one line; was
# cli/_damage.py, which the dashboard reached into) -----------------------------------------
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
