"""The run trace as JSON lines (format ``loopwright.trace/1``).

Every line has the same seven keys::

    {"format": "loopwright.trace/1", "run_id": str, "seq": int, "ts": float,
     "cycle": int, "kind": str, "data": {...}}

Line 1 is the header (``seq`` 0, ``kind`` ``"run"``, ``ts`` the run's creation time, ``cycle``
the run's last completed cycle); its ``data`` describes the run. The lines after it are the
run's events in the order they were appended, ``seq`` 1, 2, … (an event's store id is in
``event_id``, an eighth key those lines have). ``ts`` is seconds since the Unix epoch.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

from .._redact import redact
from ..store import Event, RunRecord, Store
from ._otlp import trace_id_for

__all__ = ["TRACE_FORMAT", "build_records", "iter_trace_records", "trace_records", "write_jsonl"]

TRACE_FORMAT = "loopwright.trace/1"

#: Run fields left out of the header: the task (it can be large, and holds the held-out key
#: that only evaluation may see; ``export eval-cases`` carries it).
_HEADER_OMITS = ("task",)


def trace_records(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run (id, unique prefix or task key) as trace records: the header, then its events."""
    rec = store.get_run(run_id)
    return build_records(rec, store.events(rec.run_id))


def iter_trace_records(store: Store, run_id: str) -> Iterator[dict[str, Any]]:
    """``trace_records``, yielded as the log is read a page at a time — twice: the header
    counts the events first — so a long run's trace is written without holding its every
    event (155 MB at 20,000 cycles). Events appended between the two reads are left out, as
    ``trace_records`` read earlier would."""
    rec = store.get_run(run_id)
    count = sum(store.event_counts(rec.run_id).values())  # one GROUP BY, not a read of all
    yield redact(_header(rec, count))
    # masked a batch at a time: ``redact`` masks a list's items as it masks each alone, and a
    # clean batch (the common case) is told by one scan of its text, not one a line
    lines = (
        event_line(rec, seq, ev)
        for seq, ev in enumerate(itertools.islice(store.iter_events(rec.run_id), count), 1)
    )
    while batch := list(itertools.islice(lines, _BATCH)):
        yield from redact(batch)


_BATCH = 64


def build_records(run: RunRecord, events: Sequence[Event]) -> list[dict[str, Any]]:
    """Trace records of ``run`` from its events (a pure function of its inputs)."""
    lines = [_header(run, len(events))]
    lines.extend(event_line(run, seq, ev) for seq, ev in enumerate(events, 1))
    return [redact(line) for line in lines]  # a trace leaves the engine: no secrets in it


def _header(run: RunRecord, events: int) -> dict[str, Any]:
    data = {k: v for k, v in run.to_dict().items() if k not in _HEADER_OMITS}
    data["trace_id"] = trace_id_for(run.run_id)
    data["events"] = events
    return {
        "format": TRACE_FORMAT,
        "run_id": run.run_id,
        "seq": 0,
        "ts": run.created_at,
        "cycle": run.cycle,
        "kind": "run",
        "data": data,
    }


def event_line(run: RunRecord, seq: int, ev: Event) -> dict[str, Any]:
    return {
        "format": TRACE_FORMAT,
        "run_id": run.run_id,
        "seq": seq,
        "ts": ev.ts,
        "cycle": ev.cycle,
        "kind": ev.kind,
        "data": ev.data,
        "event_id": ev.id,
    }


def write_jsonl(records: Iterable[Any], out: IO[str]) -> int:
    """Write one compact JSON document per line; returns how many were written."""
    n = 0
    for r in records:
        out.write(json.dumps(r, separators=(",", ":"), default=str) + "\n")
        n += 1
    return n
