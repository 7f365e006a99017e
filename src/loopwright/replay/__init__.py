"""What-if replay of stop contracts over recorded runs (see ``_format`` for the trace format)."""

from ._fit import (
    FIT_FORMAT,
    Candidate,
    Figures,
    FitResult,
    FoldResult,
    Grid,
    StopParams,
    fit_stop,
    plot_frontier,
    split_folds,
)
from ._format import TRACE_FORMAT, Call, CycleTrace, RunTrace, read_traces, write_traces
from ._hazard import HazardTable, fit_hazard
from ._report import Report, Totals, load_contract, recorded_outcomes, replay, summarize
from ._simulate import Outcome, simulate
from ._sources import (
    iter_source,
    load_source,
    mixed_loops,
    trace_of_run,
    traces_from_ldb,
    traces_from_store,
)

__all__ = [
    "FIT_FORMAT",
    "TRACE_FORMAT",
    "Call",
    "Candidate",
    "CycleTrace",
    "Figures",
    "FitResult",
    "FoldResult",
    "Grid",
    "HazardTable",
    "Outcome",
    "Report",
    "RunTrace",
    "StopParams",
    "Totals",
    "fit_hazard",
    "fit_stop",
    "iter_source",
    "load_contract",
    "load_source",
    "mixed_loops",
    "plot_frontier",
    "read_traces",
    "recorded_outcomes",
    "replay",
    "simulate",
    "split_folds",
    "summarize",
    "trace_of_run",
    "traces_from_ldb",
    "traces_from_store",
    "write_traces",
]
