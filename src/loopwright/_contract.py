"""The stop contract: declared before a run starts, snapshotted into it.

Every run ends with exactly one stop reason from a closed vocabulary (``STOP_REASONS``). The
contract's parts are small frozen value objects (its six rules: ``_contract_rules``);
``Contract.from_dict`` builds them from the ``[contract]`` table of a loop spec and names the
field at fault when something is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, cast

from . import _shapes as shapes
from ._contract_rules import (
    DEFAULT_MAX_CYCLES,
    MARK_REFUSED,
    Budget,
    Escalation,
    MarginalReturn,
    NoProgress,
    RiskRule,
    Success,
    engine_marks,
)
from ._errors import ConfigError

# (the contract's rules and its default ceiling moved to ``_contract_rules``; the tests read
# ``DEFAULT_MAX_CYCLES`` from here)
__all__ = [
    "DEFAULT_MAX_CYCLES",
    "RUN_STATUSES",
    "STOP_REASONS",
    "TERMINAL_STATUSES",
    "Contract",
    "StopReason",
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


def refuse_engine_marks(tables: object) -> None:
    """``ConfigError`` for contract tables a person wrote (a loop spec's ``[contract]``, a
    contract file, a rerun's tables) that set ``budget.max_cycles_default``: the engine's mark
    of its default ceiling (``Contract.with_default_ceiling``), kept in a run's snapshot
    (``contract_from_snapshot`` loads it), not a setting: written beside another exit, it
    dropped the author's own ``max_cycles = 1000``."""
    budget = tables.get("budget") if isinstance(tables, Mapping) else None
    if isinstance(budget, Mapping) and "max_cycles_default" in budget:
        raise ConfigError(MARK_REFUSED, field="contract.budget.max_cycles_default")


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
                MARK_REFUSED + " (a run's stored contract carries it: resume, fork and replay "
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
