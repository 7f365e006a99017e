"""The options and arguments the commands share (``--store``, ``--json``, ``RUN``, ``--by``,
``--token``, ``--note``, ``--request``), the checks their values meet, and ``print_json``."""

from __future__ import annotations

import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import ConfigError

# The ``--store`` this command was given on its command line (None: not given), set by the
# option's callback, which click calls for every command taking it, given or not.
_GIVEN: dict[str, str | None] = {"store": None}
_FLAG: dict[str, str] = {}  # ``store_flag``'s answer for the store given (it reads the disk)


def _store_given(value: str | None) -> str | None:
    """``--store ""`` is a mistake (an unset variable), not a request for the default store."""
    if value is not None and not value.strip():
        raise ConfigError(
            "is empty; give a store URL or path, or leave --store out for the default (a "
            'hint\'s --store "$LOOPWRIGHT_STORE" names a store whose URL holds a password: set '
            "LOOPWRIGHT_STORE to that URL first)",
            field="--store",
        )
    _GIVEN["store"] = value
    return value


def forget_store() -> None:
    """No ``--store`` given yet (a command without the option prints hints for the store a
    bare command reads)."""
    _GIVEN["store"] = None
    _FLAG.clear()  # ($LOOPWRIGHT_STORE may have changed since: a test's, in one process)


def store_flag() -> str:
    """`` --store STORE`` for the next commands a command prints, when it was given
    ``--store`` on its command line naming another store than a bare command reads here
    ('' else: ``$LOOPWRIGHT_STORE`` is still set for the next command, and the default store
    needs no flag). Without it, a hint copied as printed (`loopwright resume RUN` after
    `approve RUN --store s.db`) read the default store: "no run 'RUN'", or no store at all
    (newuser52). A URL holding a password is not printed: ``--store "$LOOPWRIGHT_STORE"``
    (``_hints.hint_flag``)."""
    from .._hints import hint_flag

    given = _GIVEN["store"]
    if given is None:
        return ""
    # (read once a command: every string the console prints asks, a long table's every cell)
    if _FLAG.get(given) is None:
        _FLAG.clear()
        _FLAG[given] = hint_flag(given)
    return _FLAG[given]


def carry_store(text: str) -> str:
    """``text`` (a run's advice, a refusal's hint: the engine's words) with each ``loopwright
    ...`` command in it naming this command's store (``store_flag``)."""
    from .._hints import carry_store as carry

    return carry(text, store_flag())


StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Store URL or path (default: $LOOPWRIGHT_STORE or ./.loopwright/loopwright.db).",
        callback=_store_given,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
# `replay` and `fit-stop`: which of the store's runs SOURCE 'store' reads (every loop's and
# project's without them: ``_stores.store_traces``)
TracesLoopOpt = Annotated[
    str | None, typer.Option("--loop", help="Only the store's runs of this loop (SOURCE 'store').")
]
TracesProjectOpt = Annotated[
    str | None,
    typer.Option("--project", help="Only the store's runs of this project (SOURCE 'store')."),
]


def run_ref(value: Any) -> Any:
    """A RUN argument (or a list of them) checked as every lookup is (``_keys.check_lookup``:
    a long pasted blob, or a control character, names no run and is refused, not looked up)."""
    from .._keys import check_lookup

    for one in value if isinstance(value, list) else [value]:
        if isinstance(one, str):
            check_lookup(one, "RUN")
    return value


@contextmanager
def as_options(**names: str) -> Iterator[None]:
    """A refusal of the Python API named by the CLI's option: a ``ConfigError`` whose field is
    one of ``names`` (``to_cycle="--to-cycle"``) is raised again under that name, so that the
    message says ``--to-cycle: ...``, what the person typed, not ``to_cycle: ...``."""
    try:
        yield
    except ConfigError as exc:
        if exc.field not in names:
            raise
        raise type(exc)(exc.message, field=names[exc.field]) from None


RunArg = Annotated[
    str,
    typer.Argument(
        metavar="RUN", help="Run id (or a unique prefix, or its task key).", callback=run_ref
    ),
]


def print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


NAME_MAX = 64  # the longest person's name: `loopwright users add` allows as long


def by_name(value: str | None) -> str | None:
    """A ``--by`` name no longer than a user's name may be. A blank one is refused: it was
    taken as no ``--by`` at all, so ``--by "$APPROVER"`` with the variable unset recorded the
    decision under the OS user's name; so is ``NAME``, the hints' placeholder."""
    if value is not None and not value.strip():
        raise ConfigError("is blank: give a person's name", field="--by")
    if value is not None and value.strip() == "NAME":
        # The hints print `--by NAME`; typed as printed it recorded (and audited) a decision
        # made by "NAME".
        raise ConfigError(
            "NAME is the hint's placeholder: give your own name, or leave --by out where "
            "it defaults to your OS user",
            field="--by",
        )
    if value is not None and len(value.strip()) > NAME_MAX:
        raise ConfigError(
            f"a name is at most {NAME_MAX} characters (as `loopwright users add` allows); "
            f"this one has {len(value.strip())}",
            field="--by",
        )
    return value


def me_flag(store: Any, *, needed: bool = False) -> str:
    """How a printed command says who acts, so it works when copied (polish54): the hints
    printed ``--by NAME``, which ``by_name`` refuses as typed. A store with users: the token,
    as ``--token "$LOOPWRIGHT_TOKEN"`` (the option's own default; a shell without it passes a
    blank token, refused in one line). Without users: nothing, ``--by`` defaulting to the OS
    user; ``needed`` (a command whose ``--by`` has no default) ``--by "$USER"``, which the
    shell reads as that same OS user. With a leading space, or ``""``."""
    if store.has_users():
        return ' --token "$LOOPWRIGHT_TOKEN"'
    return ' --by "$USER"' if needed else ""


ByOpt = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="Who decides, in a store without users (default: your OS user). With users, "
        "your --token says who.",
        callback=by_name,
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="LOOPWRIGHT_TOKEN",
        show_envvar=False,
        help="Your token, in a store with users (default: $LOOPWRIGHT_TOKEN).",
    ),
]
NoteOpt = Annotated[str | None, typer.Option("--note", help="Why, for the record.")]
RequestOpt = Annotated[
    str | None,
    typer.Option("--request", help="Which request, when the run has several pending."),
]


_SQLITE_MAGIC = b"SQLite format 3\x00"
# The first bytes of a database's companion files, and what each is called: a write-ahead log
# (its magic, either byte order of its checksums), a WAL's shared-memory index (the version
# 3007000 in the writer's byte order) and a rollback journal.
_COMPANION_MAGIC = (
    (b"\x37\x7f\x06\x82", "write-ahead log"),
    (b"\x37\x7f\x06\x83", "write-ahead log"),
    ((3007000).to_bytes(4, "little"), "shared-memory index"),
    ((3007000).to_bytes(4, "big"), "shared-memory index"),
    (b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7", "rollback journal"),
)
_COMPANION_SUFFIX = {"-wal": "write-ahead log", "-shm": "shared-memory index",
                     "-journal": "rollback journal"}  # fmt: skip


def _head(path: Path, size: int) -> bytes | None:
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None  # a terminal, a pipe: never read (it would wait on our own output)
        with path.open("rb") as fh:
            return fh.read(size)
    except OSError:
        return None  # not there, a folder, unreadable: the write says what it finds


def _not_a_database(path: Path, option: str) -> None:
    """Refuse to write over an SQLite database: ``export eval-cases --out
    .loopwright/loopwright.db`` truncated the store it was reading to nothing, every run lost
    (outside probe, stop 51). No output of the CLI is a database, so any one is refused, the
    store being read or another; and so is a database's companion file (``…db-wal``,
    ``…db-shm``, ``…db-journal``), known by its name beside the database or by its first bytes:
    writing over a live store's write-ahead log corrupts the store. Only a regular file is
    read: ``/dev/stdout``, a named pipe or a process substitution (``>(gzip)``) opened to read
    waited for ever on what it would write itself (review51b)."""
    head = _head(path, len(_SQLITE_MAGIC))
    if head == _SQLITE_MAGIC:
        raise ConfigError(
            f"{path} is an SQLite database (a loopwright store?): writing there would replace "
            "it; name another file",
            field=option,
        )
    kind = next((k for magic, k in _COMPANION_MAGIC if head and head.startswith(magic)), None)
    db: Path | None = None
    for suffix, named in _COMPANION_SUFFIX.items():
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            beside = path.with_name(path.name[: -len(suffix)])
            if _head(beside, len(_SQLITE_MAGIC)) == _SQLITE_MAGIC:
                kind, db = named, beside
    if kind is not None:
        of = f"the SQLite database {db}" if db is not None else "an SQLite database"
        raise ConfigError(
            f"{path} is the {kind} of {of} (a loopwright store's?): writing there would "
            "corrupt the database; name another file",
            field=option,
        )


def _not_an_input(path: Path, option: str, inputs: Iterable[str | Path]) -> None:
    """Refuse to write over a file the command reads: ``fit-stop runs.jsonl --report
    runs.jsonl`` replaced the recorded runs with the report (outside probe, stop 51). Only a
    regular file (``same_regular_file``): ``fit-stop /dev/stdin --out /dev/stdout`` on one
    terminal is read from and written to, not written over."""
    from .._same_file import same_regular_file

    for given in inputs:
        if same_regular_file(path, given):  # (an input not there: its reader says so)
            raise ConfigError(
                f"{path} is an input of this command ({given}): writing there would replace "
                "it; name another file",
                field=option,
            )


def out_folder(path: Path | None, option: str, inputs: Iterable[str | Path] = ()) -> None:
    """Refuse a file to write (``--out``, ``--report``, ``--plot``, ``--save-traces``) in a
    folder that does not exist, as a store path in one is (``_store_folder``): the folders
    were made, so a typo's output went unseen into a new folder. ``./.loopwright``,
    loopwright's own, is made (``--out .loopwright/run.json``). A folder that cannot be one
    (a file stands there) is left to the write, which says why."""
    if path is None:
        return
    _not_a_database(path, option)
    _not_an_input(path, option, inputs)
    folder = path.parent
    if folder.exists() or folder.is_symlink():
        return
    from ..store import DEFAULT_STORE

    if folder.absolute() == Path(DEFAULT_STORE).parent.absolute():
        try:
            folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", field=option) from None
        return
    tilde = " (a '~' is not expanded here: write $HOME)" if str(path).startswith("~") else ""
    raise ConfigError(
        f"no folder {folder} for {path}: the folder does not exist{tilde}. Create it "
        f"(mkdir -p {folder}) to write there",
        field=option,
    )
