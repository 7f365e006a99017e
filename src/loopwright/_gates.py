"""What a cycle's proposal needs before it is applied, asked by ``Cycle._evaluate``: accepted
work is protected (invariant 6: the proposal refused, or a person asked), each effect is put to
the approval policy, and the contract's risk rules (their checks called with copies of their
own); what a person approved already for the cycle is not asked again (``_need_key``).

``Gates`` is the base of ``_cycle.Cycle``: each method here is called only when there is
something to ask (accepted parts touched, effects, risk rules), so a plain cycle calls none.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import _json
from ._audit import audit_once
from ._calls import CallTimeout, call_user, hook_timeout
from ._contract_rules import RiskRule
from ._effect_keys import args_digest, key_of
from ._effects import Effect, EffectCall
from ._errors import ConfigError
from ._exec import Execution as _Exec
from ._exec import OutOfTime
from ._host import RuntimeHost
from ._loop import Loop
from ._packet import EDIT_ONE, SPEC_WORDS
from ._person_edits import person_edit
from ._proposal import Proposal, Verdict
from ._risk_steps import RiskCheckFailed, risk_steps
from ._state import Finding, TaskState, VersionLoader, split_ref
from .store import NewEvent, Store

__all__ = ["Gates"]


def _whose(s: TaskState, protected: list[str]) -> str:
    """The accepted versions an overwrite replaces, each with who wrote it: "rita's accepted
    doc/a (v2, a person's edit)", or "accepted doc/b (v3)" for one the loop's checks accepted
    (effects53b: the approver was not told the version about to go was a person's)."""
    named = []
    for ref in protected:
        edit = person_edit(s, ref)
        if edit is not None:
            named.append(
                f"{edit.get('by')}'s accepted {ref} (v{edit.get('version')}, a person's edit)"
            )
        else:
            part = s.part(ref)
            named.append(f"accepted {ref}" + (f" (v{part.count})" if part is not None else ""))
    return ", ".join(named)


class Gates(RuntimeHost):
    """The approval and risk checks of a cycle (the base of ``Cycle``)."""

    def _protected(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        protected: list[str],
        needs: list[dict[str, Any]],
        t0: float,
    ) -> bool | None:
        """Accepted work is protected (invariant 6): without a policy rule for
        overwrite_accepted the proposal is refused and the actor told why. ``None``: the
        proposal goes on (allowed, or a person's approval added to ``needs``); else what
        ``_cycle`` returns (the cycle concluded as refused, or the run ended)."""
        ow = ex.loop.approvals.match("overwrite_accepted", "edit", {"parts": protected})
        if ow is not None:
            if ow.action == "deny":
                return self._abort(
                    ex,
                    t0,
                    "escalated",
                    cause=f"overwriting accepted {', '.join(protected)} is denied: {ow.why}",
                    unverified=proposal.to_dict(),
                )
            if ow.action == "require":
                needs.append(
                    {
                        "kind": "overwrite_accepted",
                        "rule": ow.rule,
                        "why": ow.why,
                        "what": f"overwrite {_whose(ex.state, protected)}",
                        "expires_after_s": ow.expires_after_s,
                        # who may decide: the rule's role, approvers and separation (left out,
                        # one person without the role approved a four-eyes overwrite)
                        "who": dict(ow.who) if ow.who else None,
                    }
                )
            else:
                self._overwrite_allowed(ex, n, protected, str(ow.rule))
            return None
        # no rule for it: refused, the actor told why (a person's edit: the run escalates)
        s = ex.state
        edits = [(ref, e) for ref in protected if (e := person_edit(s, ref)) is not None]
        if edits:
            # The loop would change what a person wrote: that is the person's call, not a
            # cycle to retry until the budget runs out.
            who = "; ".join(
                f"{e.get('by')}'s version of {ref} (v{e.get('version')})" for ref, e in edits
            )
            ex.events.append(NewEvent(n, "proposal_refused", {"parts": protected}))
            return self._abort(
                ex,
                t0,
                "escalated",
                cause=f"the loop proposes to change {who}"
                + edit_kept(
                    ex.run_id,
                    edits[0][0],
                    "or let the loop overwrite it: an `overwrite_accepted` rule in the loop's "
                    "approval policy, in a fork run with that spec (`loopwright fork "
                    f"{ex.run_id[:12]} --at-cycle {s.cycle} --spec SPEC`; {SPEC_WORDS})",
                    edits[0][1],
                ),
                unverified=proposal.to_dict(),
            )
        s.findings = [f for f in s.findings if f.dimension != "protected"] + [
            Finding(
                f"{ref} is accepted and may not be changed",
                *split_ref(ref),
                dimension="protected",
                verifier="loopwright",
            )
            for ref in protected
        ]
        ex.events.append(NewEvent(n, "proposal_refused", {"parts": protected}))
        return self._conclude(
            ex, n, proposal, digest, {}, {}, t0, decision="refused", duplicate=True
        )

    def _overwrite_allowed(self, ex: _Exec, n: int, protected: list[str], rule: str) -> None:
        """Say whose accepted versions an ``allow`` rule lets the loop write over, unasked: an
        ``overwrite_allowed`` event with each part's version and who accepted it (a person
        who edited it, else the loop's checks), and an audit record when it is a person's
        work (docs/permissions.md). The cycle may still reject the proposal: this records the
        policy's decision, not the write."""
        s = ex.state
        parts = []
        for ref in protected:
            edit = person_edit(s, ref)
            part = s.part(ref)
            parts.append(
                {
                    "part": ref,
                    "version": part.count if part is not None else None,
                    "accepted_by": str(edit.get("by")) if edit else None,
                }
            )
        ex.events.append(NewEvent(n, "overwrite_allowed", {"rule": rule, "parts": parts}))
        people = [p for p in parts if p["accepted_by"]]
        if people:
            # Written before the cycle commits: a cycle redone after a crash decides the same
            # again, recorded once (one record per cycle, part, version and person).
            audit_once(
                self.store,
                f"policy:{rule}",
                "allow overwrite",
                f"run {ex.run_id}",
                origin="engine",
                key={"cycle": n, "parts": people},
            )

    def _effect_needs(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        calls: list[EffectCall],
        given: set[tuple[str, ...]],
        needs: list[dict[str, Any]],
        t0: float,
        reused: list[dict[str, Any]],
    ) -> bool:
        """Each of the effects to run put to the approval policy: a denied one ends the run
        (``True``); one a person must approve is added to ``needs``, unless approved already
        (``given``) or by the loop's own record (``_earned``). One this run did already under
        its key with the same arguments (a rollback's redo) is added to ``reused`` instead:
        nothing runs, so no person is asked; it runs only as that reuse, as one a person
        approved as a reuse does (``approved_as_reuses``: undone by then, it is asked again)."""
        loop = ex.loop
        for c in calls:
            eff = effect_for(loop, c)
            d = loop.approvals.decide(eff.kind, eff.name, c.args)
            if d.action == "deny":
                return self._abort(
                    ex,
                    t0,
                    "escalated",
                    cause=f"{eff.describe(c.args)} is denied by the approval policy: {d.why}",
                    evidence={"effect": c.to_dict(), "rule": d.rule},
                    unverified=proposal.to_dict(),
                )
            if d.action == "require":
                who = dict(d.who or {})
                already, reuse = done_before(self.store, ex.run_id, n, eff, c)
                need = {
                    "kind": "effect",
                    "effect": eff.name,
                    # the call as its digest sees it: the same after a JSON round trip
                    "call": call_digest(c),
                    "effect_kind": eff.kind,
                    "amount": c.args.get(str(who.get("field") or "amount")),
                    "rule": d.rule,
                    "why": d.why,
                    "what": eff.describe(c.args) + already,
                    "expires_after_s": d.expires_after_s,
                    "who": who or None,
                }
                if already:  # the person is told approving runs nothing again
                    need["done_already"] = True
                    # what a listing checks the claim by, to say it was undone since
                    need["reuse"] = reuse
                if reuse is not None and reuse["run"] == ex.run_id and reuse["same_args"]:
                    # an approval is bound to the action, and this one pays nothing: asking
                    # would only hold the run (a person's earlier approval, or the policy
                    # then, let this run do it)
                    why = (
                        f"{eff.describe(c.args)} was done already by this run under its key with "
                        "the same arguments: its result is reused, nothing runs"
                    )
                    ex.events.append(
                        NewEvent(
                            n,
                            "approval_not_needed",
                            {"effect": eff.name, "rule": d.rule, "why": why},
                        )
                    )
                    reused.append(need)
                    continue
                if given and already_approved(need, given):
                    if not reuse_gone(need, given):
                        continue  # a person approved it already (judged again after an edit)
                    need["why"] = f"{d.why}; {asked_again(self.store, ex.run_id, n, eff, c)}"
                earned, standing = self._earned(ex, n, eff, c, d)
                if earned:
                    continue  # approved by the loop's own record (docs/permissions.md)
                if standing:
                    need["why"] = f"{d.why}; {standing}"
                needs.append(need)
        return False

    async def _risk(
        self,
        ex: _Exec,
        candidate: TaskState,
        proposal: Proposal,
        visible: dict[str, Verdict],
        loader: VersionLoader,
    ) -> tuple[RiskRule, str] | None:
        """The first risk rule this proposal triggers, with the reason in words: the rules'
        patterns read (``risk_steps``), each rule's own check called as the reflector
        is (in a thread when sync, under ``hook_timeout``: the actor's timeout or the time
        budget left), so a check that blocks cannot hold the run. Raises ``RiskCheckFailed``
        (the check raised or timed out: the run escalates) or ``OutOfTime`` (the time budget
        ran out before or during the check: a ``budget_time`` stop). A check abandoned after
        its timeout may still return, in its thread: nothing waits for what it says. Each
        check is shown copies of its own (``_risk_copies``, made only for a check): what one
        changes in place, neither the cycle nor the next rule's check judges."""
        loop = ex.loop
        for rule, why in risk_steps(ex.contract.risk, candidate, proposal, visible, loop.checks):
            if why is None:
                state, mine, verdicts = _risk_copies(candidate, loader, proposal, visible)
                check = rule.check
                assert callable(check)  # risk_steps asks only a rule with a check to call
                left = None if ex.deadline is None else ex.deadline - time.time()
                who = f"the check of risk rule {rule.name!r}"
                if left is not None and left <= 0:
                    raise OutOfTime(f"the time budget ran out before {who} could be called")
                limit = hook_timeout(loop.actor_timeout_s, left)
                try:
                    # copies of its own: a check left running changes nothing of the cycle's
                    got, _ = await call_user(
                        check,
                        state,
                        mine,
                        verdicts,
                        timeout=limit,
                        threaded=ex.threaded,
                    )
                except CallTimeout as exc:
                    if left is not None and left <= limit:  # the budget's end cut it off
                        raise OutOfTime(f"the time budget ran out during {who}") from None
                    raise RiskCheckFailed(rule.name, exc) from None
                except Exception as exc:  # user code: the run escalates, naming the rule
                    raise RiskCheckFailed(rule.name, exc) from exc
                if not got:
                    continue
                # a predicate's True says "pause", not why: the rule's reason is the why
                why = (
                    (rule.reason or f"{who} says the proposal needs a person")
                    if got is True
                    else str(got)
                )
            return rule, why
        return None


def edit_kept(run_id: str, part: str, last: str, edit: dict[str, Any] | None = None) -> str:
    """Why a run whose person's version the loop may not change escalated, with the commands
    that go on from it (advice47: "approve an overwrite" and "accept the run as it is" named
    none); ``part``: the person's part, named in the edit command (polish55: ``PART --value
    V``); ``last``: the third choice, in words; ``edit``: the person's edit note, whose cycle
    (the one it was made after: its checkpoint holds the version before it) the rollback
    names (hints55: ``--to-cycle N``, typed as printed, was refused). An edit noted before
    its cycle was: the cycle said in words."""
    run = run_id[:12]
    cycle = (edit or {}).get("cycle")
    back = (
        f"`loopwright rollback {run} --to-cycle {cycle}`"
        if isinstance(cycle, int) and not isinstance(cycle, bool)
        else f"`loopwright rollback {run}` with `--to-cycle` and the cycle the edit followed"
    )
    return (
        " — a person's edit is not overwritten by the loop: edit the part again "
        f"({EDIT_ONE.format(run=run, part=shlex.quote(part))}, then `loopwright resume {run}`), "
        f"roll back to the version before the edit ({back}, then resume), " + last
    )


def call_digest(c: EffectCall) -> str:
    """An effect call as a request's need names it (its canonical form's digest)."""
    return hashlib.sha256(c.canonical().encode()).hexdigest()[:16]


def done_already(store: Store, run_id: str, n: int, eff: Effect, c: EffectCall) -> str:
    """What a person asked to approve an action already done under its business key (a
    fork redoing its origin's cycle, another run's invoice) is told: approving runs
    nothing again (newuser46: the card read as a new payment). ``""``: nothing done."""
    return done_before(store, run_id, n, eff, c)[0]


def done_before(
    store: Store, run_id: str, n: int, eff: Effect, c: EffectCall
) -> tuple[str, dict[str, Any] | None]:
    """``done_already``'s words, with what a listing of the request checks them by (the
    claim's effect kind, key and run, and the words: ``_reuse_now``); ``("", None)``:
    nothing done."""
    try:
        key, business = key_of(eff, run_id, n, c)
    except ConfigError:  # refused where the effect runs, with its own message
        return "", None
    claim = store.effect_claim(eff.kind, key) if business else None
    if claim is None or claim.status != "done":
        return "", None
    by = "this run" if claim.run_id == run_id else f"run {claim.run_id[:12]}"
    from ._effect_journal import jsonable  # (a done claim: the effects' journal, not at import)

    same = claim.args_hash is None or claim.args_hash == args_digest(jsonable(dict(c.args)))
    if not same:
        # approved, it is neither reused nor run: in doubt, for a person (``held``)
        said = (
            f" (already done by {by} under its key with other arguments: approved, it is "
            "not run again and waits for a person to check which is right)"
        )
    else:
        said = f" (already done by {by} under its key: approved, its result is reused)"
    return said, {
        "kind": eff.kind,
        "key": key,
        "run": claim.run_id,
        "said": said,
        "same_args": same,
    }


# Why a request is made again for an action approved as done already, undone since
# (newuser47: the approval paid again what the person was told would be reused).
ASKED_AGAIN = (
    "asked again: it was approved as already done, and was undone since (refunded or "
    "compensated), so approving now runs it again"
)
# ...when its undoing started and has not ended (a refund under way, or killed with no hook to
# ask whether it happened): approving then runs nothing, the run stops for a person (kill48:
# the card said "approving now runs it again").
ASKED_AGAIN_UNDOING = (
    "asked again: it was approved as already done, and its undoing (a refund or compensation) "
    "started since and is not known to have ended, so approving runs it again only once the "
    "undoing has ended; until then the run stops for a person to check whether it was undone"
)


# ...when a third run has taken the action again since, and its attempt has not ended done
# (under way, or in doubt): approving runs nothing here, the call reuses that run's result if
# it is done with the same arguments by then, else stops for a person (``held``). It said
# "approving now runs it again" (review48c).
ASKED_AGAIN_HELD = (
    "asked again: it was approved as already done, and was undone since; run {run} has "
    "taken it again under its key since (its attempt is {status}), so approving does not run "
    "it here: if that run has done it by then with the same arguments its result is reused, "
    "otherwise the run stops for a person to check whether it was done"
)


def asked_again(store: Store, run_id: str, n: int, eff: Effect, c: EffectCall) -> str:
    """Why an action approved as done already, done no more, is asked again, with what
    approving does now: by its claim now (being undone, undone, or held by another run)."""
    try:
        key, business = key_of(eff, run_id, n, c)
    except ConfigError:  # refused where the effect runs, with its own message
        return ASKED_AGAIN
    claim = store.effect_claim(eff.kind, key) if business else None
    if claim is not None and claim.status == "undoing":
        return ASKED_AGAIN_UNDOING
    if claim is not None and claim.run_id != run_id and claim.status in ("claimed", "in_doubt"):
        status = "in doubt" if claim.status == "in_doubt" else "under way"
        return ASKED_AGAIN_HELD.format(run=claim.run_id[:12], status=status)
    return ASKED_AGAIN


def given_keys(approved: Sequence[Mapping[str, Any]]) -> set[tuple[str, ...]]:
    """What people approved for a cycle, as ``already_approved`` and ``reuse_gone`` look it up."""
    keys = {_need_key(x) for x in approved if not x.get("done_already")}  # (approved to run)
    told = {_need_key(x) for x in approved if x.get("done_already")}
    return keys | told | {(*k, "done_already") for k in told - keys}


def approved_as_reuses(approved: Sequence[Mapping[str, Any]]) -> list[str]:
    """The calls (``call_digest``) people approved only as actions done already: their card
    said approving runs nothing again, and no approval covers running them. Each such effect
    runs only as that reuse (``perform_effect``'s ``reuse_only``): undone by the time it
    runs, it is not run (review48a)."""
    run = {str(x.get("call")) for x in approved if not x.get("done_already")}
    told = {str(x["call"]) for x in approved if x.get("done_already") and x.get("call")}
    return sorted(told - run)


def reuse_gone(need: Mapping[str, Any], given: set[tuple[str, ...]]) -> bool:
    """Whether ``need`` was approved as an action done already (nothing to run) that is
    done no more: the approval does not cover running it. (Whether that execution is still
    another run's, done, is the store's claim: ``_effect_keys.reuse_standing``.)"""
    return not need.get("done_already") and (*_need_key(need), "done_already") in given


def _need_key(need: Mapping[str, Any]) -> tuple[str, ...]:
    """What a request asked a person about: the same need judged again is the same key (an
    effect's by its call's canonical form: its description is of the arguments as given, and
    a proposal read back from the store has lists for tuples, strings for integer keys)."""
    base = tuple(str(need.get(k)) for k in ("kind", "rule", "effect"))
    call = need.get("call")
    return (*base, "call", str(call)) if call else (*base, "what", str(need.get("what")))


def already_approved(need: Mapping[str, Any], given: set[tuple[str, ...]]) -> bool:
    """Whether a person approved ``need`` already: by its call, or by its description when
    the approval was asked before needs carried their call (a run parked across an upgrade)."""
    if _need_key(need) in given:
        return True
    return bool(need.get("call")) and _need_key({**need, "call": None}) in given


def effect_for(loop: Loop, call: EffectCall) -> Effect:
    eff = loop.effect(call.name)
    if eff is None:  # checked when the proposal arrived; a resumed run checks it again
        raise ConfigError(f"this loop declares no effect {call.name!r}", field="effects")
    return eff


def _risk_copies(
    candidate: TaskState, loader: VersionLoader, proposal: Proposal, visible: Mapping[str, Verdict]
) -> tuple[TaskState, Proposal, dict[str, Verdict]]:
    """A risk rule's check's arguments: its own copies of the candidate, the proposal and the
    verdicts."""
    return candidate.detached(loader), proposal.owned(), _verdict_copies(visible)


def _verdict_copies(verdicts: Mapping[str, Verdict]) -> dict[str, Verdict]:
    """A risk rule's check's own copy of the verdicts, as the record will hold them."""
    raw = _json.round_trip({k: v.to_dict() for k, v in verdicts.items()})
    return {k: Verdict.from_dict(v) for k, v in raw.items()}
