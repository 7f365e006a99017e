"""Whether a new SQLite store may be made where a path names it: only in a folder that exists.

A store path whose folder is missing is almost always a typo (``/srv/lopwright/runs.db``), and
a new store there runs every task again and pays its effects again: the effects journal is per
store. The CLI (``--store``, ``$LOOPWRIGHT_STORE``) and ``Runtime(path)`` refuse it alike. The
default store's folder (``./.loopwright``) is loopwright's own: made when missing.

A PostgreSQL ``?schema=NAME`` its database lacks is the same typo (``?schema=prdo``), refused
alike (``missing_schema_error``): the schema is the store's folder there. The user creates it
(``CREATE SCHEMA``) to start a store in it, as they make a folder; a URL without ``?schema=``
uses the connection's current schema, which exists, as the default store's folder is made.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from ._errors import ConfigError
from .store import DEFAULT_STORE, missing_pg_schema, sqlite_file

__all__ = ["missing_schema_error", "missing_store_folder"]


def missing_store_folder(url: str) -> tuple[str, Path] | None:
    """``(file, folder)`` when ``url`` (resolved: ``resolve_store_url``) names an SQLite file
    not there yet in a folder that does not exist; None when the store may be opened (it
    exists, its folder does, it is no SQLite file, or it lies in ``./.loopwright``)."""
    path = sqlite_file(url)
    if not path or path == ":memory:" or Path(path).exists():
        return None
    folder = Path(path).parent
    if folder.is_dir() or folder.absolute() == Path(DEFAULT_STORE).parent.absolute():
        return None
    if path.startswith("file:"):
        # An SQLite URI filename, read as one by an SQLite built with URI filenames (as
        # Debian's is): ``file:data/x.db`` is data/x.db, not a folder ``file:data``. Refused
        # only when its own folder is missing too (review49c: a store there, even one that
        # exists, was refused for the folder ``file:data``).
        named = _uri_file(path)
        if named is None or Path(named).exists() or Path(named).parent.is_dir():
            return None
        return path, Path(named).parent
    return path, folder


def _uri_file(uri: str) -> str | None:
    """The file an SQLite URI filename names (``file:data/x.db?mode=rwc``: ``data/x.db``;
    ``file:///srv/x.db``: ``/srv/x.db``); None for an in-memory database."""
    parts = urlsplit(uri)
    name = unquote(parts.path)
    if not name or name == ":memory:" or "memory" in parse_qs(parts.query).get("mode", []):
        return None
    return name


def missing_schema_error(url: str, source: str) -> ConfigError | None:
    """The error for a PostgreSQL ``url`` (resolved) whose ``?schema=`` its database lacks,
    naming the store a typo may have meant; None when it exists, or the URL names none (or
    is no PostgreSQL URL). ``source``: where the URL came from (``--store``, …)."""
    missing = missing_pg_schema(url)
    if missing is None:
        return None
    schema, database, near = missing
    quoted = '"' + schema.replace('"', '""') + '"'
    return ConfigError(
        f"no schema {schema!r} in database {database!r} (from {source}){near}. A new store "
        "there would run every task, and its effects, again: check ?schema= in the URL, or "
        f"create the schema first (CREATE SCHEMA {quoted};) to start a new store in it, or "
        "leave ?schema= out for the connection's current schema",
        field="store",
    )
