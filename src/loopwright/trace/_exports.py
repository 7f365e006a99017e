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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from .._decide import record_no_attempt
from .._errors import check_choice
from .._redact import redact
from ..store import RunRecord, Store
from ._eval_cases import EVAL_CASE_FORMAT, eval_case, eval_cases, write_eval_case
from ._run_cycles import (
    Cycle,
    context_id,
    ended_run_ids,
    ended_runs,
    hash_of,
    iter_cycles,
)

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

PAIR_FORMAT = "loopwright.preference_pair/1"

PairMatch = Literal["state", "hindsight", "both"]


# --- preference pairs ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Candidate:
    run: RunRecord
    cycle: Cycle
    context: dict[str, Any] | None  # read again for the cycles a pair holds (``_with_values``)
    context_id: str
    rank: int | None


def _rank(c: Cycle) -> int | None:
    """How good a proposal turned out: 2 accepted, 1 improved the best visible score without
    being accepted, 0 revised or refused without improving; ``None`` for what is neither
    better nor worse (an actor's question, a cycle that never concluded, a check-only cycle:
    no actor proposed anything, the verifiers judged a person's edit, ``_decide.no_attempt``).
    Nor the cycle of a request denied after an edit beside it: the actor's proposal was
    parked and denied (never concluded), the proposal it concluded with is the person's edit
    judged, no actor's."""
    if not c.concluded or record_no_attempt(c.record) or _judged_beside_denied(c.record):
        return None
    if c.decision == "accepted":
        return 2
    if c.decision not in ("revise", "refused"):
        return None
    return 1 if c.record.get("improved") else 0


def _judged_beside_denied(rec: dict[str, Any]) -> bool:
    """A cycle that began as the actor's attempt and concluded judging a person's edit
    check-only: its request was denied (or expired) after an edit beside it."""
    return bool(rec.get("check_only")) and not record_no_attempt(rec)


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
            for c in iter_cycles(store.iter_checkpoints(rec.run_id), rec.loop_name, keep=None)
        ]
        for rec in runs
    ]


# (shared by every bare cycle, never written to: a dict each was a third of what one held)
_IMPROVED: dict[str, Any] = {"improved": True}
_NOTHING: dict[str, Any] = {}


def _bare(c: Cycle) -> Cycle:
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
    full: dict[tuple[str, int], Cycle] = {}
    for run_id, ats in wanted.items():
        for cyc in iter_cycles(store.iter_checkpoints(run_id), runs[run_id].loop_name, keep=ats):
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
    check_choice(match, ("state", "hindsight", "both"), "match")
    per_run = _candidates(store, ended_runs(store, project, loop_name, run_ids))
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
        "pair_id": hash_of([match, *ident], 16),
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
