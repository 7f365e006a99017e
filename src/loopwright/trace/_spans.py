"""A run's span tree, rebuilt from what the store recorded.

The engine writes events at commit time, so the events of one commit share one timestamp; the
calls inside a cycle (actor, verifiers) carry their own durations (``seconds`` in the
``proposal`` and ``verdict`` events), effects and retries are journaled with their real
timestamps, and approvals have ``requested_at``/``decided_at``. The tree is rebuilt from those:

* ``run`` — from ``run_created`` to the run's end (``ended_at``, or its last event);
* ``cycle`` — one per ``cycle_started`` event (a cycle redone after a rollback is a second
  occurrence of the same number), from its estimated start to the event that closed it
  (``decision``, or ``stopped``/``rolled_back``);
* ``actor`` and one ``verifier`` span per verifier call, laid end to end from the cycle's start
  with their recorded durations (their exact start times were not recorded; a call that made
  model calls starts no later than its first one);
* ``model`` — one per model call an actor or verifier reported (``model_call`` events, see
  ``loopwright._modelcalls``), a child of that call's span, at its recorded start and latency,
  with the GenAI semantic-convention attributes (``gen_ai.request.model``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.provider.name`` where known) and
  its cost; the prompt and reply stay in the store (content capture is opt-in in the GenAI
  conventions), the span event carries their sizes;
* ``effect`` — one per idempotency key, from its first journal event to its outcome;
* ``approval`` — one per request, from ``requested_at`` to ``decided_at``.

Every store event becomes exactly one span event on the most specific span it belongs to. Spans
still open when the trace is taken (a parked run) end at the last recorded time and are marked
``incomplete``. Nothing here reads a clock: the same store gives the same tree.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._verdict import held_out_words
from ..store import Approval, Checkpoint, Event, RunRecord, Store
from ._cycle_spans import approval_spans, claimed, cycle_spans, effect_spans
from ._span_model import (
    APPROVAL_KINDS,
    CLOSING,
    ERROR_STATUSES,
    IN_CYCLE_KINDS,
    RUN_KINDS,
    Occurrence,
    Span,
    SpanEvent,
    exported_attributes,
    is_client_span,
    span_event,
)

__all__ = [
    "APPROVAL_KINDS",
    "IN_CYCLE_KINDS",
    "RUN_KINDS",
    "Span",
    "SpanEvent",
    "build_spans",
    "build_window",
    "exported_attributes",
    "fit_spans",
    "is_client_span",
    "iter_spans",
    "run_spans",
    "span_event",
]


def run_spans(store: Store, run_id: str) -> tuple[RunRecord, list[Span]]:
    """The run (looked up by id, unique prefix or task key) and its span tree."""
    rec = store.get_run(run_id)
    spans = build_spans(
        rec,
        store.events(rec.run_id),
        store.checkpoints(rec.run_id),
        store.approvals(run_id=rec.run_id),
    )
    return rec, spans


def build_spans(
    run: RunRecord,
    events: Sequence[Event],
    checkpoints: Sequence[Checkpoint],
    approvals: Sequence[Approval],
    *,
    first_seq: int = 1,
    after_ts: float | None = None,
    occurrences: Mapping[int, int] | None = None,
) -> list[Span]:
    """The span tree of ``run``, parents before children (a pure function of its inputs).

    A live tracer builds it from a window of the log: ``events`` then start at position
    ``first_seq``, after an event placed at ``after_ts`` (see ``build_window``), with
    ``occurrences[n]`` occurrences of cycle ``n`` before them, and ``checkpoints``/
    ``approvals`` are those of the window; the spans of the window's cycles are then the same
    as in the whole log's tree, times included."""
    return build_window(
        run,
        events,
        checkpoints,
        approvals,
        first_seq=first_seq,
        after_ts=after_ts,
        occurrences=occurrences,
    )[0]


def build_window(
    run: RunRecord,
    events: Sequence[Event],
    checkpoints: Sequence[Checkpoint],
    approvals: Sequence[Approval],
    *,
    first_seq: int = 1,
    after_ts: float | None = None,
    occurrences: Mapping[int, int] | None = None,
) -> tuple[list[Span], float]:
    """``build_spans``, and the time a window that follows this one starts after (its
    ``after_ts``): that of the last event placed here (not one that waits for its cycle's
    first commit), or ``after_ts`` when none was. A cycle starts no earlier than the event
    placed before it: one value, carried from window to window, never a maximum over the
    log before it."""
    occs, run_items, owner, last_ts, next_ts = _segment(
        run, events, first_seq, after_ts, occurrences
    )
    _attach_records(occs, checkpoints)
    by_id = {a.approval_id: a for a in approvals}

    root = _run_span(run, last_ts)
    spans: list[Span] = [root]
    for occ in occs:
        tied = [by_id[a] for a, o in owner.items() if o is occ and a in by_id]
        spans.extend(cycle_spans(run, occ, tied, last_ts))
    # What belongs to no cycle: effects run outside one (compensations), approval requests
    # made outside one (offers of compensation), and the run's own events.
    loose = [a for a in approvals if a.approval_id not in owner]
    spans.extend(effect_spans(root, run_items))
    spans.extend(approval_spans(root, loose, run_items, last_ts))
    for seq, ev in run_items:
        if not claimed(ev, loose):
            root.events.append(span_event(seq, ev))
    for s in spans:
        s.attributes.setdefault("gen_ai.conversation.id", run.run_id)
    _fit(spans)
    root.events.sort(key=lambda e: (e.ts, e.attributes["loopwright.event.seq"]))
    return spans, next_ts


# --- segmentation ----------------------------------------------------------------------------
@dataclass(slots=True)
class _Plan:
    """Where each event goes, by position only (no event held): ``_segment`` fills it with
    the events, ``iter_spans`` with the events of a cycle at a time."""

    count: int = 0
    #: the latest of the events' times and the run's creation
    last_ts: float = 0.0
    #: per occurrence: cycle, index, seq of its ``cycle_started``, prev_ts, item seqs in the
    #: order they were placed; and in ``closed`` the seq of what closed it (``None``: open)
    occs: list[tuple[int, int, int, float, list[int]]] = field(default_factory=list)
    closed: list[int | None] = field(default_factory=list)
    run_items: list[int] = field(default_factory=list)
    owner: dict[str, int] = field(default_factory=dict)
    #: the time of the last event placed (``after_ts`` where none was): where the window
    #: that follows starts after
    next_ts: float = 0.0


def _plan(
    run: RunRecord,
    events: Iterable[Event],
    first_seq: int = 1,
    after_ts: float | None = None,
    occurrences: Mapping[int, int] | None = None,
) -> _Plan:
    """Where each event of the log (or of a window of it, as ``build_spans`` takes one) goes,
    by position, the events read once.

    Each occurrence's ``prev_ts`` is the time of the last event placed before its
    ``cycle_started`` (the run's creation for the first): the previous commit's, or a journal
    entry's. The last one, not the latest: where a host's clock steps back (a session resumed
    on a host whose clock is behind) a maximum would hold every cycle after the step at the
    earlier host's time, and would make a window of the log depend on all of it before.

    Journal events (retries, effects) are written when they happen, before the commit that
    carries their cycle's ``cycle_started``: events of a cycle with no open occurrence wait for
    the next ``cycle_started`` of that number, and go to the run when none comes. A
    ``cycle_started`` of a cycle still open (a lost commit) leaves the earlier occurrence open.
    """
    occs: list[tuple[int, int, int, float, list[int]]] = []
    closed: list[int | None] = []
    run_items: list[int] = []
    owner: dict[str, int] = {}
    open_: dict[int, int] = {}
    waiting: dict[int, list[int]] = {}
    counts: dict[int, int] = dict(occurrences or {})
    last_ts = run.created_at if after_ts is None else after_ts
    top = run.created_at
    seq = first_seq - 1  # the last position (its count from 1)
    for seq, ev in enumerate(events, first_seq):
        top = max(top, ev.ts)
        aid = str(ev.data.get("approval_id") or "")
        if ev.kind == "cycle_started":
            counts[ev.cycle] = counts.get(ev.cycle, 0) + 1
            open_.pop(ev.cycle, None)
            items = [*waiting.pop(ev.cycle, []), seq]
            occs.append((ev.cycle, counts[ev.cycle], seq, last_ts, items))
            closed.append(None)
            open_[ev.cycle] = len(occs) - 1
        elif ev.kind in APPROVAL_KINDS and aid in owner:
            occs[owner[aid]][4].append(seq)
        elif ev.kind in RUN_KINDS:
            run_items.append(seq)
            if ev.kind in CLOSING:
                for i in open_.values():
                    closed[i] = seq
                open_.clear()
        elif ev.cycle in open_:
            i = open_[ev.cycle]
            occs[i][4].append(seq)
            if ev.kind == "approval_requested" and aid:
                owner[aid] = i
            elif ev.kind == "decision":
                closed[i] = seq
                del open_[ev.cycle]
        else:
            waiting.setdefault(ev.cycle, []).append(seq)
            continue
        last_ts = ev.ts  # the last event placed: a commit's time, or a journal entry's
    for items in waiting.values():
        run_items.extend(items)
    run_items.sort()
    return _Plan(seq, top, occs, closed, run_items, owner, last_ts)


def _segment(
    run: RunRecord,
    events: Sequence[Event],
    first_seq: int = 1,
    after_ts: float | None = None,
    occurrences: Mapping[int, int] | None = None,
) -> tuple[list[Occurrence], list[tuple[int, Event]], dict[str, Occurrence], float, float]:
    """Split the event log into cycle occurrences and run-level events: ``_plan``'s places,
    filled with the events; the latest time (the run's creation's if later); and the time of
    the last event placed (``after_ts`` where none was)."""
    p = _plan(run, events, first_seq, after_ts, occurrences)
    o = first_seq  # events[s - o]: the event at position s
    occs = [
        Occurrence(
            cycle=cycle,
            index=index,
            started=events[first - o],
            prev_ts=prev_ts,
            items=[(s, events[s - o]) for s in seqs],
            closed_by=None if closed is None else (closed, events[closed - o]),
        )
        for (cycle, index, first, prev_ts, seqs), closed in zip(p.occs, p.closed, strict=True)
    ]
    run_items = [(s, events[s - o]) for s in p.run_items]
    owner = {aid: occs[i] for aid, i in p.owner.items()}
    return occs, run_items, owner, p.last_ts, p.next_ts


def _attach_records(occs: Sequence[Occurrence], checkpoints: Sequence[Checkpoint]) -> None:
    """Pair each closed-by-decision occurrence with its cycle record, in order (every
    ``decision`` event is committed together with exactly one record holding a proposal),
    and give every occurrence the full verdicts of its cycle (for their usage): from that
    record, or for a cycle that parked or ran effects and has not concluded, from the
    mid-cycle record (held-out) and the checkpoint's ``pending`` entry (visible)."""
    records = (c.record for c in checkpoints if c.record is not None and "proposal" in c.record)
    verdicts = _verdicts((ck.record, ck.fields) for ck in checkpoints)
    for occ in occs:
        _take_record(occ, records)
        occ.verdicts = verdicts.get(occ.cycle, {})


def _take_record(occ: Occurrence, records: Iterator[dict[str, Any]]) -> None:
    """The next of ``records`` (the cycle records that hold a proposal, in order) is the
    record of ``occ`` when a ``decision`` closed it (every ``decision`` event is committed
    together with exactly one such record), if it is of ``occ``'s cycle."""
    if occ.closed_by is None or occ.closed_by[1].kind != "decision":
        return
    rec = next(records, None)
    if rec is not None and int(rec.get("cycle", -1)) == occ.cycle:
        occ.record = rec


def _verdicts(
    rows: Iterable[tuple[dict[str, Any] | None, Mapping[str, Any]]],
    keep: Callable[[Any], Any] | None = None,
) -> dict[int, dict[str, Any]]:
    """The full verdicts of every cycle from its checkpoints' records and fields (``rows``):
    the cycle's record's, or for a cycle that parked or ran effects and has not concluded,
    the mid-cycle record's held-out verdicts and the checkpoint's ``pending`` entry's visible
    ones. ``keep``: what of each verdict is kept (all of it when ``None``); a verdict of which
    it keeps nothing is left out, as is a cycle left with none (a reader's ``.get(...) or
    {}`` reads them alike: a long run's every cycle held a dict of empty dicts)."""
    verdicts: dict[int, dict[str, Any]] = {}
    for mid, fields in rows:
        if mid is None or "cycle" not in mid:
            continue
        n = int(mid["cycle"])
        pend = fields.get("pending") or {}  # not every part of every checkpoint
        visible = mid.get("visible") or (pend.get("visible") if pend.get("cycle") == n else None)
        found = verdicts.pop(n, {})
        for name, v in [*(visible or {}).items(), *(mid.get("held_out") or {}).items()]:
            kept = v if keep is None else keep(v)
            if keep is None or kept:
                found[name] = kept
            else:  # nothing kept: as if it were not there (a later one replaces an earlier)
                found.pop(name, None)
        if found or keep is None:
            verdicts[n] = found
    return verdicts


# --- attributes, events, fitting -------------------------------------------------------------
def _run_span(run: RunRecord, last_ts: float) -> Span:
    """The run's own span (the root of its tree): from its creation to its last event or end."""
    root = Span(
        key="run",
        kind="run",
        name=f"run {run.loop_name}",
        start=run.created_at,
        end=max(last_ts, run.ended_at or 0.0),
        parent=None,
        attributes=_run_attributes(run),
        incomplete=run.ended_at is None,
    )
    if run.status in ERROR_STATUSES:
        root.status = "error"
        root.status_message = str((run.packet or {}).get("cause") or run.stop_reason or "")
    elif run.status == "accepted":
        root.status = "ok"
    return root


def _run_attributes(run: RunRecord) -> dict[str, Any]:
    a: dict[str, Any] = {
        "gen_ai.conversation.id": run.run_id,
        "loopwright.run.id": run.run_id,
        "loopwright.task_key": run.task_key,
        "loopwright.loop.name": run.loop_name,
        "loopwright.project": run.project,
        "loopwright.status": run.status,
        "loopwright.cycles": run.cycle,
        "loopwright.cost_usd": run.cost_usd,
        "loopwright.usage.total_tokens": run.tokens,
        "loopwright.seconds": run.seconds,
    }
    if run.stop_reason:
        a["loopwright.stop_reason"] = run.stop_reason
    if run.forked_from:  # the lineage: a fork's own trace names the run and cycle it came from
        a["loopwright.run.forked_from"] = run.forked_from
        a["loopwright.run.forked_at"] = run.forked_at
    if run.loop_version:
        a["loopwright.loop.version"] = run.loop_version
    if run.best_score is not None:
        a["loopwright.best_score"] = run.best_score
    if run.held_out_passed is not None:
        a["loopwright.held_out_passed"] = run.held_out_passed
        if run.held_out_self_reported is not None:  # (unknown for a run ended before stop 55)
            # tests behind it not decided outside the candidate's process: any, and the
            # verdict is not an independent one (``RunRecord.held_out_independent``)
            a["loopwright.held_out_self_reported"] = run.held_out_self_reported
        # the two as one word, as the runs lists say it (``_verdict.held_out_words``)
        a["loopwright.held_out_verdict"] = str(
            held_out_words(run.held_out_passed, run.held_out_self_reported).kind
        )
    return a


def fit_spans(spans: Sequence[Span]) -> None:
    """``build_spans``'s last step on spans put together elsewhere (a live tracer's run span
    with the events of windows sent earlier): children inside their parents, each event
    inside its span, its recorded time kept beside it where it moved."""
    _fit(spans)


def _fit(spans: Sequence[Span]) -> None:
    """Make every child lie inside its parent (estimates and clock steps can disagree by a
    hair): a child never starts before its parent, a parent ends no earlier than its
    children. Children come after their parents in ``spans``."""
    by_key = {s.key: s for s in spans}
    for s in spans:
        if s.parent is not None:
            p = by_key[s.parent]
            s.start = max(s.start, p.start)
            s.end = max(s.end, s.start)
    for s in reversed(spans):
        if s.parent is not None:
            p = by_key[s.parent]
            p.end = max(p.end, s.end)
    # A call's events (its proposal or verdict) were committed after the call ended: they are
    # placed at the call's end, their recorded time kept beside them.
    for s in spans:
        for ev in s.events:
            at = min(max(ev.ts, s.start), s.end)
            if at != ev.ts:
                ev.attributes["loopwright.event.ts"] = ev.ts
                ev.ts = at


# --- the tree a window at a time -------------------------------------------------------------
def _all_verdicts(store: Store, run_id: str) -> dict[int, dict[str, Any]]:
    """``_attach_records``'s verdicts of every cycle, the checkpoints read a page at a time,
    each verdict cut to what ``_call_costs`` reads of it (its findings are most of it: 20 MB
    at 6,000 cycles whole)."""
    rows = ((mid, fields) for _seq, _cycle, mid, fields in store.iter_fields(run_id))
    return _verdicts(rows, _costed)


_EVIDENCE_READ = ("model", "input_tokens", "output_tokens")


def _costed(v: Any) -> Any:
    """A verdict's ``usage`` and the ``evidence`` keys ``_call_costs`` reads."""
    if not isinstance(v, Mapping):
        return v
    out: dict[str, Any] = {}
    if v.get("usage"):  # (none, or an empty one: ``_call_costs`` reads them alike)
        out["usage"] = v["usage"]
    evidence = v.get("evidence")
    if isinstance(evidence, Mapping):
        read = {k: evidence[k] for k in _EVIDENCE_READ if k in evidence}
        if read:  # (none: as if there were no evidence, for ``_call_costs``)
            out["evidence"] = read
    elif evidence is not None:
        out["evidence"] = evidence
    return out


def iter_spans(store: Store, run: RunRecord) -> Iterator[Span]:
    """``run_spans``'s tree, the same spans, a cycle's at a time as the log is read a page at a
    time (twice: once to place the events, then to build): the cycles' spans in tree order,
    then those of the run's own, then **the run span last** (its end and events are known only
    then). Holds the events of the cycles not yet built, the run's own events, a position per
    event and the verdicts per cycle — not the whole log, nor the whole tree (a 20,000-cycle
    run's tree held 504 MB). Events appended between the reads are left out."""
    p = _plan(run, store.iter_events(run.run_id))
    approvals = store.approvals(run_id=run.run_id)
    by_id = {a.approval_id: a for a in approvals}
    verdicts = _all_verdicts(store, run.run_id)
    records = (
        r for _s, _c, r in store.iter_records(run.run_id) if r is not None and "proposal" in r
    )
    tied: dict[int, list[Approval]] = {}
    for aid, i in p.owner.items():
        if aid in by_id:
            tied.setdefault(i, []).append(by_id[aid])
    # the position by which every event an occurrence holds has been read
    ready = [max([*occ[4], p.closed[i] or 0]) for i, occ in enumerate(p.occs)]
    run_seqs = set(p.run_items)
    root = _run_span(run, p.last_ts)
    held: dict[int, Event] = {}
    own: dict[int, Event] = {}
    nxt = 0

    def build(i: int) -> list[Span]:
        cycle, index, first, prev_ts, seqs = p.occs[i]
        items = [(s, held.pop(s)) for s in seqs]
        occ = Occurrence(
            cycle=cycle, index=index, started=dict(items)[first], prev_ts=prev_ts, items=items
        )
        if (closed := p.closed[i]) is not None:
            occ.closed_by = (closed, own[closed] if closed in own else dict(items)[closed])
        _take_record(occ, records)
        occ.verdicts = verdicts.get(cycle, {})
        spans = cycle_spans(run, occ, tied.get(i, []), p.last_ts)
        for s in spans:
            s.attributes.setdefault("gen_ai.conversation.id", run.run_id)
        # fitted under a stand-in for the run span (whose start is the run's creation, fixed)
        stub = Span(key="run", kind="run", name="", start=run.created_at, end=root.end, parent=None)
        _fit([stub, *spans])
        root.end = stub.end
        return spans

    for seq, ev in enumerate(itertools.islice(store.iter_events(run.run_id), p.count), 1):
        if seq in run_seqs:
            own[seq] = ev
        else:
            held[seq] = ev
        while nxt < len(p.occs) and ready[nxt] <= seq:
            yield from build(nxt)
            nxt += 1
    run_items = [(s, own[s]) for s in p.run_items if s in own]
    loose = [a for a in approvals if a.approval_id not in p.owner]
    rest = [*effect_spans(root, run_items), *approval_spans(root, loose, run_items, p.last_ts)]
    for seq, ev in run_items:
        if not claimed(ev, loose):
            root.events.append(span_event(seq, ev))
    for span in [root, *rest]:
        span.attributes.setdefault("gen_ai.conversation.id", run.run_id)
    _fit([root, *rest])
    root.events.sort(key=lambda e: (e.ts, e.attributes["loopwright.event.seq"]))
    yield from rest
    yield root
