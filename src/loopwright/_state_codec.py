"""How a run's state is stored: a compact head, per-cycle deltas, periodic snapshots.

Invariant 8 (constant cost per cycle) is kept here. A ``TaskState`` is split into

* **version rows** — each version of each part, written once (its status updated in place
  when the engine accepts or rejects it); values never travel in a checkpoint;
* a **head** — everything else, bounded in size whatever the run's length: the plan, open
  findings, notes, accounting, for each part its version count and latest accepted version,
  and a window of recent history. Digests of rejected proposals are rows of their own.

A cycle's checkpoint stores only the head's **delta** from the previous checkpoint (changed
keys; sub-keys for the per-part maps; the new history entries), and every ``snapshot_every``
cycles (or when the deltas since the last snapshot outgrow it) a full head, so that loading the
latest state reads one snapshot and a bounded number of deltas.

Written by hand because this is the product's own storage format: no library models "a
structured agent state as append-only rows" (LangGraph's savers store whole channel values per
checkpoint, which is the O(cycles) growth this module exists to avoid).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ._state import Part, TaskState, split_ref
from ._stored_accounting import priced_row

__all__ = [
    "FORMAT",
    "VersionRow",
    "advance",
    "apply_delta",
    "copy_json",
    "delta",
    "fold",
    "head",
    "is_head",
    "resolve",
    "unwritten_versions",
    "wanted_versions",
]

FORMAT = 4  # the store schema version that introduced this layout

# (ref, n, cycle, status, value): one row of the versions table
VersionRow = tuple[str, int, int, str, Any]

# Per-part maps whose deltas list only the changed keys.
_MAP_KEYS = ("parts", "best_parts", "retries")
# Windows that grow at the end and drop from the front: deltas carry only the new entries.
_TAIL_KEYS = ("history", "notes")
# Lists whose entries change in place or grow at the end (a plan gains steps as the actor adds
# them): deltas carry the changed entries by position and the new ones.
_LIST_KEYS = ("plan",)
# The head's scalar fields a cycle seldom changes, named as the state's attributes: read and
# compared in one C call each (a tuple compares its items with ``is`` then ``==``, as ``delta``
# does), looked at key by key only when they differ. ``cycle``, ``score`` and ``stall``, which
# most cycles change, are tested one by one (a loop over them cost 0.9 % of a trivial cycle).
_STEADY_KEYS = (
    "goal",
    "task_key",
    "project",
    "next_action",
    "best_score",
    "best_cycle",
    "progress_score",
    "answer_checks",
    "cap_checks",
    "fenced_upto",
)
_steady, _steady_in = (
    operator.attrgetter(*_STEADY_KEYS),
    operator.itemgetter(*_STEADY_KEYS),
)
# How many keys ``head`` writes (``advance`` takes a head of another length the slow way).
_HEAD_LEN = 29


def head(
    state: TaskState,
    prev: Mapping[str, Any] | None = None,
    changed: Iterable[str] | None = None,
    steps: Iterable[int] | None = None,
) -> dict[str, Any]:
    """The compact head of ``state``: no part values, no full history, no rejected digests.
    With ``prev`` (the head of the last checkpoint) and ``changed`` (the parts changed since,
    ``TaskState.take_changes``), only those parts are looked at: the others' entries are
    ``prev``'s (a C-level dict copy), so the cost follows what the cycle changed. ``steps``
    (the plan positions changed since, ``TaskState.take_plan_changes``) does the same for
    the plan."""
    if prev is None or changed is None:
        parts = {ref: _entry(p) for ref, p in state.iter_parts()}
    else:
        parts = dict(prev["parts"])
        for ref in sorted(changed):
            q = state.part(ref)
            if q is None:
                parts.pop(ref, None)
            else:
                parts[ref] = _entry(q)
    return {
        "format": FORMAT,
        "goal": state.goal,
        "task_key": state.task_key,
        "project": state.project,
        # The task is not here: it never changes in a run and the run's row holds it (as
        # masked at creation); a store puts it back when it resolves a head (``resolve``).
        # Held here, a task with a large document in it was written again by every snapshot.
        "artifacts": list(state.artifacts),
        "parts": parts,
        "plan": _plan(state, prev, steps),
        "findings": _finding_dicts(state.findings),
        # A note, once in the state, is never changed in place (as a history entry): the
        # list is copied, its entries shared. A deep copy here cost O(notes) every commit, up
        # to NOTES_WINDOW (a loop that parks for a person every 25 cycles: more each cycle
        # until cycle 2,500; an effect every cycle: about a third of the cycle's calls).
        "notes": list(state.notes),
        "next_action": state.next_action,
        "retries": dict(state.retries),
        "cycle": state.cycle,
        "spent": state.spent.to_dict(),
        "held_out_spent": priced_row(state.held_out_spent),
        "billed": state.billed,  # replaced, never changed in place (``noted_calls``)
        "paid_cycles": None if state.paid_cycles is None else list(state.paid_cycles),
        "answer_checks": state.answer_checks,
        "cap_checks": state.cap_checks,
        "fenced_upto": state.fenced_upto,
        "score": state.score,
        "best_score": state.best_score,
        "best_cycle": state.best_cycle,
        "best_parts": state.best_parts,  # replaced, never changed in place (mark_best)
        "progress_score": state.progress_score,
        "stall": state.stall,
        "approved": list(state.approved),
        "passed_checks": list(state.passed_checks),
        # A copy: the engine changes the pending entry in place between checkpoints, and a
        # head must keep what was committed for the next delta to be right.
        "pending": _copy(state.pending),
        "history": list(state.history),
    }


def _finding_dicts(findings: Iterable[Any]) -> list[dict[str, Any]]:
    out = []
    for f in findings:  # (a loop: no comprehension a cycle)
        out.append(f.to_dict())
    return out


def _plan(
    state: TaskState, prev: Mapping[str, Any] | None, steps: Iterable[int] | None
) -> list[dict[str, Any]]:
    """The head's plan: ``prev``'s with the steps at ``steps`` written anew (the same list
    when none changed), or every step's (no ``prev`` or ``steps``)."""
    plan = state.plan
    if prev is not None and steps is not None:
        old: list[dict[str, Any]] = prev["plan"]
        changed = list(steps)
        if not changed and len(old) == len(plan):
            return old  # the same list: the delta leaves the plan out
        out = list(old)
        for i in changed:
            if i > len(out):
                break  # not the appended run it should be: write every step
            entry = plan[i].to_dict()
            if i < len(out):
                out[i] = entry
            else:
                out.append(entry)
        else:
            if len(out) == len(plan):
                return out
    return [s.to_dict() for s in plan]


def _entry(p: Part) -> list[Any]:
    cur = p._known[p.count]  # (``p.current`` without a property call)
    # (the current version accepted: the latest accepted, without ``Part.accepted``'s call)
    acc = cur if cur.status == "accepted" else p.accepted
    # the current version's status too: it can change after the version was written
    return [p.count, None if acc is None else acc.n, cur.status]


def _copy(value: Any) -> Any:
    """A copy of JSON-like containers (values inside are immutable or never changed)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


copy_json = _copy  # (the stores' name for it: a run's task they keep, handed out as copies)


def is_head(d: Mapping[str, Any]) -> bool:
    return d.get("format") == FORMAT and "parts" in d


def delta(
    prev: Mapping[str, Any],
    new: Mapping[str, Any],
    hints: Mapping[str, Iterable[Any]] | None = None,
) -> dict[str, Any]:
    """What changed from ``prev`` to ``new`` (both heads); ``apply_delta(prev, d) == new``.
    ``hints``: for a per-part map (``parts``, ``best_parts``), the only keys whose entries can
    differ, and for the plan the only positions — so that a cycle compares what it changed,
    not every part's entry or every step."""
    out: dict[str, Any] = {}
    # Every cycle, for each of the head's keys (most the same object as before, the rest
    # mostly equal): tests written out with subscripts and ``type``, no call a key. The look-up
    # in ``prev`` is one subscript in a ``try`` (free in CPython 3.11 until it raises): a key
    # ``prev`` lacks (an older head's) is the rare case, not an ``in`` test on every key.
    for k, v in new.items():
        try:
            old = prev[k]
        except KeyError:
            out[k] = v
            continue
        if old is v:
            continue
        # (the hinted keys first, each test once: most keys have no hint and go straight on)
        if hints and k in hints and (hint := hints[k]) is not None:
            if k in _LIST_KEYS and type(old) is list and type(v) is list:
                out[k + "@"] = _edits(old, v, hint)
                continue
            if type(old) is dict and type(v) is dict:
                if (d := _hinted(old, v, hint)) is not None:
                    out[k + "$"] = d
                continue
        if old == v:
            continue
        if k in _MAP_KEYS and type(old) is dict and type(v) is dict:
            out[k + "$"] = _map_diff(old, v)
        elif k in _TAIL_KEYS and type(old) is list and type(v) is list:
            out[k + "$"] = _tail(old, v)
        elif k in _LIST_KEYS and type(old) is list and type(v) is list:
            out[k + "@"] = _edits(old, v)
        else:
            out[k] = v
    return out


def advance(
    state: TaskState,
    prev: dict[str, Any],
    changed: Collection[str],
    steps: Collection[int] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``head(state, prev, changed, steps)`` and its ``delta`` from ``prev`` in one pass:
    ``(new, d)`` with ``new == head(...)`` and ``d == delta(prev, new, hints)`` for the hints
    a checkpoint gives (``changed`` for the parts, ``steps`` for the plan, ``best_diff`` for
    the best parts), so ``apply_delta(prev, d) == new``. ``prev`` is a head this module made
    (``ex.head``: every key of ``head``'s); anything else goes through ``head`` and
    ``delta``. Each field of ``state`` is compared with ``prev``'s as it is read and copied
    only when it changed: the new head is ``prev`` with the changed keys set, the same
    objects where nothing changed (a head is never changed in place). The rules are
    ``delta``'s, which stays the reference (``tests/unit/test_state.py`` checks the two
    agree); a cycle of the trivial loop changes four of the 24 keys."""
    if len(prev) != _HEAD_LEN or prev.get("format") != FORMAT:
        return _advance_slow(state, prev, changed, steps)
    new = dict(prev)
    out: dict[str, Any] = {}
    v: Any
    o: Any
    n: Any
    try:
        if (vs := _steady(state)) != (olds := _steady_in(prev)):
            for k, v, o in zip(_STEADY_KEYS, vs, olds, strict=True):
                if v is not o and v != o:
                    new[k] = out[k] = v
        cycle, score, stall = state.cycle, state.score, state.stall
        if cycle != prev["cycle"]:
            new["cycle"] = out["cycle"] = cycle
        if score is not (o := prev["score"]) and score != o:
            new["score"] = out["score"] = score
        if stall != prev["stall"]:
            new["stall"] = out["stall"] = stall
        v = list(state.artifacts)
        if v != prev["artifacts"]:
            new["artifacts"] = out["artifacts"] = v
        if changed:
            old = prev["parts"]
            parts = dict(old)
            upd: dict[str, Any] = {}
            gone: list[Any] = []
            for ref in sorted(changed):  # (as ``head`` and ``delta``: in sorted order)
                q = state.part(ref)
                if q is None:
                    if parts.pop(ref, None) is not None:
                        gone.append(ref)
                else:
                    e = parts[ref] = _entry(q)
                    if ref not in old or old[ref] != e:
                        upd[ref] = e
            new["parts"] = parts
            if upd or gone:
                out["parts$"] = [upd, gone]
        o = prev["plan"]
        v = _plan(state, prev, steps)
        if v is not o:
            new["plan"] = v
            if steps is not None:
                out["plan@"] = _edits(o, v, steps)
            elif v != o:
                out["plan@"] = _edits(o, v)
        v = _finding_dicts(state.findings)
        if v != prev["findings"]:
            new["findings"] = out["findings"] = v
        n = state.notes
        if n != (o := prev["notes"]):
            new["notes"] = v = list(n)
            out["notes$"] = _tail(o, v)
        m = state.retries
        if m != (o := prev["retries"]):
            new["retries"] = v = dict(m)
            out["retries$"] = _map_diff(o, v)
        v = state.spent.to_dict()
        if v != prev["spent"]:
            new["spent"] = out["spent"] = v
        v = priced_row(state.held_out_spent)
        if v != prev["held_out_spent"]:
            new["held_out_spent"] = out["held_out_spent"] = v
        v = state.billed
        if v is not prev["billed"] and v != prev["billed"]:
            new["billed"] = out["billed"] = v
        v = state.paid_cycles
        if v != prev["paid_cycles"]:
            new["paid_cycles"] = out["paid_cycles"] = None if v is None else list(v)
        v = state.best_parts
        if v is not (o := prev["best_parts"]):
            new["best_parts"] = v
            best = state.best_diff(o)
            if best is not None:
                d = _hinted(o, v, best)
                if d is not None:
                    out["best_parts$"] = d
            elif v != o:
                out["best_parts$"] = _map_diff(o, v)
        n = state.approved
        if n != prev["approved"]:
            new["approved"] = out["approved"] = list(n)
        n = state.passed_checks
        if n != prev["passed_checks"]:
            new["passed_checks"] = out["passed_checks"] = list(n)
        v = state.pending
        if v != prev["pending"]:
            new["pending"] = out["pending"] = _copy(v)
        n = state.history
        if n != (o := prev["history"]):
            new["history"] = v = list(n)
            out["history$"] = _tail(o, v)
    except KeyError:  # not a head of this module's (a key missing): the two passes
        return _advance_slow(state, prev, changed, steps)
    return new, out


def _advance_slow(
    state: TaskState,
    prev: dict[str, Any],
    changed: Collection[str],
    steps: Collection[int] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    new = head(state, prev, changed, steps)
    return new, delta(prev, new, hints(state, prev, changed, steps))


def hints(
    state: TaskState,
    prev: Mapping[str, Any],
    changed: Collection[str],
    steps: Collection[int] | None,
) -> dict[str, Collection[Any]]:
    """``delta``'s hints for a checkpoint's head made from ``prev`` (``head``'s arguments)."""
    out: dict[str, Collection[Any]] = {"parts": changed}
    if steps is not None:
        out["plan"] = steps
    best = state.best_diff(prev["best_parts"])
    if best is not None:
        out["best_parts"] = best
    return out


def _map_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Any]:
    """``[changed, gone]`` from ``old`` to ``new``, a per-part map's delta."""
    return [
        {sk: sv for sk, sv in new.items() if sk not in old or old[sk] != sv},
        [sk for sk in old if sk not in new],
    ]


def _hinted(old: dict[str, Any], v: dict[str, Any], hint: Iterable[Any]) -> list[Any] | None:
    """``delta``'s ``[changed, gone]`` for a per-part map whose entries can differ only at
    ``hint``'s keys (a key missing on either side reads as None), or None for no change."""
    upd: dict[str, Any] = {}
    gone: list[Any] = []
    for r in sorted(hint):
        if r in v:
            nv = v[r]
            if (old[r] != nv) if r in old else nv is not None:
                upd[r] = nv
        elif r in old and old[r] is not None:
            gone.append(r)
    return [upd, gone] if upd or gone else None


def _tail(old: list[Any], new: list[Any]) -> list[Any]:
    """``[drop, added]`` with ``old[drop:] + added == new``: a window that dropped ``drop``
    entries from its front and appended ``added`` (the common case costs one comparison of the
    kept entries); anything else is a full replacement, ``[len(old), new]``."""
    n_old, n_new = len(old), len(new)
    for drop in range(n_old + 1):
        keep = n_old - drop
        if keep > n_new or (keep and old[drop] != new[0]):
            continue
        if old[drop:] == new[:keep]:
            return [drop, new[keep:]]
    return [n_old, list(new)]


def _edits(old: list[Any], new: list[Any], hint: Iterable[int] | None = None) -> list[Any]:
    """``[keep, changed, added]`` with ``new`` = ``old[:keep]``, its entries at the positions
    of ``changed`` (``[[i, entry], ...]``) replaced, then ``added``. ``hint``: the only
    positions below ``len(old)`` whose entries can differ."""
    keep = min(len(old), len(new))
    where = range(keep) if hint is None else (i for i in hint if i < keep)
    changed = [[i, new[i]] for i in where if old[i] != new[i]]
    return [keep, changed, new[keep:]]


def apply_delta(base: Mapping[str, Any], d: Mapping[str, Any]) -> dict[str, Any]:
    """A new head: ``base`` with the delta ``d`` applied (``base`` is not changed)."""
    return fold(base, [d])


def fold(base: Mapping[str, Any], deltas: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``base`` with ``deltas`` applied in order (``base`` is not changed). Each per-part map
    is copied once, then changed in place, so a chain of small deltas over a state with many
    parts costs what the deltas hold, not their number times the parts."""
    out = dict(base)
    own: set[str] = set()  # the maps already copied
    for d in deltas:
        for k, v in d.items():
            if k.endswith("@"):
                keep, changed, added = v
                items = list(out.get(k[:-1]) or ())[: int(keep)]
                for i, entry in changed:
                    items[int(i)] = entry
                out[k[:-1]] = [*items, *added]
            elif k.endswith("$"):
                key = k[:-1]
                if key in _TAIL_KEYS:
                    drop, added = v
                    out[key] = [*list(out.get(key) or ())[int(drop) :], *added]
                else:
                    changed, gone = v
                    if key not in own:
                        out[key] = dict(out.get(key) or {})
                        own.add(key)
                    m = out[key]
                    m.update(changed)
                    for sk in gone:
                        m.pop(sk, None)
            else:
                out[k] = v
                own.discard(k)
    return out


def wanted_versions(h: Mapping[str, Any]) -> set[tuple[str, int]]:
    """The versions a head needs held in memory: each part's current, accepted and best."""
    best = h.get("best_parts") or {}
    out: set[tuple[str, int]] = set()
    for ref, entry in (h.get("parts") or {}).items():
        count, acc = entry[0], entry[1]
        out.add((ref, int(count)))
        if acc is not None:
            out.add((ref, int(acc)))
        b = best.get(ref)
        if b is not None and 1 <= int(b) <= int(count):
            out.add((ref, int(b)))
    return out


def stored_version(
    state: TaskState, written: Mapping[tuple[str, int], str], ref: str, value: Any
) -> int | None:
    """The newest version of part ``ref`` held in memory whose value is ``value`` (the same
    object, or an equal text) and that ``written`` counts as stored (committed, or going with
    the commit being staged): what a record's edit writing an unchanged value may name
    (``_record_codec.refer_versions``'s ``held``). Any other type only as the same object: an
    equal dict may read back otherwise from JSON (``1.0`` as ``1``)."""
    q = state.part(ref)
    if q is None:
        return None
    text = type(value) is str
    found = None
    for n, v in q._known.items():  # (no property call)
        have = v.value
        same = have is value or (text and type(have) is str and have == value)
        if same and (found is None or n > found) and (ref, n) in written:
            found = n
    return found


def resolve(
    h: Mapping[str, Any],
    versions: Mapping[tuple[str, int], VersionRow],
    task: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """A head as a state dict of the classic shape (``TaskState.from_dict`` reads it): each
    part lists the versions in ``versions`` it needs (``wanted_versions``) and its ``count``.
    ``task`` gives the run's task, for a head that does not hold it (``head``: none since
    schema 4's heads stopped carrying it; an older head keeps its own)."""
    d = {k: v for k, v in h.items() if k not in ("parts", "artifacts")}
    if "task" not in d and task is not None:
        d["task"] = task()
    arts: dict[str, list[dict[str, Any]]] = {a: [] for a in h.get("artifacts") or ()}
    wanted = wanted_versions(h)
    by_ref: dict[str, list[int]] = {}
    for ref, n in wanted:
        by_ref.setdefault(ref, []).append(n)
    for ref, entry in (h.get("parts") or {}).items():
        count = int(entry[0])
        artifact, name = split_ref(ref)
        vs = []
        for n in sorted(by_ref.get(ref, ())):
            row = versions.get((ref, n))
            if row is not None:
                status = entry[2] if n == count and len(entry) > 2 else row[3]
                vs.append({"n": n, "value": row[4], "cycle": row[2], "status": status})
        arts.setdefault(artifact, []).append({"name": name, "count": count, "versions": vs})
    d["artifacts"] = [{"name": a, "parts": ps} for a, ps in arts.items()]
    return d


def unwritten_versions(
    state: TaskState,
    written: Mapping[tuple[str, int], str],
    changed: Iterable[str] | None = None,
) -> tuple[list[VersionRow], dict[tuple[str, int], str]]:
    """Version rows to write — versions held in memory that ``written`` (``(ref, n) -> status``
    as committed) lacks or has with another status — and the new ``written`` (only versions
    held in memory: it stays as small as the state). With ``changed`` (the parts changed since
    ``written`` was made) only those parts are looked at, and ``written`` is updated in place
    (it may then keep entries of versions since dropped from memory, until the next full
    pass)."""
    parts: Iterable[tuple[str, Part | None]]
    if changed is not None and isinstance(written, dict):
        now = written
        parts = []
        for ref in sorted(changed):  # (a loop: no comprehension a cycle)
            parts.append((ref, state.part(ref)))
    else:
        now = {}
        parts = state.iter_parts()
    rows: list[VersionRow] = []
    for ref, q in parts:
        for n, v in () if q is None else q._known.items():  # (no property call)
            key = (ref, n)
            if key not in written or written[key] != v.status:  # (a status is never None)
                rows.append((ref, n, v.cycle, v.status, v.value))
            now[key] = v.status
    return rows, now
