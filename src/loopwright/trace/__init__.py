"""Traces: a run's append-only events as JSON lines, as OpenTelemetry spans (OTLP/JSON, or
sent to an OTLP/HTTP collector, after the fact or live through the SDK while the run
executes), and turned into eval cases and preference pairs.

Everything here reads the store and nothing else; ``docs/trace.md`` documents every format.
"""

from __future__ import annotations

from ._case_actor import case_actor
from ._exports import (
    EVAL_CASE_FORMAT,
    PAIR_FORMAT,
    context_id,
    ended_run_ids,
    eval_case,
    eval_cases,
    preference_pairs,
    write_eval_case,
)
from ._follow import FOLLOW_UNTIL, follow_events, follow_events_sync
from ._jsonl import TRACE_FORMAT, build_records, iter_trace_records, trace_records, write_jsonl
from ._live import LiveTracer, live_tracer, provider_from_env
from ._otlp import (
    OTLPExportError,
    OTLPExportResult,
    export_otlp,
    otlp_message,
    otlp_to_protobuf,
    otlp_trace,
    span_id_for,
    spans_to_otlp,
    trace_id_for,
    traces_url,
    write_otlp,
)
from ._spans import Span, SpanEvent, build_spans, run_spans

__all__ = [
    "EVAL_CASE_FORMAT",
    "FOLLOW_UNTIL",
    "PAIR_FORMAT",
    "TRACE_FORMAT",
    "LiveTracer",
    "OTLPExportError",
    "OTLPExportResult",
    "Span",
    "SpanEvent",
    "build_records",
    "build_spans",
    "case_actor",
    "context_id",
    "ended_run_ids",
    "eval_case",
    "eval_cases",
    "export_otlp",
    "follow_events",
    "follow_events_sync",
    "iter_trace_records",
    "live_tracer",
    "otlp_message",
    "otlp_to_protobuf",
    "otlp_trace",
    "preference_pairs",
    "provider_from_env",
    "run_spans",
    "span_id_for",
    "spans_to_otlp",
    "trace_id_for",
    "trace_records",
    "traces_url",
    "write_eval_case",
    "write_jsonl",
    "write_otlp",
]
