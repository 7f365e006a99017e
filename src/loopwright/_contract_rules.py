"""The stop contract's six rules (success, no progress, budget, marginal return, risk,
escalation): frozen value objects that check themselves where they are built, and the budget's
default cycle ceiling with the engine's mark of it."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from . import _shapes as shapes
from ._errors import ConfigError
from ._usage import MAX_RUN_TOKENS

__all__ = [
    "DEFAULT_MAX_CRASHES",
    "DEFAULT_MAX_CYCLES",
    "Budget",
    "Escalation",
    "MarginalReturn",
    "NoProgress",
    "RiskCheck",
    "RiskRule",
    "Success",
    "engine_marks",
]


# The cycle ceiling a spend-only contract (``Contract.spend_only``) is given where a run is given
# it: its only exits count money or tokens, which cycles that spend nothing (a plain function's
# actor, a model reporting no cost, a proposal refused again and again) never reach (stop 49's
# seed 200615 ran for ever). As LangGraph's ``recursion_limit`` (25) bounds a graph nobody
# bounded; a contract that sets max_cycles, max_seconds or a no_progress rule chooses its own.
DEFAULT_MAX_CYCLES = 1_000

# How many times the executor of a run may die in one cycle (a kill -9, an out-of-memory kill,
# a crash in native code, ``os._exit``) before a resume ends the run ``escalated`` instead of
# driving that cycle again (``Budget.max_crashes`` sets it). A crash is never a failed attempt
# a retry bound counts (nothing is journaled when the process dies), so without this bound an
# actor that kills its process every time was called on every resume for ever (stop 52). As
# DBOS's ``max_recovery_attempts``.
DEFAULT_MAX_CRASHES = 5


# Set while the engine builds a budget carrying ``max_cycles_default`` (``engine_marks``): its
# default ceiling given (``Contract.with_default_ceiling``), a run's snapshot loaded
# (``contract_from_snapshot``), a marked budget copied. A ``Budget(...)`` a caller builds with the
# mark outside it is refused: the mark is the engine's, as in a spec or a contract file.
_ENGINE_MARKS: ContextVar[bool] = ContextVar("loopwright_engine_marks", default=False)


@contextmanager
def engine_marks() -> Iterator[None]:
    """Within it a ``Budget`` may be built with ``max_cycles_default`` (the engine's own)."""
    token = _ENGINE_MARKS.set(True)
    try:
        yield
    finally:
        _ENGINE_MARKS.reset(token)


MARK_REFUSED = (
    "is the engine's mark of its default cycle ceiling, which a contract with only "
    "spend budgets is given, not a setting: leave it out (budget.max_cycles sets a "
    "cycle cap of your own)"
)


def _names(obj: Any, attr: str, where: str) -> None:
    """Normalise a field holding names or patterns to a tuple of strings: a lone string is one
    name (iterating it would yield single characters, and ``"*"`` would match everything)."""
    value = getattr(obj, attr)
    if value is None:
        return
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"must be a list of strings, got {value!r}", field=where)
    object.__setattr__(obj, attr, tuple(value))


def _num(value: Any, name: str, *, integer: bool = False, allow_none: bool = True) -> None:
    if value is None:
        if not allow_none:
            raise ConfigError("is required", field=name)
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a number, got {value!r}", field=name)
    if integer and not isinstance(value, int):
        raise ConfigError(f"must be a whole number, got {value!r}", field=name)
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past every float (10**400 in a JSON body): was a 500
        raise ConfigError(
            "must be a finite number, got a whole number too large to compare (over 1.8e308)",
            field=name,
        ) from None
    if not finite:  # NaN passes every limit; an infinite one is None, unset
        raise ConfigError(f"must be a finite number, got {value!r}", field=name)
    if value < 0:
        raise ConfigError(f"must not be negative, got {value!r}", field=name)


def _count(value: Any) -> bool:
    """A whole number of runs (``2.0`` from a JSON tool counts; ``1.5`` and ``true`` do not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or value.is_integer()


@dataclass(frozen=True, kw_only=True, slots=True)
class Success:
    """When the work is done.

    Attributes:
        min_score: the aggregate visible score needed, in [0, 1] (the invoice example's
            "confidence ≥ 98%").
        required: names of visible verifiers that must pass; ``None`` means all visible ones.
        accept_parts: ``"when_clean"`` accepts (and protects) each part as soon as every visible
            verifier checked it without a finding; ``"on_success"`` accepts all parts only when
            the whole run succeeds.
        allow_vacuous: accept a required check's vacuous pass (a verdict whose evidence says
            ``vacuous``: it had nothing to check, e.g. no tests). Off by default: success is
            refused, the verdict's finding says why, and the run ends by another rule.
    """

    min_score: float = 1.0
    required: tuple[str, ...] | None = None
    accept_parts: Literal["when_clean", "on_success"] = "when_clean"
    allow_vacuous: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.allow_vacuous, bool):
            raise ConfigError("must be true or false", field="contract.success.allow_vacuous")
        _names(self, "required", "contract.success.required")
        _num(self.min_score, "contract.success.min_score", allow_none=False)
        if not 0.0 <= self.min_score <= 1.0:
            raise ConfigError(
                f"must be within [0, 1], got {self.min_score!r}", field="contract.success.min_score"
            )
        if self.accept_parts not in ("when_clean", "on_success"):
            raise ConfigError(
                "must be 'when_clean' or 'on_success'", field="contract.success.accept_parts"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class NoProgress:
    """A plateau exit: stop when the visible score has not risen by ``min_delta`` (exactly
    ``min_delta`` counts) above the level the last material improvement reached — not the best
    score, which small rises may have moved (0.70, 0.72, 0.76 with 0.05: the last is a rise of
    0.06 from the level 0.70) — and no failing required check started passing, for ``cycles``
    consecutive cycles. The level starts at 0 (a first score of 0 is no progress). A proposal
    identical to an earlier rejected one (its writes of a part's current value left out), or one
    refused for touching accepted work, is a cycle without progress."""

    cycles: int = 2
    min_delta: float = 0.01

    def __post_init__(self) -> None:
        _num(self.cycles, "contract.no_progress.cycles", integer=True, allow_none=False)
        _num(self.min_delta, "contract.no_progress.min_delta", allow_none=False)
        if self.cycles < 1:
            raise ConfigError("must be at least 1", field="contract.no_progress.cycles")


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """Spend limits; ``None`` is unlimited. The engine never starts a cycle it can already tell
    would cross one: the next cycle is projected at the mean of the cycles so far.

    ``max_cycles_key`` names a per-task cycle budget: a dotted path into the task (e.g.
    ``"recorded.max_cycles"``, which ``loopwright import ldb`` writes from each recording). A
    task holding a whole number ≥ 1 there runs under that cap, or under ``max_cycles`` if that
    is lower (the contract's cap stays a cap); tasks without one run under ``max_cycles``.
    Beside the default ceiling (``max_cycles_default``) a task's own cap is not lowered to it:
    the ceiling is the cap of a task without one.

    ``max_cycles_default`` says ``max_cycles`` is the engine's default ceiling
    (``DEFAULT_MAX_CYCLES``), not the author's: the contract had only spend budgets
    (``Contract.with_default_ceiling``). A stop at it says so; it holds only beside that
    ceiling (a ``max_cycles`` set to another number is the author's). The engine's mark, not a
    setting: a ``Budget`` built with it outside the engine (``engine_marks``) is refused.

    ``max_crashes``: how many times the run's executor may die in the middle of one cycle
    (killed, out of memory, a crash in native code) and that cycle still be driven again on
    resume; a resume that finds more ends the run ``escalated`` (``None``: the default,
    ``DEFAULT_MAX_CRASHES``; ``0``: the first crash escalates). Not a limit that ends a
    run by itself: a contract still needs one of the others."""

    max_cycles: int | None = None
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_seconds: float | None = None
    max_cycles_key: str | None = None
    max_cycles_default: bool = False
    max_crashes: int | None = None

    def __post_init__(self) -> None:
        _num(self.max_cycles, "contract.budget.max_cycles", integer=True)
        _num(self.max_crashes, "contract.budget.max_crashes", integer=True)
        if not isinstance(self.max_cycles_default, bool):
            raise ConfigError("must be true or false", field="contract.budget.max_cycles_default")
        if self.max_cycles_default and not _ENGINE_MARKS.get():
            raise ConfigError(
                MARK_REFUSED + " (a budget copied from a run's contract with "
                "dataclasses.replace carries it: pass max_cycles_default=False)",
                field="contract.budget.max_cycles_default",
            )
        if self.max_cycles_default and self.max_cycles != DEFAULT_MAX_CYCLES:
            # (a max_cycles replaced or laid over a default ceiling, in a fork: the author's)
            object.__setattr__(self, "max_cycles_default", False)
        key = self.max_cycles_key
        if key is not None and (not isinstance(key, str) or not key.strip(".")):
            raise ConfigError(
                f"must be a dotted key into the task, got {key!r}",
                field="contract.budget.max_cycles_key",
            )
        _num(self.max_cost_usd, "contract.budget.max_cost_usd")
        _num(self.max_tokens, "contract.budget.max_tokens", integer=True)
        for name in ("max_cycles", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value > MAX_RUN_TOKENS:
                # a run's total, or cycle, past it cannot be stored: the budget could never be
                # reached, and a run that went on toward it failed its commit (stop 52)
                raise ConfigError(
                    f"must be at most 2**63 - 1 (MAX_RUN_TOKENS, the largest count a store "
                    f"holds), got {value:.4g}",
                    field=f"contract.budget.{name}",
                )
        _num(self.max_seconds, "contract.budget.max_seconds")
        if self.max_cycles == 0:
            raise ConfigError("must be at least 1", field="contract.budget.max_cycles")

    @property
    def bounded(self) -> bool:
        return any(
            v is not None
            for v in (self.max_cycles, self.max_cost_usd, self.max_tokens, self.max_seconds)
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class MarginalReturn:
    """Stop when another cycle is not worth its expected cost: estimated P(success in the next
    cycle) × ``value_per_success_usd`` < expected cost of the next cycle (the mean cost of the
    cycles so far that cost anything, as a cost budget projects it: a free cycle, such as a
    check-only one of free checks, is left out; no estimate before the first cycle, so the
    first cycle always runs).

    P comes from a hazard table: for cycle ``k`` (1-based; the last row stands for every later
    cycle) and ``stall`` (cycles since the last material improvement, the last column stands
    for more), ``hazard[k-1][stall]`` = ``[successes, trials]`` observed in traces (``loopwright
    fit-stop`` fits it). P = (successes + prior_successes) / (trials + prior_successes +
    prior_failures). With no table, the prior is all that is known of cycles in general, and
    the run's own stall is what is known of this one: each cycle since the last material
    improvement counts as a failed trial, P = prior_successes / (prior_successes +
    prior_failures + stall) — 0.25 by default after an improvement, 0.2 after one cycle
    without, 0.1 after six — so a stalled run whose cycles cost money ends by this rule
    (the prior alone, whatever the stall, let a plateau go on until a budget). A cautious
    guess; fit a table on your own traces.
    """

    value_per_success_usd: float
    hazard: tuple[tuple[tuple[int, int], ...], ...] = ()
    prior_successes: float = 1.0
    prior_failures: float = 3.0

    def __post_init__(self) -> None:
        where = "contract.marginal_return"
        _num(self.value_per_success_usd, f"{where}.value_per_success_usd", allow_none=False)
        _num(self.prior_successes, f"{where}.prior_successes", allow_none=False)
        _num(self.prior_failures, f"{where}.prior_failures", allow_none=False)
        if self.prior_successes + self.prior_failures <= 0:
            raise ConfigError("the prior needs some weight", field=f"{where}.prior_failures")
        rows = []
        try:
            for row in self.hazard:
                cells = []
                for cell in row:
                    if len(cell) != 2 or not all(_count(x) for x in cell):
                        raise ValueError(cell)  # int() read 1.5 as 1, and true as 1
                    succ, trials = (int(cell[0]), int(cell[1]))
                    if succ < 0 or trials < succ:
                        raise ValueError(cell)
                    float(trials)  # OverflowError past every float: p_success divides by it
                    cells.append((succ, trials))
                if not cells:
                    raise ValueError(row)
                rows.append(tuple(cells))
        except (TypeError, ValueError, IndexError, OverflowError):
            raise ConfigError(
                "must be rows of [successes, trials] pairs with 0 <= successes <= trials",
                field=f"{where}.hazard",
            ) from None
        object.__setattr__(self, "hazard", tuple(rows))

    def p_success(self, cycle: int, stall: int) -> float:
        """Estimated P(success at ``cycle``) given no success before and ``stall``: from the
        hazard table's cell, or, with no table, the prior with each stalled cycle counted as a
        failed trial."""
        a, b = self.prior_successes, self.prior_failures
        if not self.hazard:
            return a / (a + b + max(stall, 0))
        row = self.hazard[min(max(cycle, 1), len(self.hazard)) - 1]
        succ, trials = row[min(max(stall, 0), len(row) - 1)]
        return (succ + a) / (trials + a + b)


RiskCheck = Callable[..., "str | bool | Awaitable[str | bool | None] | None"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RiskRule:
    """A condition that parks the run for a person's approval (it never ends the run).

    Attributes:
        name: the rule's name, shown in the approval request.
        touches: glob patterns on ``artifact/part``: a proposal changing a matching part pauses.
        findings: finding dimensions (from visible verifiers) that pause, e.g.
            ``"conflicting_evidence"``.
        check: a callable ``(state, proposal, verdicts) -> str | bool | None`` (sync or
            async) returning a reason to pause (``True``: pause for ``reason``; ``None``,
            ``False`` or ``""``: no pause), or a ``"module:attr"`` / ``"file.py:attr"``
            reference to one. It is called as the loop's reflector is: off the event loop, under the
            actor's timeout or the time budget left (60 s when neither is set); one that
            raises or times out escalates the run, naming the rule (docs/concepts.md).
        reason: why this needs a person, in words.
        expires_after_s: a request not decided within this many seconds expires (escalates).
        ask: instead of a yes/no approval, park with this question for a person; the answer is
            recorded and put in the next cycle's context (the proposal is then applied).
    """

    name: str
    touches: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    check: str | RiskCheck | None = None
    reason: str = ""
    expires_after_s: float | None = None
    ask: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ConfigError("every risk rule needs a name", field="contract.risk.name")
        _names(self, "touches", f"contract.risk.{self.name}.touches")
        _names(self, "findings", f"contract.risk.{self.name}.findings")
        if self.check is not None and not (isinstance(self.check, str) or callable(self.check)):
            raise ConfigError(
                f"must be a callable or a 'module:attr' reference, got {self.check!r}",
                field=f"contract.risk.{self.name}.check",
            )
        if not (self.touches or self.findings or self.check):
            raise ConfigError(
                f"rule {self.name!r} needs 'touches', 'findings' or 'check'",
                field=f"contract.risk.{self.name}",
            )
        # the request's "why" in every view: 5 was stored as "5", a list as its repr (None,
        # which a snapshot may hold, is no reason: the rule's own words are used)
        if self.reason is None:
            object.__setattr__(self, "reason", "")
        shapes.text(self.reason, f"contract.risk.{self.name}.reason")
        _num(self.expires_after_s, f"contract.risk.{self.name}.expires_after_s")
        if self.ask is not None and (not isinstance(self.ask, str) or not self.ask.strip()):
            raise ConfigError("must be the question's text", field=f"contract.risk.{self.name}.ask")


@dataclass(frozen=True, kw_only=True, slots=True)
class Escalation:
    """Where unresolved work goes: an owner and a default recommended next action."""

    owner: str | None = None
    route: str | None = None
    recommended_action: str | None = None

    def __post_init__(self) -> None:
        for name in ("owner", "route", "recommended_action"):
            shapes.optional(getattr(self, name), str, f"contract.escalation.{name}")
