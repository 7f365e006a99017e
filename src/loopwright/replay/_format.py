"""The run-trace format (``loopwright.run-trace/1``): what replay needs of a recorded run.

One JSON object per line, one line per run::

    {"format": "loopwright.run-trace/1",
     "run_id": "…", "task_key": "…", "source": "store:…" | "ldb:…",
     "required": ["visible_tests"],          # visible checks a required flag makes required
     "recorded": {"status": "accepted", "stop_reason": "success", "cycles": 3,
                  "cost_usd": 0.12, "tokens": 4100, "held_out_passed": true},
     "cycles": [
       {"cycle": 1,
        "calls": [{"who": "actor", "cost_usd": 0.04, "tokens": 1300},
                  {"who": "verifier:fields", "cost_usd": 0.0, "tokens": 0}],
        "verdicts": {"fields": {"passed": false, "score": 0.8}},   # visible checks only
        "score": 0.8,                         # the aggregate visible score as recorded
        "held_out_passed": null,              # null: not judged / unknown
        "refused": false, "duplicate": false, "asked": false,
        "seconds": 1.2, "improved": true,     # improved: as the recording decided
        "reopened": false,                    # true: it ended the run, a person reopened it
        "check_only": false,                  # true: it judged a person's edit, no actor call
        "escalated": false}],                 # true: short of success, its end escalates
     "tail": {"kind": "escalated", "cost_usd": 0.0, "tokens": 0, "seconds": 0.0}}  # after it

``calls`` lists every priced call of the cycle in the order it happened (actor, verifiers,
effects; a failed attempt that was billed is a call of its own, before the attempt after it):
the engine checks budgets between calls, so replay must too. A call with ``"unknown_cost":
true`` is an effect settled by its reconcile hook without a cost (its reply lost to a crash):
it says nothing of whether that effect bills, so it does not make it known free. A first call ``{"who":
"aborted"}`` is what the run spent, after the cycle before, in a cycle that ended the run
mid-way (an approval denied, a call given up, a budget crossed between calls) before a person
reopened it (an edit) and the run was resumed: that cycle was never concluded, the one
recorded here is the one the resumed run made in its place. ``tail`` says how the recorded run
ended after its last concluded cycle when that was not a decision of the contract:
``escalated`` (the actor or user code ended it mid-cycle), ``crossed`` (a budget stopped it
mid-cycle; ``reason``: which, and for ``budget_time`` ``max_seconds``: the recorded limit),
``parked`` (waiting for a person), ``cancelled``, ``unfinished``, ``reopened`` (a cycle ended
it mid-way, a person reopened it, and the resumed run stopped before another cycle) or
``none``; its ``cost_usd``, ``tokens`` and ``seconds``: what that unfinished cycle spent.
``"edited": true`` in a trace with no cycles: a person edited the run (a fork) before its first
concluded cycle, so the cycle its resume owed was check-only (only a used-up budget stops it).

A fork (``Runtime.fork``) adds ``start``: the accounting it inherited from the run it was forked
from (``cycle``, ``cost_usd``, ``tokens``, ``seconds``, ``best_score``, ``progress_score``,
``stall``, ``passed_checks``; ``answer_checks`` when some check-only cycles are not counted by
the cycle cap; ``answer_owed`` when it was forked at a cycle that asked a question its state
holds the answer of: its first cycle, check-only, is not counted either). Its contract goes on from there; its ``recorded`` figures and its
cycles are its own (what it inherited is not counted again).
"""

from __future__ import annotations

import itertools
import json
import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path
from typing import IO, Any

from .._contract import RUN_STATUSES, STOP_REASONS
from .._decide import no_attempt
from .._errors import ConfigError
from .._json import JsonLineError, json_lines, not_text

__all__ = [
    "ABORTED",
    "TRACE_FORMAT",
    "Call",
    "CycleTrace",
    "RunTrace",
    "added_up",
    "read_traces",
    "write_traces",
]

TRACE_FORMAT = "loopwright.run-trace/1"


def given_runs(traces: Iterable[RunTrace], *, field: str = "traces") -> Iterator[RunTrace]:
    """The recorded runs given to ``fit_stop`` or ``replay``, one at a time: what is not runs
    at all is refused at once, an item that is not a ``RunTrace`` when it is reached (before it
    is judged), each a ``ConfigError`` naming ``field``, not an ``AttributeError`` from the
    simulation."""
    if isinstance(traces, str | bytes | Mapping) or not isinstance(traces, Iterable):
        raise ConfigError(
            f"must be recorded runs (RunTrace, from load_source or traces_from_store), "
            f"got {type(traces).__name__}",
            field=field,
        )

    def each() -> Iterator[RunTrace]:
        for i, t in enumerate(traces):
            if not isinstance(t, RunTrace):
                raise ConfigError(f"item {i} is a {type(t).__name__}, not a RunTrace", field=field)
            yield t

    return each()


def added_up(amounts: Iterable[float]) -> float:
    """``amounts`` added one at a time, in order: as the engine adds a run's spend up call by
    call, so a replayed run's spend equals its recorded spend to the bit. Not ``sum``: since
    Python 3.12 it adds floats with compensation and rounds otherwise (the recorded policy's
    replay then cost $5.960605500000001 against $5.9606055 recorded, printed as "-0.0%"
    saved), and it would give other totals on 3.11 than on 3.13."""
    return float(reduce(operator.add, amounts, 0.0))


#: ``Call.who`` of the spend of a cycle that ended the run mid-way, reopened by a person: the
#: first call of the cycle the resumed run concluded in its place.
ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class Call:
    who: str
    cost_usd: float = 0.0
    tokens: int = 0
    unknown_cost: bool = False  # settled by its reconcile hook, without a cost: not known free


@dataclass(frozen=True, slots=True)
class CycleTrace:
    cycle: int
    calls: tuple[Call, ...] = ()
    verdicts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    score: float | None = None
    held_out_passed: bool | None = None
    refused: bool = False
    duplicate: bool = False
    asked: bool = False
    seconds: float = 0.0
    improved: bool | None = None  # as the recording decided (None: not recorded)
    # This cycle ended the run and a person reopened it (an edit of the ended run): replay
    # goes on past an end here, as the person had the run go on.
    reopened: bool = False
    # This cycle judged a person's edit, no actor call (``_edit_check``): it counts no cycle
    # without progress, and no plateau ends the run at its end.
    check_only: bool = False
    # Short of success, this cycle's end escalates the run, a person's call the contract does
    # not make (a request denied after a person's edit beside it, however the recording ended
    # it; a person's version failing a visible check, as recorded): replay ends it there,
    # before the plateau and the budgets (as the engine decides it).
    escalated: bool = False

    @property
    def cost_usd(self) -> float:
        return added_up(c.cost_usd for c in self.calls)

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.calls)


@dataclass(frozen=True, slots=True)
class RunTrace:
    run_id: str
    task_key: str
    cycles: tuple[CycleTrace, ...]
    required: tuple[str, ...] = ()
    recorded: Mapping[str, Any] = field(default_factory=dict)
    tail: Mapping[str, Any] = field(default_factory=lambda: {"kind": "none"})
    source: str = ""
    # A fork's starting point: the accounting it inherited (``_inherited.Inherited.to_dict``);
    # empty for a run that started from its task.
    start: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": TRACE_FORMAT,
            "run_id": self.run_id,
            "task_key": self.task_key,
            "source": self.source,
            "required": list(self.required),
            "recorded": dict(self.recorded),
            "cycles": [
                {
                    "cycle": c.cycle,
                    "calls": [
                        {"who": x.who, "cost_usd": x.cost_usd, "tokens": x.tokens}
                        | ({"unknown_cost": True} if x.unknown_cost else {})
                        for x in c.calls
                    ],
                    "verdicts": {k: dict(v) for k, v in c.verdicts.items()},
                    "score": c.score,
                    "held_out_passed": c.held_out_passed,
                    "refused": c.refused,
                    "duplicate": c.duplicate,
                    "asked": c.asked,
                    "seconds": c.seconds,
                    "improved": c.improved,
                    **({"reopened": True} if c.reopened else {}),
                    **({"check_only": True} if c.check_only else {}),
                    **({"escalated": True} if c.escalated else {}),
                }
                for c in self.cycles
            ],
            "tail": dict(self.tail),
            **({"start": dict(self.start)} if self.start else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "trace") -> RunTrace:
        if not isinstance(d, Mapping):
            raise ConfigError("must be a JSON object", field=where)
        fmt = d.get("format")
        if fmt != TRACE_FORMAT:
            raise ConfigError(
                f"format {fmt!r} is not {TRACE_FORMAT!r} (a newer or foreign file?)",
                field=f"{where}.format",
            )
        try:
            cycles = tuple(
                CycleTrace(
                    cycle=_count(c["cycle"], "cycle"),
                    calls=tuple(
                        Call(
                            str(x["who"]),
                            _amount(x.get("cost_usd", 0.0), "calls[].cost_usd"),
                            _count(x.get("tokens", 0), "calls[].tokens"),
                            _bit(x.get("unknown_cost", False), "calls[].unknown_cost"),
                        )
                        for x in c.get("calls") or ()
                    ),
                    verdicts=_verdicts(c.get("verdicts")),
                    score=_score(c.get("score")),
                    held_out_passed=_flag(c.get("held_out_passed"), "held_out_passed"),
                    refused=_bit(c.get("refused", False), "refused"),
                    duplicate=_bit(c.get("duplicate", False), "duplicate"),
                    asked=_bit(c.get("asked", False), "asked"),
                    seconds=_amount(c.get("seconds", 0.0), "seconds"),
                    improved=_flag(c.get("improved"), "improved"),
                    reopened=_bit(c.get("reopened", False), "reopened"),
                    check_only=_bit(c.get("check_only", False), "check_only"),
                    escalated=_bit(c.get("escalated", False), "escalated"),
                )
                for c in d.get("cycles") or ()
            )
            # A cycle that called the actor made an attempt, whatever its flag: a release
            # before stop 48 marked the cycle of a request denied after an edit beside it
            # check-only too, and its file replayed it as none (past a cycle cap) where the
            # store's trace of the same run is the actor's attempt (``_decide.no_attempt``);
            # and, short of success, that cycle escalates on the denial (``escalated``).
            cycles = tuple(
                c
                if not c.check_only or no_attempt(True, (x.who for x in c.calls))
                else replace(c, check_only=False, escalated=True)
                for c in cycles
            )
            numbers = [c.cycle for c in cycles]
            if any(a >= b for a, b in itertools.pairwise(numbers)):
                # replay takes the cycles in the order listed: a reordered or repeated cycle
                # would replay another run than the one recorded
                raise ValueError(f"cycle numbers must increase, got {numbers}")
            recorded = dict(d.get("recorded") or {})
            tail = dict(d.get("tail") or {"kind": "none"})
            if tail.get("kind", "none") not in TAIL_KINDS:  # an unknown one replayed as censored
                raise ValueError(
                    f"tail.kind must be one of {sorted(TAIL_KINDS)}, got {tail.get('kind')!r}"
                )
            start = dict(d.get("start") or {})
            _names(start.get("passed_checks"), "start.passed_checks")
            # What replay adds up and compares: a number that is text or NaN is a bad file,
            # said here, not a ValueError (or a NaN total) later.
            for name, part, keys in (
                ("recorded", recorded, _RECORDED_NUMBERS),
                ("tail", tail, _TAIL_NUMBERS),
                ("start", start, _START_NUMBERS),
            ):
                for key, check in keys.items():
                    if part.get(key) is not None:
                        check(part[key], f"{name}.{key}")
            _flag(recorded.get("held_out_passed"), "recorded.held_out_passed")
            # what the recorded column (and fit-stop's reference) counts as accepted
            for key, vocabulary in (("status", RUN_STATUSES), ("stop_reason", STOP_REASONS)):
                if recorded.get(key) is not None and recorded[key] not in vocabulary:
                    raise ValueError(
                        f"recorded.{key} must be one of {list(vocabulary)}, got {recorded[key]!r}"
                    )
            _names(recorded.get("success_required"), "recorded.success_required")
            return cls(
                run_id=str(d["run_id"]),
                task_key=str(d.get("task_key", d["run_id"])),
                cycles=cycles,
                required=_names(d.get("required"), "required"),
                recorded=recorded,
                tail=tail,
                source=str(d.get("source", "")),
                start=start,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            said = str(exc) if type(exc) is ValueError else repr(exc)
            raise ConfigError(f"malformed run trace: {said}", field=where) from None


def _finite(value: Any) -> bool:
    """A JSON number a float can hold: an integer too large for one (``1e400`` written out in
    digits) is not, and is refused like ``Infinity`` (``math.isfinite`` raised OverflowError)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _amount(value: Any, what: str) -> float:
    if _finite(value) and value >= 0:
        return float(value)
    raise ValueError(f"{what} must be a number, 0 or more, got {value!r}")


def _count(value: Any, what: str) -> int:
    if _finite(value) and value >= 0 and value == int(value):
        return int(value)
    raise ValueError(f"{what} must be a whole number, 0 or more, got {value!r}")


def _score(value: Any) -> float | None:
    if value is None:
        return None
    if _finite(value):
        return float(value)
    raise ValueError(f"score must be a number or null, got {value!r}")


def _flag(value: Any, what: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"{what} must be true, false or null, got {value!r}")


def _bit(value: Any, what: str) -> bool:
    if isinstance(value, bool):  # bool("false") is True
        return value
    raise ValueError(f"{what} must be true or false, got {value!r}")


def _names(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        for name in value:  # (a fitted contract's TOML is UTF-8: a lone surrogate failed it)
            try:
                not_text(name)
            except ValueError as exc:
                raise ValueError(f"{what}: check name {name!r}: {exc}") from None
        return tuple(value)  # not a lone string: its characters would be the names
    raise ValueError(f"{what} must be a list of check names, got {value!r}")


def _verdicts(value: Any) -> dict[str, dict[str, Any]]:
    """A cycle's visible verdicts: replay reads ``passed`` and ``vacuous`` as flags ("false"
    is truthy) and a verdict's score must not be NaN."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"verdicts must be an object, got {value!r}")
    out = {}
    for name, v in value.items():
        if not isinstance(v, Mapping):
            raise ValueError(f"verdicts.{name} must be an object, got {v!r}")
        for key in ("passed", "vacuous"):
            if key in v:
                _bit(v[key], f"verdicts.{name}.{key}")
        if v.get("score") is not None:
            _score(v["score"])
        out[str(name)] = dict(v)
    return out


#: ``tail.kind``: how a recorded run ended after its last concluded cycle (module docstring).
TAIL_KINDS = frozenset(
    {"escalated", "crossed", "parked", "cancelled", "unfinished", "reopened", "none"}
)

_RECORDED_NUMBERS = {"cycles": _count, "cost_usd": _amount, "tokens": _count, "max_cycles": _count}
_TAIL_NUMBERS = {"cost_usd": _amount, "tokens": _count, "seconds": _amount, "max_seconds": _amount}
_START_NUMBERS = {
    "cycle": _count,
    "cost_usd": _amount,
    "tokens": _count,
    "seconds": _amount,
    "stall": _count,
    "answer_checks": _count,
    "best_score": lambda v, _: _score(v),
    "progress_score": lambda v, _: _score(v),
}


def write_traces(traces: Iterable[RunTrace], out: str | Path | IO[str]) -> int:
    """Write traces as JSONL; returns how many."""
    n = 0
    if isinstance(out, str | Path):
        with Path(out).open("w", encoding="utf-8") as fh:
            return write_traces(traces, fh)
    for t in traces:
        out.write(json.dumps(t.to_dict(), separators=(",", ":")) + "\n")
        n += 1
    return n


def read_traces(path: str | Path) -> Iterator[RunTrace]:
    """Read a run-trace JSONL file; a bad line raises ``ConfigError`` naming it."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no such file: {p}", field="SOURCE")
    lines: dict[str, int] = {}  # run id -> its line: a run listed twice would count twice
    with p.open("rb") as fh:
        try:
            for n, data in json_lines(fh, lambda exc: f"not JSON ({exc.msg})"):
                trace = RunTrace.from_dict(data, where=f"{p}:{n}")
                if trace.run_id in lines:
                    raise ConfigError(
                        f"{p}, line {n}: run {trace.run_id!r} is on line {lines[trace.run_id]} "
                        "too (it would be counted twice)",
                        field="SOURCE",
                    )
                lines[trace.run_id] = n
                yield trace
        except JsonLineError as bad:
            raise ConfigError(f"{p}, line {bad.line}: {bad.message}", field="SOURCE") from None
