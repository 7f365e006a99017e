"""``RunResult``: how a run stands after the engine returned, and the state it holds
(``lasting``): every version read at once while they fit in ``RESULT_HELD_BYTES``, else read
when wanted, through the store or its database opened again (invariant 8).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._errors import StoreError
from ._state import TaskState, Version, VersionLoader
from ._usage import Usage
from ._verdict import held_out_words, independent
from .store import Store
from .store._records import VERSION_COST

__all__ = ["RESULT_HELD_BYTES", "RunResult"]


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run stands after the engine returned: ended, or parked for approval.

    Its ``repr`` is short (ids, status, stop reason, cycles, score, spend, held-out): the
    ``packet`` and ``state`` (whole artifacts, tracebacks) are read as attributes."""

    run_id: str
    task_key: str
    status: str
    stop_reason: str | None
    cycles: int
    best_score: float | None
    spent: Usage
    packet: dict[str, Any] | None = field(repr=False)
    state: TaskState = field(repr=False)
    held_out_passed: bool | None = None
    # how many tests behind ``held_out_passed`` were not decided outside the candidate's
    # process (the run's ``held_out_self_reported``; None: unknown): any, and the verdict is
    # not an independent one (``held_out_independent``, stop 56)
    held_out_self_reported: int | None = None
    # how far the run's spend is past its cost budget, and its tokens past its token budget
    # (``_stored_run_words.cost_over_budget``, ``tokens_over_budget``): None within it, or
    # with none. A bill charged after the last budget check (a call in flight, an execution
    # fenced out: fenced56b) can take an accepted run past its budget with no stop to say so.
    over_budget_usd: float | None = None
    over_budget_tokens: int | None = None

    @property
    def held_out_independent(self) -> bool | None:
        """``held_out_passed`` as metrics count it (``_verdict.independent``): ``None`` for a
        pass resting on self-reported tests or a failure resting only on refused ones."""
        return independent(self.held_out_passed, self.held_out_self_reported)

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "task_key": self.task_key,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "cycles": self.cycles,
            "best_score": self.best_score,
            "spent": self.spent.to_dict(),
            "held_out_passed": self.held_out_passed,
            "held_out_self_reported": self.held_out_self_reported,
            "held_out_verdict": held_out_words(
                self.held_out_passed, self.held_out_self_reported
            ).kind,
            "over_budget_usd": self.over_budget_usd,
            "over_budget_tokens": self.over_budget_tokens,
            "packet": self.packet,
        }


RESULT_HELD_BYTES = 8 * 2**20
"""A run's result holds every version when that costs about this much memory at most (a
result of such a run outlives its store); a larger one reads its older versions when wanted."""


def lasting(state: TaskState, store: Store, run_id: str, *, ended: bool) -> TaskState:
    """A result's state. Every version is read now, in one read, when the run has ended and
    holding them costs at most ``RESULT_HELD_BYTES`` (the result then outlives the store it
    came from, and needs none), or when the database cannot be opened again; otherwise older
    versions are read when wanted — through the store, or through its database opened again
    read-only once the store is closed (``Store.lasting_loader``) — so that a long run of
    large values does not end with all of them in memory, and a run that waits for a person
    every cycle does not read its whole history at each wait (invariant 8). Pickled, a
    result reads what it does not hold (``_AsOf.__reduce__``), so it crosses processes."""
    held: dict[str, list[Version]] | None
    if not store.reopenable:
        held = store.versions_within(run_id, None)  # cannot be read later: all of it now
    elif not ended:
        held = None  # it will be resumed from this store: read older versions if wanted
    elif sum(p.count for _ref, p in state.iter_parts()) * VERSION_COST > RESULT_HELD_BYTES:
        held = None  # their number alone says so (each costs VERSION_COST): no read
    else:
        held = store.versions_within(run_id, RESULT_HELD_BYTES)
    if held is not None:
        for ref, p in state.iter_parts():
            p.fill(held.get(ref, ()))
            p.loader = None  # all held: the result needs no store (and can be pickled)
        return state
    loader = store.lasting_loader(run_id)
    for ref, p in state.iter_parts():
        p.loader = _AsOf(loader, ref, p.count, state.cycle)
    return state


class _AsOf:
    """A result's versions of one part as they were when the result was read. A rollback
    that the run went on from writes its version numbers again (in later cycles): those are
    refused rather than shown as this result's history."""

    __slots__ = ("_count", "_cycle", "_loader", "_ref")

    def __init__(self, loader: VersionLoader, ref: str, count: int, cycle: int) -> None:
        self._loader, self._ref, self._count, self._cycle = loader, ref, count, cycle

    def __deepcopy__(self, memo: dict[int, Any]) -> _AsOf:
        return self  # a handle on the store, shared by copies (as a function would be)

    def __copy__(self) -> _AsOf:
        return self

    def __reduce__(self) -> tuple[type[Read], tuple[tuple[Version, ...]]]:
        # A store's connection does not cross processes: the versions, read now, do.
        return Read, (tuple(self()),)

    def __call__(self) -> list[Version]:
        versions = list(self._loader(self._ref))
        again = [v.n for v in versions if v.n <= self._count and v.cycle > self._cycle]
        if again:
            raise StoreError(
                f"{self._ref}: versions {again[:5]} were written again after this result was "
                "read (the run was rolled back and went on): read the run again "
                "(Runtime.result) for its versions now"
            )
        return versions


class Read:
    """A part's versions read already: what a pickled lazy result's loader becomes."""

    __slots__ = ("_versions",)

    def __init__(self, versions: tuple[Version, ...]) -> None:
        self._versions = versions

    def __reduce__(self) -> tuple[type[Read], tuple[tuple[Version, ...]]]:
        return Read, (self._versions,)

    def __call__(self) -> list[Version]:
        return list(self._versions)
