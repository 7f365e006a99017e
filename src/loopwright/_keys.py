"""The rule a task key (and any run identifier a person types) must keep, in one place.

A task key names one task store-wide: it is a column both stores index, a word in every
listing and a path segment of the dashboard. A key is refused, with a ``ConfigError`` naming
the field and the rule broken, when it is

- not text;
- empty, only whitespace, or only invisible characters (format characters such as U+200B);
- begins or ends with whitespace (``" t1"`` and ``"t1"`` would be two tasks that print alike);
- longer than ``MAX_KEY_CHARS`` characters (PostgreSQL's index refuses long keys, SQLite
  takes them: the stores would differ);
- holds a control character (U+0000–U+001F, U+007F–U+009F: PostgreSQL refuses NUL, and a
  newline or an escape sequence breaks one-line output), a line or paragraph separator
  (U+2028, U+2029), a bidirectional control (U+202A–U+202E, U+2066–U+2069, and the marks
  U+200E, U+200F, U+061C: the key would print as another; the CLI and the dashboard write out
  the same set), or a lone surrogate (not text; neither store can write it).

Anything else is a valid key: letters of any script, digits, punctuation, inner spaces, emoji
(joiners included). docs/concepts.md states the rule for users.

The character rule (``unprintable``) is also the rule of what people type elsewhere: a
person's name, ``--by``, a decision's note, and the names of loops and projects
(``check_name``; a new run's are held to ``MAX_KEY_CHARS`` too, ``check_length``: both stores
index them). The names a loop declares for its verifiers, effects and risk rules keep it
too, and hold no invisible (format) character at all (``check_declared_name``): they are
identifiers, which a zero-width space would make two that print alike. Neither they nor a
new run's loop and project name begin or end with whitespace (``check_unpadded``: ``"a"`` and
``"a "`` print alike). All refuse new input only: what a store holds is read, listed, looked
up and replayed as it is.
"""

from __future__ import annotations

import unicodedata

from ._errors import ConfigError

__all__ = [
    "MAX_KEY_CHARS",
    "check_declared_name",
    "check_key",
    "check_length",
    "check_lookup",
    "check_name",
    "check_unpadded",
    "fit_key",
    "unprintable",
]

MAX_KEY_CHARS = 256
# embeddings, overrides, isolates, and the marks (LRM, RLM, ALM) that reorder the digits and
# neutrals beside them: "x \u200f10 \u200f20" prints as "x 20 10" (as web/_values, cli/_table)
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_REFUSED_CATEGORIES = frozenset(("Cc", "Cs", "Zl", "Zp"))


def _bad_char(text: str) -> str | None:
    """Why ``text`` breaks the character rule, or None."""
    if text.isprintable():  # the common case, in C: no Cc, Cs, Zl, Zp (nor Cf, Co, Cn, Zs)
        return None
    for i, ch in enumerate(text):
        if ch in _BIDI or unicodedata.category(ch) in _REFUSED_CATEGORIES:
            what = "a bidirectional control" if ch in _BIDI else "a control character"
            if unicodedata.category(ch) == "Cs":
                what = "a lone surrogate"
            return f"must not hold {what} (U+{ord(ch):04X} at position {i + 1})"
    return None


def unprintable(text: str) -> str | None:
    """Why ``text`` could not be printed on one line as itself (a control character, an escape
    sequence's ESC included, a line separator, a bidirectional control), or None: the rule of
    task keys, which people's names keep too."""
    return _bad_char(text)


def _shown(value: object) -> str:
    """``value`` as an error message shows it: escaped (``repr``), cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _invisible(value: str) -> bool:
    """Whether ``value`` (printable as itself) is only format characters or spaces."""
    return not value.isprintable() and all(unicodedata.category(ch)[0] in "CZ" for ch in value)


def check_name(value: object, what: str, field: str) -> None:
    """A loop's or a project's name given anew (``what``: ``"loop name"``, ``"project
    name"``): refused (``ConfigError`` naming ``field``) when it is not text or breaks the
    character rule of task keys, or is only invisible characters. A project's ``""`` is no
    project. Names a store holds already are never checked: they are read and listed as
    they are."""
    if not isinstance(value, str):
        raise ConfigError(f"a {what} must be text, got {type(value).__name__}", field=field)
    why = _bad_char(value)
    if why is None and value and _invisible(value):
        why = "must hold a visible character (it is only format characters or spaces)"
    if why is not None:
        raise ConfigError(f"{what} {_shown(value)} {why}", field=field)


def check_length(value: str, what: str, field: str) -> None:
    """A name indexed as a task key is (a new run's loop or project name, an import's label):
    refused (``ConfigError`` naming ``field``) past ``MAX_KEY_CHARS`` characters. PostgreSQL
    refused a 10,000-character project (a store error, "unavailable"), SQLite took it
    (outside probe, stop 51). Not in ``check_name``, which a ``Loop`` asks where it is built:
    a run SQLite stored under a longer name is resumed and forked with a loop of that name
    (review51b)."""
    if len(value) > MAX_KEY_CHARS:
        raise ConfigError(
            f"{what} {_shown(value)} must be at most {MAX_KEY_CHARS} characters (got {len(value)})",
            field=field,
        )


_PADDED = "must not begin or end with whitespace"


def check_unpadded(value: str, what: str, field: str) -> None:
    """A loop's or a project's name a new run is made under: refused (``ConfigError`` naming
    ``field``, the name shown with ``repr``) when it begins or ends with whitespace, as a task
    key is (``"p"`` and ``"p "`` would be two projects that print alike). Not in ``check_name``,
    which a ``Loop`` asks where it is built: a run an earlier release stored under such a loop
    name is resumed with a loop of that name (review49c). Nor longer than a key
    (``check_length``)."""
    if value != value.strip():
        raise ConfigError(f"{what} {_shown(value)} {_PADDED}", field=field)
    check_length(value, what, field)


def check_declared_name(value: str, what: str, field: str) -> None:
    """A verifier's, an effect's, a risk rule's or an approval rule's name as a loop declares
    it (``what``: ``"verifier name"``...): refused (``ConfigError`` naming ``field``, the
    character and its position) when it is only whitespace, begins or ends with whitespace
    (``"a"`` and ``"a "`` would be two checks that print alike), breaks the character rule of task
    keys or holds any invisible (format, ``Cf``) character: a zero-width space, a joiner, a soft hyphen, a byte-order mark. Only
    where a loop is declared (a ``Loop``, a spec): a contract or a run an earlier release
    stored is read, listed and replayed with the names it holds."""
    why = _bad_char(value)
    if why is None and not value.strip():
        why = "must not be empty or only whitespace"  # (printed as nothing: " ", a tab)
    if why is None and value != value.strip():
        why = _PADDED
    if why is None and not value.isprintable():
        for i, ch in enumerate(value):
            if unicodedata.category(ch) == "Cf":
                why = f"must not hold an invisible character (U+{ord(ch):04X} at position {i + 1})"
                break
    if why is not None:
        raise ConfigError(f"{what} {_shown(value)} {why}", field=field)


def _broken(value: object) -> str | None:
    if not isinstance(value, str):
        return f"must be text, not {type(value).__name__}"
    if not value.strip():
        return "must not be empty or only whitespace"
    if value != value.strip():
        return "must not begin or end with whitespace"
    if len(value) > MAX_KEY_CHARS:
        return f"must be at most {MAX_KEY_CHARS} characters (got {len(value)})"
    why = _bad_char(value)
    if why is None and _invisible(value):
        return "must hold a visible character (it is only format characters or spaces)"
    return why


def check_key(value: object, field: str = "task_key", *, at: str = "") -> str:
    """``value`` as a task key, or a ``ConfigError`` naming ``field`` and the rule it breaks.
    ``at``: where the value came from (``tasks.jsonl:3``), put first in the message."""
    why = _broken(value)
    if why is None:
        return value  # type: ignore[return-value]  # _broken checked it is a str
    where = f"{at}: " if at else ""
    raise ConfigError(f"{where}task key {_shown(value)} {why}", field=field)


def check_lookup(value: str, field: str = "run") -> None:
    """A run id or task key given to find a run: refused (``ConfigError``) only for what a
    store cannot look up alike — not text, a NUL (PostgreSQL refuses one in a query), a lone
    surrogate (neither store can encode one). A key the rule of new keys refuses otherwise
    (too long, a newline, padded) is looked up: a run an older release stored with such a key
    is still found by it, and any other is simply not found."""
    if not isinstance(value, str):  # (the API's callers: a None or a number is a mistake)
        raise ConfigError(
            f"must be a run id or task key (text), not {type(value).__name__}", field=field
        )
    if "\x00" in value:
        i = value.index("\x00")
        raise ConfigError(
            f"a run id or task key must not hold a control character (U+0000 at position {i + 1})",
            field=field,
        )
    if not value.isprintable():
        for i, ch in enumerate(value):
            if "\ud800" <= ch <= "\udfff":
                raise ConfigError(
                    "a run id or task key must not hold a lone surrogate "
                    f"(U+{ord(ch):04X} at position {i + 1})",
                    field=field,
                )


def fit_key(base: str, suffix: str) -> str:
    """A derived key ``base + suffix`` (a fork's ``~fork-…``) cut to ``MAX_KEY_CHARS``: the
    suffix, which makes it unique, is kept whole."""
    return base[: max(0, MAX_KEY_CHARS - len(suffix))].rstrip() + suffix
