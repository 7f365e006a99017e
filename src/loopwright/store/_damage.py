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

import sys

from .._errors import StoreCorruptError

__all__ = ["damage_error", "driver_damage", "value_damage"]

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
