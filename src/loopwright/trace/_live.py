"""Live tracing: a run's spans sent through the OpenTelemetry SDK while the run executes.

The engine calls ``LiveTracer.committed(run_id, opened_at=…)`` after every durable commit. The
tracer reads what the store gained since (events, the new checkpoints' records and ``fields``,
approvals when they moved), rebuilds the spans still open with ``build_window`` (that is
``build_spans``, the function the offline ``otlp-json`` export uses, so names, structure,
attributes and times have one source of truth; over a window of the log that starts where
nothing but the run span was open — what came before is sent and dropped, so what a commit
costs and what the tracer holds do not grow with the run; the one time a window's first cycle
needs from before it, the last placed event's, is carried from window to window) and turns
them into SDK spans: a span is started when the tree first shows it (the parent's SDK span is
then open, so the child gets its real parent) and ended, with its attributes, events and
status, once the tree no longer marks it ``incomplete``. The SDK's ``BatchSpanProcessor`` and
OTLP/HTTP exporter (retries, gzip, ``OTEL_EXPORTER_OTLP_*``) do the sending.

Ids are the SDK's (random), not the offline export's derived ones: a live trace and an export
agree on span names, parent/child structure, times and attributes. A run driven again after it
parked (or in another process) gets a new ``run`` span for that session; spans an earlier
session completed are not sent twice, those it sent incomplete are sent again, complete. A
person's operation through a traced ``Runtime`` (rollback, cancel, edit: one commit) is a
session of its own: it sends what its commit completed and its ``run`` span, then ends. Where
the earlier sessions ended is the commit the session opened the run at (``opened_at``, the
engine says), not guessed from the log: an operation writes no ``started``/``resumed``. What
they sent is what the log up to that commit's last event showed complete: judged by the log's
order, never by comparing times (sessions on hosts whose clocks disagree write the same log).

Nothing here is imported by the engine unless tracing is configured, and ``opentelemetry`` is
imported only then (the ``otel`` extra). A tracer failure is logged once and never fails a run.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._contract import TERMINAL_STATUSES
from .._otel_env import otel_tracing_configured, register_otlp_headers
from .._redact import redact, redact_text
from .._redact_logs import masked_logger
from ..store import Approval, Checkpoint, Event, RunRecord, Store
from ._otlp import SCOPE, nanos
from ._spans import (
    APPROVAL_KINDS,
    IN_CYCLE_KINDS,
    RUN_KINDS,
    Span,
    SpanEvent,
    build_window,
    exported_attributes,
    fit_spans,
    is_client_span,
    span_event,
)
from ._window import read_window

__all__ = ["LiveTracer", "live_tracer", "provider_from_env"]

log = masked_logger("loopwright.trace")

#: Statuses after which this session stops driving the run: every open span is ended.
_PAUSED = frozenset({"awaiting_approval"})
#: Events read at first, and at most, at a time when a resumed session looks back from the
#: log's end (a page twice the last while it looks on).
_TAIL_PAGE = (16, 256)


def provider_from_env(env: Mapping[str, str] | None = None) -> Any | None:
    """A ``TracerProvider`` exporting over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (and ``OTEL_SDK_DISABLED`` is not true);
    ``None`` otherwise, or (with a warning) when the ``otel`` extra is not installed. The
    exporter reads its headers, compression, timeout and certificates from the standard
    variables, the resource reads ``OTEL_RESOURCE_ATTRIBUTES`` / ``OTEL_SERVICE_NAME``."""
    env = os.environ if env is None else env
    if not otel_tracing_configured(env):
        return None
    register_otlp_headers(env)  # the exporter's credentials masked (a collector's echo)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but live tracing needs the otel extra "
            "(pip install 'loopwright[otel]'): %s; no spans are sent",
            exc,
        )
        return None
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME over these.
    defaults = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "loopwright"}
    provider = TracerProvider(resource=Resource.create(defaults))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


_env_provider: list[Any] = []  # the process's provider from the environment, built once


def live_tracer(store: Store, tracer_provider: Any | None = None) -> LiveTracer | None:
    """The tracer for a ``Runtime``: on ``tracer_provider`` when given, else on the provider
    the ``OTEL_*`` environment configures (one per process, shared by every ``Runtime``: one
    export thread, flushed at exit by the SDK); ``None`` when neither is there."""
    provider = tracer_provider
    if provider is None:
        if not _env_provider:
            built = provider_from_env()
            if built is None:
                return None
            _env_provider.append(built)
        provider = _env_provider[0]
    return LiveTracer(store, provider)


class _Counts:
    """How many times each cycle has started before the window: the occurrence numbers of a
    cycle redone after a rollback. Held as a range of cycles started once plus the exceptions,
    so that a long run does not keep an entry per cycle."""

    __slots__ = ("hi", "lo", "other")

    def __init__(self) -> None:
        self.lo, self.hi = 1, 0  # cycles lo..hi started once each (empty: hi < lo)
        self.other: dict[int, int] = {}  # counts of the cycles outside that range, or not 1

    def get(self, n: int) -> int:
        return self.other.get(n, 1 if self.lo <= n <= self.hi else 0)

    def add(self, n: int) -> None:
        count = self.get(n) + 1
        if count == 1 and self.hi < self.lo:
            self.lo = self.hi = n
        elif count == 1 and n == self.hi + 1 and n not in self.other:
            self.hi = n
        else:
            self.other[n] = count


@dataclass(slots=True)
class _RunTrace:
    """What the tracer holds for one run this session is driving: the window of the log not
    sent yet and what it needs to go on from there, never the whole log (invariant 8)."""

    # The window rebuilt at each commit: it starts after the last commit that left only the
    # run span open (everything before it is sent and dropped from here), so a commit costs
    # one cycle's events and holds no more, not the whole log.
    events: list[Event] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    # The id of the last event the sessions before this one had when they last committed (the
    # commit this session opened the run at; 0: no earlier session), and the keys of the spans
    # the log up to it showed complete: they sent those (if traced). A span still open there,
    # or completed by what came after in the log (a decision, an effect's outcome journaled
    # before a crash, a person's answer), is sent by this one. Order, not time: this session's
    # clock may be behind or ahead of theirs. ``sent`` is judged at the first commit and
    # dropped with the window it was judged on.
    seen: int = 0
    sent: set[str] = field(default_factory=set)
    open: dict[str, Any] = field(default_factory=dict)  # span key -> SDK span
    # Keys of the spans sent (or an earlier session sent): a cycle's while its window is
    # rebuilt, the run's own (effects and approvals outside a cycle) for the whole session.
    done: set[str] = field(default_factory=set)
    last_event: int = 0  # the id of the last event read
    last_seq: int = -1  # the seq of the last checkpoint read, and its fields
    last_fields: Mapping[str, Any] | None = None
    # Where the window starts: its first event's position in the run's log, the time of the
    # last event placed before it (a window's first cycle starts no earlier: the export's
    # rule, a value carried from window to window, never a maximum over the log before), and
    # the cycle_started counts before it.
    first_seq: int = 1
    after_ts: float | None = None
    occurrences: _Counts = field(default_factory=_Counts)
    # The run span's events and end as far as the windows sent go (it is sent at the end).
    run_events: list[SpanEvent] = field(default_factory=list)
    run_end: float = 0.0


class LiveTracer:
    """Sends a run's spans through an OpenTelemetry ``TracerProvider`` as the run commits."""

    def __init__(self, store: Store, tracer_provider: Any) -> None:
        from .. import __version__

        self.store = store
        self.provider = tracer_provider
        self._tracer = tracer_provider.get_tracer(SCOPE, __version__)
        self._runs: dict[str, _RunTrace] = {}
        self._lock = threading.Lock()  # runs may commit from several threads (workers)
        self._failed = False

    def committed(self, run_id: str, *, opened_at: int, session_ends: bool = False) -> None:
        """A commit of ``run_id`` is durable: send the spans it started or completed.

        ``opened_at``: the seq of the checkpoint the committing session opened the run at (the
        last commit of the sessions before it, whose spans were sent then; 0: none).
        ``session_ends``: the session commits
        no more (a person's operation): every span still open is ended and sent now."""
        try:
            with self._lock:
                self._update(run_id, opened_at, session_ends)
        except Exception:  # a tracer must never fail a run
            if not self._failed:
                self._failed = True
                log.warning("live tracing of run %s failed; it goes on", run_id, exc_info=True)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every ended span now (the provider's ``force_flush``)."""
        return bool(self.provider.force_flush(timeout_millis))

    def held(self) -> int:
        """How many entries (events, checkpoints, span keys, ...) the tracer holds for the runs
        it follows: the same from cycle to cycle of a long run (tests and benchmarks read it)."""
        n = 0
        for run in self._runs.values():
            for name in type(run).__slots__:
                v = getattr(run, name)
                n += len(v) if isinstance(v, list | set | dict) else len(getattr(v, "other", ()))
        return n

    # --- reading what the store gained --------------------------------------------------------
    def _update(self, run_id: str, opened_at: int, session_ends: bool) -> None:
        store = self.store
        rt = self._runs.get(run_id)
        fresh = rt is None
        if rt is None:
            rt = self._runs[run_id] = self._open(run_id, opened_at)
            new = rt.events
            asked = True
        else:
            new = store.events(run_id, after_id=rt.last_event)
            if new:
                rt.last_event = new[-1].id
            rt.events.extend(new)
            # What the commits since gained, each checkpoint's fields (``pending``) folded on
            # from the last one's: no state resolved, no snapshot read again.
            cks = store.checkpoints_after(run_id, rt.last_seq, rt.last_fields)
            if cks:
                rt.last_seq, rt.last_fields = cks[-1].seq, cks[-1].fields
            rt.checkpoints.extend(cks)
            asked = any(e.kind in APPROVAL_KINDS for e in new)
        window = rt.events
        ids = {str(e.data.get("approval_id")) for e in window if e.kind in APPROVAL_KINDS}
        if asked:
            # The requests the window names, each read by its id: not every request the run
            # ever made (a run that parks every 25 cycles makes one more each time).
            found = (store.approval(i) for i in sorted(ids))
            rt.approvals = sorted(
                (a for a in found if a is not None), key=lambda a: (a.requested_at, a.approval_id)
            )
        rec = store.get_run(run_id)
        ending = session_ends or rec.status in TERMINAL_STATUSES or rec.status in _PAUSED
        approvals = [a for a in rt.approvals if a.approval_id in ids]
        occurrences = {
            e.cycle: rt.occurrences.get(e.cycle) for e in window if e.kind == "cycle_started"
        }
        if fresh and rt.seen:
            rt.sent = self._sent_earlier(rec, rt, approvals, occurrences, opened_at)
        spans, next_ts = build_window(
            rec,
            window,
            rt.checkpoints,
            approvals,
            first_seq=rt.first_seq,
            after_ts=rt.after_ts,
            occurrences=occurrences,
        )
        root = spans[0]
        if ending:
            # The run span is sent now, with its events of the windows already sent (the
            # whole log's tree has them all: the windows split it where only it was open).
            root.events[:0] = rt.run_events
            root.end = max(root.end, rt.run_end)
            fit_spans([root])  # those read from the log start no earlier than the run
            root.events.sort(key=lambda e: (e.ts, e.attributes["loopwright.event.seq"]))
        self._emit(rt, spans, ending)
        if ending:
            del self._runs[run_id]  # this session stops driving the run; a later one starts afresh
            return
        if set(rt.open) <= {"run"}:  # quiet: every span of the window is sent
            for e in window:
                if e.kind == "cycle_started":
                    rt.occurrences.add(e.cycle)
            rt.run_events.extend(root.events)
            rt.run_end = max(rt.run_end, root.end)
            rt.first_seq += len(window)
            # the next cycle starts no earlier than the last event placed (as in the export)
            rt.after_ts = next_ts
            rt.events, rt.checkpoints = [], []
            # a later window's cycles are other occurrences: their keys are new; its events
            # all came after what the earlier sessions had
            rt.done = {k for k in rt.done if not k.startswith("cycle/")}
            rt.sent = set()

    def _open(self, run_id: str, opened_at: int) -> _RunTrace:
        """What a session needs to follow a run from its first commit: for a run that earlier
        sessions drove, the window from where the log last left only the run span open
        before this session opened it (``_resumed``); else (a new run, or no such place) the
        whole log, every checkpoint's record and fields and none of their states."""
        if opened_at > 0:
            rt = self._resumed(run_id, opened_at)
            if rt is not None:
                return rt
        store = self.store
        rt = _RunTrace()
        rt.events = store.events(run_id)
        if rt.events:
            rt.last_event = rt.events[-1].id
        rt.checkpoints = store.checkpoints(run_id)
        if rt.checkpoints:
            rt.last_seq, rt.last_fields = rt.checkpoints[-1].seq, rt.checkpoints[-1].fields
        rt.seen = _last_seen(rt.events, rt.checkpoints, opened_at)
        return rt

    def _resumed(self, run_id: str, opened_at: int) -> _RunTrace | None:
        """The window of a session that opened the run at checkpoint ``opened_at``, read from
        the log's end backwards (invariant 8: what a resume costs does not grow with the
        run): it starts after the last ``decision`` committed by then past which nothing an
        earlier event opened is still open (a cycle with no ``cycle_started`` of its own
        after it, an approval request answered after it, one still pending). Before it, every
        span had ended when the earlier sessions last committed (they sent it) but the run
        span: its events there (the kinds a cycle seldom writes, kept where the whole log's
        tree places them) are read with their positions, and so is how many events came
        before. ``None``: no such place (the whole log is read then)."""
        store = self.store
        cks = store.checkpoints_after(run_id, opened_at - 1)
        if not cks or cks[0].seq != opened_at:
            return None
        # The events a commit writes carry its checkpoint's time (one ``now``): the newest event
        # with the time of the commit this session opened the run at is the last the earlier
        # sessions had. A tag matched, not a clock compared: this session's clock may be
        # behind or ahead of theirs. (A commit that wrote no event: the whole log is read.)
        stamp = cks[0].created_at
        seen: int | None = None

        def had(ev: Event) -> bool:  # at or before the last event the earlier sessions had
            nonlocal seen
            if seen is None and ev.ts == stamp:
                seen = ev.id
            return seen is not None

        # requests still pending: the window must start before each was made
        pending = {a.approval_id for a in store.approvals(run_id=run_id, status="pending")}
        read = read_window(store, run_id, page=_TAIL_PAGE, pending=pending, ready=had)
        cut, window = read.cut, read.events
        if cut is None:
            return None  # the log's start: no such place
        assert seen is not None
        # The checkpoints the window's commits wrote: after the one the cut's commit wrote (a
        # commit's events carry its checkpoint's time).
        back = 2
        while not any(c.created_at == cut.ts and c.seq <= opened_at for c in cks):
            if cks[0].seq <= 0:
                return None
            cks = store.checkpoints_after(run_id, max(opened_at - back, 0) - 1)
            back *= 2
        at = max(c.seq for c in cks if c.created_at == cut.ts and c.seq <= opened_at)
        first_id = window[0].id if window else cut.id + 1
        count, before = store.event_positions(run_id, before_id=first_id, skip=IN_CYCLE_KINDS)
        rolled = [ev.id for _, ev in before if ev.kind == "rolled_back"]
        run_events = [
            span_event(seq, ev)
            for seq, ev in before
            if ev.kind in RUN_KINDS or self._loose(run_id, ev, first_id, rolled)
        ]
        rt = _RunTrace(
            events=window,
            checkpoints=[c for c in cks if c.seq > at],
            seen=seen,
            last_event=window[-1].id if window else cut.id,
            last_seq=cks[-1].seq,
            last_fields=cks[-1].fields,
            first_seq=count + 1,
            after_ts=cut.ts,
            run_events=run_events,
            # the run span ends no earlier than its events (one may be later than the cut's
            # where a clock stepped back since); a later event of a cycle before the cut is
            # not read (the export's run span ends no earlier than it: see docs/trace.md)
            run_end=max([cut.ts, *(e.ts for e in run_events)]),
        )
        # A cycle the window starts that started before too (redone after a rollback): its
        # occurrence number counts those. Without a rollback, cycles before the cut are not
        # after it.
        again = {e.cycle for e in window if e.kind == "cycle_started"}
        again = again if rolled else {n for n in again if n <= cut.cycle}
        rt.occurrences.other.update(store.cycle_starts(run_id, before_id=first_id, cycles=again))
        return rt

    def _sent_earlier(
        self,
        rec: RunRecord,
        rt: _RunTrace,
        approvals: list[Approval],
        occurrences: Mapping[int, int],
        opened_at: int,
    ) -> set[str]:
        """The keys of the window's spans the earlier sessions sent: those complete in the
        tree of the window's events up to the last they had (``rt.seen``), as the last of
        them built it at its last commit (a request answered after it still waiting there)."""
        had = [e for e in rt.events if e.id <= rt.seen]
        if not had:
            return set()
        answered = {str(e.data.get("approval_id")) for e in had if e.kind == "approval_decided"}
        spans, _ = build_window(
            rec,
            had,
            [c for c in rt.checkpoints if c.seq <= opened_at],
            [
                a if a.approval_id in answered else replace(a, status="pending", decided_at=None)
                for a in approvals
            ],
            first_seq=rt.first_seq,
            after_ts=rt.after_ts,
            occurrences=occurrences,
        )
        return {s.key for s in spans[1:] if not s.incomplete}

    def _loose(self, run_id: str, ev: Event, first_id: int, rolled: list[int]) -> bool:
        """Whether ``ev`` (before the window, of a kind a cycle seldom writes) is on the run
        span, as the whole log's tree places it: no occurrence of its cycle open at it, and
        none started after it that claims it (its journal written ahead of the cycle's
        first commit). Each answer is a few rows of the log around ``ev``."""
        store = self.store
        if store.in_cycle(run_id, event_id=ev.id, cycle=ev.cycle):
            return False
        if any(r > ev.id for r in rolled):  # cycle numbers went back after it: count them
            at = store.cycle_starts(run_id, before_id=ev.id, cycles={ev.cycle})
            then = store.cycle_starts(run_id, before_id=first_id, cycles={ev.cycle})
            return then.get(ev.cycle, 0) == at.get(ev.cycle, 0)
        after = store.next_start(run_id, after_id=ev.id, before_id=first_id, cycle=ev.cycle)
        return after != ev.cycle

    # --- SDK spans ----------------------------------------------------------------------------
    def _emit(self, rt: _RunTrace, spans: list[Span], ending: bool) -> None:
        from opentelemetry import trace

        for s in spans:
            if s.key in rt.done:
                continue
            if s.key not in rt.open:
                if s.parent is not None and s.parent not in rt.open:
                    rt.done.add(s.key)  # under a span an earlier session sent: sent then too
                    continue
                if s.parent is not None and s.key in rt.sent:
                    rt.done.add(s.key)  # an earlier session sent it complete
                    continue
                ctx = (
                    trace.set_span_in_context(rt.open[s.parent])
                    if s.parent is not None
                    else trace.set_span_in_context(trace.INVALID_SPAN)  # a root, not a child
                )
                rt.open[s.key] = self._tracer.start_span(
                    s.name,
                    context=ctx,
                    kind=trace.SpanKind.CLIENT if is_client_span(s) else trace.SpanKind.INTERNAL,
                    start_time=nanos(s.start),
                )
        # End children before their parents (the SDK does not care; readers of a live
        # stream see a parent only after what it contains).
        for s in reversed(spans):
            sdk = rt.open.get(s.key)
            if sdk is None or (s.incomplete and not ending):
                continue
            _finish(sdk, s)
            del rt.open[s.key]
            rt.done.add(s.key)


def _last_seen(events: list[Event], checkpoints: list[Checkpoint], opened_at: int) -> int:
    """The id of the last event the earlier sessions had at their last commit, the checkpoint
    this session opened the run at (0 for the run's first, seq 0: no earlier session; not
    guessed from the log: an operation writes no ``started``/``resumed``). A commit's events
    carry its checkpoint's time: the last event of the latest commit up to ``opened_at`` that
    wrote any (times matched as tags, never compared: clocks of hosts may disagree). Where no
    event carries a commit's time (a store that stamps them apart), the last event no later
    than that checkpoint: judged by time, as before."""
    if opened_at <= 0:
        return 0
    stamps = {c.created_at for c in checkpoints if c.seq <= opened_at}
    seen = max((e.id for e in events if e.ts in stamps), default=0)
    if seen or not events:
        return seen
    # No event carries a commit's time: a store of another make (the ``Store`` contract does
    # not ask for it) stamps them apart. Judged by time then, as where clocks agree.
    end = next((c.created_at for c in reversed(checkpoints) if c.seq == opened_at), None)
    return 0 if end is None else max((e.id for e in events if e.ts <= end), default=0)


def _finish(sdk: Any, s: Span) -> None:
    from opentelemetry.trace import Status, StatusCode

    sdk.set_attributes(_otel_attributes(exported_attributes(s)))
    for ev in s.events:
        sdk.add_event(ev.name, _otel_attributes(ev.attributes), timestamp=nanos(ev.ts))
    if s.status == "error":
        msg = redact_text(s.status_message) if s.status_message else None
        sdk.set_status(Status(StatusCode.ERROR, msg))
    elif s.status == "ok":
        sdk.set_status(Status(StatusCode.OK))
    sdk.end(end_time=nanos(s.end))


def _otel_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as the SDK takes them: scalars and homogeneous lists of scalars; ``None``
    and empty lists left out (as the offline export does), anything else as JSON text."""
    out: dict[str, Any] = {}
    # A span leaves the engine: secrets masked (invariant 9), as in every export.
    for k, v in redact(dict(attrs)).items():
        if v is None:
            continue
        if isinstance(v, str | bool | int | float):
            out[k] = v
        elif isinstance(v, list | tuple):
            items = [x for x in v if x is not None]
            if not items:
                continue
            kinds = {type(x) for x in items}
            if len(kinds) == 1 and kinds <= {str, bool, int, float}:
                out[k] = list(items)
            else:
                out[k] = json.dumps(items, sort_keys=True, default=str)
        else:
            out[k] = json.dumps(v, sort_keys=True, default=str)
    return out
