"""Stores: where runs, checkpoints, events and approvals live.

``open_store(url)`` picks the implementation by URL: a path or ``sqlite:///path`` for the
embedded SQLite store (default ``./.loopwright/loopwright.db``); ``postgresql://`` or
``postgres://`` for the PostgreSQL store (extra ``loopwright[postgres]``), where
``?schema=NAME`` keeps the tables in their own schema and ``pool_min``/``pool_max`` size the
connection pool; other query parameters go to libpq (``sslmode``, ``connect_timeout``, …).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from .._errors import ConfigError
from .._url_secrets import hide_url_secrets
from ._base import Store
from ._people import AuditRecord, AuthorityRecord, UserRecord, Vote
from ._records import (
    Approval,
    Checkpoint,
    ClosedApproval,
    CommitRequest,
    EffectClaim,
    EffectReuse,
    Event,
    JournalEntry,
    JournalWrite,
    NewApproval,
    NewEvent,
    RunRecord,
    VersionRow,
)

__all__ = [
    "DEFAULT_STORE",
    "Approval",
    "AuditRecord",
    "AuthorityRecord",
    "Checkpoint",
    "ClosedApproval",
    "CommitRequest",
    "EffectClaim",
    "EffectReuse",
    "Event",
    "JournalEntry",
    "JournalWrite",
    "NewApproval",
    "NewEvent",
    "RunRecord",
    "Store",
    "UserRecord",
    "VersionRow",
    "Vote",
    "check_store_exists",
    "existing_store_url",
    "missing_pg_schema",
    "open_store",
    "refuse_undecoded",
    "resolve_store_url",
    "sqlite_file",
    "sqlite_url_path",
]

DEFAULT_STORE = ".loopwright/loopwright.db"


def resolve_store_url(url: str | None = None) -> str:
    """The store to use: the argument, else ``LOOPWRIGHT_STORE``, else the default file. A
    ``LOOPWRIGHT_STORE`` of blanks only (``export LOOPWRIGHT_STORE=" "``) is a ``ConfigError``:
    it named a file " " in the working folder, made a new store invisible in ``ls``
    (outside49; refused here, where ``Runtime``, the CLI and every reader resolve it)."""
    if url:
        _refuse_secret_shaped(url, "store")
        return url
    env = os.environ.get("LOOPWRIGHT_STORE")
    if env and not env.strip():
        raise ConfigError(
            f"is blank ({env!r}); set it to a store URL or path, or unset it for the default store",
            field="$LOOPWRIGHT_STORE",
        )
    if env:
        _refuse_secret_shaped(env, "$LOOPWRIGHT_STORE")
    return env or DEFAULT_STORE


# libpq's connection keywords (``host=… dbname=…``): a store string naming one of them is
# a connection string given where a path was read, not a file name
_LIBPQ_KEY = re.compile(
    r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|sslmode|sslcert|sslkey|"
    r"sslrootcert|connect_timeout|options|application_name|service|target_session_attrs)"
    r"\s*=",
    re.IGNORECASE,
)
_KEY_VALUE = re.compile(r"^\w+=\S*$")


def _refuse_secret_shaped(url: str, field: str) -> None:
    """A ``ConfigError`` (never echoing ``url``) when ``url`` would make a new SQLite store
    whose file name holds a connection's secrets: a libpq key=value connection string
    (``host=db password=… dbname=x``) read as a path, or an ``sqlite://user:password@…``
    URL. A store file that already exists at that name still opens (docs/storage.md)."""
    if "://" not in url:
        tokens = url.split()
        if not (_LIBPQ_KEY.search(url) or (len(tokens) > 1 and all(map(_KEY_VALUE.match, tokens)))):
            return
        if os.path.exists(url):
            return
        raise ConfigError(
            "looks like a libpq key=value connection string (not shown: it may hold a "
            "password), which would be read as a file name; write it as a postgresql:// URL "
            "(postgresql://user@host:5432/dbname), or sqlite:///PATH for a file of that name",
            field=field,
        )
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or not parts.netloc or "@" not in parts.netloc:
        return
    if os.path.exists(unquote(_written_path(parts))):
        return
    raise ConfigError(
        "an sqlite: URL with user@ or user:password@ (not shown) names a file whose name "
        "would hold them; an SQLite store takes no credentials: give sqlite:///path/to/store.db "
        "or a postgresql:// URL",
        field=field,
    )


def sqlite_url_path(url: str) -> str | None:
    """The file an ``sqlite:`` store URL names (None for any other URL): ``sqlite:///rel.db``
    is relative, ``sqlite:////abs.db`` absolute, as in SQLAlchemy; its ``%XX`` are decoded,
    as in any URL's path (``%20`` a space, ``%23`` a '#', ``%3F`` a '?'). '' when it names
    none."""
    parts = urlsplit(url)
    return None if parts.scheme != "sqlite" else unquote(_written_path(parts))


def sqlite_file(url: str) -> str | None:
    """The file an SQLite store ``url`` names (as ``open_store`` reads it: a plain path, or an
    ``sqlite:`` URL's); None for other stores, whose server says for itself whether they
    exist, and for a URL with a '#' (``open_store`` refuses it, saying why)."""
    if "://" not in url:
        return url
    if "#" in url:
        return None
    return sqlite_url_path(url)


def missing_pg_schema(url: str) -> tuple[str, str, str] | None:
    """``(schema, database, near)`` when a PostgreSQL ``url`` names a schema (``?schema=NAME``)
    that its database lacks (opening the store would create it, empty); None otherwise, and
    when psycopg is not installed (opening the store says so). ``near`` says which store a
    typo may have meant: ``; did you mean 'prod'?``, or the database's loopwright stores
    when none is close, or '' when it holds none."""
    if urlsplit(url).scheme not in ("postgresql", "postgres"):
        return None
    try:
        from .postgres import missing_schema
    except ImportError:
        return None
    missing = missing_schema(url)
    if missing is None:
        return None
    schema, database, stores = missing
    return schema, database, _near(schema, stores)


def _near(name: str, stores: list[str]) -> str:
    import difflib  # (a mistyped store's name only)

    close = difflib.get_close_matches(name, stores, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    if not stores:
        return ""
    listed = ", ".join(repr(s) for s in stores[:8]) + (", …" if len(stores) > 8 else "")
    return f"; the stores it holds: {listed}"


def refuse_undecoded(url: str) -> None:
    """A ``ConfigError`` when the ``sqlite:`` ``url`` names, its ``%XX`` decoded, a file that
    does not exist, and, read as written, one that does: before they were decoded the URL
    named that file, which is never left for a new, empty store beside it (nor reported as
    missing)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        return
    literal = _written_path(parts)
    path = unquote(literal)
    if literal != path and not os.path.exists(path) and os.path.exists(literal):
        raise ConfigError(
            hide_url_secrets(
                f"{url!r} names {path!r} (a URL's %XX are decoded), which does not exist; "
                f"{literal!r} does: give it as a plain file path (a path is read as it is)",
                url,
            ),
            field="store",
        )


def check_store_exists(
    url: str,
    *,
    no_file: Callable[[str], Exception],
    no_schema: Callable[[str, str, str], Exception],
) -> str:
    """``url`` (resolved) when the store it names exists, else the caller's error raised:
    ``no_file(path)`` for an SQLite file that does not exist (after ``refuse_undecoded``),
    ``no_schema(schema, database, near)`` for a PostgreSQL schema its database lacks
    (``near``: the store a typo may have meant, ``missing_pg_schema``). Opening
    either would create it: a mistyped path must not leave an empty store behind and report
    0 runs. What a store that must exist is read for (a command, ``compute_metrics``) says
    itself, in its error."""
    path = sqlite_file(url)
    if path and path != ":memory:" and not os.path.exists(path):
        refuse_undecoded(url)  # (the URL named an existing file before its %XX were decoded)
        raise no_file(path)
    missing = missing_pg_schema(url)
    if missing is not None:
        raise no_schema(*missing)
    return url


def existing_store_url(store: str | os.PathLike[str] | None, *, reads: str) -> str:
    """The URL of the existing store that ``store`` (a path, a URL, or ``None`` for
    ``LOOPWRIGHT_STORE`` or the default) names, for a reader given a path where a ``Store``
    also goes (``compute_metrics``, ``replay.traces_from_store``); a ``ConfigError`` (field
    ``store``) naming what is ``reads`` when there is none, rather than an empty store made."""
    return check_store_exists(
        resolve_store_url(os.fspath(store) if store is not None else None),
        no_file=lambda path: ConfigError(
            f"no store at {path}: {reads} are read from an existing store (check the path)",
            field="store",
        ),
        no_schema=lambda schema, database, near: ConfigError(
            f"no schema {schema!r} in database {database!r}{near}: {reads} are read from an "
            "existing store (check ?schema= in the URL)",
            field="store",
        ),
    )


def _written_path(parts: SplitResult) -> str:
    if parts.netloc:
        return parts.netloc + parts.path
    return parts.path[1:] if parts.path.startswith("/") else parts.path


def open_store(url: str | os.PathLike[str] | None = None) -> Store:
    """Open (creating if needed) the store named by ``url``: a store URL or a path, as
    ``Runtime`` takes it; anything else is a ``ConfigError`` naming ``store``."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if url is not None and not isinstance(url, str):
        raise ConfigError(f"must be a path or a store URL, got {type(url).__name__}", field="store")
    url = resolve_store_url(url)
    if "://" not in url:
        from .sqlite import SQLiteStore

        return SQLiteStore(url)
    parts = urlsplit(url)
    path = sqlite_url_path(url)
    if path is not None:
        if not path:
            raise ConfigError(
                hide_url_secrets(f"{url!r} names no file; use sqlite:///path/to/store.db", url),
                field="store",
            )
        if "#" in url:
            # urlsplit reads "#..." as a fragment and drops it: the store would be opened (and
            # created) at the path cut there, beside the one the user named
            raise ConfigError(
                hide_url_secrets(
                    f"{url!r}: '#' ends the path of a URL, so this names another file; give "
                    "the store as a plain file path instead (a path is read as it is), or "
                    "write the '#' as %23",
                    url,
                ),
                field="store",
            )
        refuse_undecoded(url)
        query = parse_qs(parts.query)
        unknown = set(query) - {"durability"}
        if unknown:
            raise ConfigError(
                hide_url_secrets(f"unknown option(s) {sorted(unknown)} in {url!r}", url),
                field="store",
            )
        from .sqlite import SQLiteStore

        return SQLiteStore(path, durability=query.get("durability", ["full"])[0])
    if parts.scheme in ("postgresql", "postgres"):
        try:
            from .postgres import PostgresStore
        except ImportError as exc:
            if "psycopg" not in str(exc):
                raise
            raise ConfigError(
                "the PostgreSQL store needs psycopg 3: pip install 'loopwright[postgres]'",
                field="store",
            ) from None
        return PostgresStore(url)
    raise ConfigError(
        hide_url_secrets(
            f"unknown store URL scheme {parts.scheme!r} in {url!r}; use a file path, "
            "sqlite:///path or postgresql://…",
            url,
        ),
        field="store",
    )
