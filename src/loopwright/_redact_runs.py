"""Pieces of a registered secret (``_redact``): a run of at least ``RUN_MIN`` characters of a
value given to ``register_secret``, in any case, is masked through to the end of the run.

A server that echoes the ``Authorization`` header it was sent can echo it changed: upper-cased,
without its ``sk-proj-`` prefix, cut in two by a line break, one character a word. The exact
search finds none of these. A registered value is a known string, so a long enough piece of it
is as good as the whole. Why 16: a piece that long of a random API key (about 95 bits in base
62, 64 in hex) does not occur in ordinary text, a digest or another key by chance, while a
shorter one could (a key's ``sk-proj-`` prefix, 8 characters, is every such key's); and it is
short enough to find a key's tail after a prefix of any usual length (``sk-proj-``,
``sk-ant-api03-``) and, through a line break, both pieces of a key cut once where one piece
holds 16. What stays in clear is a piece under 16 characters standing alone. 12 would need
a gram at every 5th offset instead of every 9th: about twice the substring tests on
every record (bench/RESULTS.md, stop 52).

Cheap on every write: at registration, each value's lower-cased 8-grams at every 9th offset are
indexed (``GRAM``, ``STEP``: any run of ``RUN_MIN`` = 9 + 8 − 1 characters holds one whole),
and the same grams with a space between characters (a key spelled out). A text is tested with
one substring search per gram (in C; a 42-character key has 4 grams, 8 needles); only a text
holding one is read further: from each place a gram is found the run is followed both ways
through the value, across up to 4 characters of whitespace or escaped ``\\n``, ``\\r``,
``\\t`` between two of its characters (a line break, a key spelled out), and masked where it
holds ``RUN_MIN`` of the value's characters or more. A value shorter than ``RUN_MIN`` has no
pieces: it is masked only whole.
"""

from __future__ import annotations

import threading

from ._redact_shapes import REDACTED

RUN_MIN = 16
"""The fewest characters of a registered value masked where they stand alone."""

GRAM = 8
STEP = 9  # RUN_MIN = STEP + GRAM - 1: a run of RUN_MIN characters holds a whole indexed gram

_GAP_MAX = 4  # characters of whitespace (or escapes) skipped between two of a value's
_ESCAPES = ("\\n", "\\r", "\\t")

_lock = threading.Lock()
_Index = tuple[object, tuple[str, ...], dict[str, tuple[tuple[int, int], ...]], tuple[str, ...]]
# (the registry it indexes, lower-cased values, {gram: ((value index, offset), …)}, the grams
# longest first): replaced whole. It belongs to one registry object
# (``_redact_registry.registered_names``): a registry replaced has no pieces until a value is
# registered in it.
_index: list[_Index] = [(None, (), {}, ())]


def register_runs(value: str, registry: object) -> None:
    """Index ``value``'s grams for ``registry`` (a value shorter than ``RUN_MIN`` has none: it
    is masked only whole, by the exact search)."""
    low = value.lower()
    if len(low) < RUN_MIN or len(low) != len(value):
        return
    with _lock:
        owner, values, grams, _ = _index[0]
        if owner is not registry:
            values, grams = (), {}
        if low in values:
            return
        k = len(values)
        new = dict(grams)
        for j in range(0, len(low) - GRAM + 1, STEP):
            g = low[j : j + GRAM]
            for needle in (g, " ".join(g)):
                new[needle] = (*new.get(needle, ()), (k, j))
        _index[0] = (registry, (*values, low), new, tuple(sorted(new, key=len, reverse=True)))


def runs_state() -> _Index:
    """The index as it is now (for ``restore_runs``: ``_redact.reset``)."""
    return _index[0]


def restore_runs(state: _Index | None = None) -> None:
    """Put back the index ``runs_state`` returned (None: no pieces, as a process starts)."""
    with _lock:
        _index[0] = (None, (), {}, ()) if state is None else state


def _needles(registry: object) -> tuple[str, ...]:
    index = _index[0]
    return index[3] if index[0] is registry else ()


def any_run(low: str, registry: object) -> bool:
    """Whether lower-cased text ``low`` may hold a piece of a value registered in
    ``registry`` (a gram of one: ``mask_runs`` decides)."""
    for g in _needles(registry):  # noqa: SIM110  (no generator: on every record's text)
        if g in low:
            return True
    return False


def _gap_after(low: str, p: int) -> int:
    """How many characters of whitespace or escapes start at ``p`` (at most ``_GAP_MAX``)."""
    n = 0
    while n < _GAP_MAX and p + n < len(low):
        if low[p + n].isspace():
            n += 1
        elif low[p + n] == "\\" and low[p + n : p + n + 2] in _ESCAPES:
            n += 2
        else:
            break
    return n if n <= _GAP_MAX else 0


def _gap_before(low: str, p: int) -> int:
    """How many characters of whitespace or escapes end at ``p`` (at most ``_GAP_MAX``)."""
    n = 0
    while n < _GAP_MAX and p - n > 0:
        if low[p - n - 1].isspace():
            n += 1
        elif p - n >= 2 and low[p - n - 2 : p - n] in _ESCAPES:
            n += 2
        else:
            break
    return n if n <= _GAP_MAX else 0


def _run(low: str, src: str, i: int, j: int) -> tuple[int, int, int]:
    """The run of ``src`` through text position ``i`` (where ``src[j]`` is): its start and end
    in the text and how many of ``src``'s characters it holds."""
    p, q = i, j
    while q < len(src):
        if p < len(low) and low[p] == src[q]:
            p, q = p + 1, q + 1
            continue
        gap = _gap_after(low, p)
        if gap and p + gap < len(low) and low[p + gap] == src[q] and q > j:
            p += gap
            continue
        break
    end, q_end = p, q
    p, q = i, j
    while q > 0:
        if p > 0 and low[p - 1] == src[q - 1]:
            p, q = p - 1, q - 1
            continue
        gap = _gap_before(low, p)
        if gap and p - gap > 0 and low[p - gap - 1] == src[q - 1]:
            p -= gap
            continue
        break
    return p, end, q_end - q


def mask_runs(s: str, registry: object) -> str:
    """``s`` with each run of ``RUN_MIN`` or more characters of a value registered in
    ``registry`` masked."""
    owner, values, grams, needles = _index[0]
    if owner is not registry or not needles or len(s) < RUN_MIN:
        return s
    low = s.lower()
    if len(low) != len(s):  # (a character whose lower case is longer: read as it is)
        low = "".join(c if len(c.lower()) != 1 else c.lower() for c in s)
    spans: list[tuple[int, int]] = []
    for g in needles:
        i = low.find(g)
        while i >= 0:
            for k, j in grams[g]:
                start, end, held = _run(low, values[k], i, j)
                if held >= RUN_MIN:
                    spans.append((start, end))
            i = low.find(g, i + 1)
    if not spans:
        return s
    spans.sort()
    out: list[str] = []
    done = 0
    for start, end in spans:
        if end <= done:
            continue
        if start < done:
            start = done
        else:
            out += (s[done:start],)
        if not out or out[-1] != REDACTED:
            out.append(REDACTED)
        done = end
    return "".join(out) + s[done:]
