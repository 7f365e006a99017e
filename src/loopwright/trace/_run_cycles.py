"""A run's cycles as its checkpoints recorded them, for eval cases and preference pairs: what the
actor was shown before each (its context and ``context_id``) and the parts after it; the ended
runs, found a page of runs at a time."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from .._contract import TERMINAL_STATUSES
from .._engine import HELD_OUT_KEY
from .._errors import ConfigError
from .._state import TaskState
from ..store import Checkpoint, RunRecord, Store

__all__ = ["context_id", "ended_run_ids"]

#: Cycle decisions that conclude a cycle with a recorded proposal and verdicts.
_CONCLUDED = frozenset({"accepted", "revise", "refused", "asked"})
#: Checkpoint records written mid-cycle (the cycle concludes in a later record, or never).
_MID_CYCLE = frozenset({"parked", "effects"})


# --- the cycles of a run ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Cycle:
    """A cycle of a run as its checkpoints recorded it: what the actor was shown before it
    (``context``, ``_actor_context``) and the part values after it (``after``; ``None`` for a
    cycle that never concluded). Not the states themselves: a long run's every state held
    at once was 400 MB at 20,000 cycles."""

    cycle: int
    proposal: dict[str, Any]
    digest: str
    decision: str
    concluded: bool
    record: dict[str, Any]
    visible: dict[str, Any]
    held_out: dict[str, Any]
    #: the context itself and the values after the cycle, kept only where the caller asked
    #: for them (``keep``)
    context: dict[str, Any] | None
    context_id: str
    after: dict[str, dict[str, Any]] | None
    #: the position of the checkpoint it was found at: which cycle this is, across two reads
    at: int = 0
    #: a concluded cycle that parked first: the cycle as it parked (its proposal and verdicts
    #: then; a request denied after an edit beside it concludes judging the edit instead)
    parked: Cycle | None = None


def list_cycles(
    checkpoints: Iterable[Checkpoint], loop_name: str, *, keep: AbstractSet[int] | None
) -> list[Cycle]:
    """``iter_cycles`` as a list."""
    return list(iter_cycles(checkpoints, loop_name, keep=keep))


def iter_cycles(
    checkpoints: Iterable[Checkpoint], loop_name: str, *, keep: AbstractSet[int] | None
) -> Iterator[Cycle]:
    """Every cycle of the run that produced a proposal, in order, the checkpoints read once
    in order (a store's ``iter_checkpoints`` holds a page of them, not the run), each yielded
    as soon as it is known (a reader that keeps less of a cycle than its record holds less).

    A concluded cycle has one record with its proposal and verdicts; a cycle that parked (or
    stopped during its effects) and never concluded keeps its proposal and visible verdicts in
    the checkpoint's ``pending`` entry and its held-out verdicts in the mid-cycle record.
    ``keep=None`` (an eval case, and the search for preference pairs, which need only the
    contexts' identities) keeps neither a context nor the values after a cycle: a long run's
    cycles then hold their records alone. A set keeps them for the cycles found at those
    positions (``at``: the cycles preference pairs hold, read again) and reads no other
    cycle's context (their ``context_id`` is then empty), but for cycles that parked (few:
    their context is read before the position of the record that concludes them).
    """

    waiting: dict[int, Cycle] = {}
    # the contexts of the last two checkpoints read (i - 1 and i), each read once, in order:
    # index -> (context, its id)
    seen: dict[int, tuple[dict[str, Any], str]] = {}
    cks: dict[int, Checkpoint] = {}  # the previous checkpoint and this one

    def context(i: int) -> tuple[dict[str, Any], str]:
        if i not in seen:
            ctx = _actor_context(cks[i].read_state())
            seen[i] = (ctx, context_id(loop_name, ctx))
            for old in [k for k in seen if k < i - 1]:
                del seen[old]
        return seen[i]

    for i, ck in enumerate(checkpoints):
        cks[i] = ck
        cks.pop(i - 2, None)
        rec = ck.record
        if rec is None or i == 0:
            continue
        n = int(rec.get("cycle", ck.cycle))
        decision = str(rec.get("decision", ""))
        if "proposal" in rec and decision in _CONCLUDED:
            start = waiting.pop(n, None)
            wanted = keep is not None and i in keep
            if start is not None:
                before: tuple[dict[str, Any] | None, str] = (start.context, start.context_id)
            elif keep is None or wanted:
                before = context(i - 1)
            else:
                before = (None, "")
            yield (
                Cycle(
                    cycle=n,
                    proposal=dict(rec["proposal"]),
                    digest=str(rec.get("digest", "")),
                    decision=decision,
                    concluded=True,
                    record=rec,
                    visible=dict(rec.get("visible") or {}),
                    held_out=dict(rec.get("held_out") or {}),
                    context=before[0] if wanted else None,
                    context_id=before[1],
                    after=context(i)[0]["artifacts"] if wanted else None,
                    at=i,
                    parked=start,
                )
            )
        elif decision in _MID_CYCLE and n not in waiting:
            pend = ck.fields.get("pending") or {}
            if "proposal" not in pend:
                continue
            waiting[n] = Cycle(
                cycle=n,
                proposal=dict(pend["proposal"]),
                digest=str(pend.get("digest", "")),
                decision=decision,
                concluded=False,
                record=rec,
                visible=dict(pend.get("visible") or {}),
                held_out=dict(rec.get("held_out") or {}),
                context=context(i - 1)[0] if keep is not None else None,
                context_id=context(i - 1)[1],
                after=None,
                at=i,
            )
        elif decision == "rollback":
            yield from waiting.values()
            waiting.clear()
    yield from waiting.values()


#: What ``_actor_context`` reads of a state.
_CONTEXT_FIELDS = ("goal", "task", "artifacts", "plan", "findings")


def _actor_context(state: dict[str, Any]) -> dict[str, Any]:
    """What the actor was shown before a cycle, as data: the task without its held-out key,
    the artifacts, which values are accepted, the open findings and the plan.

    Read off those fields alone (stop 50): the whole state read first, for each record, built
    what a context never shows — its history, notes, the digests of every rejected proposal
    (a set as large as the run's rejections, rebuilt a record at a time) — most of an
    export's CPU after the reads."""
    st = TaskState.from_dict({k: state[k] for k in _CONTEXT_FIELDS if k in state})
    return {
        "goal": st.goal,
        "task": {k: v for k, v in st.task.items() if k != HELD_OUT_KEY},
        "artifacts": st.values(),
        "accepted": st.accepted_values(),
        "findings": [f.to_dict() for f in st.findings],
        "plan": [s.to_dict() for s in st.plan],
    }


def hash_of(data: Any, n: int = 32) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def context_id(loop_name: str, context: dict[str, Any]) -> str:
    """The identity of a context: a hash of the loop's name and the actor-visible context."""
    return hash_of({"loop": loop_name, "context": context})


#: Runs listed at a time to find the ended ones (a run's row holds its task and packet: tens
#: of KB each, a store's every row at once grew with the store).
RUNS_PAGE = 10


def ended_run_ids(
    store: Store,
    *,
    project: str | None = None,
    loop_name: str | None = None,
    run_ids: Sequence[str] | None = None,
) -> list[str]:
    """The ids of the runs ``eval_cases`` makes cases of, oldest first (``ConfigError`` when
    one of ``run_ids`` has not ended), by id alone: the store's runs listed a page at a time."""
    if run_ids:
        return [r.run_id for r in ended_runs(store, project, loop_name, run_ids)]
    keys: list[tuple[float, str]] = []
    after: tuple[float, str] | None = None
    while True:
        page = store.list_runs(project=project, loop_name=loop_name, limit=RUNS_PAGE, after=after)
        keys.extend((r.created_at, r.run_id) for r in page if r.status in TERMINAL_STATUSES)
        if len(page) < RUNS_PAGE:
            break
        after = (page[-1].created_at, page[-1].run_id)
    return [run_id for _at, run_id in sorted(keys)]


def ended_runs(
    store: Store, project: str | None, loop_name: str | None, run_ids: Sequence[str] | None
) -> list[RunRecord]:
    if run_ids and (project is not None or loop_name is not None):
        # both given, the runs named were exported whatever their project or loop, the
        # filter dropped in silence (outside probe, stop 51)
        # named as the Python API's parameter; the CLI says its own option (``as_options``)
        raise ConfigError(
            "names the runs itself: give it without a project or loop filter (or those without it)",
            field="run_ids",
        )
    if run_ids:
        # a run named twice (``--run ID --run ID``, or its id and a prefix of it) is one run:
        # exported twice, an eval set held its case twice
        runs = list({r.run_id: r for r in map(store.get_run, run_ids)}.values())
        bad = [r.run_id for r in runs if r.status not in TERMINAL_STATUSES]
        if bad:
            raise ConfigError(f"run(s) {', '.join(bad)} have not ended", field="run_ids")
    else:
        runs = [
            r
            for r in store.list_runs(project=project, loop_name=loop_name)
            if r.status in TERMINAL_STATUSES
        ]
    return sorted(runs, key=lambda r: (r.created_at, r.run_id))
