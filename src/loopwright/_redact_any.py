"""The redaction net's clean case in one pass: every word ``_redact_shapes.triggered`` answers
on, looked for at once by an Aho–Corasick automaton compiled in Rust (``ahocorasick-rs``),
where the prefilter runs about thirty substring tests, a ``bytes.translate`` and a regular
expression over the same text (ratio55: 67 k instructions on a trivial cycle's record, the
automaton 16 k).

A prefilter of the prefilter, never a second judge: where the automaton finds none of its
words, ``_triggered(text, passw=True)`` is ``False`` — each way it answers otherwise needs one
of them in the text (a trigger, or ``passw``, ``private``, ``session``); where it finds one, or
the package is missing (``ImportError``: the substring tests decide alone, as before), the
prefilter itself decides. What is masked, and what is stored, is the same with and without the
package (``tests/unit/test_redact_any55.py``).
"""

from __future__ import annotations

from typing import Any

from ._redact_shapes import TRIGGERS

# Every trigger, and the three words ``triggered``'s clean-scan answer also reads: ``passw``
# (a key holding it is a secret's name) and ``private`` and ``session`` (its ``None``: a key
# the key pattern must look for may be there). All ASCII: found in a text's UTF-8 bytes exactly
# where they are in the text (no byte of a longer character is an ASCII one).
WORDS: tuple[str, ...] = tuple(sorted({*TRIGGERS, "passw", "private", "session"}))


def _automaton() -> Any:
    """The automaton of ``WORDS``; None where the package is missing."""
    try:
        import ahocorasick_rs
    except ImportError:  # pragma: no cover - a core dependency; the substring tests still work
        return None
    # Over bytes, not ``str``: the ``str`` automaton maps each match back to a character
    # index, a pass over the text as long as the search itself (27 k against 16 k).
    return ahocorasick_rs.BytesAhoCorasick([w.encode() for w in WORDS])


_AUTOMATON: Any = _automaton()


def surely_untriggered(low: str) -> bool:
    """Whether lower-cased ``low`` surely holds none of ``WORDS`` (then
    ``_triggered(low, passw=True)`` is False); False where it may, or with no automaton."""
    return _AUTOMATON is not None and not _AUTOMATON.find_matches_as_indexes(
        low.encode("utf-8", "surrogatepass")
    )
