"""A recall: the feedback memory put in a context, what people said first.

People's feedback (every signal but ``reflection``) and the loop's own reflections are two
bounded store searches (``MemorySearch.reflections``), asked in one ``Store.memory_recall``;
reflections are read, and shown, only when people's feedback leaves slots free. ``FeedbackMemory.retrieve``, each cycle's recall
(``_cycle``) and ``GroupRecall`` (runs sharing an event loop) all go through ``recall``.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._memory import MemoryItem, rank
from ._memory_search import RECALL_RANKED, memory_search

if TYPE_CHECKING:
    from .store._base import MemoryFound, MemorySearch, Store

__all__ = ["RECALL_LIMIT", "recall", "recall_searches"]

RECALL_LIMIT = 5
"""The items a cycle's context is given from feedback memory (both sides together)."""


def recall_searches(
    scopes: Iterable[tuple[str, str | None]],
    query: str,
    limit: int = RECALL_LIMIT,
    ranked: int | None = RECALL_RANKED,
) -> tuple[MemorySearch, MemorySearch]:
    """A recall's two store searches: what people said (every signal but ``reflection``),
    then what the loop told itself (reflections). Their rows, in that order, go to ``rank``:
    a person's feedback always comes before a reflection, however many reflections repeat
    the query's words, and reflections fill only the slots people's feedback leaves free.
    Each is bounded as one search was (``limit``, ``ranked``)."""
    return _searches(tuple(scopes), query, limit, ranked)


@functools.lru_cache(maxsize=256)
def _searches(
    scopes: tuple[tuple[str, str | None], ...], query: str, limit: int, ranked: int | None
) -> tuple[MemorySearch, MemorySearch]:
    # Every cycle's recall asks again, mostly for the same pair (``_memory_search._search``'s
    # cache): one look-up a cycle for both, not one each.
    people = memory_search(scopes, query, limit, ranked, reflections=False)
    return people, memory_search(scopes, query, limit, ranked, reflections=True)


def recall(
    store: Store,
    scopes: Sequence[tuple[str, str | None]],
    query: str,
    limit: int = RECALL_LIMIT,
    ranked: int | None = RECALL_RANKED,
    found: MemoryFound | None = None,
) -> builtins.list[MemoryItem]:
    """At most ``limit`` items for a context: people's feedback first, ranked among itself,
    then, only if it leaves slots free, reflections (``recall_searches``). Both are read in
    one ``Store.memory_recall`` (one probe answers both sides of a scope with no memory);
    ``found``: that answer, already read (``GroupRecall``). Read again here only when the
    same feedback in several scopes took the spare rows."""
    if limit <= 0:
        return []
    people, loop = recall_searches(scopes, query, limit, ranked)
    if found is None:
        [found] = store.memory_recall([(people, loop, limit)])
    rows, theirs = found
    if not rows and theirs is not None and not theirs:
        return []  # (most loops keep no memory)
    mine, out = _fill(store, people, rows, (), scopes, limit)
    if len(out) == limit or (theirs is not None and not theirs):
        return out  # full, or no reflection to add: ranked once
    return _fill(store, loop, theirs, mine, scopes, limit)[1]


def _fill(
    store: Store,
    search: MemorySearch,
    rows: Sequence[Mapping[str, Any]] | None,
    before: Sequence[Mapping[str, Any]],
    scopes: Sequence[tuple[str, str | None]],
    limit: int,
) -> tuple[Sequence[Mapping[str, Any]], builtins.list[MemoryItem]]:
    """``search``'s rows (``rows``, or read) and the items of ``before`` and them; read
    again, asking for more, while the same feedback in several scopes took the spare rows."""
    while True:
        if rows is None:
            [rows] = store.memory_search([search])
        got = [*before, *rows]
        out = rank(got, scopes=scopes, limit=limit) if got else []  # (most loops keep none)
        if len(out) == limit or len(rows) < search.limit:
            return rows, out
        search = dataclasses.replace(search, limit=2 * search.limit)
        rows = None
