"""One cycle up to its verdicts: context (with recalled feedback memory) → actor → verifiers
→ the approval and risk checks.

``Cycle._cycle`` is where a cycle starts; it hands the proposal on to ``_apply`` / ``_conclude``
(``_conclude``: effects, decision; then ``_checkpoint``'s commit) or to ``_park``
(``_parking``: a person must decide). The candidate state the verifiers judge is built by
``_candidate_state``.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from . import _decide as rules
from ._actor_context import HELD_OUT_KEY, ActorContext
from ._call_billing import charge
from ._call_retry import call_with_retry
from ._candidate_state import candidate_of, verifier_copies
from ._effects import EffectCall
from ._errors import ConfigError
from ._exec import Execution as _Exec
from ._exec import (
    GaveUp,
    OutOfTime,
    OverBudget,
    budget_before,
    calls_usage,
    error_info,
    priced_dict,
)
from ._frozen import twin_of
from ._gates import already_approved, approved_as_reuses, effect_for, given_keys, reuse_gone
from ._plan import check_new_steps
from ._proposal import Proposal, Verdict
from ._question import Question
from ._redact import redact
from ._risk_steps import RiskCheckFailed
from ._same_value import same_value
from ._state import Finding, Version
from ._usage import Usage
from ._verdict import not_judged_count
from ._verdict import self_reported_count as mine
from .store import NewEvent

__all__ = ["ASKED", "HELD_OUT_KEY", "Cycle"]

_VERIFIER = operator.attrgetter("verifier")

ASKED = "the actor asked for a person: "  # an escalating proposal's cause, before its reason

_NOTHING = Usage()  # a call that reported no usage (Usage is immutable: one serves all)


class Cycle(ActorContext):
    """The first half of a cycle: context, actor, verifiers, gates (mixed into ``Runtime``;
    the gates' checks in ``_gates.Gates``)."""

    # Sync user code runs in threads even for a run driving alone (set by ``Worker``): inline,
    # a call longer than the lease held the event loop, so no heartbeat renewed the lease and
    # another worker took the run over while it was being driven, redoing its cycle.
    calls_in_threads = False

    async def _cycle(self, ex: _Exec) -> bool:
        """Run one cycle; returns True when the run ended or parked."""
        s, loop, contract = ex.state, ex.loop, ex.contract
        n = s.cycle + 1
        t0 = time.perf_counter()
        ex.events.append(NewEvent(n, "cycle_started", {}))
        ex.calls = []
        ex.asked = set()
        ex.cycle_at, ex.cycle_from = n, s.spent
        if ex.retries:  # earlier cycles' failed attempts count no more: hold this cycle's only
            ex.retries = {k: e for k, e in ex.retries.items() if e.cycle >= n}
        ex.threaded = self._active > 1 or self.calls_in_threads
        left = rules.remaining(contract, s)
        # The time budget is a wall-clock deadline for this cycle's calls and their retries.
        ex.deadline = None if left.seconds is None else time.time() + left.seconds
        hidden = s.held_out_spent  # what held-out checks spent is not shown (invariant 3)
        shown = None if hidden.cost_usd or hidden.tokens else left
        memory = self._recall_now(ex)  # (None: read with other runs, awaited)
        if memory is None:
            memory = await self._recall(ex)
        ex.last_context = self._context(ex, n, memory, shown)
        ex.last_visible = {}
        if ex.phase is not None:  # (a phase hook is set by the crash tests only)
            ex.at("before_actor")
        try:
            proposal, secs = await call_with_retry(
                self.store,
                ex,
                scope="actor",
                cycle=n,
                policy=loop.retry,
                fn=loop.actor,
                args=(ex.last_context,),
                timeout=loop.actor_timeout_s,
                deadline=ex.deadline,
                # a retry is shown the state afresh, not what the failed attempt changed of it
                again=partial(self._fresh_context, ex, n, memory, shown),
            )
        except OutOfTime as exc:
            charge(ex, "actor", exc.billed)
            return self._abort(ex, t0, "budget_time", cause=str(exc))
        except OverBudget as over:
            charge(ex, "actor", over.billed)
            return self._abort(ex, t0, over.reason, cause=str(over))
        except GaveUp as gave:
            charge(ex, "actor", gave.billed)
            return self._abort(
                ex, t0, "escalated", cause=_gave_up("the actor", gave), error=gave.error
            )
        if ex.phase is not None:  # (a phase hook is set by the crash tests only)
            ex.at("after_actor")
        if not isinstance(proposal, Proposal):
            return self._abort(
                ex,
                t0,
                "escalated",
                cause="the actor returned the wrong type",
                error=_fault(
                    "actor",
                    "TypeError",
                    f"the actor returned {type(proposal).__name__}, expected Proposal",
                ),
            )
        try:
            # From here on the engine holds its own copy: what the actor keeps (and may still
            # change) never reaches the state, and what is judged is what is stored.
            owned = proposal.owned()
            if owned.new_steps:  # (steps the state cannot hold: refused here, named)
                check_new_steps(owned.new_steps)
        except ConfigError as exc:
            return self._abort(
                ex,
                t0,
                "escalated",
                cause=f"the actor returned a value that cannot be stored: {exc}",
                error=_fault("actor", "ConfigError", str(exc)),
            )
        # (a proposal that nothing can change is its own copy: a check's copy is itself too)
        # The process's own API keys are masked in the work too, before anything sees it
        # (``Proposal.unregistered``).
        settled, proposal = owned is proposal, owned.unregistered()
        usage = proposal.usage or _NOTHING
        digest = proposal.digest()
        ex.calls.append({"who": "actor", "cost_usd": usage.cost_usd, "tokens": usage.tokens})
        if usage.cost_usd or usage.tokens:
            s.spent = s.spent + Usage(usage.cost_usd, usage.tokens, 0.0)
        logged = {
            "kind": proposal.kind,
            "digest": digest,
            "note": proposal.note,
            "parts": _refs(proposal.changes()),
            "effects": [c.name for c in proposal.effects] if proposal.effects else [],
            "usage": usage.to_dict(),
            "seconds": secs,
        }
        if proposal.escalate:
            # why the actor asked for a person, in the log where its proposal is (masked at
            # the commit, as every event)
            logged["escalate"] = proposal.escalate
        ex.events.append(NewEvent(n, "proposal", logged))
        if proposal.escalate:
            return self._abort(
                ex,
                t0,
                "escalated",
                cause=f"{ASKED}{proposal.escalate}",
                unverified=proposal.to_dict() if proposal.changes() else None,
            )
        if proposal.question is not None:
            q = proposal.question
            # A question calls no verifier: it is asked unless no cycle could read its answer
            # (``_decide.unanswerable``); then the cycle concludes unanswered and the run stops
            # as the contract says. Before, the first verifier's cost decided it.
            used = calls_usage(ex.calls).add_seconds(time.perf_counter() - t0)
            why = rules.unanswerable(ex.contract, s, used)
            if why is not None:
                return self._conclude(
                    ex, n, proposal, digest, {}, {}, t0, decision="asked", unanswered=(why, q)
                )
            need = {
                "kind": "question",
                "rule": None,
                "why": proposal.note or "the actor needs an answer to continue",
                "what": q.text,
                "expires_after_s": None,
            }
            return self._park(ex, n, proposal, digest, {}, {}, [need], t0, ask=q)
        # No verifier starts on a budget crossed, or reached unless it is known to bill
        # nothing (``call_stop``): the proposal is kept, unverified, in the packet.
        # (``loop._checks``, here and below: the slot read, not a property called a cycle)
        crossed = budget_before(ex, f"verifier:{loop._checks[0].name}")
        if crossed:
            return self._abort(
                ex,
                t0,
                crossed[0],
                cause=f"{crossed[1]} during the actor call",
                unverified=proposal.to_dict(),
            )
        return await self._evaluate(ex, n, proposal, digest, t0, settled=settled)

    async def _evaluate(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        t0: float,
        *,
        approved: Sequence[Mapping[str, Any]] = (),
        settled: bool = False,
    ) -> bool:
        """Verify the proposal and decide what it needs: a person (``_park``), or nothing
        (``_apply``). ``approved``: what a person already approved for this cycle (it is judged
        again after an edit made while it waited): not asked again. ``settled``: the proposal
        is known to be its own copy (``Proposal.owned`` returned it)."""
        s, loop, contract = ex.state, ex.loop, ex.contract
        needs: list[dict[str, Any]] = []
        given = given_keys(approved) if approved else set()
        # Accepted work is protected (invariant 6): without a policy rule for
        # overwrite_accepted the proposal is refused and the actor told why.
        protected: list[str] = []
        changes = proposal.changes()  # (once: the candidate is built from them too)
        for e in changes:  # (a loop: no comprehension a cycle)
            p = s.part(e.ref)
            if p is not None and p.status == "accepted" and not same_value(p.value, e.value):
                protected.append(e.ref)
        if protected:
            stop = self._protected(ex, n, proposal, digest, protected, needs, t0)
            if stop is not None:
                return stop
        unknown = (
            sorted({c.name for c in proposal.effects if loop.effect(c.name) is None})
            if proposal.effects
            else None
        )
        if unknown:
            return self._abort(
                ex,
                t0,
                "escalated",
                cause=f"the actor asked for effects this loop does not declare: {unknown} "
                f"(declared: {[e.name for e in loop.effects]})",
                unverified=proposal.to_dict(),
            )
        leaking: dict[str, set[str]] = {}
        for c in proposal.effects:
            names = c.secret_args()
            if names:
                leaking.setdefault(c.name, set()).update(names)
        if leaking:
            # Invariant 9 before invariant 2: an effect's arguments are journaled and shown for
            # approval, so a call carrying a secret is not run; a person looks at why the actor
            # put one there (the packet's copy of the proposal is masked with the record).
            return self._abort(
                ex,
                t0,
                "escalated",
                cause="the actor asked for effects with a secret in their arguments: "
                + "; ".join(f"{k} ({', '.join(sorted(v))})" for k, v in sorted(leaking.items()))
                + " — an effect takes credentials from its own configuration, not from the "
                "proposal",
                unverified=proposal.to_dict(),
            )
        # An EffectCall built by hand is not checked as ``Effect.call`` checks it: one its
        # effect cannot be called with was parked, approved, then failed when run
        unfit = (
            [
                why
                for c in proposal.effects
                if (eff := loop.effect(c.name)) is not None and (why := eff.unfit(c.args))
            ]
            if proposal.effects
            else None
        )
        if unfit:
            return self._abort(
                ex,
                t0,
                "escalated",
                cause="the actor asked for effects that cannot run with their arguments: "
                + "; ".join(unfit),
                unverified=proposal.to_dict(),
            )
        # ...or its effect is: the same writes, dressed differently (docs/concepts.md)
        rejected = s.rejected
        effective: str | None = None  # what the proposal changes, once asked (``_conclude``)
        # A check-only cycle proposed nothing (its empty proposal is no actor's): never a
        # duplicate of an actor's empty proposal rejected before (``_edit_check``)
        duplicate = not ex.check_only and (
            digest in rejected
            or (
                (effective := rules.effective_digest(s, proposal, digest)) != digest
                and effective in rejected
            )
        )
        candidate = candidate_of(s, proposal, n, changes)
        visible: dict[str, Verdict] = {}
        held: dict[str, Verdict] = {}

        # Verifiers judge copies (each part copied as it is read), so a verifier that changes
        # what it judges changes neither the work committed nor the state's values. Held-out
        # checks judge a fuller copy, so nothing they do can reach the actor's next context
        # (invariant 3 holds even against a misbehaving verifier). Each check has its own: one
        # that changed a shared copy would have the next check judge values never stored.
        def loader(ref: str) -> list[Version]:
            return self.store.versions(ex.run_id, ref)

        for i, check in enumerate(loop._checks):
            if i:
                crossed = budget_before(ex, f"verifier:{check.name}")
                if crossed:
                    # What was judged so far goes with the unverified candidate: a visible
                    # check that passed is no acceptance without the checks not run.
                    rest = [c.name for c in loop.checks[i:]]
                    return self._abort(
                        ex,
                        t0,
                        crossed[0],
                        cause=f"{crossed[1]} during verifier {loop.checks[i - 1].name}; "
                        f"{rest} not run",
                        evidence=_so_far(visible),
                        unverified=proposal.to_dict(),
                    )
            light = not check.held_out
            scope = f"verifier:{check.name}"  # (its name in the calls, the journal, the budget)
            # its copies
            own = partial(verifier_copies, candidate, loader, proposal, light, settled)
            try:
                verdict, secs = await call_with_retry(
                    self.store,
                    ex,
                    scope=scope,
                    cycle=n,
                    policy=check.retry or loop.retry,
                    fn=check.fn,
                    args=own(),
                    timeout=check.timeout_s,
                    deadline=ex.deadline,
                    again=own,  # a retry's own
                )
            except OutOfTime as exc:
                charge(ex, scope, exc.billed)
                return self._abort(
                    ex, t0, "budget_time", cause=str(exc), unverified=proposal.to_dict()
                )
            except OverBudget as over:
                charge(ex, scope, over.billed)
                return self._abort(
                    ex, t0, over.reason, cause=str(over), unverified=proposal.to_dict()
                )
            except GaveUp as gave:
                charge(ex, scope, gave.billed)
                where = f"verifier {check.name}"
                # The proposal it judged is kept, unverified, beside the verdicts so far, as
                # at every other end inside a cycle (stop 52: a person fixing the check had
                # no copy of the work paid for)
                return self._abort(
                    ex,
                    t0,
                    "escalated",
                    cause=_gave_up(where, gave),
                    error=gave.error,
                    evidence=_so_far(visible) if visible else None,
                    unverified=proposal.to_dict(),
                )
            if not isinstance(verdict, Verdict):
                # (said as the actor's is: "failed" named no fault; its ``where`` is the
                # scope a raising verifier's error names)
                got = f"returned {type(verdict).__name__}, expected Verdict"
                return self._abort(
                    ex,
                    t0,
                    "escalated",
                    cause=f"verifier {check.name} returned the wrong type ({got})",
                    error=_fault(scope, "TypeError", f"verifier {check.name} {got}"),
                    evidence=_so_far(visible) if visible else None,
                    unverified=proposal.to_dict(),
                )
            # (some finding has no verifier named; a C loop, no call a finding)
            if verdict.findings and not all(map(_VERIFIER, verdict.findings)):
                tagged = []
                for f in verdict.findings:  # (a loop: no comprehension a cycle)
                    tagged.append(_tag(f, check.name))
                verdict = _tagged(verdict, tuple(tagged))
            # Invariant 9: a secret in a finding or its evidence (a test's output, an echoed
            # key) is masked before the state, the record or the actor's next context has it.
            raw = verdict.to_dict()
            masked = redact(raw)
            if masked is not raw:
                verdict = Verdict.from_dict(masked)
            (held if check.held_out else visible)[check.name] = verdict
            if check.held_out and len(held) == len(loop.held_out):
                # every held-out check judged this candidate: what an end reports from now on,
                # even one in this cycle (_finishing)
                ex.held_out_known, ex.held_out_last = True, all(v.passed for v in held.values())
                ex.held_out_verdicts = {k: v.to_dict() for k, v in held.items()}
            vu = verdict.usage or _NOTHING
            ex.calls.append({"who": scope, "cost_usd": vu.cost_usd, "tokens": vu.tokens})
            if vu.cost_usd or vu.tokens:
                priced = Usage(vu.cost_usd, vu.tokens, 0.0)
                s.spent = s.spent + priced
                if check.held_out:
                    s.held_out_spent = s.held_out_spent + priced
            ex.events.append(
                NewEvent(
                    n,
                    "verdict",
                    {
                        "verifier": check.name,
                        "held_out": check.held_out,
                        "passed": verdict.passed,
                        "score": verdict.value,
                        "findings": len(verdict.findings),
                        "seconds": secs,
                        # (a held-out end read from events counts them: _finishing; a held-out
                        # verdict always says, so an event without is one written before)
                        **(
                            {
                                "self_reported": mine(verdict.evidence),
                                "not_judged": not_judged_count(verdict.evidence),
                            }
                            if check.held_out
                            else {"self_reported": n_mine}
                            if (n_mine := mine(verdict.evidence))
                            else {}
                        ),
                        # what this judgement cost: a trace sums a verifier's judgements (a
                        # cycle judged again after a person's edit pays twice)
                        **({"usage": priced_dict(vu)} if vu.cost_usd or vu.tokens else {}),
                    },
                )
            )
        # Which requested effects run: those of an accepted cycle, and those declared to run
        # whatever the verdict.
        score = rules.aggregate_score(loop._checks, visible) if visible else None
        ok = rules.success(contract, loop._checks, visible, score, needed=loop._required)
        calls: list[EffectCall] = []
        held_back: list[str] = []
        if proposal.effects:  # (most proposals ask for none: nothing to walk)
            calls = [c for c in proposal.effects if ok or not effect_for(loop, c).requires_success]
            held_back = [c.name for c in proposal.effects if c not in calls]
        if held_back:
            ex.events.append(
                NewEvent(n, "effects_held", {"effects": held_back, "why": "cycle not accepted"})
            )
        reused: list[dict[str, Any]] = []  # done by this run already: reused, not asked
        if calls and self._effect_needs(ex, n, proposal, calls, given, needs, t0, reused):
            return True
        if reused:  # carried as approved reuses (a park keeps them with the cycle)
            approved = [*approved, *reused]
        # An approval covers the one cycle it was given for (it resumes that cycle directly);
        # the same action proposed again later is asked about again, never waved through.
        try:
            hit = (
                await self._risk(ex, candidate, proposal, visible, loader)
                if contract.risk
                else None
            )
        except OutOfTime as exc:
            return self._abort(ex, t0, "budget_time", cause=str(exc), unverified=proposal.to_dict())
        except RiskCheckFailed as failed:
            error = error_info(f"risk rule {failed.rule}", failed.error)
            return self._abort(
                ex,
                t0,
                "escalated",
                cause=f"{failed}: {error['message']}",
                error=error,
                unverified=proposal.to_dict(),
            )
        if hit is not None:
            rule, why = hit
            needs.append(
                {
                    "kind": "question" if rule.ask else "risk",
                    "rule": rule.name,
                    "why": why,
                    "what": rule.ask or f"apply the cycle-{n} proposal",
                    "expires_after_s": rule.expires_after_s,
                }
            )
        if given:
            needs = [x for x in needs if not already_approved(x, given) or reuse_gone(x, given)]
        if needs:
            # the rule's question, unless its answer is among what was approved already
            asked = hit is not None and any(x["kind"] == "question" for x in needs)
            ask = Question(str(hit[0].ask)) if asked and hit is not None and hit[0].ask else None
            return self._park(
                ex,
                n,
                proposal,
                digest,
                visible,
                held,
                needs,
                t0,
                ask=ask,
                calls=calls,
                approved=approved,
            )
        return await self._apply(
            ex,
            n,
            proposal,
            digest,
            visible,
            held,
            t0,
            candidate,
            duplicate,
            calls,
            judged=(score, ok, effective),
            reuse_only=approved_as_reuses(approved),
        )

    def _abort(self, ex: _Exec, t0: float, reason: str, **packet: Any) -> bool:
        """End the run in the middle of a cycle: charge the cycle's time so far, then finish."""
        ex.state.spent = ex.state.spent.add_seconds(time.perf_counter() - t0)
        self._finish(ex, reason, **packet)
        return True


def _refs(edits: Sequence[Any]) -> list[str]:
    """Each edit's part reference (a loop: no comprehension a cycle)."""
    out: list[str] = []
    for e in edits:
        out.append(e.ref)
    return out


def _so_far(visible: dict[str, Verdict]) -> dict[str, Any]:
    """A packet's evidence for a cycle ended among its checks: the visible verdicts so far."""
    return {"verdicts": {k: v.to_dict() for k, v in visible.items()}}


def _fault(where: str, kind: str, message: str) -> dict[str, Any]:
    return {"where": where, "type": kind, "message": message}


def _gave_up(who: str, gave: GaveUp) -> str:
    err = gave.error
    what = f"{err.get('type')}: {err.get('message')}"
    if gave.kind == "needs_human":
        return f"{who} failed with an error a person must resolve ({what})"
    if gave.kind == "transient":
        return f"{who} failed transiently {gave.attempts} time(s), the retry bound; last: {what}"
    if err.get("type") in ("Timeout", "CallTimeout"):
        return f"{who} timed out ({what})"
    return f"{who} raised an exception ({what})"


# The twins of Finding and Verdict (``_frozen.quick_init``): a verdict's findings tagged with
# their verifier's name are built with plain attribute stores, with no checks run again (what
# they are built from was checked when the verifier built it; a name is a loop's check's).
_FINDING_TWIN: Any = twin_of(Finding)
_VERDICT_TWIN: Any = twin_of(Verdict)
_new = object.__new__


def _tag(f: Finding, verifier: str) -> Finding:
    if f.verifier:
        return f
    if _FINDING_TWIN is None or type(f) is not Finding:  # (a subclass: its own __init__)
        return Finding(f.message, f.artifact, f.part, f.dimension, f.severity, verifier, f.evidence)
    out = _new(_FINDING_TWIN)
    out.message = f.message
    out.artifact = f.artifact
    out.part = f.part
    out.dimension = f.dimension
    out.severity = f.severity
    out.verifier = verifier
    out.evidence = f.evidence
    out.__class__ = Finding
    tagged: Finding = out
    return tagged


def _tagged(v: Verdict, findings: tuple[Finding, ...]) -> Verdict:
    """``v`` with ``findings`` (its own, tagged by ``_tag``)."""
    if _VERDICT_TWIN is None or type(v) is not Verdict:
        return Verdict(v.passed, v.score, findings, v.evidence, v.usage, v.checked)
    out = _new(_VERDICT_TWIN)
    out.passed = v.passed
    out.score = v.score
    out.findings = findings
    out.evidence = v.evidence
    out.usage = v.usage
    out.checked = v.checked
    out.__class__ = Verdict
    tagged: Verdict = out
    return tagged
