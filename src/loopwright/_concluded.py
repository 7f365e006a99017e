"""Which checkpoint concluded a cycle of a run, and whether it still reads as it was: what a
fork (``_fork``), a rollback (``_people``) and the trace exports go back to. A cycle the run
has not concluded, or one a rollback abandoned and its versions were written again since, is
refused with a ``ConfigError`` naming the argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from ._errors import ConfigError
from ._state import TaskState
from .store import Checkpoint, Store

__all__ = ["concluded_at", "concluded_in", "refuse_rewritten"]


def refuse_rewritten(store: Store, run_id: str, ck: Checkpoint, field: str) -> None:
    """A rollback writes its version numbers again once the run goes on (a cycle, an edit): a
    cycle it abandoned then reads, through those numbers, values it never had (storage.md,
    "Limits"). Forking from it or rolling back to it is refused; a rollback rolled forward
    writes the versions back as they were (their cycles), so it is not."""
    state = TaskState.from_dict(ck.state)
    for ref, part in state.iter_parts():
        # numbers above the part's count are the versions a long run wrote after the target
        again = store.written_after(run_id, ref, upto=part.count, cycle=ck.cycle, limit=5)
        if again:
            raise ConfigError(
                f"cycle {ck.cycle} of run {run_id} was abandoned by a rollback, and {ref}'s "
                f"versions {again} were written again since: it no longer reads as it was; "
                "choose a cycle before the rollback's target or after it",
                field=field,
            )


def concluded_in(store: Store, run_id: str, cycle: int, field: str) -> Checkpoint:
    """``concluded_at`` among the run's first checkpoint and those of ``cycle``
    (``Store.checkpoints_at``): a fork or rollback to an early cycle of a long run reads that
    cycle's checkpoints, not every one. A cycle the run has not concluded is refused with the
    range it has, read from its records and fields a page at a time (``Store.iter_fields``):
    listing every checkpoint read every version of the run too (124 MB for a fork to a cycle
    past the end of a 4,810-cycle run, against 39 MB at 200 cycles)."""
    try:
        return concluded_at(store.checkpoints_at(run_id, cycle), run_id, cycle, field)
    except ConfigError:
        pass
    found, done = _concluding((_Fields(*r) for r in store.iter_fields(run_id)), cycle)
    if found is not None or done is None:
        # concluded, but not among checkpoints_at's (a store of its own); or no checkpoint at
        # all: as before
        return concluded_at(store.checkpoints(run_id), run_id, cycle, field)
    raise _not_concluded(run_id, cycle, done, field)


def concluded_at(cks: Sequence[Checkpoint], run_id: str, cycle: int, field: str) -> Checkpoint:
    """The checkpoint that concluded ``cycle`` (the initial one for cycle 0) — not a status-only
    commit or an earlier rollback that carries the same cycle number. ``field`` names the
    argument in the error when the run has no such cycle."""
    found, done = _concluding(cks, cycle)
    if found is None:
        raise _not_concluded(run_id, cycle, done, field)
    return found


class _Concluding(Protocol):
    """What ``_concluding`` reads of a checkpoint."""

    @property
    def cycle(self) -> int: ...
    @property
    def record(self) -> dict[str, Any] | None: ...
    @property
    def fields(self) -> Mapping[str, Any]: ...


class _Fields(NamedTuple):
    """A row of ``Store.iter_fields``, read as a checkpoint."""

    seq: int
    cycle: int
    record: dict[str, Any] | None
    fields: Mapping[str, Any]


_C = TypeVar("_C", bound=_Concluding)


def _concluding(cks: Iterable[_C], cycle: int) -> tuple[_C | None, tuple[int, int] | None]:
    """Of a run's checkpoints (oldest first), the last that concluded ``cycle`` (``None``:
    none did), and the first and last cycles concluded (``None``: no checkpoint). The first
    checkpoint concludes its cycle (the initial one, cycle 0); another does when its record
    holds the cycle's proposal and its state is not parked (``pending``: its ``fields`` are
    read only then)."""
    found: _C | None = None
    done: tuple[int, int] | None = None
    for i, c in enumerate(cks):
        rec = c.record
        if i == 0 or (rec and "proposal" in rec and not _waiting(c.fields.get("pending"))):
            n = c.cycle
            done = (n, n) if done is None else (min(done[0], n), max(done[1], n))
            if n == cycle:
                found = c
    return found, done


def _waiting(pending: Any) -> bool:
    """Whether a checkpoint's ``pending`` entry holds its cycle open (parked, or mid-effects):
    a person's edit owed its check-only cycle (``_edit_check``) does not."""
    return bool(pending) and not (
        isinstance(pending, Mapping) and pending.get("stage") == "edit_check"
    )


def _not_concluded(
    run_id: str, cycle: int, done: tuple[int, int] | None, field: str
) -> ConfigError:
    has = "no checkpoint" if done is None else f"cycles {done[0]}..{done[1]}"
    return ConfigError(
        f"run {run_id} has no completed checkpoint for cycle {cycle} (it has {has})",
        field=field,
    )
