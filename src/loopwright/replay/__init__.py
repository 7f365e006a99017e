"""What-if replay of stop contracts over recorded runs (see ``_format`` for the trace format)."""

from ._format import TRACE_FORMAT, Call, CycleTrace, RunTrace, read_traces, write_traces
from ._report import Report, Totals, load_contract, recorded_outcomes, replay, summarize
from ._simulate import Outcome, simulate
from ._sources import load_source, trace_of_run, traces_from_ldb, traces_from_store

__all__ = [
    "TRACE_FORMAT",
    "Call",
    "CycleTrace",
    "Outcome",
    "Report",
    "RunTrace",
    "Totals",
    "load_contract",
    "load_source",
    "read_traces",
    "recorded_outcomes",
    "replay",
    "simulate",
    "summarize",
    "trace_of_run",
    "traces_from_ldb",
    "traces_from_store",
    "write_traces",
]
