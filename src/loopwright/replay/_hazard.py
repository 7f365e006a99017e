"""The hazard table of ``MarginalReturn``, counted from recorded runs.

For every cycle ``k`` a recorded run actually went through, and the ``stall`` before it (cycles
since the last material improvement, as the engine's state holds it when it decides whether to
start cycle ``k``), the table counts one *trial*, and one *success* when that cycle's visible
verdicts satisfy the success rule. A run is counted up to its first success under that rule and
no further (the engine would have stopped there), so ``hazard[k-1][stall]`` estimates
P(success at cycle ``k`` | no success before, ``stall``) — exactly what ``marginal_stop`` asks
before cycle ``k`` with ``MarginalReturn.p_success(k, stall)``.

The stall is computed as the engine and ``simulate`` compute it: a cycle improves when
``loopwright._decide.improved(level, score, min_delta, newly_passing)`` holds on the recorded
scores (and the proposal was neither a duplicate nor refused/asked); otherwise the stall grows
by one (a cycle that parked with a question leaves it as it is, and so does a check-only one,
which judged a person's edit: it is no trial either, the engine asking ``marginal_stop``
before no such cycle, and its success the person's). A cycle whose end escalates on a
person's call (``escalated``: a request denied after an edit beside it) is a trial that ends
the run, never the actor's success. The engine uses the
contract's ``no_progress.min_delta``, or ``0.0`` when the contract has no ``no_progress`` rule:
pass the same ``min_delta`` here as the contract the table is meant for (``fit_stop`` does).

Capping: cycles beyond ``max_cycles`` are counted in the last row and stalls beyond
``max_stall`` in the last column (``p_success`` reads the table the same way), so the table has
``max_cycles`` rows of ``max_stall + 1`` cells.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import _decide as rules
from .._contract import Contract
from .._contract_rules import Budget, Success
from .._errors import ConfigError
from .._inherited import NOTHING, Inherited
from ._format import RunTrace
from ._simulate import succeeded

__all__ = ["HazardTable", "fit_hazard"]

HazardTable = tuple[tuple[tuple[int, int], ...], ...]


def fit_hazard(
    traces: Iterable[RunTrace],
    *,
    success: Success | None = None,
    min_delta: float = 0.0,
    max_cycles: int = 10,
    max_stall: int = 3,
) -> HazardTable:
    """Count ``[successes, trials]`` per (cycle, stall before it) over recorded runs.

    Args:
        traces: the recorded runs.
        success: the success rule (the contract's ``Success``); default ``Success()``: every
            required visible check passes (the trace's ``required``, else all of them) and the
            score is 1.0.
        min_delta: the material-improvement threshold for the stall (use the contract's
            ``no_progress.min_delta``, or 0.0 when it has none, as the engine does).
        max_cycles: rows; later cycles count in the last row.
        max_stall: the last column index; longer stalls count there.
    """
    if isinstance(max_cycles, bool) or not isinstance(max_cycles, int) or max_cycles < 1:
        raise ConfigError(f"must be a whole number ≥ 1, got {max_cycles!r}", field="max_cycles")
    if isinstance(max_stall, bool) or not isinstance(max_stall, int) or max_stall < 0:
        raise ConfigError(f"must be a whole number ≥ 0, got {max_stall!r}", field="max_stall")
    if min_delta < 0:
        raise ConfigError(f"must not be negative, got {min_delta!r}", field="min_delta")
    judge = Contract(success=success or Success(), budget=Budget(max_cycles=1))
    succ = [[0] * (max_stall + 1) for _ in range(max_cycles)]
    trials = [[0] * (max_stall + 1) for _ in range(max_cycles)]
    for trace in traces:
        required = set(trace.required or ())
        # a fork goes on from the cycle, level and stall it inherited, as the engine asks
        # ``p_success(k, stall)`` of it (``RunTrace.start``; nothing for other runs)
        inh = Inherited.from_dict(trace.start) if trace.start else NOTHING
        best: float | None = inh.progress_score
        passed: set[str] = set(inh.passed_checks)
        stall = inh.stall
        for k, c in enumerate(trace.cycles, inh.cycle + 1):
            row, col = min(k, max_cycles) - 1, min(stall, max_stall)
            if c.check_only:
                # judged a person's edit: no attempt, so no trial of the actor's (the engine
                # asks ``marginal_stop`` before none: ``_decide.check_stop``); a success here
                # is the person's, and ends the run
                if succeeded(judge, trace, c):
                    break
            elif c.escalated:
                # a person's call ends the run here: the cycle of a request denied after an
                # edit beside it (the actor's attempt, its proposal denied: accepted, the
                # success is the person's version's), a person's version failing a check.
                # A trial, never the actor's success (review48c); the run goes on only where
                # a person reopened it
                trials[row][col] += 1
                if not c.reopened:
                    break
            else:
                trials[row][col] += 1
                if succeeded(judge, trace, c):
                    succ[row][col] += 1
                    break
            decided = not (c.refused or c.asked)
            newly = {
                name
                for name, v in c.verdicts.items()
                if v.get("passed") and name in (required or c.verdicts) and name not in passed
            }
            if (
                not c.duplicate
                and decided
                and rules.improved(best, c.score, min_delta, bool(newly))
            ):
                known = [v for v in (best, c.score) if v is not None]
                best = max(known) if known else None
                stall = 0
            elif not (c.asked or c.check_only):  # (as ``simulate``: no attempt made)
                stall += 1
            passed |= newly
    return tuple(
        tuple(zip(srow, trow, strict=True)) for srow, trow in zip(succ, trials, strict=True)
    )
