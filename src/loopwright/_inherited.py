"""What a fork inherited from the run it was forked from, read from the fork's first checkpoint.

``Runtime.fork`` starts a run from another run's state after cycle N, ``spent`` included: the
fork's budget contract goes on counting the spend, cycles and time its origin had reached, so
the fork's run row (``cost_usd``, ``tokens``, ``seconds``, ``cycle``) is cumulative along its
line. Outcome metrics and replay count each dollar, cycle and point of score once: a fork's own
figures are its run row's less what it inherited, and what it inherited is the state its first
checkpoint (seq 0, written in the fork's one creating transaction) holds. A run that is not a
fork inherited nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._question import answer_unread
from .store import RunRecord, Store

__all__ = ["NOTHING", "Inherited", "fork_seq", "inherited"]


@dataclass(frozen=True, slots=True)
class Inherited:
    """The engine's accounting a fork started from (all zero / empty for any other run)."""

    cycle: int = 0
    cost_usd: float = 0.0
    tokens: int = 0
    seconds: float = 0.0
    best_score: float | None = None
    progress_score: float | None = None
    stall: int = 0
    passed_checks: tuple[str, ...] = field(default_factory=tuple)
    # What the budgets' projection and mid-cycle checks read (``TaskState.billed``,
    # ``paid_cycles``; None: not counted, an origin stored before they were)
    billed: tuple[tuple[str, bool], ...] = ()
    paid_cycles: tuple[int, int, int] | None = (0, 0, 0)
    # check-only cycles the cycle cap does not count (``TaskState.answer_checks``)
    answer_checks: int = 0
    # the cycle forked at asked a question its state holds the answer of, unread: the fork's
    # first cycle is the one that answer is for (``_edit_check.answer_owed``), so a check-only
    # one judging an edit there is not counted by the cap either
    answer_owed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "cycle": self.cycle,
            "cost_usd": self.cost_usd,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "best_score": self.best_score,
            "progress_score": self.progress_score,
            "stall": self.stall,
            "passed_checks": list(self.passed_checks),
            "billed": dict(self.billed),
            "paid_cycles": None if self.paid_cycles is None else list(self.paid_cycles),
            **({"answer_checks": self.answer_checks} if self.answer_checks else {}),
            **({"answer_owed": True} if self.answer_owed else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Inherited:
        def num(key: str) -> float:
            v = d.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0

        def score(key: str) -> float | None:
            v = d.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        return cls(
            cycle=int(num("cycle")),
            cost_usd=num("cost_usd"),
            tokens=int(num("tokens")),
            seconds=num("seconds"),
            best_score=score("best_score"),
            progress_score=score("progress_score"),
            stall=int(num("stall")),
            passed_checks=tuple(str(x) for x in d.get("passed_checks") or ()),
            billed=tuple((str(k), bool(v)) for k, v in _mapping(d.get("billed")).items()),
            paid_cycles=_paid(d, int(num("cycle"))),
            answer_checks=int(num("answer_checks")),
            answer_owed=d.get("answer_owed") is True,
        )


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _paid(d: Mapping[str, Any], cycle: int) -> tuple[int, int, int] | None:
    """The paid-cycle counts: as stored; none counted for an origin at cycle 0; else unknown
    (None: an origin, or a trace, stored before they were counted)."""
    v = d.get("paid_cycles")
    if isinstance(v, list | tuple) and len(v) == 3 and all(isinstance(x, int) for x in v):
        return (int(v[0]), int(v[1]), int(v[2]))
    return (0, 0, 0) if cycle == 0 and "paid_cycles" not in d else None


NOTHING = Inherited()


def inherited(run: RunRecord, first_state: Mapping[str, Any] | None) -> Inherited:
    """What ``run`` inherited, given its first checkpoint's state (``Checkpoint.fields`` of
    seq 0 will do: parts are not needed). ``NOTHING`` for a run that is not a fork."""
    if run.forked_from is None or not first_state:
        return NOTHING
    spent = first_state.get("spent")
    cost, tokens, seconds = 0.0, 0, 0.0
    if isinstance(spent, Mapping):
        cost = float(spent.get("cost_usd") or 0.0)
        tokens = int(spent.get("tokens") or 0)
        seconds = float(spent.get("seconds") or 0.0)
    cycle = first_state.get("cycle")
    return Inherited.from_dict(
        {
            "cycle": cycle if isinstance(cycle, int) else (run.forked_at or 0),
            "cost_usd": cost,
            "tokens": tokens,
            "seconds": seconds,
            "best_score": first_state.get("best_score"),
            "progress_score": first_state.get("progress_score"),
            "stall": first_state.get("stall"),
            "passed_checks": first_state.get("passed_checks"),
            "billed": first_state.get("billed"),
            "paid_cycles": first_state.get("paid_cycles"),
            "answer_checks": first_state.get("answer_checks"),
            "answer_owed": answer_unread(
                _list(first_state.get("history")),
                _list(first_state.get("notes")),
                cycle if isinstance(cycle, int) else (run.forked_at or 0),
            ),
        }
    )


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def fork_seq(store: Store, run: RunRecord) -> int | None:
    """The ``seq`` of the origin's checkpoint a fork started from, as ``Runtime.fork`` recorded
    it in the fork's ``run_created`` event (the run's first: one page of its events is read);
    None for a fork made before it was recorded, or by a store that could not record it."""
    first = next(itertools.islice(store.iter_events(run.run_id), 1), None)
    if first is None or first.kind != "run_created":
        return None
    forked = (first.data or {}).get("forked_from")
    seq = forked.get("seq") if isinstance(forked, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None
