"""The escalation packet: what a person needs to take over a run that did not succeed.

Hitting a limit never throws work away: the packet carries the best candidate so far and
everything accepted, beside the unresolved findings, the evidence and where the trace is.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ._contract import Contract
from ._decide import at_default_ceiling, crosses, cycle_cap
from ._hints import settle_command
from ._money_text import usd
from ._state import TaskState
from ._verdict import independent

__all__ = [
    "EDIT_ONE",
    "SETTLED_TAIL",
    "SETTLE_TAIL",
    "SPEC_WORDS",
    "build_packet",
    "edit_part",
    "explain",
    "settle_first",
    "stop_cause",
    "waiting_compensations",
]

# How to go on past a budget: the run keeps its contract, and `resume` returns an ended run as
# it is; a fork at its last cycle takes a contract laid over the run's (advice47: the advice
# said "raise contract.budget.max_cycles" and "accept it by hand", which no command does).
_FORK = (
    "`loopwright fork {run} --at-cycle {cycle} --contract FILE` (FILE: a `[contract.budget]` "
    "table with the higher {setting}), then `loopwright resume` the new run"
)
# A person's version instead of the actor's: judged by the checks, no actor call, first.
# Runnable as printed but for FILE, which it says in words (polish55: `PART --value V`, typed
# as printed, gave a text part the value "V"); {part}: a part the run holds (``edit_part``).
EDIT_ONE = (
    "`loopwright edit {run} {part} --file FILE` (FILE: a file holding the part's new value; "
    "`--value` and the value itself for a short one)"
)
_EDIT = (
    EDIT_ONE + " (`--note TEXT`: a note the actor is shown), then "
    "`loopwright resume {run}`: a person's edit is judged by the checks, with no actor call, "
    "before the actor runs again"
)
# The spec of a fork is the person's (a stronger actor's tools, a rule): said in words, as
# FILE is (hints55: a bare SPEC read as a name to copy).
SPEC_WORDS = "SPEC: the path of the spec file with that change"
_KEEP = {k: "{" + k + "}" for k in ("run", "cycle", "best", "part")}  # filled by build_packet
_REVIEW = "Review the best candidate: `loopwright show {run}`."
_BUDGET = (
    "The {what} budget is spent. "
    + _REVIEW
    + " {when}, go on in a fork with a higher budget: "
    + _FORK
    + "; to finish it yourself, edit the fork's parts before resuming it."
)
# The advice by stop reason ({run}, {cycle}: the run and its last cycle; build_packet).
_ADVICE = {
    "no_progress": (
        "The actor stopped improving. Review the open findings (`loopwright show {run}`): give "
        "the remaining parts your own version, "
        + _EDIT
        + "; or strengthen the actor's tools and fork the run with that spec "
        "(`loopwright fork {run} --at-cycle {cycle} --spec SPEC`; " + SPEC_WORDS + ")."
    ),
    "budget_cycles": _BUDGET.format(
        what="cycle", when="If the score was still rising", setting="max_cycles", **_KEEP
    ),
    "budget_cost": _BUDGET.format(
        what="cost",
        when="Only if the last cycles still improved the score",
        setting="max_cost_usd",
        **_KEEP,
    ),
    "budget_tokens": _BUDGET.format(
        what="token",
        when="Only if the last cycles still improved the score",
        setting="max_tokens",
        **_KEEP,
    ),
    "budget_time": _BUDGET.format(
        what="time", when="If the score was still rising", setting="max_seconds", **_KEEP
    ),
    # (the engine's default ceiling of a spend-only contract, not its author's: build_packet)
    "budget_cycles_default": (
        "The default cycle ceiling ended the run: its contract's only exits besides success "
        "are spend budgets, which cycles that spend nothing never reach. "
        + _REVIEW
        + " Choose the end of the loop's runs: set budget.max_cycles, max_seconds or a "
        "no_progress rule in its contract; to go on from here: "
        + "`loopwright fork {run} --at-cycle {cycle} --contract FILE` (FILE: a "
        "`[contract.budget]` table with max_cycles, or a `[contract.no_progress]` table), then "
        "`loopwright resume` the new run."
    ),
    "marginal_return": "Another cycle was not worth its expected cost. " + _REVIEW,
    # the escalated run's own advice, with the commands that reopen it: build_packet
    "cancelled": "The run was cancelled. If the work is still needed, fork it from its best "
    "candidate: `loopwright fork {run} --at-cycle {best}`, then `loopwright resume` the "
    "new run.",
    "error": "loopwright itself failed. Report the error with the trace; the last checkpoint "
    "is intact and the run can be inspected with `loopwright show {run}`.",
}

_WORDS = {
    "success": "accepted: every required visible check passed",
    "no_progress": "stopped: no measurable improvement for {n} cycles",
    "budget_cycles": "stopped: the cycle budget ({max_cycles}) is spent",
    # (reached, crossed by a call in flight, or crossed by the next cycle's projection: the
    # cause after these words says which; "would be crossed" read wrong for the first two)
    "budget_cost": "stopped: at the cost budget (${max_cost_usd})",
    "budget_tokens": "stopped: at the token budget ({max_tokens})",
    "budget_time": "stopped: at the time budget ({max_seconds} s)",
    "marginal_return": "stopped: another cycle was not worth its expected cost",
    "escalated": "escalated to a person",
    "cancelled": "cancelled",
    "error": "failed: loopwright itself raised an error",
}


# A budget stop with what was spent beside the limit: "at the cost budget ($0.30)" read as if
# $0.30 was spent when a call in flight had taken it to $0.36.
_SPENT_WORDS = {
    "budget_cost": "stopped: spent ${spent} of the cost budget (${max_cost_usd})",
    "budget_tokens": "stopped: used {spent} tokens of the token budget ({max_tokens})",
    "budget_time": "stopped: ran {spent} s of the time budget ({max_seconds} s)",
}
_SPENT_KEYS = {"budget_cost": "cost_usd", "budget_tokens": "tokens", "budget_time": "seconds"}


def explain(
    reason: str,
    contract: Contract,
    *,
    max_cycles: int | None = None,
    spent: Mapping[str, Any] | None = None,
    cycles: int | None = None,
    checked: int = 0,
    at_default: bool | None = None,
) -> str:
    """A stop reason in plain words, with the contract's numbers (``max_cycles``: the run's
    own cycle cap, when the task carried one; ``spent``: the run's spend, said beside a
    budget that stopped it; ``cycles``, ``checked``: a stop at the cycle cap says how many
    cycles ran and how many of them judged a person's edit, not counted, ``edit_checks``;
    ``at_default``: the cap was the default ceiling, ``at_default_ceiling`` of the task)."""
    b = contract.budget
    if reason == "budget_cycles" and _at_default(contract, at_default):
        after = f" after {cycles} cycles{_judged_edits(checked)}" if checked and cycles else ""
        return f"stopped: the default cycle ceiling ({b.max_cycles:,}) is spent{after}{_CHOOSE}"
    if reason == "budget_cycles" and checked and cycles is not None:
        cap = max_cycles if max_cycles is not None else b.max_cycles
        return f"stopped: the cycle budget ({cap}) is spent after {cycles} cycles" + (
            _judged_edits(checked)
        )
    used = None if spent is None else spent.get(_SPENT_KEYS.get(reason, ""))
    if isinstance(used, (int, float)) and not isinstance(used, bool):
        shown = _usd(used) if reason == "budget_cost" else _secs(used)
        return _SPENT_WORDS[reason].format(
            spent=used if reason == "budget_tokens" else shown,
            max_cost_usd=_usd(b.max_cost_usd),
            max_tokens=b.max_tokens,
            max_seconds=_secs(b.max_seconds),
        )
    n = contract.no_progress.cycles if contract.no_progress else 0
    return _WORDS.get(reason, reason).format(
        n=n,
        max_cycles=max_cycles if max_cycles is not None else b.max_cycles,
        max_cost_usd=_usd(b.max_cost_usd),
        max_tokens=b.max_tokens,
        max_seconds=_secs(b.max_seconds),
    )


def edit_checks(
    cycle: int, cap: int | None, answer_checks: int, cap_checks: int | None = None
) -> int:
    """How many of a run's ``cycle`` cycles the cycle cap ``cap`` did not count: check-only
    cycles, each judging a person's edit with no actor call, that took an answered question's
    cycle (``answer_checks``) or ran past the cap reached (an edit of a run stopped on its
    cycles, ``_decide.check_stop``; ``cap_checks``, counted as they conclude). Of a run's own
    cycles only they run past the cap, but a fork under a lower cap inherits actor cycles past
    it (review49b: a fork at cycle 4 under a cap of 2, never edited, said "2 of them judged
    people's edits"): the cycles past the cap count only as far as ``cap_checks`` (None: a
    state stored before it was counted, read as all of them, as before)."""
    past = 0 if cap is None else max(0, cycle - answer_checks - cap)
    if cap_checks is not None:
        past = min(past, cap_checks)
    return answer_checks + past


def _judged_edits(k: int) -> str:
    """The words a stop at the cycle cap adds for ``k`` such cycles (packet48: "stopped after
    3 cycles: the cycle budget of 2 is used up" read as if the cap were broken)."""
    if k <= 0:
        return ""
    what = "a person's edit" if k == 1 else "people's edits"
    return f" ({k} of them judged {what}, with no actor call: not counted)"


CAUSE_LIMIT = 300  # a stop cause is a sentence for a list row, not a report


def _at_default(contract: Contract, given: bool | None) -> bool:
    """The cycle cap was the default ceiling: as the caller read it from the run's task, else
    from the contract alone (with a per-task cap, only the task tells: not said)."""
    b = contract.budget
    if given is not None:
        return given
    return b.max_cycles_default and b.max_cycles_key is None


# A stop at the default cycle ceiling (``Budget.max_cycles_default``) says it was not the
# contract's own, and what chooses one.
_CHOOSE = (
    ": the contract's only other exits are spend budgets (set budget.max_cycles, max_seconds "
    "or a no_progress rule to choose the end)"
)


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def _usd(v: Any) -> str:
    """A budget in dollars: cents when it is a whole number of them, else its own digits (a
    $0.004 budget read "$0.00", beside the $0.0030 that stopped the run)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "-"
    if abs(v * 100 - round(v * 100)) < 1e-9:
        return f"{v:.2f}"
    # fixed point, not ``g``: $2500.125 read "$2500.12" and $1,000,000.001 "$1e+06"
    return f"{v:.6f}".rstrip("0") if abs(v) >= 1e-6 else f"{v:.3g}"


def _secs(v: Any) -> str:
    """Seconds with the digits that tell a short run from none ("ran 0.0 s of the 0.05 s")."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "-"
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def _beyond(spent: Any, limit: float | int | None, *, whole: bool = False) -> str | None:
    """How a budget stands once it stopped a run: ``"crossed"`` (a call in flight went past
    it), ``"used up"`` (reached), or ``None`` (the next cycle's projection would cross it);
    judged as ``budget_stop`` judges it (``whole``: tokens, compared exactly)."""
    if limit is None or not isinstance(spent, (int, float)) or isinstance(spent, bool):
        return None
    if crosses(spent, limit, whole=whole):
        return "crossed"
    return None if crosses(limit, spent, whole=whole) else "used up"


def clip(text: str) -> str:
    """``text`` within ``CAUSE_LIMIT``: its end cut, unless it ends with what to do about an
    effect in doubt (``SETTLE_TAIL``: the command that settles it, or who settled it): then the
    words before that are cut and that end is kept whole (polish55: a long failure message
    pushed the settle command out of every list, page and webhook that shows the cause)."""
    text = " ".join(text.split())
    if len(text) <= CAUSE_LIMIT:
        return text
    at = text.rfind(SETTLE_TAIL)
    if at < 0 and (by := text.rfind(SETTLED_TAIL)) >= 0:
        at = text.rfind("; ", 0, by)
    room = CAUSE_LIMIT - (len(text) - at) - 1
    if at > 0 and room >= CAUSE_LIMIT // 4:
        return text[:room].rstrip() + "…" + text[at:]
    return text[: CAUSE_LIMIT - 1] + "…"


def stop_cause(
    reason: str | None,
    contract: Contract,
    *,
    cycle: int,
    best_score: float | None = None,
    best_cycle: int | None = None,
    spent: Mapping[str, Any] | None = None,
    max_cycles: int | None = None,
    cause: str | None = None,
    error: Mapping[str, Any] | None = None,
    evidence: Mapping[str, Any] | None = None,
    held_out_passed: bool | None = None,
    held_out_mark: int | None = None,
    checked: int = 0,
    at_default: bool | None = None,
) -> str:
    """Why a run ended, in one short sentence with its numbers: who denied what and why, which
    call failed after how many attempts, which rule stopped it and at what values.
    ``checked``: of ``cycle`` cycles, how many the cycle cap did not count (``edit_checks``);
    ``at_default``: as ``explain`` takes it; ``held_out_mark``: the run's
    ``held_out_self_reported`` (a held-out failure it marks is not said to be one)."""
    if not reason:
        return ""
    b, sp = contract.budget, spent or {}
    best = f"best score {_num(best_score)}" + (
        f" at cycle {best_cycle}" if best_cycle is not None and best_score is not None else ""
    )
    # "after N cycles": a run escalated or cancelled mid-cycle has not concluded that cycle; one
    # that concluded none read "escalated after 0 cycles: ... (cycle 1: ...)" (newuser46).
    at = (
        "before its first cycle concluded"
        if cycle == 0
        else f"after {cycle} cycle" + ("" if cycle == 1 else "s")
    )
    if reason == "success":
        # Counted from the contract alone, so a stored run reads the same sentence later.
        req = contract.success.required
        what = f"all {len(req)} required checks passed" if req else "every required check passed"
        text = f"accepted at cycle {cycle}: {what}, score {_num(best_score)}"
        if held_out_passed is False and independent(held_out_passed, held_out_mark) is None:
            text += "; held-out checks not judged (failed only on tests judged_only refused)"
        elif held_out_passed is False:
            text += "; held-out checks failed"
        return clip(text)
    if reason == "no_progress":
        n = contract.no_progress.cycles if contract.no_progress else 0
        return clip(f"stopped {at} by the no-progress rule: no improvement in {n} cycles; {best}")
    if reason == "budget_cycles" and _at_default(contract, at_default):
        return clip(
            f"stopped {at}{_judged_edits(checked)}: the default cycle ceiling of "
            f"{b.max_cycles:,} is used up{_CHOOSE}; {best}"
        )
    if reason == "budget_cycles":
        cap = max_cycles if max_cycles is not None else b.max_cycles
        return clip(
            f"stopped {at}{_judged_edits(checked)}: the cycle budget of {cap} is used up; {best}"
        )
    if reason in ("budget_cost", "budget_tokens"):
        # The budget as it stands: crossed by a call in flight (``cause`` says which), reached,
        # or still short of it by less than the next cycle is projected to cost.
        tokens = reason == "budget_tokens"
        limit = b.max_tokens if tokens else b.max_cost_usd
        used = sp.get("tokens") if tokens else sp.get("cost_usd")
        stand = _beyond(used, limit, whole=tokens)
        how = "the next cycle would cross it"
        if stand == "used up":
            how = "it is used up"
        elif stand == "crossed":
            # the engine's cause names the call: "crossed during verifier v"
            how = cause if cause and cause.startswith("crossed") else "a call crossed it"
        if tokens:
            return clip(
                f"stopped {at}: used {used if used is not None else '-'} of {limit} "
                f"tokens, {how}; {best}"
            )
        return clip(
            f"stopped {at}: spent {usd(used) if isinstance(used, (int, float)) else '$-'} of the ${_usd(limit)} cost budget, "
            f"{how}; {best}"
        )
    if reason == "budget_time":
        return clip(
            f"stopped {at}: ran {_secs(sp.get('seconds'))} s of the {_secs(b.max_seconds)} s "
            f"time budget" + (f" ({cause})" if cause else "") + f"; {best}"
        )
    if reason == "marginal_return":
        return clip(f"stopped {at}: another cycle was not worth its expected cost; {best}")
    if reason == "escalated":
        appr = (evidence or {}).get("approval")
        if isinstance(appr, Mapping) and appr.get("status") not in (None, "approved", "answered"):
            who = appr.get("decided_by") or "a person"
            note = f": {appr['note']}" if appr.get("note") else ""
            return clip(f"escalated {at}: {who} {appr.get('status')} {appr.get('what')}{note}")
        if cause:
            return clip(f"escalated {at}: {cause}")
        if error:
            return clip(
                f"escalated {at}: {error.get('where', 'user code')} raised "
                f"{error.get('type')}: {error.get('message')}"
            )
        return clip(f"escalated to a person {at}")
    if reason == "cancelled":
        return clip(f"cancelled {at}" + (f": {cause}" if cause else ""))
    if reason == "error":
        if error:
            return clip(
                f"failed {at}: loopwright raised {error.get('type')}: {error.get('message')}"
            )
        return clip(f"failed {at}: loopwright itself raised an error")
    return clip(f"{reason} {at}" + (f": {cause}" if cause else ""))


def waiting_compensations(state: TaskState, run_id: str) -> str | None:
    """What a cancelled run's packet says of the compensations its cancel offered (a
    refund), which run only when someone resumes the run: no worker claims an ended run, so
    where no one did, ``show`` said nothing of them and the payment stood unseen (stop 50).
    None when none waits."""
    pending = state.pending or {}
    if pending.get("stage") != "compensations":
        return None
    offers = [o for o in pending.get("offers") or () if o.get("action") in ("allow", "require")]
    if not offers:
        return None
    named = ", ".join(f"{o.get('effect')} ({o.get('key')})" for o in offers[:5])
    more = f" and {len(offers) - 5} more" if len(offers) > 5 else ""
    asks = sum(o.get("action") == "require" for o in offers)
    after = (
        f", once a person approves the {asks} that ask one (`loopwright approvals`)" if asks else ""
    )
    return (
        f"Its compensations are not run yet: {named}{more}. They run when the run is "
        f"resumed (`loopwright resume {run_id[:12]}`){after}; until then what they undo stands."
    )


def edit_part(state: TaskState) -> str:
    """The part an escalation's edit command names (polish55: it printed ``PART``): the first
    open finding's, else the first part still open, else the first part; quoted for a shell
    where it must be."""
    refs = [f"{f.artifact}/{f.part}" for f in state.findings if f.artifact and f.part]
    refs += sorted(state.open_refs())
    refs += [ref for ref, _ in state.iter_parts()]
    return shlex.quote(refs[0]) if refs else "ARTIFACT/PART"


def settle_first(run_id: str, key: str) -> str:
    """How an escalated run's advice begins while its own effect ``key`` is in doubt (the
    settling replaces it with who settled it: ``_settle.settled_run_packet``). Each command
    runs as printed (polish55: `--result JSON`, typed as printed, was refused as not JSON)."""
    return (
        "A person must check the outside world and settle the effect in doubt first: "
        f"`{settle_command(run_id, key)}` if it happened (`--result` and what "
        "it returned, as JSON, for a redo to reuse), "
        f"`{settle_command(run_id, key, done=False)}` if not; then "
    )


# How a cause's last words that say what to do begin (kept whole by ``clip``): an effect in
# doubt's ``_settle.settle_hint``, and what its settling puts in their place.
SETTLE_TAIL = "; once checked, settle it: "
SETTLED_TAIL = " was settled "


def in_python(advice: str, run: str) -> str:
    """``advice`` for a run started from Python, whose every resume is ``Runtime.resume``:
    `loopwright resume` refuses it, having no spec to load its loop from ("started from
    Python, not from a spec file"), and the packet named it all the same (newuser52). The
    other commands it names (`show`, `rollback`, `edit`, `fork`) read and write the store and
    work on such a run as they are."""
    return advice.replace(
        f"`loopwright resume {run}`", f"`Runtime.resume({run!r}, loop)` in Python"
    ).replace(
        "then `loopwright resume` the new run",
        "then `Runtime.resume(NEW_RUN, loop)` in Python",
    )


def build_packet(
    reason: str,
    state: TaskState,
    contract: Contract,
    *,
    run_id: str,
    cause: str | None = None,
    error: dict[str, Any] | None = None,
    evidence: dict[str, Any] | None = None,
    held_out: dict[str, Any] | None = None,
    unverified: dict[str, Any] | None = None,
    from_python: bool = False,
) -> dict[str, Any]:
    """The escalation packet for a run that ends without being accepted. ``from_python``: the
    run's loop was built in Python, not loaded from a spec (its advice resumes it there)."""
    esc = contract.escalation
    # The contract's own action comes first; the reason-specific advice follows it.
    at_default = at_default_ceiling(contract, state.task)
    advised = "budget_cycles_default" if reason == "budget_cycles" and at_default else reason
    part = edit_part(state)
    builtin = _ADVICE.get(advised, "Review the run: `loopwright show {run}`.").format(
        run=run_id[:12], cycle=state.cycle, best=state.best_cycle or state.cycle, part=part
    )
    if reason == "no_progress" and not state.findings:
        # no finding is open: "review the open findings" pointed at nothing
        builtin = (
            "The actor stopped improving with no finding open: the checks' scores held it "
            "back. Review the best candidate and the verdicts' evidence "
            f"(`loopwright show {run_id[:12]}`): give the parts your own version, "
            + _EDIT.format(run=run_id[:12], part=part)
            + "; or strengthen the actor's tools and fork the run with that spec "
            f"(`loopwright fork {run_id[:12]} --at-cycle {state.cycle} --spec SPEC`; {SPEC_WORDS})."
        )
    if reason == "escalated":
        # Not "start a new run": `loopwright run` with the task key, and `resume`, return the
        # ended run as it is; going on needs it reopened at its last checkpoint.
        builtin = (
            "A person must decide: read the reason and evidence, then fix the input, answer "
            "the question or resolve the conflict; to go on with this run, reopen it at its "
            f"last cycle and resume it: `loopwright rollback {run_id[:12]} --to-cycle "
            f"{state.cycle}`, then `loopwright resume {run_id[:12]}`."
        )
        settle = (evidence or {}).get("settle")
        if isinstance(settle, str) and settle:
            # The run's own effect in doubt: a rollback's redo of it is refused until a person
            # says what happened (the stop cause says so; the advice skipped it: polish54).
            builtin = (
                settle_first(run_id, settle) + "reopen the run before that cycle and resume "
                f"it: `loopwright rollback {run_id[:12]} --to-cycle {state.cycle}`, then "
                f"`loopwright resume {run_id[:12]}`."
            )
    waiting = waiting_compensations(state, run_id) if reason == "cancelled" else None
    if waiting and from_python:  # (as the advice holds it: a resume takes it out again)
        waiting = in_python(waiting, run_id[:12])
    if waiting:
        builtin = f"{waiting} {builtin}"
    advice = f"{esc.recommended_action} {builtin}" if esc.recommended_action else builtin
    cap = cycle_cap(contract, state)
    checked = (
        edit_checks(state.cycle, cap, state.answer_checks, state.cap_checks)
        if reason == "budget_cycles"
        else 0
    )
    if error is not None and reason == "escalated":
        # An ended run is returned as it is by `resume` and by a rerun of its task key: going
        # on needs it reopened at its last checkpoint.
        advice = (
            f"Fix the {error.get('where', 'user code')} error ({error.get('type')}: "
            f"{error.get('message')}), then reopen the run at its last cycle and resume it: "
            f"`loopwright rollback {run_id[:12]} --to-cycle {state.cycle}`, then "
            f"`loopwright resume {run_id[:12]}`."
        )
    if from_python:
        advice = in_python(advice, run_id[:12])
    return {
        "stop_reason": reason,
        "summary": explain(
            reason,
            contract,
            max_cycles=cap,
            spent=state.spent.to_dict(),
            cycles=state.cycle,
            checked=checked,
            at_default=at_default,
        )
        + (f" — {cause}" if cause else ""),
        "cause": cause,
        "owner": esc.owner,
        "route": esc.route,
        "recommended_action": advice,
        "best_candidate": {
            "cycle": state.best_cycle,
            "score": state.best_score,
            "artifacts": state.best_values(),
        },
        "accepted": state.accepted_values(),
        "unresolved_findings": [f.to_dict() for f in state.findings],
        "plan": {
            "done": state.completed_steps,
            "open": [s.id for s in state.plan if s.status != "done"],
        },
        "evidence": evidence or {},
        # what of the advice a resume that runs them takes out again (_driving._drive)
        **({"compensations_waiting": waiting} if waiting else {}),
        "held_out": held_out or {},
        "unverified_candidate": unverified,
        "error": error,
        "spent": state.spent.to_dict(),
        "cycles": state.cycle,
        "trace": {"run_id": run_id, "show": f"loopwright show {run_id}"},
        "stop_cause": stop_cause(
            reason,
            contract,
            cycle=state.cycle,
            best_score=state.best_score,
            best_cycle=state.best_cycle,
            spent=state.spent.to_dict(),
            max_cycles=cap,
            cause=cause,
            error=error,
            evidence=evidence,
            checked=checked,
            at_default=at_default,
        ),
    }
