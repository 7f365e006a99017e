"""Traces turned into learning material: eval cases and preference pairs (JSON lines).

Both leave the engine for other hands (datasets, fine-tuning jobs), so every case and pair is
passed through ``loopwright._redact.redact``: secrets in the task, the evidence, error messages
and URLs become ``***`` (ids and hashes are computed before, from the stored data).

``eval_cases`` gives one replayable case per ended run; ``preference_pairs`` gives pairs of a
better and a worse proposal made from the same context. ``docs/trace.md`` documents both
formats and exactly how pairs are formed.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import itertools
import json
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import IO, Any, Literal, cast

from .._concluded import concluded_at, concluded_in
from .._contract import TERMINAL_STATUSES
from .._cycle import ASKED
from .._engine import HELD_OUT_KEY
from .._errors import ConfigError, check_choice
from .._redact import redact
from .._state import TaskState
from ..store import Approval, Checkpoint, RunRecord, Store
from ._otlp import _spool, _spooled

__all__ = [
    "EVAL_CASE_FORMAT",
    "PAIR_FORMAT",
    "context_id",
    "ended_run_ids",
    "eval_case",
    "eval_cases",
    "preference_pairs",
    "write_eval_case",
]

EVAL_CASE_FORMAT = "loopwright.eval_case/1"
PAIR_FORMAT = "loopwright.preference_pair/1"
#: Cycle decisions that conclude a cycle with a recorded proposal and verdicts.
_CONCLUDED = frozenset({"accepted", "revise", "refused", "asked"})
#: Checkpoint records written mid-cycle (the cycle concludes in a later record, or never).
_MID_CYCLE = frozenset({"parked", "effects"})

PairMatch = Literal["state", "hindsight", "both"]


# --- the cycles of a run ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Cycle:
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


def _cycles(
    checkpoints: Iterable[Checkpoint], loop_name: str, *, keep: AbstractSet[int] | None
) -> list[_Cycle]:
    """``_iter_cycles`` as a list."""
    return list(_iter_cycles(checkpoints, loop_name, keep=keep))


def _iter_cycles(
    checkpoints: Iterable[Checkpoint], loop_name: str, *, keep: AbstractSet[int] | None
) -> Iterator[_Cycle]:
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

    waiting: dict[int, _Cycle] = {}
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
                _Cycle(
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
                )
            )
        elif decision in _MID_CYCLE and n not in waiting:
            pend = ck.fields.get("pending") or {}
            if "proposal" not in pend:
                continue
            waiting[n] = _Cycle(
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


def _actor_context(state: dict[str, Any]) -> dict[str, Any]:
    """What the actor was shown before a cycle, as data: the task without its held-out key,
    the artifacts, which values are accepted, the open findings and the plan."""
    st = TaskState.from_dict(state)
    return {
        "goal": st.goal,
        "task": {k: v for k, v in st.task.items() if k != HELD_OUT_KEY},
        "artifacts": st.values(),
        "accepted": st.accepted_values(),
        "findings": [f.to_dict() for f in st.findings],
        "plan": [s.to_dict() for s in st.plan],
    }


def _hash(data: Any, n: int = 32) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def context_id(loop_name: str, context: dict[str, Any]) -> str:
    """The identity of a context: a hash of the loop's name and the actor-visible context."""
    return _hash({"loop": loop_name, "context": context})


#: Runs listed at a time to find the ended ones (a run's row holds its task and packet: tens
#: of KB each, a store's every row at once grew with the store).
_RUNS_PAGE = 10


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
        return [r.run_id for r in _ended(store, project, loop_name, run_ids)]
    keys: list[tuple[float, str]] = []
    after: tuple[float, str] | None = None
    while True:
        page = store.list_runs(project=project, loop_name=loop_name, limit=_RUNS_PAGE, after=after)
        keys.extend((r.created_at, r.run_id) for r in page if r.status in TERMINAL_STATUSES)
        if len(page) < _RUNS_PAGE:
            break
        after = (page[-1].created_at, page[-1].run_id)
    return [run_id for _at, run_id in sorted(keys)]


def _ended(
    store: Store, project: str | None, loop_name: str | None, run_ids: Sequence[str] | None
) -> list[RunRecord]:
    if run_ids:
        runs = [store.get_run(r) for r in run_ids]
        bad = [r.run_id for r in runs if r.status not in TERMINAL_STATUSES]
        if bad:
            raise ConfigError(f"run(s) {', '.join(bad)} have not ended", field="--run")
    else:
        runs = [
            r
            for r in store.list_runs(project=project, loop_name=loop_name)
            if r.status in TERMINAL_STATUSES
        ]
    return sorted(runs, key=lambda r: (r.created_at, r.run_id))


# --- eval cases ------------------------------------------------------------------------------
def eval_cases(
    store: Store,
    *,
    project: str | None = None,
    loop_name: str | None = None,
    run_ids: Sequence[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """One eval case per ended run (oldest first), optionally of one project or loop, or of
    the given runs (each must have ended)."""
    for run_id in ended_run_ids(store, project=project, loop_name=loop_name, run_ids=run_ids):
        yield eval_case(store, run_id)


def eval_case(store: Store, run_id: str) -> dict[str, Any]:
    """The run (id, unique prefix or task key) as a replayable eval case."""
    cycles: list[dict[str, Any]] = []
    before, after = _case_halves(store, store.get_run(run_id), cycles.append)
    return dict(redact({**before, "cycles": cycles, **after}))


def write_eval_case(store: Store, run_id: str, out: IO[str]) -> None:
    """Write ``eval_case(store, run_id)`` to ``out`` as one line, the bytes ``write_jsonl``
    writes for it, its cycles as they are read: the case is not held (a 5,000-cycle run's case
    peaked at 109 MB to write 8 MB). Its cycles wait in a temporary file until the end of the
    case, known last, is (as ``write_otlp``'s spans). Each piece is masked on its own, as the
    whole case is (a mask follows a key's name, and none of the case's own keys is one)."""
    spool = _spool()
    try:
        sep = ""

        def each(c: dict[str, Any]) -> None:
            nonlocal sep
            _spooled(spool.write, sep + _line(redact(c)))
            sep = ","

        before, after = _case_halves(store, store.get_run(run_id), each)
        _spooled(spool.seek, 0)  # (flushes what is buffered: a full disk shows here)
        out.write(_line(redact(before))[:-1] + ',"cycles":[')
        shutil.copyfileobj(spool, out)
        out.write("]," + _line(redact(after))[1:] + "\n")
    finally:
        with contextlib.suppress(OSError):  # (as write_otlp: the error raised says it)
            spool.close()


def _line(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), default=str)  # as write_jsonl


def _case_halves(
    store: Store, rec: RunRecord, each: Callable[[dict[str, Any]], None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An eval case of ``rec`` without its masks: the fields before ``cycles`` and those
    after, each cycle given to ``each`` as it is read, in order."""
    ends: list[Checkpoint] = []  # the first checkpoint and the last, as they are read
    concluded: list[Checkpoint] = []  # the checkpoint of the last cycle with a proposal

    def read() -> Iterator[Checkpoint]:
        for ck in store.iter_checkpoints(rec.run_id):
            ends[1:] = [ck]  # the first stays; the last is replaced
            if ck.record and "proposal" in ck.record:
                concluded[:] = [ck]
            yield ck

    for c in _iter_cycles(read(), rec.loop_name, keep=None):
        each(_case_cycle(c))
    initial = TaskState.from_dict(ends[0].state)
    final = TaskState.from_dict(ends[-1].state)
    before = {
        "format": EVAL_CASE_FORMAT,
        "case_id": rec.run_id,
        "run_id": rec.run_id,
        "task_key": rec.task_key,
        "loop_name": rec.loop_name,
        "loop_version": rec.loop_version,
        "project": rec.project,
        "spec_ref": rec.spec_ref,
        "task": rec.task,
        "held_out_keys": [HELD_OUT_KEY] if HELD_OUT_KEY in rec.task else [],
        "contract": rec.contract,
        "initial_artifacts": initial.values(),
        "forked_from": (
            {"run_id": rec.forked_from, "cycle": rec.forked_at} if rec.forked_from else None
        ),
        "inherited_cycles": _inherited_cycles(store, rec),
    }
    after = {
        "status": rec.status,
        "stop_reason": rec.stop_reason,
        "best_score": rec.best_score,
        "held_out_passed": rec.held_out_passed,
        "human_decisions": [_decision(a) for a in store.approvals(run_id=rec.run_id)],
        "final_artifacts": final.values(),
        "accepted_artifacts": final.accepted_values(),
        "spent": {"cost_usd": rec.cost_usd, "tokens": rec.tokens, "seconds": rec.seconds},
        "created_at": rec.created_at,
        "ended_at": rec.ended_at,
        "escalation": rec.packet,
        "unfinished": _unfinished(rec, concluded[0] if concluded else ends[0]),
    }
    return before, after


def _unfinished(rec: RunRecord, last: Checkpoint) -> dict[str, Any] | None:
    """The cycle an escalated run ended inside (the actor asked for a person, a call gave up)
    with what it was billed after ``last`` (the checkpoint of its last cycle with a proposal)
    and the reason it escalated: no record holds that cycle's proposal, so a replay is told it
    here. None for a run that did not escalate."""
    if rec.status != "escalated":
        return None
    spent = last.fields.get("spent")
    before = spent if isinstance(spent, dict) else {}
    return {
        "cycle": last.cycle + 1,
        "cost_usd": max(0.0, rec.cost_usd - float(before.get("cost_usd") or 0.0)),
        "tokens": max(0, rec.tokens - int(before.get("tokens") or 0)),
        # the actor's own words when it asked (its replay asks with them again)
        "cause": str((rec.packet or {}).get("cause") or "escalated").removeprefix(ASKED),
    }


def _case_cycle(c: _Cycle) -> dict[str, Any]:
    rec = c.record
    return {
        "cycle": c.cycle,
        "concluded": c.concluded,
        "decision": c.decision,
        "context_id": c.context_id,
        "proposal": c.proposal,
        "digest": c.digest,
        "duplicate": bool(rec.get("duplicate", False)),
        "visible": c.visible,
        "held_out": c.held_out,
        "score": rec.get("score"),
        "improved": bool(rec.get("improved", False)),
        "effects": list(rec.get("effects") or ()),
        "usage": rec.get("usage"),
        "calls": list(rec.get("calls") or ()),
    }


def _inherited_cycles(store: Store, run: RunRecord) -> list[dict[str, Any]]:
    """The cycles a fork started from: its origin's up to the fork point (the origin's own
    inherited ones first, along a fork of a fork), each with the ``run_id`` that ran it, so the
    case replays from its task. The origin's cycles are read as they stood when the fork was
    made: a rollback of the origin after that rewrote them."""
    if not run.forked_from or run.forked_at is None:
        return []
    origin = store.get_run(run.forked_from)
    # The origin's checkpoint the fork started from, as recorded when it was made; then the
    # checkpoints up to it a page at a time: what comes after the fork point is not read.
    start = _fork_seq(store, run)
    if start is None:
        # A fork made before the seq was recorded: the fork point among the origin's first
        # checkpoint and those of its cycle (a fork early in a long run reads those, not the
        # origin's every checkpoint), as at the fork by the times written (right where the
        # hosts' clocks agree), else the last.
        marks = store.checkpoints_at(origin.run_id, run.forked_at)
        then = [c for c in marks if c.created_at <= run.created_at]
        try:
            start = concluded_at(then or marks, origin.run_id, run.forked_at, "forked_at").seq
        except ConfigError:
            start = concluded_in(store, origin.run_id, run.forked_at, "forked_at").seq
    upto = itertools.takewhile(lambda c: c.seq <= start, store.iter_checkpoints(origin.run_id))
    # the last occurrence of each cycle up to the fork point (a rollback redid the later ones)
    own = {
        c.cycle: c
        for c in _iter_cycles(upto, origin.loop_name, keep=None)
        if c.concluded and c.cycle <= run.forked_at
    }
    return [
        *(c for c in _inherited_cycles(store, origin) if c["cycle"] not in own),
        *({"run_id": origin.run_id, **_case_cycle(own[n])} for n in sorted(own)),
    ]


def _fork_seq(store: Store, run: RunRecord) -> int | None:
    """The ``seq`` of the origin's checkpoint a fork started from, as ``Runtime.fork`` recorded
    it in the fork's ``run_created`` event (the run's first: one page of its events is read);
    None for a fork made before it was recorded, or by a store that could not record it."""
    first = next(itertools.islice(store.iter_events(run.run_id), 1), None)
    if first is None or first.kind != "run_created":
        return None
    forked = (first.data or {}).get("forked_from")
    seq = forked.get("seq") if isinstance(forked, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _decision(a: Approval) -> dict[str, Any]:
    return {
        "approval_id": a.approval_id,
        "cycle": a.cycle,
        "kind": a.kind,
        "rule": a.rule,
        "what": a.what,
        "why": a.why,
        "question": (a.evidence or {}).get("question"),
        "status": a.status,
        "by": a.decided_by,
        "at": a.decided_at,
        "requested_at": a.requested_at,
        "note": a.note,
        "answer": a.answer,
    }


# --- preference pairs ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Candidate:
    run: RunRecord
    cycle: _Cycle
    context: dict[str, Any] | None  # read again for the cycles a pair holds (``_with_values``)
    context_id: str
    rank: int | None


def _rank(c: _Cycle) -> int | None:
    """How good a proposal turned out: 2 accepted, 1 improved the best visible score without
    being accepted, 0 revised or refused without improving; ``None`` for what is neither
    better nor worse (an actor's question, a cycle that never concluded)."""
    if not c.concluded:
        return None
    if c.decision == "accepted":
        return 2
    if c.decision not in ("revise", "refused"):
        return None
    return 1 if c.record.get("improved") else 0


def _prefers(chosen: _Candidate, rejected: _Candidate) -> bool:
    """``chosen`` was accepted or improved the score; ``rejected`` was not accepted, and did
    not improve when ``chosen`` only improved; and they are different changes."""
    if chosen.rank is None or rejected.rank is None or chosen.rank < 1:
        return False
    return chosen.rank > rejected.rank and chosen.cycle.digest != rejected.cycle.digest


def _candidates(store: Store, runs: Sequence[RunRecord]) -> list[list[_Candidate]]:
    """Every run's cycles as candidates, by the identity of their contexts only: the contexts
    and values of the few a pair holds are read again afterwards (``_with_values``), not kept
    for every cycle of every run — nor their records (``_bare``), which that read gives too."""
    return [
        [
            _Candidate(rec, _bare(c), None, c.context_id, _rank(c))
            for c in _iter_cycles(store.iter_checkpoints(rec.run_id), rec.loop_name, keep=None)
        ]
        for rec in runs
    ]


# (shared by every bare cycle, never written to: a dict each was a third of what one held)
_IMPROVED: dict[str, Any] = {"improved": True}
_NOTHING: dict[str, Any] = {}


def _bare(c: _Cycle) -> _Cycle:
    """What the search for pairs reads of a cycle (its rank, digest, context and position),
    without its proposal, verdicts and record: a long run's every record was held for the
    search (44 MB at 5,000 cycles of six findings each, for no pair written). A picked pair's
    cycles are read again whole (``_with_values``)."""
    record = _IMPROVED if c.record.get("improved") else _NOTHING
    return replace(c, proposal=_NOTHING, record=record, visible=_NOTHING, held_out=_NOTHING)


def _with_values(
    store: Store, picked: Sequence[tuple[str, _Candidate, _Candidate]]
) -> list[tuple[str, _Candidate, _Candidate]]:
    """The picked pairs, their candidates given the context and values of their cycles (each
    run read once more, keeping them for those cycles alone)."""
    wanted: dict[str, set[int]] = {}
    runs: dict[str, RunRecord] = {}
    for _match, ch, rj in picked:
        for side in (ch, rj):
            wanted.setdefault(side.run.run_id, set()).add(side.cycle.at)
            runs[side.run.run_id] = side.run
    full: dict[tuple[str, int], _Cycle] = {}
    for run_id, ats in wanted.items():
        for cyc in _iter_cycles(store.iter_checkpoints(run_id), runs[run_id].loop_name, keep=ats):
            if cyc.at in ats:
                full[(run_id, cyc.at)] = cyc

    def filled(c: _Candidate) -> _Candidate:
        cyc = full[(c.run.run_id, c.cycle.at)]
        return replace(c, cycle=cyc, context=cyc.context)

    return [(match, filled(ch), filled(rj)) for match, ch, rj in picked]


def preference_pairs(
    store: Store,
    *,
    project: str | None = None,
    loop_name: str | None = None,
    run_ids: Sequence[str] | None = None,
    match: PairMatch = "both",
) -> list[dict[str, Any]]:
    """Preference pairs from the ended runs (exact rules in ``docs/trace.md``).

    ``match="state"``: both proposals were made from the same context (same loop, same
    actor-visible state before the cycle), in one run or across runs. ``"hindsight"``: within
    one run, a rejected proposal and the next later proposal of that run that did better, in
    the rejected one's context. ``"both"`` (the default): the two sets, state pairs first;
    each pair says which rule formed it.
    """
    check_choice(match, ("state", "hindsight", "both"), "--match")
    per_run = _candidates(store, _ended(store, project, loop_name, run_ids))
    picked: list[tuple[str, _Candidate, _Candidate]] = []
    seen: set[tuple[str, str, str]] = set()
    if match in ("state", "both"):
        groups: dict[str, list[_Candidate]] = {}
        for cands in per_run:
            for c in cands:
                if c.rank is not None:
                    groups.setdefault(c.context_id, []).append(c)
        for group in groups.values():
            for ch in group:
                for rj in group:
                    if _prefers(ch, rj):
                        _pick(picked, seen, "state", ch, rj)
    if match in ("hindsight", "both"):
        for cands in per_run:
            for rj, later in _next_better(cands):
                _pick(picked, seen, "hindsight", later, rj)
    return [dict(redact(_pair(*p))) for p in _with_values(store, picked)]


def _next_better(cands: Sequence[_Candidate]) -> Iterator[tuple[_Candidate, _Candidate]]:
    """Each candidate of one run with the first later one that ``_prefers`` over it, in order.

    Only a candidate ranked 1 or 2 can be preferred, and only over a lower rank: each
    candidate looks among the later ones of a higher rank (their positions, by bisection),
    not at every later candidate — a long run whose score stopped improving has thousands of
    cycles with no better one after them, which made this quadratic."""
    at_least: dict[int, list[int]] = {1: [], 2: []}
    for i, c in enumerate(cands):
        for r in (1, 2):
            if c.rank is not None and c.rank >= r:
                at_least[r].append(i)
    for i, rj in enumerate(cands):
        if rj.rank is None or rj.rank >= 2:
            continue
        above = at_least[rj.rank + 1]
        for j in above[bisect.bisect_right(above, i) :]:
            if _prefers(cands[j], rj):  # the first of another change (digest)
                yield rj, cands[j]
                break


def _pick(
    picked: list[tuple[str, _Candidate, _Candidate]],
    seen: set[tuple[str, str, str]],
    match: str,
    chosen: _Candidate,
    rejected: _Candidate,
) -> None:
    """Pick one pair in the rejected proposal's context, unless that context already has a
    pair of the same two changes."""
    ident = (rejected.context_id, chosen.cycle.digest, rejected.cycle.digest)
    if ident in seen:
        return
    seen.add(ident)
    picked.append((match, chosen, rejected))


def _pair(match: str, chosen: _Candidate, rejected: _Candidate) -> dict[str, Any]:
    """A picked pair as written, its candidates' contexts and values read (``_with_values``)."""
    ident = (rejected.context_id, chosen.cycle.digest, rejected.cycle.digest)
    context = cast(dict[str, Any], rejected.context)
    base = context["artifacts"]  # the values TaskState(before).values() gives
    return {
        "format": PAIR_FORMAT,
        "pair_id": _hash([match, *ident], 16),
        "match": match,
        "loop_name": rejected.run.loop_name,
        "context_id": rejected.context_id,
        "context": context,
        "chosen": _side(chosen, base),
        "rejected": _side(rejected, base),
    }


def _side(c: _Candidate, base: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rec = c.cycle.record
    return {
        "run_id": c.run.run_id,
        "task_key": c.run.task_key,
        "cycle": c.cycle.cycle,
        "context_id": c.context_id,
        "proposal": c.cycle.proposal,
        "digest": c.cycle.digest,
        "net_edits": _net_edits(base, c.cycle.after),
        "decision": c.cycle.decision,
        "score": rec.get("score"),
        "improved": bool(rec.get("improved")),
        "duplicate": bool(rec.get("duplicate")),
        "visible": {k: _brief(v) for k, v in c.cycle.visible.items()},
        "held_out": {k: _brief(v) for k, v in c.cycle.held_out.items()},
    }


def _net_edits(
    base: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The part values that differ between the pair's context and the state after this
    proposal's cycle: what it changed, counted from the context (for a hindsight pair's
    chosen side, that includes the cycles in between)."""
    if after is None:
        return []
    out = []
    for art, parts in after.items():
        for part, value in parts.items():
            old = base.get(art, {})
            if part not in old or old[part] != value:
                out.append({"artifact": art, "part": part, "value": value})
    return out


def _brief(verdict: Any) -> dict[str, Any]:
    v = verdict if isinstance(verdict, dict) else {}
    return {
        "passed": v.get("passed"),
        "score": v.get("score"),
        "findings": len(v.get("findings") or ()),
    }
