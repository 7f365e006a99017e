"""``GET /api/runs/{id}`` as a stream: the whole run's document written a page of the store at
a time (its events, checkpoints and each part's versions read in pages), never built whole.

The bytes are those FastAPI wrote of the document built whole (the same keys in the same
order, pydantic's JSON serializer): a client reads the same JSON, a long run's
server holds a page, not the run (40 MB of JSON and ~420 MB of objects at 20,000 cycles).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import TypeAdapter

from .._contract import TERMINAL_STATUSES
from .._mid_cycle_records import AfterEnd, by_id, in_order_with_concluded
from .._state import Part, TaskState, Version
from ..store import Approval, RunRecord, Store
from ._timeline import in_row_order
from ._views import (
    ChartPoint,
    chart_point,
    edits_view,
    ended_row,
    event_view,
    held_or_stored,
    journal_view,
    timeline_row,
    version_views,
)

__all__ = ["CHUNK_CHARS", "ITEMS_A_CHUNK", "dump", "run_document"]

ITEMS_A_CHUNK = 32  # list items written together (one chunk of the response each)
CHUNK_CHARS = 64 * 1024  # or fewer, when they are large (a version's value and diff)


# FastAPI writes a route's returned value with pydantic's JSON serializer (not ``json.dumps``:
# its floats read ``1e-6``, not ``1e-06``): the same one, for the same bytes.
_JSON: TypeAdapter[Any] = TypeAdapter(Any)


def dump(value: Any) -> str:
    """``value`` as FastAPI writes a route's returned value (``TypeAdapter.dump_json``)."""
    return _JSON.dump_json(value).decode()


def _array(items: Iterable[Any]) -> Iterator[str]:
    """A JSON array of ``items``, written ``ITEMS_A_CHUNK`` at a time (fewer when they are
    large: a chunk holds about ``CHUNK_CHARS``)."""
    yield "["
    batch: list[str] = []
    size, first = 0, True
    for item in items:
        text = dump(item)
        batch.append(text)
        size += len(text)
        if len(batch) >= ITEMS_A_CHUNK or size >= CHUNK_CHARS:
            yield ("" if first else ",") + ",".join(batch)
            first, batch, size = False, [], 0
    if batch:
        yield ("" if first else ",") + ",".join(batch)
    yield "]"


def _versions(store: Store, run_id: str, ref: str, part: Part) -> Iterator[Version]:
    """Every version of ``part`` up to its count, oldest first, read a page at a time
    (``held_or_stored``: those the state holds are the newer truth)."""
    return held_or_stored(part, lambda: store.iter_versions(run_id, ref))


def _artifacts(store: Store, run_id: str, state: TaskState) -> Iterator[str]:
    yield "["
    for i, (ref, part) in enumerate(state.iter_parts()):
        head = dump({"ref": ref, "status": part.status})
        yield ("," if i else "") + head[:-1] + ',"versions":'
        yield from _array(version_views(_versions(store, run_id, ref, part), 0, None))
        yield "}"
    yield "]"


def run_document(
    store: Store,
    rec: RunRecord,
    head: dict[str, Any],
    state: TaskState,
    approvals: list[Approval],
) -> Iterator[str]:
    """The run's document: ``head`` (``run``, ``next_action``, ``next_action_here``, written
    as given), then its journal, every event, the plan, every cycle's timeline row and chart
    point, every version of each part (with its diff), the approvals, the edits and the
    packet — read from ``store`` as they are written."""
    rid = rec.run_id
    yield dump(head)[:-1]
    yield ',"journal":' + dump(journal_view(store.journal(rid)))
    yield ',"events":'
    yield from _array(map(event_view, store.iter_events(rid)))
    yield ',"plan":' + dump([s.to_dict() for s in state.plan])
    ended = rec.status in TERMINAL_STATUSES
    points: dict[int, ChartPoint] = {}  # (the last checkpoint of a cycle wins: a rollback)
    decided = by_id(approvals)  # a parked cycle is told by the decision on its request
    after_end = AfterEnd(ended=ended, decided=decided)  # the edits' cycles, as rows are read

    def rows() -> Iterator[dict[str, Any]]:
        # each record read once: a mid-cycle one's row needs to know if its cycle concluded
        checkpoints = in_order_with_concluded(
            store.iter_checkpoints(rid),
            lambda ck: ck.record,
            lambda: store.iter_records(rid),
            lambda ck: ck.fields.get("pending"),
        )
        for ck, concluded in checkpoints:
            after_end.read(ck.record, ck.fields.get("pending"), concluded)
            point = chart_point(ck)
            if point is not None:
                points[point.cycle] = point
            row = timeline_row(ck, concluded, ended=ended, decided=decided)
            if row is not None:
                yield row

    yield ',"timeline":'
    yield from _array(itertools.chain(in_row_order(rows()), ended_row(store, rec)))
    yield ',"chart":'
    yield from _array(
        {"cycle": p.cycle, "best_score": p.best, "spent_usd": p.spent, "improved": p.improved}
        for p in (points[c] for c in sorted(points))
    )
    yield ',"artifacts":'
    yield from _artifacts(store, rid, state)
    yield ',"approvals":' + dump([a.to_dict() for a in approvals])
    # (an edit after a parked cycle ended the run: in that cycle, as ``show`` lists it)
    yield ',"edits":' + dump(edits_view(store.events_of_kinds(rid, {"edited"}), after_end.found))
    yield ',"packet":' + dump(rec.packet) + "}"
