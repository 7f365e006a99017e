"""A person's edit judged before the actor is paid again: the check-only cycle.

``Runtime.edit`` marks the run it edits (``mark_edited``). A run parked on a request keeps its
entry, marked ``edited``: the request's cycle is judged again once it is decided
(``Parking._judge_again``). Any other run (ended and reopened, or idle) gets the entry
``{"stage": "edit_check"}`` (a rollback's compensations waiting to run keep theirs, marked
``edited``, and get it once they are done). The next cycle on ``resume`` is then a *check-only*
cycle (``EditCheck._check_edit``): no actor call, the loop's verifiers — visible, then held-out,
as in any cycle — judge the state as the person left it, and the stop contract decides it:
accepted, or the loop goes on with the actor shown those verdicts. Both paths judge through
``judge``: one way to have the verifiers look again at what a person changed.

The check-only cycle makes no attempt: a cycle cap reached does not stop it (a person's edit
of a run stopped on its cycles is judged, and accepted if it meets the contract), a cost, token
or time budget used up does (``_decide.check_stop``: its checks may cost). An edit that cannot
be judged so says why when it is made (``unjudged``: an ``edit_unjudged`` event, the run's next
action, a warning, and the CLI prints it).

The entry is written in the edit's own commit and cleared in the check-only cycle's, so a crash
before that commit judges again on resume and one after it does not (at most one check-only
cycle an edit; a run edited twice before it resumes judges the latest state once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import _decide as rules
from ._contract import Contract
from ._exec import Execution as _Exec
from ._exec import call_rows
from ._host import RuntimeHost
from ._parts import Part
from ._proposal import Proposal
from ._question import answer_unread
from ._redact_logs import masked_logger
from ._same_value import same_value
from ._state import TaskState
from .store import NewEvent, Store

__all__ = [
    "CHECKED",
    "CHECK_ONLY",
    "EDIT_CHECK",
    "EditCheck",
    "answer_owed",
    "behind_text",
    "effects_behind",
    "judge",
    "mark_edited",
    "owed_after",
    "owes_check",
    "replaced_version",
    "say_behind",
    "unjudged",
    "warn_unjudged",
]

EDIT_CHECK = "edit_check"  # the pending entry's stage: a person's edit waits to be judged
CHECKED = "judged the person's edit"  # the check-only cycle's proposal note, as shown

# The check-only cycle's proposal: it changes nothing (the person's versions are in the state).
CHECK_ONLY = Proposal(note=CHECKED)


def mark_edited(
    pending: Mapping[str, Any] | None,
    ref: str,
    replaced: Callable[[], Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """The run's pending entry after a person edited part ``ref``: what it waited on, marked
    ``edited``, or, where it waited on nothing, a check-only cycle owed (its ``parts``: those
    edited since the run's last cycle). ``replaced``: the version the edit replaced
    (``replaced_version``), asked and kept for the part's first edit since then only
    (``effects_behind``)."""
    if pending is None or pending.get("stage") == EDIT_CHECK:
        return {
            "stage": EDIT_CHECK,
            "parts": _with(pending, "parts", ref),
            "replaced": _first(pending, "replaced", ref, replaced),
        }
    # (the parts too: the check-only cycle it may owe once decided names them, as any does)
    return {
        **pending,
        "edited": True,
        "edited_parts": _with(pending, "edited_parts", ref),
        "edited_replaced": _first(pending, "edited_replaced", ref, replaced),
    }


def _with(pending: Mapping[str, Any] | None, field: str, ref: str) -> list[str]:
    """The parts ``pending[field]`` lists, ``ref`` last (once)."""
    return [*(str(p) for p in (pending or {}).get(field) or () if p != ref), ref]


def _first(
    pending: Mapping[str, Any] | None,
    field: str,
    ref: str,
    replaced: Callable[[], Mapping[str, int]] | None,
) -> dict[str, dict[str, int]]:
    """``pending[field]`` (by part: the version its first edit replaced), ``ref``'s added
    where it has none yet."""
    out = {str(k): dict(v) for k, v in ((pending or {}).get(field) or {}).items()}
    if replaced is not None and ref not in out:
        out[ref] = dict(replaced())
    return out


def owed_after(pending: Mapping[str, Any]) -> dict[str, Any] | None:
    """The entry a run owes once what it waited on (a question, compensations) is settled: a
    check-only cycle for the parts a person edited meanwhile (``mark_edited``), or None."""
    if not pending.get("edited"):
        return None
    return {
        "stage": EDIT_CHECK,
        "parts": [str(p) for p in pending.get("edited_parts") or ()],
        "replaced": dict(pending.get("edited_replaced") or {}),
    }


def replaced_version(store: Store, run_id: str, ref: str, part: Part) -> dict[str, int]:
    """The version of ``ref`` a person's edit is about to replace (its current one) and the
    first cycle whose effects ran with it: its own cycle (an actor's version is applied before
    its cycle's effects run), the next one for a person's (made once its cycle concluded).
    Read when a person edits, not in a cycle: the run's ``edited`` events tell the two."""
    base = part.current
    by_person = any(
        e.data.get("part") == ref and e.data.get("version") == base.n
        for e in store.events_of_kinds(run_id, ("edited",))
    )
    return {"n": base.n, "since": base.cycle + 1 if by_person else base.cycle}


def answer_owed(state: TaskState) -> bool:
    """Whether the last concluded cycle asked a question a person answered, which no actor
    has read since: the cycle after it is the one its answer is for (replay: a check-only
    cycle right after an asked one the recording did not end, ``replay._simulate``; a fork's
    first after such a cycle, ``Inherited.answer_owed``)."""
    return answer_unread(state.history, state.notes, state.cycle)


def owes_check(pending: Mapping[str, Any] | None) -> bool:
    """Whether the next cycle is a check-only one (a person's edit not yet judged)."""
    return pending is not None and pending.get("stage") == EDIT_CHECK


_BUDGETS = {"budget_cost": "cost", "budget_tokens": "token", "budget_time": "time"}


def unjudged(run_id: str, contract: Contract, state: TaskState) -> str | None:
    """Why a person's edit cannot be judged on ``resume`` (a budget its checks may spend is
    used up), and how to have it judged; None when it will be (or nothing is owed). Owed a
    check-only cycle: ``_decide.check_stop`` forbids it. Made beside a request: the decided
    cycle's first check may not start (``Parking._checks_stop``: approved, the run stops on
    the budget, the proposal unverified; denied or expired, it escalates on the denial),
    which ``_beside_request`` tells from the parked cycle's calls."""
    pend = state.pending
    if owes_check(pend):
        reason = rules.check_stop(contract, state)
        what = "a resume stops again before judging it"
    elif pend is not None and pend.get("approval_id") and pend.get("edited"):
        reason = _beside_request(contract, state, pend)
        what = (
            f"whether question {pend['approval_id']} is answered or declined, the run ends "
            "(answered: on that budget; declined: escalated) before judging it"
            if pend.get("question_only")
            else f"whether request {pend['approval_id']} is approved or denied, the run ends "
            "(approved: on that budget, the proposal unverified; denied: escalated on the "
            "denial) before judging it"
        )
    else:
        return None
    if reason is None:
        return None
    return (
        f"the edit is judged only once the budget allows: run {run_id[:12]} has used up its "
        f"{_BUDGETS.get(reason, reason)} budget ({reason}), which its checks may spend, so "
        f"{what}; to have it judged, fork the run with a raised budget (loopwright fork "
        f"{run_id[:12]} --at-cycle {state.cycle} --contract FILE) and make the edit there"
    )


def _beside_request(contract: Contract, state: TaskState, pend: Mapping[str, Any]) -> str | None:
    """The budget that keeps the parked cycle's first check from starting once its request is
    decided (``_decide.call_stop`` after its calls, as ``Parking._checks_stop`` asks it), or
    None. That check is the first verifier the cycle called; a question's cycle called none,
    and one is known to start only when every check the run made billed nothing."""
    spend = [dict(c) for c in pend.get("spend") or ()]
    rows = call_rows(spend)
    first = next(
        (str(c.get("who")) for c in spend if str(c.get("who")).startswith("verifier:")), None
    )
    if first is not None:
        return rules.call_stop(contract, state.spent, state.billed, rows, first)
    used = rules.budget_exhausted(contract, state.spent)
    checks = [w for w in state.billed if w.startswith("verifier:")]
    if used is None or (checks and not any(state.billed[w] for w in checks)):
        return None
    return rules.budget_crossed(contract, state.spent) or used


def warn_unjudged(why: str) -> None:
    """Tell the Python API's caller (the CLI prints ``why`` itself)."""
    masked_logger("loopwright.runs").warning("%s", why)


async def judge(
    host: RuntimeHost,
    ex: _Exec,
    n: int,
    proposal: Proposal,
    digest: str,
    why: Mapping[str, Any],
    *,
    approved: Sequence[Mapping[str, Any]] = (),
) -> bool:
    """Have the loop's verifiers judge ``proposal`` applied to the state as it is now (a person
    edited it since the actor proposed), under this cycle's time budget, and decide the cycle:
    the ``judged_again`` event says ``why``. The actor is not asked. ``approved``: what a
    person approved for this cycle already (not asked again)."""
    left = rules.remaining(ex.contract, ex.state)
    ex.deadline = None if left.seconds is None else time.time() + left.seconds
    ex.events.append(NewEvent(n, "judged_again", dict(why)))
    return await host._evaluate(ex, n, proposal, digest, time.perf_counter(), approved=approved)


def effects_behind(
    store: Store,
    run_id: str,
    state: TaskState,
    parts: Sequence[str],
    replaced: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """The run's completed effects that ran with the version a person's edit (now judged)
    replaced, where that version's value is not the part's current one: each as ``{"effect",
    "key", "cycle", "part", "ran_with", "now"}`` (version numbers). They are not run again: an
    effect runs at most once per key, and a new one is an action of its own, asked by a
    proposal and governed by the approval policy (invariants 2 and 6); said instead (polish52:
    a publish of "X fast safe cheap" stood beside an accepted "Hand made …" and nothing said
    so). ``replaced``: by part, the version its first edit since the last cycle replaced and
    the first cycle whose effects ran with it (``replaced_version``); an effect that ran with
    an older value was made stale by the change that replaced it, not by this edit.

    Its cost does not grow with the run (invariant 8, polish52b: it read every version of the
    part and the whole effects journal): the replaced version (held, or its one row) and the
    done effects from its cycle on (the journal's (run_id, kind, cycle) index). An entry
    written before ``replaced`` was kept is read as replacing the version before the
    current one, from that version's cycle."""
    out: list[dict[str, Any]] = []
    for ref in parts:
        part = state.part(ref)
        if part is None:
            continue
        now = part.current
        was = replaced.get(ref) or {"n": now.n - 1}
        n = int(was["n"])
        if not 1 <= n < now.n:
            continue
        base = part.known.get(n) or next(
            iter(store.versions_page(run_id, ref, after=n - 1, limit=1)), None
        )
        if base is None or base.n != n or same_value(base.value, now.value):
            continue
        since = int(was.get("since", base.cycle))
        # (up to the last concluded cycle: a parked cycle's effects run after the edit)
        ran = store.journal_where(
            run_id, kind="effect", after_cycle=since - 1, upto_cycle=state.cycle, statuses=("done",)
        )
        out += [
            {
                "effect": str(entry.data.get("name") or entry.kind),
                "key": entry.key.removeprefix("effect:"),
                "cycle": entry.cycle,
                "part": ref,
                "ran_with": n,
                "now": now.n,
            }
            for entry in ran
        ]
    return out


def say_behind(ex: _Exec, n: int, behind: list[dict[str, Any]]) -> None:
    """Record ``effects_behind``'s list for cycle ``n``: its record and (ended short of
    success) packet (``ex.effects_behind``), an event, the next actor's notes, a warning."""
    ex.effects_behind = behind
    if not behind:
        return
    ex.events.append(NewEvent(n, "effects_not_rerun", {"effects": behind}))
    # (the next actor is told: asking such an effect again is its proposal, a new key)
    ex.state.notes.append({"kind": "effects_not_rerun", "effects": behind})
    masked_logger("loopwright.runs").warning("run %s: %s", ex.run_id[:12], behind_text(behind))


def behind_text(behind: Sequence[Mapping[str, Any]], limit: int = 3) -> str:
    """``effects_behind``'s list in words, for a timeline row and a warning."""
    said = [
        f"{b.get('effect')} (key {b.get('key')}, cycle {b.get('cycle')}) ran while "
        f"{b.get('part')} was version {b.get('ran_with')}, not {b.get('now')}"
        for b in behind[:limit]
    ]
    more = f"; and {len(behind) - limit} more" if len(behind) > limit else ""
    return (
        "effects not run again for the person's edit: " + "; ".join(said) + more + " (a new "
        "effect is the actor's to propose, under the approval policy)"
    )


class EditCheck(RuntimeHost):
    """The check-only cycle after a person's edit (mixed into ``Runtime``)."""

    async def _check_edit(self, ex: _Exec) -> bool:
        """Cycle ``n``: the verifiers judge the person's edit, the contract decides, no actor
        call. Returns True when the run ended or parked (as ``Cycle._cycle``)."""
        s = ex.state
        n = s.cycle + 1
        parts = [str(p) for p in (s.pending or {}).get("parts") or ()]
        replaced = dict((s.pending or {}).get("replaced") or {})
        s.pending = None  # cleared in this cycle's commit: judged once
        ex.events.append(NewEvent(n, "cycle_started", {"check_only": True}))
        ex.calls = []
        ex.asked = set()
        ex.cycle_at, ex.cycle_from = n, s.spent
        if ex.retries:  # this cycle's failed attempts only (a verifier's, before a crash)
            ex.retries = {k: e for k, e in ex.retries.items() if e.cycle >= n}
        ex.threaded = self._active > 1 or self.calls_in_threads
        # no actor, no context: no feedback memory shown, nothing for a reflector
        ex.last_context, ex.last_visible, ex.shown_memory = None, {}, []
        if ex.phase is not None:  # (a phase hook is set by the crash tests only)
            ex.at("before_check")
        ex.check_only = True
        say_behind(ex, n, effects_behind(self.store, ex.run_id, s, parts, replaced))
        try:
            why = {"why": "edited", "check_only": True, "parts": parts}
            return await judge(self, ex, n, CHECK_ONLY, CHECK_ONLY.digest(), why)
        finally:
            ex.check_only = False
            ex.effects_behind = []
