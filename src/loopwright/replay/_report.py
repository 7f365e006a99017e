"""Totals of replayed outcomes, side by side with the runs as recorded."""

from __future__ import annotations

import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._contract import Contract, refuse_engine_marks
from .._errors import ConfigError
from .._inherited import Inherited
from .._spec import TOP_KEYS as _SPEC_KEYS
from ._format import RunTrace, added_up, given_runs
from ._simulate import Outcome, simulate

__all__ = ["Report", "Totals", "load_contract", "recorded_outcomes", "replay", "summarize"]


@dataclass(frozen=True, slots=True)
class Totals:
    """What a policy yields over a set of runs (metric names as in docs/concepts.md)."""

    name: str
    runs: int
    accepted: int
    accepted_kept: int  # accepted here and as recorded
    accepted_lost: int  # accepted as recorded, not here
    censored: int
    held_out_passed: int  # runs whose final held-out verdict passed
    false_successes: int  # accepted here, held-out failed
    cycles: int
    cost_usd: float
    tokens: int
    cost_per_accepted_usd: float | None
    spend_after_last_improvement_usd: float
    spend_after_last_improvement_frac: float | None
    stop_reasons: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "runs": self.runs,
            "accepted": self.accepted,
            "accepted_kept": self.accepted_kept,
            "accepted_lost": self.accepted_lost,
            "censored": self.censored,
            "held_out_passed": self.held_out_passed,
            "false_successes": self.false_successes,
            "cycles": self.cycles,
            "cost_usd": self.cost_usd,
            "tokens": self.tokens,
            "cost_per_accepted_usd": self.cost_per_accepted_usd,
            "spend_after_last_improvement_usd": self.spend_after_last_improvement_usd,
            "spend_after_last_improvement_frac": self.spend_after_last_improvement_frac,
            "stop_reasons": dict(self.stop_reasons),
        }


def recorded_outcomes(traces: Sequence[RunTrace]) -> list[Outcome]:
    """The runs as they were recorded, in the same shape as replayed outcomes."""
    out = []
    for t in traces:
        r = t.recorded
        cost = float(r.get("cost_usd", added_up(x.cost_usd for c in t.cycles for x in c.calls)))
        spent = last = 0.0  # the run's own spend (a fork's, less what it inherited)
        last_cycle = 0
        # a fork rises above the best it inherited
        best: float | None = Inherited.from_dict(t.start).best_score if t.start else None
        for c in t.cycles:
            spent += c.cost_usd
            rose = c.score is not None and (best is None or c.score > best)
            if rose:
                best = c.score
            # The recording's own judgement of a material improvement where it has one.
            if c.improved if c.improved is not None else rose:
                last, last_cycle = spent, c.cycle
        out.append(
            Outcome(
                run_id=t.run_id,
                task_key=t.task_key,
                reason=str(r.get("stop_reason") or r.get("status") or "unknown"),
                cycles=int(r.get("cycles", len(t.cycles))),
                cost_usd=cost,
                tokens=int(r.get("tokens", sum(c.tokens for c in t.cycles))),
                seconds=sum(c.seconds for c in t.cycles) + _tail_seconds(t),
                accepted=r.get("status") == "accepted",
                held_out_passed=_held_out(t),
                best_score=best,
                last_improvement_cycle=last_cycle,
                spend_after_last_improvement_usd=max(0.0, cost - last),
            )
        )
    return out


def _held_out(t: RunTrace) -> bool | None:
    """The run's recorded held-out verdict; for a run still open (none recorded yet), its last
    concluded cycle's, as a contract's column counts it (``simulate``: censored there)."""
    held = t.recorded.get("held_out_passed")
    if held is None and not t.recorded.get("stop_reason") and t.cycles:
        return t.cycles[-1].held_out_passed
    return held if held is None else bool(held)


def _tail_seconds(t: RunTrace) -> float:
    """The recorded seconds after the last concluded cycle (a cycle it never concluded)."""
    if t.tail.get("kind", "none") == "none":
        return 0.0
    x = t.tail.get("seconds")
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else 0.0


def summarize(
    name: str, outcomes: Sequence[Outcome], recorded: Sequence[Outcome] | None = None
) -> Totals:
    rec = {o.run_id: o for o in recorded or ()}
    accepted = [o for o in outcomes if o.accepted]
    # (in order, as on every Python: see added_up)
    cost = added_up(o.cost_usd for o in outcomes)
    after = added_up(o.spend_after_last_improvement_usd for o in outcomes)
    kept = sum(1 for o in accepted if o.run_id in rec and rec[o.run_id].accepted)
    lost = sum(1 for o in outcomes if o.run_id in rec and rec[o.run_id].accepted and not o.accepted)
    return Totals(
        name=name,
        runs=len(outcomes),
        accepted=len(accepted),
        accepted_kept=kept if recorded is not None else len(accepted),
        accepted_lost=lost,
        censored=sum(1 for o in outcomes if o.reason == "censored"),
        held_out_passed=sum(1 for o in outcomes if o.held_out_passed),
        false_successes=sum(1 for o in accepted if o.held_out_passed is False),
        cycles=sum(o.cycles for o in outcomes),
        cost_usd=cost,
        tokens=sum(o.tokens for o in outcomes),
        cost_per_accepted_usd=cost / len(accepted) if accepted else None,
        spend_after_last_improvement_usd=after,
        spend_after_last_improvement_frac=after / cost if cost > 0 else None,
        stop_reasons=dict(Counter(o.reason for o in outcomes)),
    )


@dataclass(frozen=True, slots=True)
class Report:
    recorded: Totals
    contracts: list[tuple[Totals, list[Outcome]]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded.to_dict(),
            "contracts": [
                {**t.to_dict(), "runs_detail": [o.to_dict() for o in outs]}
                for t, outs in self.contracts
            ],
        }


def replay(traces: Iterable[RunTrace], contracts: Mapping[str, Contract]) -> Report:
    """How each of ``contracts`` (by name) would have ended the recorded runs ``traces``
    (a list, or an iterator such as ``traces_from_store``'s), beside the record. Each is
    replayed as a run is given it: a spend-only one with the default cycle ceiling
    (``Contract.with_default_ceiling``); ``simulate`` takes a contract as it is (a run's
    snapshot is its contract, an earlier release's spend-only one without that ceiling).

    The runs are read once, in order, each judged under every contract before the next is
    read: of an iterator (``iter_source``), one run's cycles are held at a time, and the
    outcomes (a few figures a run) are what grows with the runs (stop 50: every run's trace
    was held first)."""
    runs = given_runs(traces)
    if not isinstance(contracts, Mapping):
        raise ConfigError(
            f"must map names to Contracts, got {type(contracts).__name__}", field="contracts"
        )
    for name, contract in contracts.items():
        if not isinstance(name, str) or not isinstance(contract, Contract):
            raise ConfigError(
                f"{name!r} maps to a {type(contract).__name__}, not a Contract "
                "(Contract.from_dict or load_contract makes one from tables)",
                field="contracts",
            )
    given = {name: contract.with_default_ceiling() for name, contract in contracts.items()}
    recorded: list[Outcome] = []
    outs: dict[str, list[Outcome]] = {name: [] for name in contracts}
    for t in runs:
        recorded += recorded_outcomes((t,))
        for name, contract in given.items():
            outs[name].append(simulate(t, contract))
    rows = [(summarize(name, o, recorded), o) for name, o in outs.items()]
    return Report(summarize("recorded", recorded, recorded), rows)


def load_contract(path: str | Path, *, keep_risk: bool = False) -> Contract:
    """A contract from TOML: a loop spec (its ``[contract]``) or a file of contract tables,
    as a run is given it (a spend-only one with the default cycle ceiling, as a ``Loop`` built
    of that spec has it). Risk rules are dropped unless ``keep_risk``: replay does not replay
    a person's decisions (a fork runs them)."""
    tables = contract_tables(path, keep_risk=keep_risk)
    return _contract_of(Path(path), tables).with_default_ceiling()


def _contract_of(p: Path, tables: Mapping[str, Any]) -> Contract:
    """``Contract.from_dict(tables)``, a refusal naming the file ``p`` too: replay takes several
    ``--contract`` files, and "contract.budget.max_cycles: must be at least 1" said not which."""
    try:
        return Contract.from_dict(tables)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}", field="--contract") from None


def contract_tables(path: str | Path, *, keep_risk: bool = False) -> dict[str, Any]:
    """The contract tables a TOML file gives (as ``load_contract`` reads them), only those it
    gives: to lay over another contract (``loopwright fork --contract``)."""
    p = Path(path)
    if p.is_dir():  # ("no contract file at ." sent a person looking for a missing file)
        raise ConfigError(
            f"{p} is a directory, not a contract file: name the file", field="--contract"
        )
    if not p.exists():  # (a pipe is read: a contract file is read once; outside50b)
        raise ConfigError(f"no contract file at {p}", field="--contract")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8-sig"))  # as a spec: a mark is no text
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p} is not valid TOML: {exc}", field="--contract") from None
    except RecursionError:
        raise ConfigError(
            f"{p} is nested too deeply to be a contract", field="--contract"
        ) from None
    table = data.get("contract", data)
    if not isinstance(table, Mapping):
        raise ConfigError(f"{p}: [contract] must be a table", field="--contract")
    known = {"success", "no_progress", "budget", "marginal_return", "escalation"}
    # A loop spec's other tables are the spec's; anything else is a typo, which dropped in
    # silence would replay a contract without the rule it meant ([contract.no_progres]).
    allowed = known | {"risk"} | (set() if "contract" in data else _SPEC_KEYS)
    for key in table:
        if key not in allowed:
            where = f"contract.{key}" if "contract" in data else key
            raise ConfigError(
                f"{p}: unknown table {where!r}; expected one of {sorted(known | {'risk'})}",
                field="--contract",
            )
    if "contract" in data:
        # bare tables beside [contract]: which does the file mean? (they were dropped, and the
        # file replayed under [contract]'s alone)
        both = sorted(k for k in data if k in known or k == "risk")
        if both:
            raise ConfigError(
                f"{p}: [{both[0]}] beside [contract]: give the contract's tables either all "
                f"under [contract] ([contract.{both[0]}]) or all bare, not both",
                field="--contract",
            )
    try:
        refuse_engine_marks(table)  # (a run's snapshot carries it; a file a person wrote not)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}", field="--contract") from None
    if keep_risk:
        known.add("risk")
    elif table.get("risk") is not None:
        # Dropped, but read as a run would read them: a rule with no trigger, or two of one
        # name, is the file's mistake, said here as `run` and `fork` say it (it passed).
        _contract_of(p, {"risk": table["risk"], "budget": {"max_cycles": 1}})
    return {k: v for k, v in table.items() if k in known}
