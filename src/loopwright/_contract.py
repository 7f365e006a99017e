"""The stop contract: declared before a run starts, snapshotted into it.

Every run ends with exactly one stop reason from a closed vocabulary (``STOP_REASONS``). The
contract's parts are small frozen value objects; ``Contract.from_dict`` builds them from the
``[contract]`` table of a loop spec and names the field at fault when something is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, cast

from . import _shapes as shapes
from ._errors import ConfigError
from ._usage import MAX_RUN_TOKENS

__all__ = [
    "DEFAULT_MAX_CRASHES",
    "DEFAULT_MAX_CYCLES",
    "RUN_STATUSES",
    "STOP_REASONS",
    "TERMINAL_STATUSES",
    "Budget",
    "Contract",
    "Escalation",
    "MarginalReturn",
    "NoProgress",
    "RiskRule",
    "StopReason",
    "Success",
    "contract_from_snapshot",
    "refuse_engine_marks",
    "snapshot_as_written",
    "status_for",
]

StopReason = Literal[
    "success",
    "no_progress",
    "budget_cycles",
    "budget_cost",
    "budget_tokens",
    "budget_time",
    "marginal_return",
    "escalated",
    "cancelled",
    "error",
]
STOP_REASONS: tuple[str, ...] = (
    "success",
    "no_progress",
    "budget_cycles",
    "budget_cost",
    "budget_tokens",
    "budget_time",
    "marginal_return",
    "escalated",
    "cancelled",
    "error",
)
RUN_STATUSES: tuple[str, ...] = (
    "pending",
    "running",
    "awaiting_approval",
    "accepted",
    "stopped",
    "escalated",
    "cancelled",
    "failed",
)
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


_MARK_REFUSED = (
    "is the engine's mark of its default cycle ceiling, which a contract with only "
    "spend budgets is given, not a setting: leave it out (budget.max_cycles sets a "
    "cycle cap of your own)"
)


def refuse_engine_marks(tables: object) -> None:
    """``ConfigError`` for contract tables a person wrote (a loop spec's ``[contract]``, a
    contract file, a rerun's tables) that set ``budget.max_cycles_default``: the engine's mark
    of its default ceiling (``Contract.with_default_ceiling``), kept in a run's snapshot
    (``contract_from_snapshot`` loads it), not a setting: written beside another exit, it
    dropped the author's own ``max_cycles = 1000``."""
    budget = tables.get("budget") if isinstance(tables, Mapping) else None
    if isinstance(budget, Mapping) and "max_cycles_default" in budget:
        raise ConfigError(_MARK_REFUSED, field="contract.budget.max_cycles_default")


TERMINAL_STATUSES = frozenset({"accepted", "stopped", "escalated", "cancelled", "failed"})

_STATUS_OF = {
    "success": "accepted",
    "escalated": "escalated",
    "cancelled": "cancelled",
    "error": "failed",
}


def status_for(reason: str) -> str:
    """The run status a stop reason ends in (docs/concepts.md)."""
    return _STATUS_OF.get(reason, "stopped")


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
                _MARK_REFUSED + " (a budget copied from a run's contract with "
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


# Contract's sections: name, type, may be None.
_FIELDS: tuple[tuple[str, type, bool], ...] = (
    ("success", Success, False),
    ("no_progress", NoProgress, True),
    ("budget", Budget, False),
    ("marginal_return", MarginalReturn, True),
    ("escalation", Escalation, False),
)

_SECTIONS: dict[str, type] = {
    "success": Success,
    "no_progress": NoProgress,
    "budget": Budget,
    "marginal_return": MarginalReturn,
    "escalation": Escalation,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Contract:
    """The stop contract of a run.

    A contract must guarantee an end: at least one budget limit or a no-progress rule.
    """

    success: Success = field(default_factory=Success)
    no_progress: NoProgress | None = None
    budget: Budget = field(default_factory=Budget)
    marginal_return: MarginalReturn | None = None
    risk: tuple[RiskRule, ...] = ()
    escalation: Escalation = field(default_factory=Escalation)

    def __post_init__(self) -> None:
        for name, typ, opt in _FIELDS:
            value = getattr(self, name)
            if not isinstance(value, typ) and not (opt and value is None):
                hint = (
                    f" (a mapping is read by Contract.from_dict, or pass {typ.__name__}(...))"
                    if isinstance(value, Mapping)
                    else ""
                )
                raise ConfigError(
                    f"must be a {typ.__name__}{' or None' if opt else ''}, got "
                    f"{type(value).__name__}{hint}",
                    field=f"contract.{name}",
                )
        object.__setattr__(self, "risk", shapes.tuple_of(self.risk, RiskRule, "contract.risk"))
        if not self.budget.bounded and self.no_progress is None and self.marginal_return is None:
            keyed = self.budget.max_cycles_key
            raise ConfigError(
                "the contract has no exit besides success: set a budget (max_cycles, "
                "max_cost_usd, max_tokens or max_seconds), a no_progress or a marginal_return "
                "rule"
                + (
                    f" (max_cycles_key {keyed!r} alone is not one: a task without that key "
                    "would run without a limit; max_cycles beside it is the cap of such a task)"
                    if keyed
                    else ""
                ),
                field="contract.budget",
            )
        names = [r.name for r in self.risk]
        if len(names) != len(set(names)):
            raise ConfigError("risk rule names must be unique", field="contract.risk")

    @property
    def marginal_return_only(self) -> bool:
        """The only exit besides success is a marginal_return rule, which stops a run only once
        its cycles cost money: a loop refuses such a contract (a snapshot of one still loads)."""
        return (
            not self.budget.bounded
            and self.no_progress is None
            and self.marginal_return is not None
        )

    @property
    def spend_only(self) -> bool:
        """Every exit besides success counts money or tokens (no cycle cap, task cap, time
        budget or no_progress rule): a run whose cycles spend nothing — a plain function's
        actor, a proposal refused again and again — is never ended by it: a run is given it
        with the default cycle ceiling (``with_default_ceiling``)."""
        return self.budget.max_cycles_key is None and self.wants_default_ceiling

    @property
    def wants_default_ceiling(self) -> bool:
        """``spend_only``, or a per-task cycle cap (``max_cycles_key``) beside spend budgets
        only: a task without that key is ``spend_only``'s never-ending run (a run is given the
        default ceiling for such a task; a task carrying the key keeps its own cap)."""
        b = self.budget
        return (
            b.max_cycles is None
            and b.max_seconds is None
            and self.no_progress is None
            and (b.max_cost_usd is not None or b.max_tokens is not None)
        )

    def with_default_ceiling(self) -> Contract:
        """The contract a run is given (a ``Loop`` built, a fork, a what-if replay): a
        ``spend_only`` one (or one with only a per-task cap beside its spend budgets:
        ``wants_default_ceiling``) with ``budget.max_cycles`` = ``DEFAULT_MAX_CYCLES``, marked
        ``max_cycles_default``; one whose default ceiling is no longer its only other exit (a
        fork's contract laid over its origin's, adding a no_progress rule or a time budget)
        without it; any other as it is (``self``)."""
        b = self.budget
        if b.max_cycles_default:
            bare = replace(b, max_cycles=None, max_cycles_default=False)
            if not bare.bounded and self.no_progress is None and self.marginal_return is None:
                return self  # (the ceiling is its only exit left: it stays)
            authored = replace(self, budget=bare)
            return self if authored.wants_default_ceiling else authored
        if not self.wants_default_ceiling:
            return self
        with engine_marks():
            ceiling = replace(b, max_cycles=DEFAULT_MAX_CYCLES, max_cycles_default=True)
        return replace(self, budget=ceiling)

    def refuse_for_a_run(self) -> None:
        """Where a run is given this contract (a loop built, a fork): ``ConfigError`` for a
        contract no run can work under (a snapshot of one still loads, and replay reads one):
        ``marginal_return_only``, or a budget of 0 or within ``FLOAT_SLACK`` of it
        (``budget_stop`` stops at a spend that has reached its limit, so every run would end
        before its first cycle, reporting 0 calls made; ``max_cycles = 0`` is refused where
        it is read, as no snapshot holds one)."""
        self.refuse_marginal_return_only()
        b = self.budget
        for name, limit in (
            ("max_cost_usd", b.max_cost_usd),
            ("max_tokens", b.max_tokens),
            ("max_seconds", b.max_seconds),
        ):
            if limit == 0:
                raise ConfigError(
                    "must be more than 0: a budget of 0 ends every run before its first "
                    "cycle (leave it out for no limit)",
                    field=f"contract.budget.{name}",
                )
            if limit is not None and limit <= shapes.FLOAT_SLACK:
                # A cost or time budget is reached within the float slack of a sum
                # (``_decide.crosses``): one this small is reached at 0 spent, so it acts as a
                # budget of 0 (stop 52: max_seconds=1e-9 stopped every run, 0 cycles made).
                raise ConfigError(
                    f"must be more than {shapes.FLOAT_SLACK:g}, got {limit!r}: a budget "
                    "within the rounding slack of a sum counts as reached before anything is "
                    "spent and ends every run before its first cycle (leave it out for no "
                    "limit)",
                    field=f"contract.budget.{name}",
                )

    def refuse_marginal_return_only(self) -> None:
        """``ConfigError`` when ``marginal_return_only`` (part of ``refuse_for_a_run``)."""
        if self.marginal_return_only:
            raise ConfigError(
                "a marginal_return rule is the contract's only exit besides success, and it "
                "stops a run only once its cycles cost money: a loop whose cycles report no "
                "cost would never stop; add a budget (max_cycles or max_seconds) or a "
                "no_progress rule beside it",
                field="contract.marginal_return",
            )

    # --- (de)serialisation --------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Contract:
        """Build a contract from a mapping (a TOML ``[contract]`` table, or a run's snapshot
        of one whose budget is not the engine's default ceiling). ``budget.max_cycles_default``
        is refused here as a ``Budget(...)`` refuses it: the mark is the engine's, which loads
        a run's snapshot carrying it with ``contract_from_snapshot``."""
        budget = data.get("budget") if isinstance(data, Mapping) else None
        if isinstance(budget, Mapping) and budget.get("max_cycles_default") is True:
            raise ConfigError(
                _MARK_REFUSED + " (a run's stored contract carries it: resume, fork and replay "
                "that run load it as it is)",
                field="contract.budget.max_cycles_default",
            )
        return cls._from_dict(data)

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any], *, snapshot: bool = False) -> Contract:
        if not isinstance(data, Mapping):
            raise ConfigError("must be a table", field="contract")
        known = {"success", "no_progress", "budget", "marginal_return", "risk", "escalation"}
        for key in data:
            if key not in known:
                raise ConfigError(
                    f"unknown key {key!r}; expected one of {sorted(known)}",
                    field=f"contract.{key}",
                )
        kwargs: dict[str, Any] = {}
        for key, typ in _SECTIONS.items():
            if key in data and data[key] is not None:
                with engine_marks() if snapshot else nullcontext():  # (the engine's own load)
                    kwargs[key] = _section(typ, data[key], f"contract.{key}")
        rules = data.get("risk") or ()
        if isinstance(rules, Mapping):
            raise ConfigError(
                "must be an array of tables ([[contract.risk]])", field="contract.risk"
            )
        kwargs["risk"] = tuple(
            _section(RiskRule, r, f"contract.risk[{i}]") for i, r in enumerate(rules)
        )
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        def sec(obj: Any) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for f in fields(obj):
                v = getattr(obj, f.name)
                if callable(v):
                    v = f"{getattr(v, '__module__', '?')}:{getattr(v, '__qualname__', '?')}"
                out[f.name] = list(v) if isinstance(v, tuple) else v
            return out

        mr = self.marginal_return
        budget = sec(self.budget)
        for optional in ("max_cycles_key", "max_cycles_default"):
            if not budget[optional]:
                del budget[optional]  # snapshots of contracts without one stay as they were
        if budget["max_crashes"] is None:
            del budget["max_crashes"]  # (the default: 0 is a setting)
        return {
            "success": sec(self.success),
            "no_progress": sec(self.no_progress) if self.no_progress else None,
            "budget": budget,
            "marginal_return": None
            if mr is None
            else {
                "value_per_success_usd": mr.value_per_success_usd,
                "hazard": [[list(c) for c in row] for row in mr.hazard],
                "prior_successes": mr.prior_successes,
                "prior_failures": mr.prior_failures,
            },
            "risk": [sec(r) for r in self.risk],
            "escalation": sec(self.escalation),
        }


def contract_from_snapshot(data: Mapping[str, Any]) -> Contract:
    """The contract a run's stored snapshot (``RunRecord.contract``) holds, its default
    ceiling's mark (``budget.max_cycles_default``) kept: the engine's own loader (resume, fork,
    the web, the CLI's views). ``Contract.from_dict``, the public one, refuses the mark."""
    return Contract._from_dict(data, snapshot=True)


def snapshot_as_written(data: Mapping[str, Any]) -> dict[str, Any]:
    """A run's snapshot as a person would write it, for what leaves the engine (an eval case):
    the default ceiling the engine gave it (``max_cycles`` with its mark) left out, as its author
    left it out. ``Contract.from_dict`` reads the result, and a loop built on it is given the
    ceiling again; with the mark kept, the documented ``from_dict(case["contract"])`` refused
    every spend-only run's case."""
    out = dict(data)
    budget = out.get("budget")
    if isinstance(budget, Mapping) and budget.get("max_cycles_default") is True:
        out["budget"] = {
            k: v for k, v in budget.items() if k not in ("max_cycles", "max_cycles_default")
        }
    return out


def _section(typ: type, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError("must be a table", field=where)
    names = {f.name for f in fields(typ)}
    args: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(
                f"unknown key {key!r}; expected one of {sorted(names)}", field=f"{where}.{key}"
            )
        args[key] = tuple(value) if isinstance(value, list) else value
    try:
        return cast(Any, typ)(**args)
    except TypeError as exc:
        raise ConfigError(str(exc), field=where) from None
