"""The store a command works on. Commands that only read (or act on runs that must already
exist) refuse a store file, or a PostgreSQL schema, that does not exist instead of creating it:
a typo in ``--store`` must not leave an empty store, or its folders, behind and report "0
run(s)"."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import ConfigError

if TYPE_CHECKING:
    from ..replay import RunTrace
    from ..store import Store

__all__ = [
    "creatable_store",
    "existing_store",
    "open_existing",
    "open_or_create",
    "store_traces",
    "unknown_filters",
]


def _source(url: str | None) -> str:
    if url:
        return "--store"
    return "$LOOPWRIGHT_STORE" if os.environ.get("LOOPWRIGHT_STORE") else "the default store"


def existing_store(url: str | None) -> str:
    """The store URL to use (``--store``, else ``$LOOPWRIGHT_STORE``, else the default file),
    refused with a one-line error when it names an SQLite file, or a PostgreSQL schema
    (``?schema=NAME``), that does not exist: opening either would create it."""
    from ..store import check_store_exists, resolve_store_url

    return check_store_exists(
        resolve_store_url(url),
        no_file=lambda path: ConfigError(
            f"no store at {path} (from {_source(url)}); check the path, or create one with "
            "`loopwright run` or `loopwright demo`"
        ),
        no_schema=lambda schema, database, near: ConfigError(
            f"no schema {schema!r} in database {database!r} (from {_source(url)}){near}; "
            "check ?schema= in the URL"
        ),
    )


def open_existing(url: str | None) -> Store:
    """``open_store`` for a store that must already exist (see ``existing_store``)."""
    from ..store import open_store

    return open_store(existing_store(url))


def creatable_store(url: str | None) -> str:
    """The store URL to use (as ``existing_store`` resolves it) for a command that may create
    the store (``run``, ``demo``, a ``worker``, the first user or memory): refused with a
    one-line error when it names an SQLite file, not there yet, in a folder that does not
    exist, or a PostgreSQL ``?schema=`` its database lacks. Such a path, from ``--store`` or
    ``$LOOPWRIGHT_STORE``, is almost always a typo, and
    a new store there runs every task again and pays its effects again (the effects journal
    is per store). The default store's folder (``./.loopwright``) is loopwright's own: made
    when missing, also for another store file named in it (``_store_folder``)."""
    from .._store_folder import missing_schema_error, missing_store_folder
    from ..store import DEFAULT_STORE, resolve_store_url

    resolved = resolve_store_url(url)
    source = _source(url)
    schema_error = missing_schema_error(resolved, source)
    if schema_error is not None:
        raise ConfigError(schema_error.message)
    missing = missing_store_folder(resolved)
    if missing is None:
        return resolved
    path, folder = missing
    instead = "drop --store" if url else "unset LOOPWRIGHT_STORE"
    raise ConfigError(
        f"no folder {folder} for the store {path} (from {source}): the folder does not "
        f"exist. Create it (mkdir -p {folder}) to start a new store there, or {instead} to "
        f"use the default store ./{DEFAULT_STORE} (created when missing)"
    )


def open_or_create(url: str | None, refuse_new: str | None = None) -> tuple[Store, str | None]:
    """``open_store`` for a command that may start a store (adding its first user, before any
    run): the store and, when it was created now, the file it created (to say so).
    ``refuse_new``: the reason this call may not create one (nothing is created then)."""
    from ..store import open_store, resolve_store_url, sqlite_file

    resolved = resolve_store_url(url)
    path = sqlite_file(resolved)
    new = path if path and path != ":memory:" and not Path(path).exists() else None
    if new is not None and refuse_new:
        raise ConfigError(f"no store at {new}: {refuse_new}")
    return open_store(creatable_store(url)), new


def unknown_filters(st: Store, *, project: str | None, loop: str | None) -> list[str]:
    """A line for each of ``--project`` and ``--loop`` that no run of the store has: a typo in a
    filter otherwise reads as "no run matched" (an empty table, all metrics n/a). Asked only
    when nothing matched, so a store of many runs pays for it only then."""
    from ._table import printable

    def listed(known: list[str]) -> str:
        return ", ".join(printable(x) for x in known[:10]) + (", …" if len(known) > 10 else "")

    lines: list[str] = []
    if project is not None and st.count_runs(project=project) == 0:
        known = st.run_projects()
        lines.append(
            f"note: no run has project {printable(repr(project))}"
            + (f" (projects: {listed(known)})" if known else " (no run has a project)")
        )
    if loop is not None and st.count_runs(loop_name=loop) == 0:
        known = st.run_loops()
        lines.append(
            f"note: no run is of loop {printable(repr(loop))}"
            + (f" (loops: {listed(known)})" if known else " (the store has no run)")
        )
    return lines


def store_traces(
    url: str | None, source: str, *, loop: str | None, project: str | None
) -> list[RunTrace]:
    """The runs ``replay`` and ``fit-stop`` read from SOURCE 'store', filtered by ``--loop`` and
    ``--project`` (``iter_store_traces``, as a list)."""
    return list(iter_store_traces(url, source, loop=loop, project=project))


def iter_store_traces(
    url: str | None, source: str, *, loop: str | None, project: str | None
) -> Iterator[RunTrace]:
    """``store_traces``' runs one at a time, the store open while they are read: a filter no
    run has is named (as ``loopwright runs`` names it), and runs of several loops read without
    ``--loop`` are said on stderr, loop by loop (they pool other actors' costs and outcomes:
    docs/fit-stop.md), once every run was read. A store that does not exist is refused
    here, before the first run is read."""
    st = open_existing(url)
    return _store_traces(st, source, loop=loop, project=project)


def _store_traces(
    st: Store, source: str, *, loop: str | None, project: str | None
) -> Iterator[RunTrace]:
    import typer

    from ..replay._sources import iter_source, loops_line

    loops: dict[str, int] = {}  # the runs of each loop read (what ``mixed_loops`` counts)
    read = 0
    with st:
        # (counted first: a run made while they are read is read, never called left out)
        total = st.count_runs(project=project, loop_name=loop)
        for t in iter_source(source, st, loop=loop, project=project):
            read += 1
            name = t.recorded.get("loop")
            if isinstance(name, str):
                loops[name] = loops.get(name, 0) + 1
            yield t
        unknown = [] if read else unknown_filters(st, project=project, loop=loop)
    left = total - read
    if unknown:
        raise ConfigError("; ".join(x.removeprefix("note: ") for x in unknown), field="SOURCE")
    if loop is None and (line := loops_line(loops)):
        typer.echo(line, err=True)
    if left > 0:
        # (the count of runs read said only what was read: a run the user rolled back, and
        # looked for in the table, was missing from it without a word)
        typer.echo(
            f"note: {left} run(s) rolled back are left out (their cycles are not one line: "
            "docs/replay.md)",
            err=True,
        )
