"""Feedback memory's text search: the form feedback is compared in, the words of a query, and
the store search a recall asks (``MemorySearch``), with its bounds."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError

if TYPE_CHECKING:
    from .store._base import MemorySearch

__all__ = [
    "MAX_QUERY_TERMS",
    "RECALL_RANKED",
    "RELEVANCE_FLOOR",
    "check_ranked",
    "feedback_key",
    "memory_search",
    "normalise_text",
    "query_terms",
]


RELEVANCE_FLOOR = 0.1
"""Relevance of an item that shares no word with the query (or of every item for an empty
query): it still ranks by strength, below items that match."""

RECALL_RANKED: int | None = 1_000
"""The most matches a recall scores for relevance (``Loop(recall_ranked=...)``,
``FeedbackMemory.retrieve(ranked=...)``): the newest, so a recall costs the same however many
items share a word with the query; an older match ranks as an item matching none (by strength,
at the floor). None scores every match: a recall's cost then grows with them (≈ 6 µs each)."""

MAX_QUERY_TERMS = 32
"""Distinct query words searched for (the first ones): a cycle's query is its goal and its
findings, and each word is one more index lookup."""


# --- text normalisation and relevance ----------------------------------------------------
_WORD = re.compile(r"\w+")
_STOPWORD_TEXT = (
    "a an and are as at be but by do does for from has have in is it its not of on or so "
    "that the their them then there these this to was were will with"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def normalise_text(text: str) -> str:
    """The form two pieces of feedback are compared in: case, spacing and final punctuation
    do not matter."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(text.split()).rstrip(".!;")


def feedback_key(text: str, rule: Mapping[str, Any] | None) -> tuple[str, str]:
    """Identity of a piece of feedback across scopes: normalised text and canonical rule."""
    canon = json.dumps(rule, sort_keys=True, separators=(",", ":"), default=str) if rule else ""
    return normalise_text(text), canon


def query_terms(query: str) -> list[str]:
    """The words of ``query`` worth searching for, once each, in order: stop words and
    one-letter words say nothing about relevance. Plurals are folded by the store's stemmer."""
    out: dict[str, None] = {}
    for word in _WORD.findall(unicodedata.normalize("NFKC", query).casefold()):
        if len(word) >= 2 and word not in _STOPWORDS:
            out.setdefault(word)
        if len(out) == MAX_QUERY_TERMS:
            break
    return list(out)


def memory_search(
    scopes: Iterable[tuple[str, str | None]],
    query: str,
    limit: int = 5,
    ranked: int | None = RECALL_RANKED,
    reflections: bool | None = None,
) -> MemorySearch:
    """The store search that ranks the feedback of ``scopes`` for ``query`` (the newest
    ``ranked`` matches scored: ``RECALL_RANKED``). Asks for more than ``limit``: the same
    feedback held in several scopes comes once (``rank``). ``reflections``: which items
    (``MemorySearch.reflections``; a recall asks ``recall_searches``)."""
    given = []
    for s, k in scopes:  # (a loop: every cycle's recall)
        given.append((s, k or ""))
    return _search(tuple(given), query, limit, ranked, reflections)


@functools.lru_cache(maxsize=256)
def _search(
    scopes: tuple[tuple[str, str], ...],
    query: str,
    limit: int,
    ranked: int | None,
    reflections: bool | None,
) -> MemorySearch:
    # Every cycle asks again, mostly with the same scopes and query (the goal and the same
    # findings): a search is immutable, so the same one is handed out again.
    from .store._base import MemorySearch

    return MemorySearch(
        scopes=scopes,
        terms=tuple(query_terms(query)),
        limit=2 * limit + 5,
        floor=RELEVANCE_FLOOR,
        ranked=ranked,
        reflections=reflections,
    )


def check_ranked(value: object, name: str = "ranked") -> int | None:
    """``value`` as a cap on the matches a recall scores: a positive integer, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"must be a positive integer or None, got {value!r}", field=name)
    if value > _MAX_RANKED:  # the stores' LIMIT is a 64-bit integer: refused there, mid-run
        raise ConfigError(f"must be at most {_MAX_RANKED} (None: no cap), got {value}", field=name)
    return value


_MAX_RANKED = 2**63 - 1
