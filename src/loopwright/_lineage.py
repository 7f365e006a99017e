"""A fork's lineage: the run it was forked from, the run that one was forked from, and so on
(``loopwright show``'s header and ``show --json``'s ``lineage``)."""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import RunNotFoundError
from .store import RunRecord, Store

__all__ = ["MAX_LINKS", "Lineage", "fork_lineage", "lineage_text"]

#: The most origins named: a longer chain is cut there (said ``…``), as is a chain that comes
#: back to a run already named (the store's records can only say so if they were altered).
MAX_LINKS = 10


@dataclass(frozen=True, slots=True)
class Lineage:
    """``links``: ``(origin run id, the cycle forked at)``, nearest origin first. ``more``:
    the chain goes on past the last link (cut at ``MAX_LINKS``, or it comes back to a run
    already named); ``missing``: the last link's run is not in the store (deleted)."""

    links: tuple[tuple[str, int | None], ...]
    more: bool = False
    missing: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "forks": [{"run_id": r, "forked_at": at} for r, at in self.links],
            "more": self.more,
            "missing": self.missing,
        }


def fork_lineage(store: Store, run: RunRecord, *, limit: int = MAX_LINKS) -> Lineage:
    """``run``'s origins, nearest first, at most ``limit`` of them, each read once; a chain
    that comes back to a run already named stops there."""
    links: list[tuple[str, int | None]] = []
    seen = {run.run_id}
    cur = run
    while cur.forked_from:
        if len(links) >= limit or cur.forked_from in seen:
            return Lineage(tuple(links), more=True)
        links.append((cur.forked_from, cur.forked_at))
        seen.add(cur.forked_from)
        try:
            cur = store.get_run(cur.forked_from)
        except RunNotFoundError:
            return Lineage(tuple(links), missing=True)
    return Lineage(tuple(links))


def lineage_text(lineage: Lineage) -> str:
    """The lineage in words, after the first link (which the caller says its own way):
    ``, which is a fork of run A at cycle M`` for each further origin, ``, …`` when cut."""
    said = "".join(f", which is a fork of run {r} at cycle {at}" for r, at in lineage.links[1:])
    if lineage.more:
        said += ", …"
    return said
