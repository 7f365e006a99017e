"""JSON for the stores: orjson's speed with the standard library's results.

Every checkpoint serialises the whole run state, so encoding is a large share of a cycle's CPU
(≈ 10× less with orjson). Where orjson and ``json`` (as the stores used it: compact,
``default=str``) differ, the stores keep ``json``'s result, so that a value written and read
back is the value ``json`` would have given — which matters beyond taste: an effect's key is a
hash of its arguments, computed once from the actor's objects and again, after a crash, from
the arguments read back from the write-ahead checkpoint.

* float and tuple subclasses (``numpy.float64``, namedtuples): written as a number and a list;
* integers beyond 64 bits: encoded by ``json`` (orjson refuses them) and decoded by ``json``
  (orjson would make floats of them) — text holding a run of 19+ digits is parsed by ``json``;
* non-str keys and anything else orjson refuses: encoded by ``json``; a key ``json`` refuses
  too (a date, a tuple) is written as its ``str``, as a value of that type is;
* dataclasses and datetimes: ``str(obj)``, as ``json`` with ``default=str`` writes them.

One difference is deliberate: ``NaN`` and ``±Infinity`` are not JSON, and are written as
``null`` on every path (PostgreSQL's json type refuses them; older versions wrote ``NaN`` into
SQLite, which still reads back). So is a lone surrogate in a string (half an emoji, JSON's
``"\\ud83d"``), which is not text: written as U+FFFD, a surrogate pair as its character.
A plain ``Enum`` member (neither ``int`` nor ``str``) is written as its value, where ``json``
wrote ``str(member)``; effect arguments cannot hold one (they must be strict JSON).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import Any

from ._errors import ConfigError

try:  # a core dependency; the fallback keeps a --no-deps install working, only slower
    import orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    orjson = None  # type: ignore[assignment]

__all__ = [
    "DuplicateKeyError",
    "JsonLineError",
    "NumberRangeError",
    "check_given_text",
    "check_text",
    "check_value",
    "dumps",
    "is_text",
    "json_lines",
    "loads",
    "loads_all",
    "lone_surrogate",
    "not_text",
    "owned_copy",
    "refuse_constant",
    "round_trip",
    "str_keys",
    "strict_loads",
    "too_long",
]

# An integer orjson would read as a float (over 64 bits) has 19 digits or more in a row. The
# text is looked at through a table that makes every digit "0", a decimal point "." and every
# other byte "x", then searched for nineteen "0"s: a C pass and a substring search, 8-25 times
# faster than a regular expression (a 5 MB draft read back spent 40 ms in ``\d{19}``, more than
# orjson's parse). A run right after a "." is a fraction's, no integer: a duration orjson
# wrote as ``0.00002810200021485798`` is read by orjson, not sent (with its whole record) to
# the standard library's slower path, as one row in eight of a long run's store was.
_DIGITS_AS_ZEROS = bytes(
    0x30 if 0x30 <= i <= 0x39 else 0x2E if i == 0x2E else 0x78 for i in range(256)
)
_DIGIT_RUN = b"0" * 19


def _may_hold_big_int(text: str | bytes) -> bool:
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    shape = raw.translate(_DIGITS_AS_ZEROS)
    at = shape.find(_DIGIT_RUN)
    while at != -1:
        # the first run found starts a run of digits; one found past it continues that run
        if at == 0 or shape[at - 1] not in b".0":
            return True
        at = shape.find(_DIGIT_RUN, at + len(_DIGIT_RUN))
    return False


_OPTS = 0 if orjson is None else orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _default(obj: Any) -> Any:
    # What json writes natively but orjson hands to ``default``: json's result.
    if isinstance(obj, float):  # numpy.float64 and other float subclasses
        return float(obj)
    if isinstance(obj, tuple):  # namedtuples
        return list(obj)
    return str(obj)


def _finite(value: Any, keys: bool = False) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (only on the rare path that
    ``json`` encodes, so that NaN is ``null`` there too) and every lone surrogate in a string
    by U+FFFD: half an emoji a model wrote (``"\\ud83d"``) is no text, and stored as it is it
    made every page, answer and ``show`` that prints the run fail to encode. With ``keys``, a
    mapping key ``json`` refuses (a date, a tuple, a UUID) is its ``str``, as ``default=str``
    writes such a value: a verdict's evidence or an effect's result keyed so is stored, where
    ``json`` raised a ``TypeError`` that failed the run (or left it unable to commit)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _whole_text(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        written: set[str] = set()  # the keys as json writes them: 1 and "1" are one key there
        for k, v in value.items():
            nk = _json_key(k, keys)
            text = _written_key(nk)
            if text is not None:
                if text in written:  # two keys written alike (a date and its text, 1 and
                    nk = text = numbered_key(text, written)  # "1"): both kept, the later numbered
                written.add(text)
            out[nk] = _finite(v, keys)
        return out
    if isinstance(value, list | tuple):
        return [_finite(v, keys) for v in value]
    if keys and type(value) is int and too_long(value):
        # (the lenient write; ``owned_copy`` refuses it, naming it)
        return f"<an integer of {value.bit_length()} bits, too long to write as JSON>"
    return value


def too_long(value: int) -> bool:
    """Whether no JSON text can be written with ``value`` (more digits than Python writes an
    int as text, about 4,300 by default). Written by the lenient ``dumps`` as a short text
    saying so, as a value JSON cannot hold is written as its ``str``: one in a finding's
    evidence raised ``ValueError`` from the commit, and the run was left unable to go on."""
    if value.bit_length() <= 14_000:  # (no int this short is refused: no text made)
        return False
    try:
        str(value)
    except ValueError:
        return True
    return False


def _written_key(key: Any) -> str | None:
    # json writes a number, a bool or None key as its JSON text; any other key it refuses
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, int | float):
        return json.dumps(key)
    return None


def numbered_key(key: str, taken: Container[str]) -> str:
    """``key#2`` (or the first ``key#N`` not in ``taken``): a key written like one before it,
    kept beside it (the stores and the redaction net never merge two keys into one)."""
    n = 2
    while f"{key}#{n}" in taken:
        n += 1
    return f"{key}#{n}"


def str_keys(value: Any) -> Any:
    """``value`` as ``dumps`` writes it when ``json`` must: every key it refuses as its
    ``str``, non-finite floats ``None``, lone surrogates U+FFFD."""
    return _finite(value, keys=True)


def _json_key(key: Any, keys: bool) -> Any:
    if isinstance(key, str):
        return _whole_text(key)
    if not keys or key is None or isinstance(key, int | float):  # (bool is an int)
        return key
    try:
        return _whole_text(str(key))
    except Exception:  # user code's ``__str__``: the key must not fail the write
        return f"<{type(key).__name__}>"


def is_text(text: str) -> bool:
    """Whether UTF-8 can hold ``text`` as it is (no lone surrogate, no unjoined pair)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _whole_text(text: str) -> str:
    """``text`` as UTF-8 can hold it: a surrogate pair joined into its character, a lone
    surrogate replaced by U+FFFD."""
    if is_text(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _std_dumps(value: Any) -> str:
    return json.dumps(_finite(value, keys=True), separators=(",", ":"), default=str)


def dumps(value: Any) -> str:
    """Compact JSON text (non-JSON objects as ``str(obj)``)."""
    if orjson is None:
        return _std_dumps(value)
    try:
        return orjson.dumps(value, default=_default, option=_OPTS).decode()
    except TypeError:  # a big int, a non-str key, a lone surrogate: the standard library's way
        return _std_dumps(value)


def round_trip(value: Any) -> Any:
    """``loads(dumps(value))``: ``value`` as a store reads it back, in new objects. Text orjson
    wrote back to orjson, without ``loads``'s search for long integers (orjson writes none)."""
    if orjson is not None:
        try:
            return orjson.loads(orjson.dumps(value, default=_default, option=_OPTS))
        except TypeError:  # a big int, a non-str key, a lone surrogate
            pass
    return loads(_std_dumps(value))


def _strict_default(obj: Any) -> Any:
    if isinstance(obj, float):  # numpy.float64 and other float subclasses
        return float(obj)
    if isinstance(obj, tuple):  # namedtuples
        return list(obj)
    raise TypeError(f"a value of type {type(obj).__name__} is not JSON")


def owned_copy(value: Any) -> Any:
    """``value`` as a store gives it back — lists for tuples, ``None`` for a non-finite
    number, ``"1"`` for the key ``1``, U+FFFD for a lone surrogate — in new objects that share
    nothing with ``value``; ``ValueError`` naming what JSON cannot hold (a set, bytes, a
    datetime, any other object or key, a value that contains itself), which ``dumps`` would
    write as its ``str``.

    What user code hands the engine is kept as this copy: what is judged is what is stored
    and read back after a crash, and nothing the user still holds (and may change later, from
    a thread) is shared with the run's state."""
    try:
        if orjson is None:
            raise TypeError("no orjson")
        # orjson's own text holds no long integer (it refuses them): no search for one
        return orjson.loads(orjson.dumps(value, default=_strict_default, option=_OPTS))
    except TypeError:  # refused, or a big int, a lone surrogate, a cycle: json says which
        pass
    try:
        text = json.dumps(_finite(value), separators=(",", ":"), default=_strict_default)
    except RecursionError:
        raise ValueError("it is nested too deeply, or contains itself") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None
    return loads(text)


def loads(text: str | bytes) -> Any:
    """Parse JSON text; integers of any size come back exact. A lone surrogate escaped in the
    text (``"\\ud83d"``, kept by releases before they were refused) comes back as U+FFFD:
    read as it is, nothing could print it, and every page, answer and ``show`` of its run
    failed to encode."""
    if orjson is None or _may_hold_big_int(text):
        return _texts(json.loads(text))
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN/Infinity or a lone surrogate, from older versions
        return _texts(json.loads(text))


#: Texts ``loads_all`` searches for a long integer at once (bounds the joined copy it makes).
_SEARCHED_AT_ONCE = 256


def loads_all(texts: Sequence[str]) -> list[Any]:
    """``[loads(t) for t in texts]``, with one search for a long integer over a few hundred
    texts at a time (joined by newlines: no run of digits spans two) instead of one search
    each, a few thousand instructions less per text (a result reading back a long run's
    versions parses thousands of short values). A run found sends that group text by text
    through ``loads``, which decides each as it always does."""
    if orjson is None:
        return [loads(t) for t in texts]
    out: list[Any] = []
    for i in range(0, len(texts), _SEARCHED_AT_ONCE):
        group = texts[i : i + _SEARCHED_AT_ONCE]
        if _may_hold_big_int("\n".join(group)):
            out += [loads(t) for t in group]
            continue
        for t in group:
            try:
                out.append(orjson.loads(t))
            except orjson.JSONDecodeError:  # NaN/Infinity or a lone surrogate: as ``loads``
                out.append(_texts(json.loads(t)))
    return out


def _texts(value: Any) -> Any:
    """``value`` with each string (and key) holding a lone surrogate made whole (U+FFFD); the
    other values as they are (a stored NaN reads back as NaN). Only on the standard library's
    path, which ``orjson`` leaves for these rare texts."""
    if isinstance(value, str):
        return _whole_text(value)
    if isinstance(value, dict):
        return {_whole_text(k): _texts(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_texts(v) for v in value]
    return value


class NumberRangeError(ValueError):
    """A JSON number no stored value can hold: beyond a float's range (``1e999``) or an
    integer of more digits than Python converts."""


def refuse_constant(name: str) -> Any:
    """``json.loads``'s ``parse_constant``: NaN and Infinity are not JSON values."""
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NumberRangeError(f"the number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # Python's limit on the digits of an int made from text
        raise NumberRangeError(f"a number of {len(text):,} digits is too long") from None


class DuplicateKeyError(ValueError):
    """A JSON object that gives a key twice (``{"value": 1, "value": 2}``): which one was
    meant is not known (a JSON reader keeps the last, silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"the key {key!r} is given twice in one object")
            seen.add(key)
    return out


def strict_loads(text: str) -> Any:
    """What a person typed, as strict JSON: ``ValueError`` (a ``json.JSONDecodeError`` for
    text that is not JSON) for ``NaN`` and ``Infinity``, ``NumberRangeError`` for a number
    out of range — values the stores would otherwise write as ``null`` —, and
    ``DuplicateKeyError`` for an object that gives a key twice."""
    try:
        return json.loads(
            text,
            parse_constant=refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:  # '[' * 50_000: deeper than Python's stack
        raise ValueError("nested too deeply to be a value") from None


MAX_DEPTH = 256  # a person's value nested deeper is refused (check_value)


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` deep (without recursion:
    a value that contains itself is found too deep, not looped over)."""
    # only containers are pushed: a scalar has no depth of its own (pushing every string and
    # number of a reply of 100,000 edits was most of its check)
    if not isinstance(value, _NESTS):
        return False
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v
        if not children:
            continue
        if depth >= limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, _NESTS))
    return False


_NESTS = (dict, list, tuple)


def check_value(value: Any, *, field: str) -> None:
    """Refuse (``ConfigError``) a value that is not strict JSON: a non-finite number, or
    anything JSON cannot hold (sets, objects), which the stores would change on the way; or
    nested more than ``MAX_DEPTH`` deep (a store's writer recurses a level at a time: deeper,
    the edit's commit failed with a ``RecursionError``, a 500 or an "internal error")."""
    if deeper_than(value, MAX_DEPTH):
        raise ConfigError(
            f"the value must be JSON nested at most {MAX_DEPTH} deep (lists and objects)",
            field=field,
        )
    try:
        json.dumps(value, allow_nan=False)
        _str_keys(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"the value must be JSON (finite numbers): {exc}", field=field) from None


def _str_keys(value: Any) -> None:
    """``json.dumps`` writes ``{1: "a"}`` as ``{"1": "a"}``: a value that changes on the way.
    A string holding a lone surrogate (JSON's ``"\\ud800"``) is stored escaped, but is no
    text: every page, API answer or export that prints it as UTF-8 would fail on it."""
    if isinstance(value, str):
        not_text(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"object keys must be strings, not {type(k).__name__} {k!r}")
            not_text(k)
            _str_keys(v)
    elif isinstance(value, list | tuple):
        for v in value:
            _str_keys(v)


def check_text(text: Any, *, field: str) -> None:
    """Refuse (``ConfigError``) a person's text that a store cannot keep in a column: a NUL
    character (PostgreSQL's text refuses it) or a lone surrogate (no page, export or answer
    can print it; the audit log that records it cannot be changed)."""
    if not isinstance(text, str):
        return
    if "\x00" in text:
        raise ConfigError("holds a NUL character, which the store does not keep", field=field)
    try:
        not_text(text)
    except ValueError as exc:
        raise ConfigError(str(exc), field=field) from None


def check_given_text(text: Any, *, field: str) -> None:
    """``check_text`` for text a caller may leave out (a note, a person's name): ``None`` or a
    string. Anything else is refused naming the field, not failed on deep inside (``len`` of an
    int, a list bound as a column, ``.strip`` of a number)."""
    if text is None:
        return
    if not isinstance(text, str):
        raise ConfigError(f"must be text, got {type(text).__name__}", field=field)
    check_text(text, field=field)


def lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate (escaped: ``\\ud83d``) in a string, key or item of ``value``;
    None when every string is text."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str) and not v.isascii():
            try:
                v.encode("utf-8")  # in C: a model's 5 MB reply is checked in milliseconds
            except UnicodeEncodeError as exc:
                return v[exc.start].encode("utf-8", "backslashreplace").decode("ascii")
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return None


def not_text(text: str) -> None:
    """``ValueError`` when ``text`` holds a lone surrogate (it cannot be written as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("utf-8", "backslashreplace").decode("ascii")
        raise ValueError(f"the text holds a lone surrogate ({bad}), which is not text") from None


class JsonLineError(ValueError):
    """A JSON Lines file's line that holds no JSON value: ``line`` (1-based) and what is wrong
    with it (``message``), for the reader to name its file in its own error."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_lines(
    lines: Iterable[bytes], not_json: Callable[[json.JSONDecodeError], str]
) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of a JSON Lines file read as bytes,
    or ``JsonLineError`` at the first bad one (``not_json``: how the reader words a line that
    is not JSON). Each line is decoded on its own: a text stream decodes ahead in 8 KB
    chunks, so its ``UnicodeDecodeError`` came up lines before the bad one, naming the wrong
    line. The run-trace and LDB readers read through this one loop."""
    for n, raw in enumerate(lines, 1):
        if n == 1:
            raw = without_bom(raw)
        elif raw.startswith(_BOM):  # JSON's own words: "decode using utf-8-sig"
            raise JsonLineError(
                n,
                "starts with a byte-order mark (U+FEFF), which only a file's start may hold "
                "(two files joined?): remove it",
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonLineError(n, f"not UTF-8 text ({exc.reason})") from None
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JsonLineError(n, not_json(exc) + _bare_cr(text)) from None
        except RecursionError:
            raise JsonLineError(n, "nested too deeply") from None
        except ValueError:  # not a JSONDecodeError: an integer past the int-from-text limit
            raise JsonLineError(n, "a number has too many digits to read") from None
        # A lone surrogate comes only from a \u escape (UTF-8 cannot hold one): JSON reads
        # "\ud800" into a string no file or store can write, the reader's internal error
        # later (an LDB import's --out). Walked only where the line has such an escape.
        if _SURROGATE_ESCAPE.search(text) and (bad := lone_surrogate(value)) is not None:
            raise JsonLineError(n, f"holds a lone surrogate ({bad}), which is not text")
        yield n, value


_BOM = b"\xef\xbb\xbf"


def without_bom(first: bytes) -> bytes:
    """A file's first line without a leading UTF-8 byte-order mark (Windows editors write one;
    JSON's reader refused it in its own words, "decode using utf-8-sig"). A mark is not a
    mistake, as in a tasks file or a spec."""
    return first[len(_BOM) :] if first.startswith(_BOM) else first


def _bare_cr(line: str) -> str:
    r"""What to add to "line N: not JSON" when the line holds a bare carriage return: a file
    whose lines end in ``\r`` alone (old Mac tools) reads as one line of several values. JSON
    Lines ends each line with ``\n`` (``\r\n`` too: JSON ignores the ``\r``), and a ``\r``
    between a value's tokens is JSON whitespace, so it is not read as a line end: said."""
    if "\r" not in line.rstrip("\r\n"):
        return ""
    return (
        "; its lines end in a bare carriage return (\\r), not a newline: JSON Lines ends "
        "each line with \\n or \\r\\n (convert it, e.g. tr '\\r' '\\n')"
    )
