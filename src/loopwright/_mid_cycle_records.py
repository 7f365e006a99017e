"""A run's checkpoints (or records) in order, each with the cycles concluded: what the views of
a whole run (``show --json``, ``GET /api/runs/{id}``) need to tell a mid-cycle record whose
cycle concluded later (its concluding record shows the same) from one whose cycle never did.

They read every record twice, a page at a time: first the concluded cycles, then the records
to show (7-15 % of their time). Here the records are read once, in order: a mid-cycle record
is held back, with what follows it, until a record concluding its cycle is read (next, as a
rule) or the records end; a run that holds back more than ``HOLD`` reads the concluded
cycles of every record then, as before, and holds back nothing more.

A mid-cycle record whose cycle never concluded (a cycle parked for approval, or one whose
effects did not complete) is shown by every timeline as ``unapplied`` makes it: the proposal,
visible verdicts and spend its checkpoint's write-ahead state (``pending``) holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "HOLD",
    "MID_CYCLE",
    "in_order_with_concluded",
    "never_concluded",
    "shown_records",
    "unapplied",
]

#: Decisions of the records written inside a cycle: a cycle's effects write one before they
#: run, a parked cycle one when it parks. The cycle concluded if a later (or, after a
#: rollback, an earlier) record holds its proposal.
MID_CYCLE = frozenset({"parked", "effects"})
#: The most checkpoints held back at once before the concluded cycles are read whole.
HOLD = 256

_T = TypeVar("_T")


def in_order_with_concluded(
    items: Iterable[_T],
    record_of: Callable[[_T], dict[str, Any] | None],
    every_record: Callable[[], Iterable[tuple[int, int, dict[str, Any] | None]]],
) -> Iterator[tuple[_T, set[Any]]]:
    """``items`` (a run's checkpoints or records, oldest first, read once), each with the
    cycles concluded (``store._records.concluded_cycles``) as far as it needs: the set holds
    its cycle if its cycle concluded at all in the run, when it is a mid-cycle record. The set
    grows as the items are read: read it (never change it) for an item before taking the
    next. ``every_record``
    (``Store.iter_records`` of the run) is read only when more than ``HOLD`` items wait."""
    concluded: set[Any] = set()
    held: deque[_T] = deque()
    complete = False

    def waits(item: _T) -> bool:
        rec = record_of(item)
        return (
            not complete
            and rec is not None
            and "proposal" not in rec
            and rec.get("decision") in MID_CYCLE
            and rec.get("cycle") not in concluded
        )

    for item in items:
        rec = record_of(item)
        if rec and "proposal" in rec:
            concluded.add(rec.get("cycle"))
        if not held and not waits(item):
            yield item, concluded
            continue
        held.append(item)
        while held and not waits(held[0]):
            yield held.popleft(), concluded
        if len(held) > HOLD:
            concluded |= {r.get("cycle") for _s, _c, r in every_record() if r and "proposal" in r}
            complete = True
            while held:
                yield held.popleft(), concluded
    complete = True  # every record read: a cycle not concluded now never was
    while held:
        yield held.popleft(), concluded


def never_concluded(record: Mapping[str, Any] | None, concluded: set[Any]) -> bool:
    """Whether ``record`` is a mid-cycle record whose cycle never concluded (``concluded``:
    as ``in_order_with_concluded`` gives it with the record)."""
    return (
        record is not None
        and "proposal" not in record
        and record.get("decision") in MID_CYCLE
        and record.get("cycle") not in concluded
    )


def unapplied(record: Mapping[str, Any], pending: object, *, ended: bool) -> dict[str, Any] | None:
    """A never-concluded mid-cycle ``record`` (``never_concluded``) as the timelines show it,
    from its checkpoint's ``pending`` (the write-ahead state written with it): the cycle's
    proposal, visible verdicts (its held-out ones are the record's) and what it spent, which
    no other row lists; its ``decision`` says why it was not applied. ``ended``: the run has
    ended, so it never will be. None where ``pending`` holds no proposal (an older store)."""
    if not isinstance(pending, Mapping) or not isinstance(pending.get("proposal"), Mapping):
        return None
    parked = record.get("decision") == "parked"
    if parked:
        why = "parked for approval: " + ("never applied" if ended else "not applied yet")
    else:
        why = "not applied: its effects did not complete"
    return {
        "cycle": record.get("cycle"),
        "proposal": pending["proposal"],
        "visible": pending.get("visible"),
        "held_out": record.get("held_out"),
        "usage": pending.get("usage"),
        "decision": why,
    }


def shown_records(
    store: Store, run_id: str, *, ended: bool
) -> Iterator[tuple[int, dict[str, Any] | None, set[Any], dict[str, Any] | None]]:
    """The run's records, oldest first, read once a page at a time: each checkpoint's
    ``(cycle, record, concluded, shown)``, ``concluded`` as ``in_order_with_concluded`` gives
    it, ``shown`` a never-concluded mid-cycle record as ``unapplied`` makes it from its
    checkpoint's fields (else None), as the run page's rows are made."""
    rows = in_order_with_concluded(
        store.iter_fields(run_id), lambda row: row[2], lambda: store.iter_records(run_id)
    )
    for (_seq, cycle, record, fields), concluded in rows:
        shown = None
        if record is not None and never_concluded(record, concluded):
            shown = unapplied(record, fields.get("pending"), ended=ended)
        yield cycle, record, concluded, shown
