"""The Store protocol's feedback memory (``MemoryStore``, part of ``Store``; what
``loopwright._memory`` keeps and recalls)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from ._records import MemoryFound, MemoryRecall, MemorySearch

__all__ = ["MemoryStore"]


class MemoryStore(ABC):
    """Feedback memory's items (mixed into ``Store``)."""

    # --- feedback memory (``loopwright._memory``) ---------------------------------------
    # Not fenced by a run lease: people write memory too. Items are plain dicts with the keys
    # of ``MemoryItem.to_dict()``; validation is ``FeedbackMemory``'s job, but ``memory_add``
    # masks secrets and refuses held-out markers itself (``_memory.screened_row``).
    @abstractmethod
    def memory_add(self, item: Mapping[str, Any]) -> None:
        """Insert one memory item. ``ConflictError`` when its ``memory_id`` exists already."""

    @abstractmethod
    def memory_query(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
        limit: int | None = None,
        memory_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Memory items, newest first (``created_at``, then ``memory_id``, descending).

        ``scopes``: only items whose ``(scope, scope_key)`` is one of these pairs (a ``None``
        key matches any key of that scope; an empty sequence matches nothing). ``status``,
        ``memory_id``: only items with exactly that value."""

    def memory_count(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
    ) -> int:
        """How many items ``memory_query`` with these filters would return, unbounded. This
        default reads them all; the built-in stores count in the database."""
        return len(self.memory_query(scopes=scopes, status=status))

    def memory_recall(self, recalls: Sequence[MemoryRecall]) -> list[MemoryFound]:
        """Each recall's rows (``_recall.recall``): its people's search's, and its reflections'
        search's only when people's feedback came back with fewer rows than its ``slots``
        (None: not read), read in one go. This default asks ``memory_search`` for the people's
        searches, then for the short ones' reflections; the built-in stores answer a recall's
        two sides with one probe on one connection (an empty scope answers both unsearched)."""
        people = self.memory_search([r[0] for r in recalls])
        if len(people) != len(recalls):
            raise ValueError(f"{len(people)} answers to {len(recalls)} memory searches")
        short = [i for i, rows in enumerate(people) if len(rows) < recalls[i][2]]
        out: list[MemoryFound] = [(rows, None) for rows in people]
        if short:
            loop = self.memory_search([recalls[i][1] for i in short])
            if len(loop) != len(short):
                raise ValueError(f"{len(loop)} answers to {len(short)} memory searches")
            for i, rows in zip(short, loop, strict=True):
                out[i] = (people[i], rows)
        return out

    @abstractmethod
    def memory_search(self, searches: Sequence[MemorySearch]) -> list[list[dict[str, Any]]]:
        """Each search's items (dicts as ``memory_query``'s), best first, at most its
        ``limit``, read in one go. Rank: ``strength × relevance`` (full-text relevance to the
        terms, divided by the best match's in those scopes, scaled into [floor, 1]; rounded to
        9 places), ties by scope (task, project, global), strength, newer ``updated_at``, then
        ``memory_id``."""

    @abstractmethod
    def memory_set_status(
        self,
        memory_id: str,
        status: str,
        *,
        by: str,
        now: float,
        expect: Sequence[str] | None = None,
        not_by: str | None = None,
    ) -> dict[str, Any]:
        """Atomically set an item's status, append ``{"status", "by", "at": now}`` to its
        history and set ``updated_at``; returns the item. Setting the status it already has
        writes nothing. ``expect``: the current status must be one of these, else
        ``ConflictError``. ``not_by``: a person who may not make the change, checked in the
        same transaction: ``NotPermittedError`` when they added the item (``person_key``).
        ``MemoryNotFoundError`` for an unknown id."""
