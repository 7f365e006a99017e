"""The commands the engine, the CLI and the dashboard print for a person to type, and the store
they must name (a module of its own that both ``cli`` and ``web`` import: neither reaches into
the other's private modules).

``settle_command``: the one wording of ``loopwright settle RUN KEY --done`` (an escalation's
cause and advice, a crash's, a refund's).

The store a printed ``loopwright ...`` command must name to act on the store it was printed
for. The engine writes a run's advice (``loopwright settle RUN KEY --done``, ``loopwright
resume RUN``, ``loopwright users add ana approver``) knowing nothing of the CLI's flags: a
command copied from a run of ``--store s.db`` read the default store ("no run", or another
store's run of the same task key). The CLI and the dashboard, which know the store, add it to
each command they print (``carry_store``) when a bare command would read another store here
(``hint_flag``). A URL holding a secret is never printed: the flag names
``"$LOOPWRIGHT_STORE"`` instead, which the person sets (typed without it set, ``--store ""``
is refused in one line, never read as the default store)."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

__all__ = [
    "FROM_ENV",
    "SET_IT",
    "carry_store",
    "carry_store_in",
    "hint_flag",
    "settle_command",
]

# the flag of a store whose URL holds a secret (a password, a token): the shell's value of
# the variable, which the person sets to the URL they know
FROM_ENV = ' --store "$LOOPWRIGHT_STORE"'
SET_IT = "set LOOPWRIGHT_STORE to its URL before the commands that name it"

# a command in backticks (`loopwright resume R`) or in parentheses (loopwright users add X)
_COMMAND = re.compile(r"(`loopwright [^`]+?)(`)|(\(loopwright [^()]+?)(\))")


def settle_command(run_id: str, key: str, *, done: bool = True) -> str:
    """``loopwright settle RUN KEY --done`` (or ``--not-done``) for ``run_id``'s effect ``key``,
    as a person types it (the run's short id; every word runnable as printed, polish55). The
    key is a business key maybe (``effect(key=...)``, from the call's arguments, which a model
    may have chosen): quoted for the shell where it is not one plain word, so that a pasted
    command settles that key, and never runs what the key holds (``x; rm -rf ~``)."""
    word = key if _PLAIN_WORD.fullmatch(key) else shlex.quote(key)
    return f"loopwright settle {run_id[:12]} {word} {'--done' if done else '--not-done'}"


# a key the shell reads as itself, unquoted (``pay:A-1~2``; a ``~`` first is a home directory)
_PLAIN_WORD = re.compile(r"[\w@%+=:,./-][\w@%+=:,./~-]*", re.ASCII)


def _same_store(a: str, b: str) -> bool:
    from .store import sqlite_file

    if a == b:
        return True
    fa, fb = sqlite_file(a), sqlite_file(b)
    return bool(fa and fb) and os.path.realpath(str(fa)) == os.path.realpath(str(fb))


def hint_flag(url: str | None) -> str:
    """`` --store URL`` for the commands printed about the store at ``url`` ('' when a bare
    command reads that store here: ``url`` is None, or it is what ``$LOOPWRIGHT_STORE`` or
    the default resolves to). A URL with a secret in it (a PostgreSQL password): ``FROM_ENV``."""
    from ._redact import redact_text
    from .store import resolve_store_url

    if not url:
        return ""
    try:
        bare = resolve_store_url(None)
    except Exception:  # a blank $LOOPWRIGHT_STORE: a bare command is refused, so name it
        bare = ""
    if bare and _same_store(url, bare):
        return ""
    # (a URL a terminal would act on, `\x1b[2J` in a path, is not printed raw either: the
    # error line shows it written out, and a command printed so would not run as typed)
    if redact_text(url) != url or not url.isprintable():
        return FROM_ENV
    return f" --store {shlex.quote(url)}"


def carry_store(text: str, flag: str) -> str:
    """``text`` with ``flag`` added at the end of each ``loopwright ...`` command it names, in
    backticks or in parentheses, that names no ``--store`` of its own ('' leaves it as is)."""
    if not flag or "loopwright " not in text:
        return text

    def add(m: re.Match[str]) -> str:
        body, end = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if " --store" in body:
            return m.group(0)
        return f"{body}{flag}{end}"

    return _COMMAND.sub(add, text)


# The words of a run's document that name commands: a record's stop cause, a packet's advice,
# summary and stop cause (its ``trace.show`` is a bare command, not in backticks)
_HINT_KEYS = ("stop_cause", "recommended_action", "summary")


def carry_store_in(doc: dict[str, Any] | None, flag: str) -> dict[str, Any] | None:
    """``doc`` (a run's record or result as a dict, or its escalation packet) with the
    commands its words name carrying ``flag`` (``--json`` and the API, notify56: a command
    copied from them read the default store): a copy; ``doc`` itself when ``flag`` is ''."""
    if not flag or not isinstance(doc, dict):
        return doc
    out = dict(doc)
    for k in _HINT_KEYS:
        if isinstance(out.get(k), str):
            out[k] = carry_store(out[k], flag)
    trace = out.get("trace")
    show = trace.get("show") if isinstance(trace, dict) else None
    if isinstance(show, str) and show.startswith("loopwright ") and " --store" not in show:
        out["trace"] = {**(trace or {}), "show": show + flag}
    if isinstance(out.get("packet"), dict):
        out["packet"] = carry_store_in(out["packet"], flag)
    return out
