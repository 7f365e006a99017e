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
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from ..store import Approval, Checkpoint, Event, RunRecord, Store

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

SpanKind = Literal["run", "cycle", "actor", "verifier", "model", "effect", "approval"]
Status = Literal["unset", "ok", "error"]

#: Events that belong to the run as a whole, never to one cycle.
RUN_KINDS = frozenset(
    {
        "run_created",
        "started",
        "resumed",
        "stopped",
        "rolled_back",
        "compensations",
        "compensations_not_offered",
    }
)
#: Run-level events that end whatever cycle is still open.
_CLOSING = frozenset({"stopped", "rolled_back"})
_EFFECT_END = frozenset(
    {
        "effect_done",
        "effect_failed",
        "effect_in_doubt",
        "effect_reconciled",
        "effect_reused",
        "effect_recovered",
    }
)
APPROVAL_KINDS = frozenset({"approval_requested", "approval_decided", "still_waiting"})
#: Events written inside a cycle, many a run (one or more each cycle), or claimed by an effect
#: or approval span: never on the run span but where a run's journal outlived its cycle. A
#: reader of the run span's events alone (a resumed live tracer) leaves them unread.
IN_CYCLE_KINDS = frozenset(
    {
        "cycle_started",
        "proposal",
        "verdict",
        "decision",
        "proposal_refused",
        "model_call",
        "retry",
        "gave_up",
        "effect_started",
        "effect_retry",
        "effect_grace",
        "effect_args_differ",
        *_EFFECT_END,
        *APPROVAL_KINDS,
    }
)
MODEL_CALL = "model_call"  # as ``loopwright._modelcalls.MODEL_CALL``
#: Fields of a ``model_call`` event kept out of its span event: the content itself.
_CONTENT = frozenset({"prompt", "reply"})
_APPROVAL_KINDS = APPROVAL_KINDS
_ERROR_STATUSES = frozenset({"escalated", "failed"})


@dataclass(slots=True)
class SpanEvent:
    """One store event placed on a span (``seq`` is its 1-based position in the run)."""

    name: str
    ts: float
    attributes: dict[str, Any]


@dataclass(slots=True)
class Span:
    """One node of the run's span tree; ``key`` is a path unique and stable within the run."""

    key: str
    kind: SpanKind
    name: str
    start: float
    end: float
    parent: str | None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    status: Status = "unset"
    status_message: str = ""
    incomplete: bool = False


@dataclass(slots=True)
class _Occurrence:
    """One occurrence of a cycle: its events from ``cycle_started`` to what closed it."""

    cycle: int
    index: int
    started: Event
    prev_ts: float
    items: list[tuple[int, Event]]
    closed_by: tuple[int, Event] | None = None
    record: dict[str, Any] | None = None
    verdicts: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"cycle/{self.cycle}#{self.index}"


def exported_attributes(s: Span) -> dict[str, Any]:
    """The attributes a span is exported with, offline (OTLP/JSON) and live (the SDK) alike:
    its own, its kind, and ``loopwright.incomplete`` when it was still open."""
    return {**s.attributes, "loopwright.span.kind": s.kind} | (
        {"loopwright.incomplete": True} if s.incomplete else {}
    )


def is_client_span(s: Span) -> bool:
    """Whether the span is a call out of the process (OTLP kind CLIENT): an effect or a model
    call."""
    return s.kind in ("effect", "model")


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
        spans.extend(_cycle_spans(run, occ, tied, last_ts))
    # What belongs to no cycle: effects run outside one (compensations), approval requests
    # made outside one (offers of compensation), and the run's own events.
    loose = [a for a in approvals if a.approval_id not in owner]
    spans.extend(_effect_spans(root, run_items))
    spans.extend(_approval_spans(root, loose, run_items, last_ts))
    for seq, ev in run_items:
        if not _claimed(ev, loose):
            root.events.append(_span_event(seq, ev))
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
        elif ev.kind in _APPROVAL_KINDS and aid in owner:
            occs[owner[aid]][4].append(seq)
        elif ev.kind in RUN_KINDS:
            run_items.append(seq)
            if ev.kind in _CLOSING:
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
) -> tuple[list[_Occurrence], list[tuple[int, Event]], dict[str, _Occurrence], float, float]:
    """Split the event log into cycle occurrences and run-level events: ``_plan``'s places,
    filled with the events; the latest time (the run's creation's if later); and the time of
    the last event placed (``after_ts`` where none was)."""
    p = _plan(run, events, first_seq, after_ts, occurrences)
    o = first_seq  # events[s - o]: the event at position s
    occs = [
        _Occurrence(
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


def _attach_records(occs: Sequence[_Occurrence], checkpoints: Sequence[Checkpoint]) -> None:
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


def _take_record(occ: _Occurrence, records: Iterator[dict[str, Any]]) -> None:
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


# --- spans of one cycle ----------------------------------------------------------------------
def _cycle_spans(
    run: RunRecord, occ: _Occurrence, approvals: Sequence[Approval], last_ts: float
) -> list[Span]:
    t0 = occ.started.ts
    items = occ.items
    closing = occ.closed_by
    cycle = Span(
        key=occ.key,
        kind="cycle",
        name=f"cycle {occ.cycle}",
        start=t0,
        end=closing[1].ts if closing else max(ev.ts for _, ev in items),
        parent="run",
        attributes={"loopwright.cycle": occ.cycle, "loopwright.cycle.occurrence": occ.index},
        incomplete=closing is None,
    )
    _cycle_attributes(cycle, occ, closing)

    # Calls, in the order the engine makes them: the actor, then each verifier.
    calls: dict[str, Span] = {}
    durations: dict[str, float] = {}
    failures: dict[str, list[float]] = {}
    gave_up: dict[str, Event] = {}
    models: dict[str, list[tuple[int, Event]]] = {}
    for seq, ev in items:
        scope = _scope_of(ev)
        if scope is None:
            continue
        if scope not in calls:
            calls[scope] = _call_span(run, occ, scope)
        if ev.kind == MODEL_CALL:
            models.setdefault(scope, []).append((seq, ev))
        elif ev.kind in ("proposal", "verdict"):
            durations[scope] = float(ev.data.get("seconds") or 0.0)
        elif ev.kind in ("retry", "gave_up"):
            failures.setdefault(scope, []).append(ev.ts)
            if ev.kind == "gave_up":
                gave_up[scope] = ev
    # The calls ended before the first commit of the cycle (t0), one after the other: lay
    # them out backwards from there with their recorded durations (a call that gave up ends
    # at its last failure; one that failed started before its first failure, and was first
    # tried as soon as the call before it ended: durations cover only the last attempt). A
    # cycle whose first call failed started at the previous commit; nothing starts earlier.
    order = sorted(calls, key=lambda sc: sc != "actor")  # the actor first, then verifiers
    cursor = t0
    for scope in reversed(order):
        span = calls[scope]
        span.end = min(cursor, gave_up[scope].ts) if scope in gave_up else cursor
        span.start = span.end - durations.get(scope, 0.0)
        if scope in failures:
            span.start = min(span.start, failures[scope][0])
        if scope in models:  # its model calls' recorded times are real: it spans them
            starts = [_float(ev.data.get("started_at")) or ev.ts for _, ev in models[scope]]
            ends = [
                t + _float(ev.data.get("seconds"))
                for t, (_, ev) in zip(starts, models[scope], strict=True)
            ]
            span.start = min(span.start, *starts)
            span.end = min(span.end, max(span.start + durations.get(scope, 0.0), *ends))
        cursor = span.start
    # A failed call's start is known only from the model calls it reported, if any.
    guessed = {sc for sc in failures if sc not in models}
    first_failed = bool(order) and order[0] in guessed
    cycle.start = occ.prev_ts if first_failed else max(occ.prev_ts, min(cursor, t0))
    prev_end = cycle.start
    for scope in order:
        span = calls[scope]
        span.start = prev_end if scope in guessed else max(span.start, prev_end)
        span.end = max(span.end, span.start)
        prev_end = span.end
    for scope, span in calls.items():
        if scope in gave_up:
            err = gave_up[scope].data
            span.status = "error"
            span.status_message = str(err.get("error") or "gave up")
            span.attributes["error.type"] = str(err.get("class") or "_OTHER")
        span.attributes["loopwright.attempts"] = len(failures.get(scope, ())) + (
            0 if scope in gave_up else 1
        )
    _call_costs(calls, occ)

    spans = [cycle]
    for scope in order:
        spans.append(calls[scope])
        spans.extend(_model_spans(calls[scope], models.get(scope, ()), occ.cycle))
    effects = _effect_spans(cycle, items)
    if occ.record is None and (calls or effects):
        # A cycle the run ended inside (an actor that gave up, a failed effect) has no
        # record: what its calls and effects were billed is its cost.
        c, billed = cycle.attributes, [*calls.values(), *effects]
        c["loopwright.cost_usd"] = sum(
            _float(s.attributes.get("loopwright.cost_usd")) for s in billed
        )
        c["loopwright.usage.total_tokens"] = sum(
            int(_float(s.attributes.get("loopwright.usage.total_tokens"))) for s in billed
        )
    waits = _approval_spans(cycle, approvals, items, last_ts)
    spans.extend(sorted([*waits, *effects], key=lambda s: (s.start, s.key)))
    for seq, ev in items:
        scope = _scope_of(ev)
        if ev.kind == MODEL_CALL and scope is not None:
            continue  # on its model span
        if scope is not None:
            target = calls[scope]
            target.events.append(_span_event(seq, ev))
            if ev.kind == "verdict":
                target.events.append(_evaluation_event(ev))
        elif not _claimed(ev, approvals):
            cycle.events.append(_span_event(seq, ev))
    return spans


def _cycle_attributes(cycle: Span, occ: _Occurrence, closing: tuple[int, Event] | None) -> None:
    rec = occ.record
    a = cycle.attributes
    if rec is not None:
        a["loopwright.decision"] = rec.get("decision")
        a["loopwright.score"] = rec.get("score")
        a["loopwright.improved"] = bool(rec.get("improved"))
        a["loopwright.duplicate"] = bool(rec.get("duplicate"))
        a["loopwright.proposal.digest"] = rec.get("digest")
        usage = rec.get("usage") or {}
        _usage_attributes(a, usage)
        if usage.get("seconds") is not None:
            a["loopwright.seconds"] = float(usage["seconds"])
    if closing is not None:
        ev = closing[1]
        if ev.kind == "decision":
            a.setdefault("loopwright.decision", ev.data.get("decision"))
            a["loopwright.best_score"] = ev.data.get("best_score")
        elif ev.kind == "stopped":
            a["loopwright.stop_reason"] = ev.data.get("reason")
            if ev.data.get("status") in _ERROR_STATUSES:
                cycle.status = "error"
                cycle.status_message = str(ev.data.get("cause") or ev.data.get("reason"))
        else:
            a["loopwright.decision"] = ev.kind


def _scope_of(ev: Event) -> str | None:
    """Which call span an event belongs to: ``actor``, ``verifier:NAME``, or none."""
    if ev.kind == "proposal":
        return "actor"
    if ev.kind == "verdict":
        return f"verifier:{ev.data.get('verifier')}"
    if ev.kind in ("retry", "gave_up", MODEL_CALL):
        scope = str(ev.data.get("scope") or "")
        if scope == "actor" or scope.startswith("verifier:"):
            return scope
    return None


def _call_span(run: RunRecord, occ: _Occurrence, scope: str) -> Span:
    base = f"{occ.key}/"
    if scope == "actor":
        return Span(
            key=base + "actor",
            kind="actor",
            name=f"invoke_agent {run.loop_name}",
            start=0.0,
            end=0.0,
            parent=occ.key,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": run.loop_name,
                "gen_ai.conversation.id": run.run_id,
                "loopwright.cycle": occ.cycle,
            },
        )
    name = scope.split(":", 1)[1]
    return Span(
        key=base + scope,
        kind="verifier",
        name=f"verify {name}",
        start=0.0,
        end=0.0,
        parent=occ.key,
        attributes={
            "gen_ai.conversation.id": run.run_id,
            "gen_ai.evaluation.name": name,
            "loopwright.cycle": occ.cycle,
            "loopwright.verifier.name": name,
        },
    )


def _call_costs(calls: Mapping[str, Span], occ: _Occurrence) -> None:
    """What each call reported: the proposal's and verdicts' fields, costs where recorded.
    A call's cost is all it was billed: its failed attempts (``retry``/``gave_up`` events
    carry theirs) and each judgement (a verifier judging again after a person's edit pays
    again; a ``verdict`` event carries its own), so the spans add up to the run's spend."""
    verdicts = occ.verdicts
    billed: dict[str, list[float]] = {}  # scope -> [cost, tokens] of failed attempts, judgements
    judged: set[str] = set()
    for _, ev in occ.items:
        scope = _scope_of(ev)
        d = ev.data
        if scope is not None and ev.kind in ("retry", "gave_up", "verdict"):
            own = d.get("usage")
            if isinstance(own, Mapping):
                b = billed.setdefault(scope, [0.0, 0.0])
                b[0] += _float(own.get("cost_usd"))
                b[1] += _float(own.get("tokens"))
                if ev.kind == "verdict":
                    judged.add(scope)
        if scope is None or ev.kind not in ("proposal", "verdict"):
            continue
        a = calls[scope].attributes
        if ev.kind == "proposal":
            a["loopwright.proposal.kind"] = d.get("kind")
            a["loopwright.proposal.digest"] = d.get("digest")
            a["loopwright.proposal.parts"] = [str(p) for p in d.get("parts") or ()]
            a["loopwright.proposal.effects"] = [str(p) for p in d.get("effects") or ()]
            if d.get("note"):
                a["loopwright.proposal.note"] = str(d["note"])
            _usage_attributes(a, d.get("usage") or {})
        else:
            a["loopwright.verifier.held_out"] = bool(d.get("held_out"))
            a["loopwright.verdict.passed"] = bool(d.get("passed"))
            a["loopwright.verdict.score"] = d.get("score")
            a["loopwright.verdict.findings"] = d.get("findings")
            a["gen_ai.evaluation.score.value"] = d.get("score")
            a["gen_ai.evaluation.score.label"] = "pass" if d.get("passed") else "fail"
            full = verdicts.get(str(d.get("verifier"))) or {}
            if scope not in judged:  # a verdict event of an older store: the record's usage
                _usage_attributes(a, full.get("usage") or {})
            # A model-backed verifier (ChatReviewer) names its model and the call's token
            # split in the evidence: the GenAI attributes of a model call.
            evidence = full.get("evidence") or {}
            if isinstance(evidence.get("model"), str) and evidence["model"]:
                a.setdefault("gen_ai.request.model", evidence["model"])
            _usage_attributes(a, {k: evidence.get(k) for k in ("input_tokens", "output_tokens")})
    for scope, (cost, tokens) in billed.items():
        a = calls[scope].attributes
        a["loopwright.cost_usd"] = _float(a.get("loopwright.cost_usd")) + cost
        a["loopwright.usage.total_tokens"] = int(
            _float(a.get("loopwright.usage.total_tokens")) + tokens
        )


def _float(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _model_spans(call: Span, evs: Iterable[tuple[int, Event]], cycle: int) -> list[Span]:
    """One ``model`` span per reported model call of ``call``, with the GenAI attributes; the
    call span gets the tokens of them all and their model (when they share one) unless it
    already names them (a reviewer's evidence)."""
    out: list[Span] = []
    tokens_in = tokens_out = 0
    names: set[str] = set()
    for i, (seq, ev) in enumerate(evs, 1):
        d = ev.data
        model = str(d.get("model") or "model")
        start = _float(d.get("started_at")) or ev.ts
        a: dict[str, Any] = {
            "gen_ai.operation.name": str(d.get("operation") or "chat"),
            "gen_ai.request.model": model,
            "loopwright.cycle": cycle,
            "loopwright.call.id": ev.id,
            "loopwright.call.scope": str(d.get("scope") or ""),
            "loopwright.attempt": d.get("attempt"),
            "loopwright.call.outcome": d.get("outcome"),
            "loopwright.seconds": _float(d.get("seconds")),
        }
        names.add(model)
        if d.get("response_model"):
            a["gen_ai.response.model"] = str(d["response_model"])
        if d.get("provider"):
            # the current name, and the one older backends read
            a["gen_ai.provider.name"] = a["gen_ai.system"] = str(d["provider"])
        host, port = _server(d.get("server"))
        if host:
            a["server.address"] = host
        if port:
            a["server.port"] = port
        for key in ("input_tokens", "output_tokens"):
            if isinstance(d.get(key), int):
                a[f"gen_ai.usage.{key}"] = d[key]
        tin, tout = d.get("input_tokens") or 0, d.get("output_tokens") or 0
        tokens_in, tokens_out = tokens_in + int(tin), tokens_out + int(tout)
        if d.get("input_tokens") is not None or d.get("output_tokens") is not None:
            a["loopwright.usage.total_tokens"] = int(tin) + int(tout)
        if d.get("cost_usd") is not None:
            a["loopwright.cost_usd"] = _float(d["cost_usd"])
        if d.get("finish_reason"):
            a["gen_ai.response.finish_reasons"] = [str(d["finish_reason"])]
        if d.get("first_token_s") is not None:
            a["loopwright.first_token_s"] = _float(d["first_token_s"])
        if d.get("repair"):
            a["loopwright.repair_turn"] = True
        if d.get("truncated"):
            a["loopwright.call.truncated"] = True
        span = Span(
            key=f"{call.key}/model/{i}",
            kind="model",
            name=f"{a['gen_ai.operation.name']} {model}",
            start=start,
            end=start + _float(d.get("seconds")),
            parent=call.key,
            attributes=a,
            events=[_span_event(seq, ev)],
        )
        if d.get("error"):
            span.status = "error"
            span.status_message = str(d["error"])
            status = d.get("http_status")
            a["error.type"] = str(status) if status else str(d["error"]).split(":", 1)[0]
        else:
            span.status = "ok"
        out.append(span)
    if out:
        ca = call.attributes
        if len(names) == 1:
            ca.setdefault("gen_ai.request.model", next(iter(names)))
        if "gen_ai.usage.input_tokens" not in ca:
            ca["gen_ai.usage.input_tokens"] = tokens_in
            ca["gen_ai.usage.output_tokens"] = tokens_out
    return out


def _server(url: Any) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of an endpoint URL."""
    if not isinstance(url, str) or not url:
        return None, None
    try:
        parts = urlsplit(url)
        return parts.hostname, parts.port
    except ValueError:
        return None, None


def _usage_attributes(a: dict[str, Any], usage: Mapping[str, Any]) -> None:
    """Spend in ``loopwright.*`` (totals are all we record); the GenAI input/output token
    attributes only where a usage reports them separately."""
    if "cost_usd" in usage:
        a["loopwright.cost_usd"] = float(usage["cost_usd"] or 0.0)
    if "tokens" in usage:
        a["loopwright.usage.total_tokens"] = int(usage["tokens"] or 0)
    for key in ("input_tokens", "output_tokens"):
        if usage.get(key) is not None:
            a[f"gen_ai.usage.{key}"] = int(usage[key])
    if usage.get("model"):  # a usage that names the model it was spent on
        a["gen_ai.request.model"] = str(usage["model"])


# --- effects and approvals -------------------------------------------------------------------
def _effect_key(ev: Event) -> str | None:
    if not ev.kind.startswith("effect_") or not ev.data.get("key"):
        return None
    return str(ev.data["key"]).removeprefix("effect:")


def _effect_spans(parent: Span, items: Iterable[tuple[int, Event]]) -> list[Span]:
    groups: dict[str, list[tuple[int, Event]]] = {}
    for seq, ev in items:
        key = _effect_key(ev)
        if key is not None:
            groups.setdefault(key, []).append((seq, ev))
    out = []
    for key, evs in groups.items():
        first = evs[0][1]
        final = next((ev for _, ev in reversed(evs) if ev.kind in _EFFECT_END), None)
        name = str(first.data.get("effect") or key.split(":", 1)[0])
        span = Span(
            key=f"{parent.key}/effect/{key}",
            kind="effect",
            name=f"execute_tool {name}",
            start=first.ts,
            end=final.ts if final is not None else max(ev.ts for _, ev in evs),
            parent=parent.key,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": key,
                "loopwright.effect.key": key,
                "loopwright.effect.attempts": sum(
                    1 for _, ev in evs if ev.kind == "effect_started"
                ),
            },
            incomplete=final is None,
        )
        if parent.kind == "cycle":
            span.attributes["loopwright.cycle"] = parent.attributes["loopwright.cycle"]
        if first.data.get("kind"):
            span.attributes["loopwright.effect.kind"] = str(first.data["kind"])
        status = _effect_status(final)
        span.attributes["loopwright.effect.status"] = status
        if final is not None and final.kind == "effect_reused":
            span.attributes["loopwright.effect.reused"] = True
        if final is not None and final.kind == "effect_reconciled":
            span.attributes["loopwright.effect.reconciled"] = True
        if final is not None and final.kind == "effect_recovered":
            span.attributes["loopwright.effect.recovered"] = True
        if status in ("failed", "in_doubt"):
            span.status = "error"
            span.status_message = str((final.data if final else {}).get("cause") or status)
            span.attributes["error.type"] = status
        elif status == "done":
            span.status = "ok"
        span.events = [_span_event(seq, ev) for seq, ev in evs]
        # what it cost: on the event of its doing (done or reconciled; a result recovered or
        # reused after it was charged where it was done)
        billed = [ev.data["usage"] for _, ev in evs if isinstance(ev.data.get("usage"), Mapping)]
        if billed:
            span.attributes["loopwright.cost_usd"] = sum(_float(u.get("cost_usd")) for u in billed)
            span.attributes["loopwright.usage.total_tokens"] = int(
                sum(_float(u.get("tokens")) for u in billed)
            )
        out.append(span)
    return out


def _effect_status(final: Event | None) -> str:
    if final is None:
        return "in_flight"
    if final.kind in ("effect_reused", "effect_reconciled"):
        return "done"
    return str(final.data.get("status") or final.kind.removeprefix("effect_"))


def _approval_spans(
    parent: Span,
    approvals: Sequence[Approval],
    items: Sequence[tuple[int, Event]],
    last_ts: float,
) -> list[Span]:
    out = []
    for a in approvals:
        decided = a.decided_at is not None and a.status != "pending"
        span = Span(
            key=f"{parent.key}/approval/{a.approval_id}",
            kind="approval",
            name=f"approval {a.kind}",
            start=a.requested_at,
            end=float(a.decided_at) if decided and a.decided_at else max(a.requested_at, last_ts),
            parent=parent.key,
            attributes={
                "loopwright.approval.id": a.approval_id,
                "loopwright.approval.kind": a.kind,
                "loopwright.approval.status": a.status,
                "loopwright.approval.what": a.what,
                "loopwright.approval.why": a.why,
                "loopwright.cycle": a.cycle,
            },
            incomplete=not decided,
        )
        if a.rule:
            span.attributes["loopwright.approval.rule"] = a.rule
        if a.decided_by:
            span.attributes["loopwright.approval.decided_by"] = a.decided_by
        if decided:
            span.attributes["loopwright.approval.wait_s"] = span.end - span.start
        if a.status in ("denied", "expired"):
            span.status = "error"
            span.status_message = f"approval {a.status}" + (
                f" by {a.decided_by}" if a.decided_by else ""
            )
        elif a.status in ("approved", "answered"):
            span.status = "ok"
        span.events = [
            _span_event(seq, ev)
            for seq, ev in items
            if ev.kind in _APPROVAL_KINDS and ev.data.get("approval_id") == a.approval_id
        ]
        out.append(span)
    return out


def _claimed(ev: Event, approvals: Sequence[Approval]) -> bool:
    """Whether an event went onto an effect or approval span rather than its container."""
    if _effect_key(ev) is not None:
        return True
    ids = {a.approval_id for a in approvals}
    return ev.kind in _APPROVAL_KINDS and ev.data.get("approval_id") in ids


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
    if run.status in _ERROR_STATUSES:
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
    return a


def _span_event(seq: int, ev: Event) -> SpanEvent:
    attrs: dict[str, Any] = {"loopwright.event.seq": seq, "loopwright.event.id": ev.id}
    for k, v in ev.data.items():
        if ev.kind == MODEL_CALL and k in _CONTENT:
            continue
        attrs[str(k)] = _plain(v)
    return SpanEvent(name=ev.kind, ts=ev.ts, attributes=attrs)


def span_event(seq: int, ev: Event) -> SpanEvent:
    """The span event of the store event ``ev`` at position ``seq`` of its run's log, as the
    tree places it (a live tracer rebuilds the run span's from the log's run-level events)."""
    return _span_event(seq, ev)


def _evaluation_event(ev: Event) -> SpanEvent:
    """The GenAI ``gen_ai.evaluation.result`` event for a verdict."""
    return SpanEvent(
        name="gen_ai.evaluation.result",
        ts=ev.ts,
        attributes={
            "gen_ai.evaluation.name": str(ev.data.get("verifier")),
            "gen_ai.evaluation.score.value": ev.data.get("score"),
            "gen_ai.evaluation.score.label": "pass" if ev.data.get("passed") else "fail",
        },
    )


def _plain(v: Any) -> Any:
    """An attribute value: scalars and lists of scalars as they are, anything else as JSON."""
    if v is None or isinstance(v, str | bool | int | float):
        return v
    if isinstance(v, list | tuple) and all(isinstance(x, str | bool | int | float) for x in v):
        return list(v)
    return json.dumps(v, sort_keys=True, default=str)


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
        occ = _Occurrence(
            cycle=cycle, index=index, started=dict(items)[first], prev_ts=prev_ts, items=items
        )
        if (closed := p.closed[i]) is not None:
            occ.closed_by = (closed, own[closed] if closed in own else dict(items)[closed])
        _take_record(occ, records)
        occ.verdicts = verdicts.get(cycle, {})
        spans = _cycle_spans(run, occ, tied.get(i, []), p.last_ts)
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
    rest = [*_effect_spans(root, run_items), *_approval_spans(root, loose, run_items, p.last_ts)]
    for seq, ev in run_items:
        if not _claimed(ev, loose):
            root.events.append(_span_event(seq, ev))
    for span in [root, *rest]:
        span.attributes.setdefault("gen_ai.conversation.id", run.run_id)
    _fit([root, *rest])
    root.events.sort(key=lambda e: (e.ts, e.attributes["loopwright.event.seq"]))
    yield from rest
    yield root
