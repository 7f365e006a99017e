"""Two runs side by side (``loopwright diff``): what differs in their contracts, how their cycles
went (score per cycle, spend), how and why they stopped, and their final artifacts part by part.

Read from the store only; typically a run and its fork (``Runtime.fork``) or its rerun.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ._errors import RunNotFoundError
from ._stored_run_words import over_budget
from ._verdict import held_out_words
from .store import RunRecord, Store

__all__ = ["compare_runs", "contract_changes", "flatten", "merge_contract"]


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"budget": {"max_cycles": 3}}`` as ``{"budget.max_cycles": 3}`` (lists kept whole)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def merge_contract(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` laid over it table by table (a ``null`` clears a key; lists,
    such as the risk rules, are replaced whole).

    A ``budget.max_cycles`` the changes set (a number, or ``null``) is the person's: the base's
    mark of the engine's default ceiling (``budget.max_cycles_default``, a run's snapshot) is
    dropped with it. Kept, a ``max_cycles = 1000`` written beside a time budget or a
    no_progress rule read as the default ceiling that rule replaces, and the fork ran without
    the cap its author set (999 was kept)."""
    out = _laid_over(base, changes)
    budget, given = out.get("budget"), changes.get("budget")
    if isinstance(budget, dict) and isinstance(given, Mapping) and "max_cycles" in given:
        budget.pop("max_cycles_default", None)
    return out


def _laid_over(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _laid_over(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def contract_changes(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each setting (``budget.max_cycles``) that differs: ``{"from": ..., "to": ...}``."""
    a, b = flatten(before), flatten(after)
    return {k: {"from": a.get(k), "to": b.get(k)} for k in sorted({*a, *b}) if a.get(k) != b.get(k)}


def _scores(store: Store, run_id: str, upto: int | None = None) -> dict[int, float | None]:
    """The score of each cycle the run recorded (up to cycle ``upto``)."""
    scores: dict[int, float | None] = {}
    # the records alone, a page at a time: not every checkpoint with its state (266 MB at
    # 20,000 cycles)
    for _seq, cycle, r in store.iter_records(run_id):
        n = int(r.get("cycle", cycle)) if r else cycle
        if r and "proposal" in r and (upto is None or n <= upto):
            scores[n] = r.get("score")
    return scores


def _inherited(store: Store, rec: RunRecord) -> dict[int, float | None]:
    """A fork's cycles up to its fork point, which it inherited and does not record: its
    origin's scores (the origin's own origin's for cycles that one inherited in turn). A cycle
    whose origin is gone reads as None."""
    scores: dict[int, float | None] = {}
    upto, origin, seen = rec.forked_at or 0, rec.forked_from, {rec.run_id}
    while origin and upto > 0 and origin not in seen:
        seen.add(origin)
        try:
            o = store.get_run(origin)
        except RunNotFoundError:
            break
        for n, v in _scores(store, o.run_id, upto).items():
            scores.setdefault(n, v)
        upto, origin = min(upto, o.forked_at or 0), o.forked_from
    return scores


def _side(store: Store, rec: RunRecord) -> dict[str, Any]:
    scores = _scores(store, rec.run_id)
    inherited = _inherited(store, rec) if rec.forked_from else {}
    state = store.latest_checkpoint(rec.run_id).task_state()
    parts = {}
    for ref, p in state.iter_parts():
        parts[ref] = {"value": p.value, "status": p.status, "versions": p.count}
    packet = rec.packet or {}
    return {
        "run": rec.run_id,
        "task_key": rec.task_key,
        "loop": rec.loop_name,
        "status": rec.status,
        "stop_reason": rec.stop_reason,
        "stop_cause": packet.get("stop_cause") or packet.get("cause"),
        "cycles": rec.cycle,
        "best_score": rec.best_score,
        "held_out_passed": rec.held_out_passed,
        "held_out_self_reported": rec.held_out_self_reported,
        "held_out_verdict": held_out_words(rec.held_out_passed, rec.held_out_self_reported).kind,
        "cost_usd": rec.cost_usd,
        "tokens": rec.tokens,
        "seconds": rec.seconds,
        # how far past its budgets (0.0 and 0 within them), as show --json says (over56b)
        **over_budget(rec),
        "forked_from": rec.forked_from,
        "forked_at": rec.forked_at,
        # cycles 1..inherited_cycles are the origin's (a fork records only its own)
        "inherited_cycles": (rec.forked_at or 0) if rec.forked_from else 0,
        "scores": {**inherited, **scores},
        "parts": parts,
    }


def compare_runs(store: Store, run_a: str, run_b: str) -> dict[str, Any]:
    """Both runs (id, prefix or task key) and their differences, as JSON-ready data."""
    a_rec, b_rec = store.get_run(run_a), store.get_run(run_b)
    a, b = _side(store, a_rec), _side(store, b_rec)
    ca, cb = flatten(a_rec.contract), flatten(b_rec.contract)
    contract = {
        k: {"a": ca.get(k), "b": cb.get(k)} for k in sorted({*ca, *cb}) if ca.get(k) != cb.get(k)
    }
    cycles = sorted({*a["scores"], *b["scores"]})
    curve = [
        {
            "cycle": n,
            "a": a["scores"].get(n),
            "b": b["scores"].get(n),
            # whether a side's score is its origin's, a cycle the fork inherited
            "a_inherited": n <= a["inherited_cycles"],
            "b_inherited": n <= b["inherited_cycles"],
        }
        for n in cycles
    ]
    parts = []
    for ref in sorted({*a["parts"], *b["parts"]}):
        pa, pb = a["parts"].get(ref), b["parts"].get(ref)
        parts.append(
            {
                "part": ref,
                "same": pa is not None and pb is not None and pa["value"] == pb["value"],
                "a": pa,
                "b": pb,
            }
        )
    for side in (a, b):
        del side["scores"], side["parts"]
    return {"a": a, "b": b, "contract": contract, "scores": curve, "parts": parts}
