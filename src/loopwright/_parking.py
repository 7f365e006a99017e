"""Parking a run for a person and coming back: ``_park`` stores the cycle mid-way with one
approval request (or question); ``_settle_pending`` decides what a resumed parked run does;
``_resume_cycle`` finishes the stored cycle without asking its verifiers again, and
``_judge_again`` asks them again when a person edited the run while it waited. ``_earned``
approves an effect on the loop's own record instead of parking (earned authority).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ._authority import EARNED_BY, audit, expire
from ._candidate_state import candidate_of
from ._edit_check import CHECK_ONLY, effects_behind, judge, owed_after, say_behind
from ._effects import Effect, EffectCall
from ._errors import ConfigError, RunNotFoundError
from ._exec import Execution as _Exec
from ._exec import budget_before, calls_usage, memory_shown
from ._gates import approved_as_reuses, asked_again, call_digest, done_already
from ._host import RuntimeHost
from ._policy import PolicyDecision
from ._proposal import Proposal, Verdict
from ._question import Question
from ._redact import redact
from ._state import TaskState
from ._store_threads import written
from .store import NewApproval, NewEvent
from .store._records import past_expiry

__all__ = ["Parking"]


class Parking(RuntimeHost):
    """The park / approval path (mixed into ``Runtime``)."""

    def _park(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        visible: dict[str, Verdict],
        held: dict[str, Verdict],
        needs: list[dict[str, Any]],
        t0: float,
        *,
        ask: Question | None = None,
        calls: list[EffectCall] | None = None,
        approved: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """Park the run mid-cycle with one request covering everything that needs a person."""
        s = ex.state
        s.spent = s.spent.add_seconds(time.perf_counter() - t0)
        approval_id = uuid.uuid4().hex[:12]
        first = needs[0]
        kind = "question" if ask is not None else str(first["kind"])
        s.pending = {
            "approval_id": approval_id,
            "cycle": n,
            "rule": first.get("rule"),
            "kind": kind,
            "question": redact(ask.to_dict()) if ask is not None else None,
            # An actor's own question applies nothing; a risk rule's applies the proposal.
            "question_only": proposal.question is not None,
            "proposal": proposal.to_stored_dict(),
            "digest": digest,
            "visible": {k: v.to_dict() for k, v in visible.items()},
            "usage": calls_usage(ex.calls).to_dict(),
            "calls": [c.to_dict() for c in calls or ()],
            "spend": list(ex.calls),
            "memory": memory_shown(ex),
        }
        if approved:  # judged again and parked again: what people approved before still holds
            s.pending["approved"] = [dict(x) for x in approved]
        if ex.check_only:  # the cycle judging a person's edit: so it stays when concluded
            s.pending["check_only"] = True
        if ex.denied is not None:  # ...beside a request denied: so it still escalates
            s.pending["denied"] = [ex.denied[0], ex.denied[1]]
        s.next_action = (
            f"waiting for an answer to question {approval_id}"
            if ask is not None
            else f"waiting for a decision on approval {approval_id} ({first.get('rule') or kind})"
        )
        why = "; ".join(str(x["why"]) for x in needs)
        ex.events.append(
            NewEvent(
                n,
                "approval_requested",
                {"approval_id": approval_id, "kind": kind, "rule": first.get("rule"), "why": why},
            )
        )
        limits = [float(x["expires_after_s"]) for x in needs if x.get("expires_after_s")]
        if ask is None:
            what = "; ".join(str(x["what"]) for x in needs)
            if proposal.changes():
                parts = ", ".join(e.ref for e in proposal.changes())
                # "apply the cycle-2 proposal (edit of doc/pay)", not the cycle named twice
                said = f"cycle-{n} proposal" in what
                what += f" ({'' if said else f'cycle {n}: '}{proposal.kind} of {parts})"
        else:
            others = [x for x in needs if x["kind"] != "question"]
            one = [str(x["what"]) for x in others if _people_needed(x) == 1]
            more = [x for x in others if _people_needed(x) > 1]
            # Answering also approves what else the cycle needed a person for: say so; what
            # needs two or more people is asked of them once the question is answered.
            what = ask.text + (f" (answering also approves: {'; '.join(one)})" if one else "")
            if more:
                most = max(map(_people_needed, more))
                what += f" (then {most} people approve: {'; '.join(str(x['what']) for x in more)})"
        req = NewApproval(
            approval_id=approval_id,
            cycle=n,
            kind=kind,
            rule=first.get("rule"),
            what=what,
            why=why,
            evidence={
                "who": _who(needs),
                "needs": needs,
                "question": ask.to_dict() if ask is not None else None,
                "findings": [f.to_dict() for v in visible.values() for f in v.findings],
                "scores": {k: v.value for k, v in visible.items()},
                "effects": [c.to_dict() for c in calls or ()],
                "note": proposal.note,
            },
            diff=_diff(s, proposal) or None,
            action_hash=digest,
            expires_at=self.store.clock() + min(limits) if limits else None,
        )
        cancel = self._commit(
            ex,
            # Held-out verdicts of the parked cycle wait here, outside the state.
            {
                "cycle": n,
                "decision": "parked",
                "approval_id": approval_id,
                "held_out": {k: v.to_dict() for k, v in held.items()},
            },
            {"status": "awaiting_approval"},
            approval=req,
        )
        if cancel:  # (a pause filed meanwhile holds it parked: its request is pending too)
            self._stop_asked(
                ex, "cancellation requested while it was being verified", boundary=False
            )
        return True

    async def _settle_pending(self, ex: _Exec) -> bool:
        """A parked run resumed: continue if approved or answered, escalate if denied or
        expired, else stay parked; a cycle stopped during its effects finishes them. Returns
        True when the run should not continue now."""
        s = ex.state
        pend = s.pending or {}
        if pend.get("stage") == "effects":
            s.pending = None
            return await self._resume_cycle(ex, pend, staged=True)
        req = self.store.approval(str(pend.get("approval_id")))
        if req is None or req.run_id != ex.run_id:
            raise RunNotFoundError(
                f"run {ex.run_id}: approval {pend.get('approval_id')} is missing"
            )
        if req.status == "pending" and past_expiry(req.expires_at, self.store.clock()):
            # (decided meanwhile, by a person or a worker recording its expiry: that decision)
            req = expire(self.store, req) or self.store.approval(req.approval_id) or req
        if req.status == "pending":
            said, ex.events = ex.events, []
            waiting = NewEvent(s.cycle, "still_waiting", {"approval_id": req.approval_id})
            await written(self.store, self.store.append_events, ex.run_id, [*said, waiting])
            return True
        # decided: its executors that died finishing the cycle since count (crash55)
        if await self._past_crash_bound(ex):
            return True
        await self._say_started(ex)
        n = int(pend["cycle"])
        # The decided cycle is this execution's to finish: one that ends with no record of its
        # own (a denial, a verifier giving up on the edit it judges, a policy changed since)
        # ended inside it, as an unparked cycle does (``stopped``'s ``ended_in``: why, and what
        # it spent since it was resumed; what it spent before it parked is its parked row's,
        # ``web._timeline``). Before, no timeline said the run ended there, nor why.
        ex.cycle_at, ex.cycle_from = n, s.spent
        note: dict[str, Any] = {
            "kind": "answer" if req.status == "answered" else "approval",
            "cycle": n,
            "decision": req.status,
            "by": req.decided_by,
            "note": req.note,
            "rule": pend.get("rule"),
        }
        if pend.get("question"):
            note["question"] = pend["question"]["text"]
        if req.status == "answered":
            note["answer"] = req.answer
        s.notes.append(note)
        s.pending = None
        if req.status not in ("approved", "answered"):
            s.next_action = ""
            who = f" by {req.decided_by}" if req.decided_by else ""
            cause = (
                f"{'question' if pend.get('question') else 'approval'} {req.status}{who}"
                # the note's start: the whole of it is in the evidence (a note may be long, and
                # the cause is shown in lists and in the packet's summary)
                + (f": {_brief(req.note)}" if req.note else "")
            )
            evidence: dict[str, Any] = {"approval": req.to_dict()}
            if pend.get("edited"):
                return await self._judge_denied(ex, pend, cause, evidence)
            self._finish(ex, "escalated", cause=cause, evidence=evidence)
            return True
        ex.calls = list(pend.get("spend") or ())
        ex.shown_memory = [str(m) for m in pend.get("memory") or ()]
        if pend.get("question_only"):
            # The actor asked; nothing of its proposal is applied. The answer is in the notes.
            if pend.get("edited"):
                # a person edited the run while the question waited: with this cycle's commit
                # the next cycle is owed, and judges the edit (``_edit_check``)
                s.pending = owed_after(pend)
            return self._conclude(
                ex,
                n,
                Proposal.from_dict(pend["proposal"]),
                str(pend["digest"]),
                {},
                {},
                time.perf_counter(),
                decision="asked",
            )
        needs = list(req.evidence.get("needs") or ())
        # An answer is one person's: what else the question covered that needs two or more
        # people (a four-eyes payment) is not approved by it, but asked of them next. One
        # person's answer paid a 50,000 payment whose rule needed two approvers.
        more = [x for x in needs if _people_needed(x) > 1] if req.status == "answered" else []
        approved = [*(pend.get("approved") or ()), *(x for x in needs if x not in more)]
        if pend.get("edited"):
            if not more:
                s.approved.append(str(pend["digest"]))
            return await self._judge_again(ex, pend, approved)
        if more:
            return self._park_again(ex, pend, more, approved)
        gone = self._reuses_gone(ex, n, pend, approved)
        if gone:
            calls = {x["call"] for x in gone}
            kept = [x for x in approved if not (x.get("done_already") and x.get("call") in calls)]
            return self._park_again(ex, pend, gone, kept)
        s.approved.append(str(pend["digest"]))
        return await self._resume_cycle(
            ex, pend, staged=False, reuse_only=approved_as_reuses(approved)
        )

    def _reuses_gone(
        self, ex: _Exec, n: int, pend: Mapping[str, Any], approved: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The approved effects the person was told were done already (nothing run again)
        that are done no more (refunded since, newuser47): each as it is asked again, with
        what approving it does now. ``[]`` for all others."""
        calls = {call_digest(c): c for c in map(EffectCall.from_dict, pend.get("calls") or ())}
        run = {x.get("call") for x in approved if not x.get("done_already")}  # approved to run
        gone: list[dict[str, Any]] = []
        for need in approved:
            told = need.get("done_already") and need.get("call") not in run
            c = calls.get(str(need.get("call"))) if told else None
            eff = None if c is None else ex.loop.effect(c.name)
            if c is None or eff is None or done_already(self.store, ex.run_id, n, eff, c):
                continue
            again = {k: v for k, v in need.items() if k not in ("done_already", "reuse")}
            again["what"] = eff.describe(c.args)
            again["why"] = f"{need.get('why')}; {asked_again(self.store, ex.run_id, n, eff, c)}"
            gone.append(again)
        return gone

    def _park_again(
        self,
        ex: _Exec,
        pend: Mapping[str, Any],
        needs: list[dict[str, Any]],
        approved: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Park the answered cycle again, as it stood (its verdicts are not asked again), with
        a request for what its answer could not approve alone."""
        parked = ex.record or {}
        return self._park(
            ex,
            int(pend["cycle"]),
            Proposal.from_dict(pend["proposal"]),
            str(pend["digest"]),
            {k: Verdict.from_dict(v) for k, v in (pend.get("visible") or {}).items()},
            {k: Verdict.from_dict(v) for k, v in (parked.get("held_out") or {}).items()},
            needs,
            time.perf_counter(),
            calls=[EffectCall.from_dict(c) for c in pend.get("calls") or ()],
            approved=approved,
        )

    async def _judge_again(
        self, ex: _Exec, pend: Mapping[str, Any], approved: Sequence[Mapping[str, Any]]
    ) -> bool:
        """A person edited the run beside this request while it waited, so the stored verdicts
        judged a state that is gone. The approved proposal is applied to the state as it is now
        and verified again (the actor is not asked again); what the person approved is not
        asked again, anything the new verdicts call for is."""
        used = _checks_stop(ex)
        if used is not None:
            # No check may start (``call_stop``), as none starts after an actor call that used
            # the budget up (``Cycle._cycle``): the approved proposal is kept, unverified, in
            # the packet. Before, the checks ran again on a budget reached (review48b).
            return self._abort(
                ex,
                time.perf_counter(),
                used[0],
                cause=f"the budget ({used[0]}) was {used[1]} before the approved proposal "
                "could be judged again after a person's edit",
                unverified=dict(pend["proposal"]),
            )
        ex.check_only = bool(pend.get("check_only"))  # a check-only cycle parked, edited again
        ex.denied = _denied(pend)
        self._say_behind(ex, pend)
        try:
            return await judge(
                self,
                ex,
                int(pend["cycle"]),
                Proposal.from_dict(pend["proposal"]),
                str(pend["digest"]),
                {"approval_id": pend.get("approval_id"), "why": "edited"},
                approved=approved,
            )
        finally:
            ex.check_only, ex.denied, ex.effects_behind = False, None, []

    def _say_behind(self, ex: _Exec, pend: Mapping[str, Any]) -> None:
        """The effects earlier cycles ran with the versions a person's edit beside this
        request replaced (``_edit_check.effects_behind``), said as a check-only cycle says
        them (polish52b: this path said nothing)."""
        parts = [str(p) for p in pend.get("edited_parts") or ()]
        replaced = dict(pend.get("edited_replaced") or {})
        say_behind(
            ex, int(pend["cycle"]), effects_behind(self.store, ex.run_id, ex.state, parts, replaced)
        )

    async def _judge_denied(
        self, ex: _Exec, pend: Mapping[str, Any], cause: str, evidence: dict[str, Any]
    ) -> bool:
        """A person edited the run beside this request while it waited, then denied it (or it
        expired): the denied proposal is not applied, and the decided cycle judges the state
        as the person left it, check-only (``_edit_check``: no actor call, the verifiers,
        visible then held-out). Accepted if it succeeds (the person's version meets the
        contract; nothing denied was done); otherwise the run escalates as a denial does, its
        packet holding these verdicts, not those of the state before the edit. Before, the run
        escalated on the stale verdicts and the edit was never judged."""
        ex.calls = list(pend.get("spend") or ())
        ex.shown_memory = [str(m) for m in pend.get("memory") or ()]
        used = _checks_stop(ex)
        if used is not None:  # no check may start: escalated on the denial, as before
            self._finish(
                ex,
                "escalated",
                cause=f"{cause} (the person's edit was not judged: {used[0]} {used[1]})",
                evidence=evidence,
            )
            return True
        why = {"approval_id": pend.get("approval_id"), "why": "edited", "check_only": True}
        ex.check_only, ex.denied = True, (cause, evidence)
        self._say_behind(ex, pend)
        try:
            return await judge(
                self,
                ex,
                int(pend["cycle"]),
                CHECK_ONLY,
                CHECK_ONLY.digest(),
                {**why, "denied": True},
            )
        finally:
            ex.check_only, ex.denied, ex.effects_behind = False, None, []

    async def _resume_cycle(
        self,
        ex: _Exec,
        pend: Mapping[str, Any],
        *,
        staged: bool,
        reuse_only: Sequence[str] = (),
    ) -> bool:
        """Finish a cycle from what was stored mid-cycle (verdicts are not asked again).
        ``reuse_only``: the calls approved only as reuses (``_apply``); a write-ahead's own."""
        ex.calls = list(pend.get("spend") or ())
        ex.shown_memory = [str(m) for m in pend.get("memory") or ()]
        ex.check_only = bool(pend.get("check_only"))  # (the cycle judging a person's edit)
        ex.denied = _denied(pend)
        try:
            if staged:  # (as its write-ahead recorded them)
                reuse_only = [str(d) for d in pend.get("reuse_only") or ()]
            return await self._finish_stored(ex, pend, staged=staged, reuse_only=reuse_only)
        finally:
            ex.check_only, ex.denied = False, None

    async def _finish_stored(
        self, ex: _Exec, pend: Mapping[str, Any], *, staged: bool, reuse_only: Sequence[str]
    ) -> bool:
        s = ex.state
        n = int(pend["cycle"])
        proposal = Proposal.from_dict(pend["proposal"])
        visible = {k: Verdict.from_dict(v) for k, v in pend["visible"].items()}
        parked = ex.record or {}
        held = {k: Verdict.from_dict(v) for k, v in (parked.get("held_out") or {}).items()}
        digest = str(pend["digest"])
        calls = [EffectCall.from_dict(c) for c in pend.get("calls") or ()]
        missing = sorted({c.name for c in calls if ex.loop.effect(c.name) is None})
        if missing:
            raise ConfigError(
                f"run {ex.run_id} must finish effects {missing}, which this loop does not "
                "declare: resume it with the loop that started it",
                field="effects",
            )
        if not staged:
            # Approved under the policy the cycle was judged by: a rule denying the action
            # since (a policy changed while the request waited) still stops it.
            for c in calls:
                eff = ex.loop.effect(c.name)
                assert eff is not None  # (missing ones refused above)
                d = ex.loop.approvals.decide(eff.kind, eff.name, c.args)
                if d.action == "deny":
                    return self._abort(
                        ex,
                        time.perf_counter(),
                        "escalated",
                        cause=f"{eff.describe(c.args)} is denied by the approval policy: "
                        f"{d.why} (it was approved before the policy changed; not run)",
                        evidence={"effect": c.to_dict(), "rule": d.rule},
                        unverified=proposal.to_dict(),
                    )
        # the keys its write-ahead fixed; a write-ahead stored before they were: recomputed
        stored = pend.get("keys") if staged else None
        return await self._apply(
            ex,
            n,
            proposal,
            digest,
            visible,
            held,
            time.perf_counter(),
            candidate_of(s, proposal, n),
            # (a check-only cycle proposed nothing: never a duplicate)
            not ex.check_only and bool(pend.get("duplicate", digest in s.rejected)),
            calls,
            staged=staged,
            keys=[(str(k), bool(b)) for k, b in stored] if stored else None,
            reuse_only=reuse_only,
        )

    def _earned(
        self, ex: _Exec, n: int, eff: Effect, call: EffectCall, d: PolicyDecision
    ) -> tuple[bool, str | None]:
        """Whether the loop's record approves this action (earned authority): if so the
        decision is recorded, by ``policy:earned`` with its evidence, and the effect runs as
        if allowed. Never for a rule that needs two or more people. Otherwise, where a grant
        covers the action, why it does not apply yet (said in the request a person sees)."""
        loop = ex.loop
        grant = loop.approvals.earned_for(eff.kind, call.args)
        if grant is None or int((d.who or {}).get("approvers") or 1) > 1:
            return False, None
        # Only approvals by people who could have approved this request themselves count:
        # a finance rule's payment is not approved on the record of people without the role,
        # above their limits, or by the person who asked for it (docs/permissions.md).
        who = dict(d.who or {})
        field = str(who.get("field") or "amount")
        value = call.args.get(field)
        if (
            field != grant.field
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and not value <= grant.up_to
        ):
            # the grant reads another argument than the rule (a line count, not the total):
            # what the rule asks a person about is above what the loop earned
            return False, (
                f"earned authority for {eff.kind} covers {grant.field} up to {grant.up_to:g}; "
                f"the rule reads {field}, which is {value!r}"
            )
        from ._earned import authority_status, earned_counts  # (a grant: not at import)

        counts = earned_counts(self.store, self.store.get_run(ex.run_id), eff.kind, call.args, who)
        standing = authority_status(self.store, loop.name, loop.version, [grant], counts)[0]
        if not standing.earned:
            said = (
                f"earned authority for {eff.kind} up to {grant.up_to:g}: "
                f"{len(standing.clean)} of {grant.after} clean approvals"
            )
            if who.get("role") or who.get("separate") or self.store.has_users():
                said += " by people who could approve this request"
            if standing.revoked_by:
                said += f" since it was revoked ({standing.revoked_by})"
            return False, said
        evidence = standing.evidence()
        what = eff.describe(call.args)
        aid = hashlib.sha256(
            json.dumps(
                [ex.run_id, n, eff.name, call.to_dict()], sort_keys=True, default=str
            ).encode()
        ).hexdigest()[:12]
        need = {"kind": "effect", "effect": eff.name, "effect_kind": eff.kind, "rule": d.rule}
        # the same grant again (the cycle judged again after an edit, or rerun after a crash):
        # one approval, one audit record (looked up: a crash may fall between the two writes)
        audited = any(
            a.actor == EARNED_BY
            for a in self.store.audit(target=f"request {aid}", action="approve")
        )
        self.store.grant_approval(
            ex.run_id,
            NewApproval(
                approval_id=aid,
                cycle=n,
                kind="effect",
                rule=d.rule,
                what=what,
                why=f"{d.why}; approved on earned authority ({len(standing.clean)} clean "
                f"approvals of {eff.kind}, limit {grant.up_to:g})",
                evidence={"needs": [need], "effects": [call.to_dict()], "earned": evidence},
                diff=None,
                action_hash=aid,
                expires_at=None,
            ),
            by=EARNED_BY,
            note="earned authority",
            now=time.time(),
        )
        if not audited:
            audit(
                self.store,
                EARNED_BY,
                "approve",
                f"request {aid}",
                origin="engine",
                run=ex.run_id,
                what=what,
                evidence=evidence,
            )
        ex.events.append(
            NewEvent(
                n,
                "approved_by_earned_authority",
                {"approval_id": aid, "effect": eff.name, "what": what, "evidence": evidence},
            )
        )
        return True, None


def _checks_stop(ex: _Exec) -> tuple[str, str] | None:
    """The budget that forbids the decided cycle's first check now (``budget_before``), if
    any: ``judge`` starts at the checks, and the check before the first is the caller's."""
    first = next(iter(ex.loop.checks), None)
    return None if first is None else budget_before(ex, f"verifier:{first.name}")


def _denied(pend: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The denial a parked check-only cycle still escalates on (``_judge_denied``), if any."""
    d = pend.get("denied")
    return (str(d[0]), dict(d[1])) if isinstance(d, list | tuple) and len(d) == 2 else None


def _diff(state: TaskState, proposal: Proposal) -> str:
    lines = []
    for e in proposal.changes():
        p = state.part(e.ref)
        old = "∅" if p is None else repr(p.value)
        lines.append(f"- {e.ref}: {old}\n+ {e.ref}: {e.value!r}")
    return "\n".join(lines)


def _people_needed(need: Mapping[str, Any]) -> int:
    """How many people a request's need asks to approve it (its rule's ``approvers``)."""
    return int((need.get("who") or {}).get("approvers") or 1)


def _who(needs: list[dict[str, Any]]) -> dict[str, Any]:
    """Who may decide a request that covers these needs: every role any of their rules
    names, the most approvers any asks for, separation if any asks for it."""
    rules = [n["who"] for n in needs if n.get("who")]
    roles = sorted({str(r["role"]) for r in rules if r.get("role")})
    return {
        "role": ", ".join(roles) or None,
        "roles": roles,
        "approvers": max([int(r.get("approvers") or 1) for r in rules] or [1]),
        "separate": any(bool(r.get("separate")) for r in rules),
    }


NOTE_IN_CAUSE = 500


def _brief(text: str) -> str:
    """The start of a person's note, for a stop cause."""
    return text if len(text) <= NOTE_IN_CAUSE else text[: NOTE_IN_CAUSE - 1] + "…"
