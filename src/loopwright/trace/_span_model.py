"""What a run's span tree is made of: spans, span events, the occurrences of a cycle, the
event kinds that place them, and how a store event becomes a span event."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ..store import Event

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
CLOSING = frozenset({"stopped", "rolled_back"})
EFFECT_END = frozenset(
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
        "effect_withdrawn",
        "effect_retry",
        "effect_grace",
        "effect_args_differ",
        "effect_undo_unsettled",
        *EFFECT_END,
        *APPROVAL_KINDS,
    }
)
MODEL_CALL = "model_call"  # as ``loopwright._modelcalls.MODEL_CALL``
#: Fields of a ``model_call`` event kept out of its span event: the content itself.
_CONTENT = frozenset({"prompt", "reply"})
ERROR_STATUSES = frozenset({"escalated", "failed"})


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
class Occurrence:
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


def span_event(seq: int, ev: Event) -> SpanEvent:
    """The span event of the store event ``ev`` at position ``seq`` of its run's log, as the
    tree places it (a live tracer rebuilds the run span's from the log's run-level events)."""
    attrs: dict[str, Any] = {"loopwright.event.seq": seq, "loopwright.event.id": ev.id}
    for k, v in ev.data.items():
        if ev.kind == MODEL_CALL and k in _CONTENT:
            continue
        attrs[str(k)] = _plain(v)
    return SpanEvent(name=ev.kind, ts=ev.ts, attributes=attrs)


def evaluation_event(ev: Event) -> SpanEvent:
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
