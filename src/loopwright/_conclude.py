"""The second half of a cycle: run its effects (``_apply``) and decide it by the contract
(``_conclude``); its checkpoint is then committed (``_checkpoint``).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import _decide as rules
from ._call_billing import settle_owed
from ._edit_check import answer_owed
from ._effects import EffectCall
from ._errors import ConfigError
from ._exec import Execution as _Exec
from ._exec import (
    budget_before,
    calls_usage,
    cycle_calls,
    error_info,
    memory_shown,
    no_attempt,
)
from ._gates import call_digest, edit_kept, effect_for
from ._host import RuntimeHost
from ._person_edits import person_edit
from ._proposal import Proposal, Verdict
from ._question import Question
from ._record_codec import packed_record, packed_usage
from ._settle import settle_hint
from ._state import Finding, TaskState
from ._usage import MAX_RUN_TOKENS, MAX_TOKENS, Usage
from .store import NewEvent

if TYPE_CHECKING:
    from ._effect_run import EffectOutcome

__all__ = ["Concluding"]

# What ``_evaluate`` found of a cycle's verdicts, handed to ``_conclude`` (which would
# otherwise find it again from the same inputs): the visible score, whether the cycle
# succeeds, and the proposal's effective digest (None: not computed).
Judged = tuple[float | None, bool, str | None]


class Concluding(RuntimeHost):
    """Effects and the cycle's decision (mixed into ``Runtime``; the commit is
    ``_checkpoint.Checkpoints``'s)."""

    async def _apply(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        visible: dict[str, Verdict],
        held: dict[str, Verdict],
        t0: float,
        candidate: TaskState,
        duplicate: bool,
        calls: list[EffectCall],
        *,
        staged: bool = False,
        keys: list[tuple[str, bool]] | None = None,
        judged: Judged | None = None,
        reuse_only: Sequence[str] = (),
    ) -> bool:
        """Run the cycle's effects (journaled, at most once), then conclude it. ``keys``: the
        calls' keys as a stored write-ahead fixed them (a resumed cycle). ``judged``: what
        ``_evaluate`` found of these verdicts, handed on to ``_conclude``. ``reuse_only``: the
        calls (``call_digest``) a person approved only as actions done already, each run only
        as that reuse (recorded in the write-ahead: a resume after a crash runs them so too)."""
        outcomes: list[EffectOutcome] = []
        if calls:
            # (a cycle with effects only: the effects' runner is not imported with the engine)
            from ._effect_run import key_of, perform_effect

            # Never start an effect once a budget is crossed, or reached unless the effect is
            # known to bill nothing (invariant 7; ``call_stop``).
            first = effect_for(ex.loop, calls[0])
            crossed = budget_before(ex, f"effect:{calls[0].name}", free=first.free)
            if crossed:
                ex.state.pending = None
                return self._abort(
                    ex,
                    t0,
                    crossed[0],
                    cause=f"{crossed[1]} before the effects {[c.name for c in calls]} ran",
                    unverified=proposal.to_dict(),
                )
            if keys is None:
                # Each call's key is fixed here, as its journal entry will be named: a resume
                # settles this key, whatever the loop's key function says by then (a deploy
                # between a crash and its resume must not pay a second time). A resumed cycle
                # whose write-ahead an earlier release stored without its keys asks the key
                # function again: one that raises now escalates as it would have then (it
                # escaped as a traceback, and the run could not be resumed).
                try:
                    keys = [key_of(effect_for(ex.loop, c), ex.run_id, n, c) for c in calls]
                except ConfigError as exc:  # a key that raised, names no action, or names a redo
                    ex.state.pending = None
                    why = "an effect's key cannot be used"
                    if staged:
                        why += " (the cycle's write-ahead, stored by an earlier release, kept none)"
                    return self._abort(
                        ex,
                        t0,
                        "escalated",
                        cause=f"{why}: {exc}",
                        error=error_info("effect", exc),
                        unverified=proposal.to_dict(),
                    )
            if not staged:
                # Write-ahead: the cycle's proposal and verdicts are stored before any effect
                # runs, so a crash during the effects resumes *this* proposal, never a new one
                # with different arguments (which would be a second payment).
                ex.state.pending = {
                    "stage": "effects",
                    "cycle": n,
                    "proposal": proposal.to_stored_dict(),
                    "digest": digest,
                    "duplicate": duplicate,
                    "visible": {k: v.to_dict() for k, v in visible.items()},
                    "usage": calls_usage(ex.calls).to_dict(),
                    "calls": [c.to_dict() for c in calls],
                    "keys": [[k, business] for k, business in keys],
                    "spend": list(ex.calls),
                    "memory": memory_shown(ex),
                }
                if reuse_only:
                    ex.state.pending["reuse_only"] = list(reuse_only)
                cancel = self._commit(
                    ex,
                    {
                        "cycle": n,
                        "decision": "effects",
                        "held_out": {k: v.to_dict() for k, v in held.items()},
                    },
                    {"status": "running"},
                )
                cancel = await self._settle(ex) or cancel  # durable before any effect runs
                # the cycle has a record now (its write-ahead), which the timelines list: a
                # stop in its effects is no end inside a cycle without one (``ended_in``)
                ex.cycle_from = None
                # cancelled while this cycle was verified: pay for nothing (a pause waits for
                # the cycle's end: never between an effect's intent and its result)
                why = "cancellation requested before the effects ran"
                if cancel and self._stop_asked(ex, why, boundary=False):
                    return True
            for i, c in enumerate(calls):
                eff = effect_for(ex.loop, c)
                outcome = await perform_effect(
                    self.store,
                    ex,
                    n,
                    eff,
                    c,
                    fixed=keys[i] if keys else None,
                    reuse_only=bool(reuse_only) and call_digest(c) in reuse_only,
                )
                outcomes.append(outcome)
                used = outcome.usage or Usage()
                if (used.cost_usd or used.tokens) or (
                    outcome.status == "done" and not outcome.reused and not eff.free
                ):
                    # One that ran and reported no cost is a call that billed nothing, as a
                    # verifier's verdict without usage is: known free from then on
                    # (``call_stop``), and in the cycle's calls, which replay checks the
                    # budgets between (it was not, and replay ran an effect the engine had not).
                    # One declared free is no priced call (``_decide.declared_free``). One
                    # settled by its reconcile hook without a cost did not report $0: its row
                    # says its cost is unknown, and it is not made known free by it.
                    u = Usage(used.cost_usd, used.tokens, 0.0)
                    row = {"who": f"effect:{c.name}", "cost_usd": u.cost_usd, "tokens": u.tokens}
                    if outcome.cost_unknown:
                        row["unknown_cost"] = True
                    ex.calls.append(row)
                    ex.state.spent = ex.state.spent + u
                stop: tuple[str, str] | None = None
                settle: str | None = None  # the run's own effect in doubt: settled first
                if outcome.status != "done":
                    # (one left in doubt says how a person settles it: effects53b)
                    hint = settle_hint(self.store, ex.run_id, outcome.key)
                    stop = ("escalated", outcome.cause + hint)
                    settle = outcome.key if hint else None
                elif i + 1 < len(calls):
                    rest = [x.name for x in calls[i + 1 :]]
                    nxt = effect_for(ex.loop, calls[i + 1])
                    crossed = budget_before(ex, f"effect:{nxt.name}", free=nxt.free)
                    if crossed:
                        # during an effect that billed; else the budget stood as it was (one
                        # declared free ran on it, newuser47): before the one not started
                        at = (
                            f"during effect {c.name}"
                            if used.cost_usd or used.tokens
                            else f"before effect {nxt.name}"
                        )
                        stop = (crossed[0], f"{crossed[1]} {at}; {rest} not run")
                    elif self.store.get_run(ex.run_id).cancel_requested:
                        # A person cancelled while this effect ran: no further effect starts
                        # (the next one ran, and the run ended as if never cancelled).
                        ex.state.pending = None
                        ex.state.notes.extend(_effect_notes(n, outcomes))
                        ex.state.spent = ex.state.spent.add_seconds(time.perf_counter() - t0)
                        self._cancel_now(
                            ex,
                            f"cancellation requested during effect {c.name} of cycle {n}; "
                            f"{rest} not run",
                        )
                        return True
                if stop is not None:
                    # What did run is kept: its notes, its cost, and the packet lists it.
                    ex.state.pending = None
                    ex.state.notes.extend(
                        _effect_notes(n, outcomes[:-1] if stop[0] == "escalated" else outcomes)
                    )
                    return self._abort(
                        ex,
                        t0,
                        stop[0],
                        cause=stop[1],
                        evidence={
                            "effect": outcome.to_dict(),
                            "effects_done": [o.to_dict() for o in outcomes if o.status == "done"],
                            **({"settle": settle} if settle else {}),
                        },
                        unverified=proposal.to_dict(),
                    )
            ex.state.pending = None
            candidate.notes.extend(_effect_notes(n, outcomes))
        return self._conclude(
            ex,
            n,
            proposal,
            digest,
            visible,
            held,
            t0,
            candidate=candidate,
            duplicate=duplicate,
            effects=[o.to_dict() for o in outcomes] if outcomes else [],
            judged=judged,
        )

    def _too_many_tokens(
        self,
        ex: _Exec,
        n: int,
        cycle_tokens: int,
        t0: float,
        proposal: Proposal,
        effects: list[dict[str, Any]] | None,
    ) -> bool:
        """End the run ``escalated`` for token counts no store can hold (``_conclude``): the
        cycle is not concluded; its spend is charged, the run's total kept at what a store
        holds. Effects the cycle already ran (``_apply``) are listed, as a stop among them
        lists them (``effects_done``), with the proposal unverified: before, the packet said
        the run escalated before its first cycle, not that a payment had been made."""
        spent = ex.state.spent
        total = spent.tokens
        if total > MAX_RUN_TOKENS:
            ex.state.spent = Usage._stored(spent.cost_usd, MAX_RUN_TOKENS, spent.seconds)
        evidence: dict[str, Any] = {
            "field": "Usage.tokens",
            "cycle_tokens": cycle_tokens,
            "run_tokens": total,
        }
        ran: dict[str, Any] = {}
        if effects:
            evidence["effects_done"] = [e for e in effects if e.get("status") == "done"]
            ran["unverified"] = proposal.to_dict()
        return self._abort(
            ex,
            t0,
            "escalated",
            cause=_tokens_cause(n, cycle_tokens, total),
            evidence=evidence,
            **ran,
        )

    def _conclude(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        visible: dict[str, Verdict],
        held: dict[str, Verdict],
        t0: float,
        *,
        candidate: TaskState | None = None,
        duplicate: bool = False,
        decision: str | None = None,
        effects: list[dict[str, Any]] | None = None,
        judged: Judged | None = None,
        unanswered: tuple[str, Question] | None = None,
    ) -> bool:
        """Decide the cycle by the contract and commit it. Returns True when the run ended.
        What the cycle cost is what its priced calls (``ex.calls``) cost. ``judged``: the
        score, success and effective digest (None: not asked) ``_evaluate`` found of the
        same verdicts, proposal and state, not computed again. ``unanswered``: the stop
        ``_decide.unanswerable`` found for the cycle's question, not asked (the run ends)."""
        if ex.retries:  # (most cycles owe nothing: no call of settle_owed's loop)
            settle_owed(self.store, ex, n)  # a call killed after its answer, not asked again
        old, loop, contract = ex.state, ex.loop, ex.contract
        # (the cycle's priced calls read once: their sum, who bills, the record's rows)
        cost, tokens, billed, calls_packed = cycle_calls(ex.calls, old.billed)
        # Token counts no store can hold (each call's is at most MAX_TOKENS, their sum is
        # not): the run escalates, naming the field, before anything of the cycle is changed
        # or committed. Raised instead, the run stayed ``running`` and raised again on every
        # resume; a total past MAX_RUN_TOKENS failed the commit (stop 52).
        if tokens > MAX_TOKENS or old.spent.tokens > MAX_RUN_TOKENS:
            return self._too_many_tokens(ex, n, tokens, t0, proposal, effects)
        s = candidate if candidate is not None else old
        effective: str | None = None
        if judged is not None and decision is None:
            score, ok, effective = judged
        else:
            score = rules.aggregate_score(loop.checks, visible) if visible else None
            ok = decision is None and rules.success(
                contract, loop.checks, visible, score, needed=loop._required
            )
        if decision is None:
            found: list[Finding] = []
            for v in visible.values():  # (a loop and C extends: no comprehension a cycle)
                found.extend(v.findings)
            s.findings = found
            rules.accept_clean_parts(
                s,
                loop._checks,
                visible,
                all_parts=ok,
                when_clean=contract.success.accept_parts == "when_clean",
            )
            s.refresh_plan()
        # the checks success needs: those flagged required, or all when none is (as success);
        # and the visible ones it does not require (below). Both the loop's, made once.
        required, optional = loop._required, loop._optional  # (slots: no property call)
        newly: list[str] = []
        for k, v in visible.items():  # (a loop: no comprehension a cycle)
            if v.passed and k in required and k not in old.passed_checks:
                newly.append(k)
        delta = contract.no_progress.min_delta if contract.no_progress else 0.0
        improved = (
            not duplicate
            and decision is None
            and rules.improved(old.progress_score, score, delta, bool(newly))
        )
        if decision is None and not duplicate and rules.better(old.best_score, score):
            # The best candidate is the best by score, whatever moved the no-progress level:
            # a rise under min_delta is kept, a required check passing at a lower score is not.
            s.best_score, s.best_cycle = score, n
            s.mark_best()
        if improved:
            if score is not None and (old.progress_score is None or score > old.progress_score):
                s.progress_score = score
            s.stall = 0
        elif decision == "asked" or no_attempt(ex):
            # waiting for an answer is not a cycle without progress, nor is judging a person's
            # edit (no attempt was made: the actor's next cycle is the one that counts)
            s.stall = old.stall
        else:
            s.stall = old.stall + 1
        if newly or len(old.passed_checks) > 1:
            s.passed_checks = sorted(set(old.passed_checks) | set(newly))
        # (else what it would be is what ``s`` holds, ``fork``'s copy of old's or old's own:
        # none or one name, sorted and unique as it is; two sets and a sort a cycle less)
        if not ok and not duplicate and decision != "asked" and not ex.check_only:
            # (a check-only cycle proposed nothing: no rejected proposal, ``_edit_check``)
            # in place: the list is shared with ``old`` and only ever grows (invariant 8)
            s.rejected.append(digest)
            if effective is None:
                effective = rules.effective_digest(old, proposal, digest)
            if effective != digest and effective not in s.rejected:
                s.rejected.append(effective)  # what it changed, however it was written
        s.cycle = n
        s.score = score
        s.spent = old.spent.add_seconds(time.perf_counter() - t0)
        s.held_out_spent = old.held_out_spent
        s.billed = billed
        decision = decision or ("accepted" if ok else "revise")
        # A bounded window: older cycles are in the checkpoints' records (invariant 8).
        keep = max(0, self.history_window - 1)
        s.history = [
            *(old.history[-keep:] if keep else ()),
            {
                "cycle": n,
                "score": score,
                "decision": decision,
                "kind": proposal.kind,
                "improved": improved,
            },
        ]
        ex.state = s
        ex.last_visible = visible
        held_d = {k: v.to_dict() for k, v in held.items()} if held else {}
        # The record is built in its stored form (``pack_record``'s, which ``_masked`` then
        # does not apply again): the whole record built, copied and pruned cost about 5 % of
        # a trivial cycle (bench/RESULTS.md, "stop 41"). Its values, in the record's order:
        shown: dict[str, Any] = {}
        for k, v in visible.items():  # (a loop: no comprehension a cycle)
            shown[k] = v.to_packed_dict(k)
        held_p: dict[str, Any] = {}
        for k, v in held.items():
            held_p[k] = v.to_packed_dict(k)
        # (its tokens were checked above; its cost is not checked against a call's bound,
        # ``MAX_AMOUNT``: a sum of checked amounts, a float that cannot overflow; stop 52: two
        # calls of 2**53 USD raised here)
        spent = Usage._stored(cost, tokens, s.spent.seconds - old.spent.seconds)
        # (a cycle that made no attempt is no paid one: the next attempt is projected at the
        # mean of attempts; its spend still counts, so the projection errs on the dear side)
        if no_attempt(ex):
            s.paid_cycles = old.paid_cycles
            if answer_owed(old):
                # it took the place of the cycle an answered question was for: not counted
                # against the cycle cap, so the actor still reads the answer
                # (``_decide.counted_cycles``; counted as it concludes, a park or an
                # escalation before that counts nothing)
                s.answer_checks = old.answer_checks + 1
            elif old.cap_checks is not None and rules.budget_stop(ex.contract, old) == (
                "budget_cycles"
            ):
                # judged with the cap reached: what a cap stop says ran past it
                s.cap_checks = old.cap_checks + 1
        else:
            s.paid_cycles = rules.counted_cycle(old.paid_cycles, spent)
        record = packed_record(
            n,  # cycle
            proposal.to_packed_dict(),
            digest,
            duplicate,
            shown,  # visible
            held_p,  # held_out
            score,
            improved,
            decision,
            effects or [],
            # The feedback memory the actor was shown (ids): what context_reuse_rate counts.
            memory_shown(ex),
            # Every priced call of the cycle in order: what replay needs to re-decide budgets.
            calls_packed,
            # All of them: a call's failed attempts and a judgement made again cost too (the
            # cycle's figure in show, the dashboard and a trace adds up to the run's spend).
            packed_usage(spent.cost_usd, spent.tokens, spent.seconds),
        )
        # The visible checks the loop does not require (``Check.required=False``): replay
        # needs them to judge success and progress as this cycle was judged. Only when there
        # are some, so the common record (every check required) costs nothing more.
        if optional:
            record["not_required"] = list(optional)
        if ex.check_only:  # judged a person's edit, no actor call (``_edit_check``)
            record["check_only"] = True
            s.history[-1]["check_only"] = True
        if ex.effects_behind:  # run with the values a person's edit replaced, not run again
            record["effects_not_rerun"] = ex.effects_behind
        ex.events.append(
            NewEvent(
                n,
                "decision",
                {
                    "decision": decision,
                    "score": score,
                    "best_score": s.best_score,
                    "improved": improved,
                    "duplicate": duplicate,
                    # (its execution's lease: the crash count judges the one that concluded
                    # the cycle by it, not by its successor's less one; ``crashes_at``)
                    "lease": ex.token,
                },
            )
        )
        if ok:
            s.next_action = ""
            self._finish(ex, "success", record=record, held_out=held_d)
            return True
        if ex.denied is not None:
            # a person's edit beside a request they denied, judged (``_judge_denied``): short
            # of success, the run escalates as the denial does, with these verdicts
            s.next_action = ""
            cause, evidence = ex.denied
            self._finish(
                ex, "escalated", record=record, held_out=held_d, cause=cause, evidence=evidence
            )
            return True
        edited = _failed_edits(s, visible) if decision == "revise" else []
        if edited:
            # A person's version fails a visible check: the actor may not overwrite it (it is
            # accepted), so waiting would only spend the budget. The person decides, with the
            # commands that do it (advice47: "accept the run as it is" named none).
            self._finish(
                ex,
                "escalated",
                record=record,
                held_out=held_d,
                cause="; ".join(text for _, text in edited)
                + edit_kept(
                    ex.run_id,
                    edited[0][0],
                    "or leave the run ended with the person's version",
                    person_edit(s, edited[0][0]),
                ),
            )
            return True
        reason: str | None = None
        if (
            contract.no_progress is not None
            and s.stall >= contract.no_progress.cycles
            and not ex.check_only
        ):
            reason = "no_progress"
        else:
            reason = rules.stop_before_cycle(contract, s)
        asked: dict[str, Any] = {}
        if unanswered is not None:
            # (the same rule on the same figures: its reason, should the two ever differ)
            reason = reason or unanswered[0]
            asked = {"question": unanswered[1].to_dict()}
        if reason is not None:
            self._finish(
                ex,
                reason,
                record=record,
                held_out=held_d,
                cause=None
                if unanswered is None
                else f"the actor asked {unanswered[1].text!r}, which was not put to a person: "
                "no cycle could read its answer",
                evidence={k: dict(v.evidence) for k, v in visible.items()} | asked,
            )
            return True
        nxt = s.next_step()
        s.next_action = (f"repair {len(s.findings)} finding(s)" if s.findings else "continue") + (
            f"; next step: {nxt.id}" if nxt else ""
        )
        flag = self._commit(ex, record, {"status": "running"}, packed=True)
        # (a cycle boundary: a person's cancel ends the run, a pause parks it)
        return flag and self._stop_asked(ex, "cancellation requested", boundary=True)


_KIND = operator.methodcaller("get", "kind")


def _tokens_cause(n: int, cycle_tokens: int, total: int) -> str:
    """The stop's words for a cycle whose token counts no store can hold."""
    if cycle_tokens > MAX_TOKENS:
        what = (
            f"the calls of cycle {n} reported {cycle_tokens} tokens in all, more than the "
            f"{MAX_TOKENS} (2**53, MAX_TOKENS) a cycle may record"
        )
    else:
        what = (
            f"cycle {n} took the run's total to {total} tokens, more than the "
            f"{MAX_RUN_TOKENS} (2**63 - 1, MAX_RUN_TOKENS) a store holds (the total is kept "
            "at that bound)"
        )
    return f"Usage.tokens: {what}; check what the actor and the checks report as tokens"


def _failed_edits(s: TaskState, visible: Mapping[str, Verdict]) -> list[tuple[str, str]]:
    """For each part whose current version a person wrote and a visible check's error finding
    touches: the part, and who edited it and what the check says."""
    # Every cycle asks, over up to NOTES_WINDOW notes: a scan in C, no Python call per note.
    if "edit" not in map(_KIND, s.notes):
        return []
    out: list[tuple[str, str]] = []
    for name, verdict in visible.items():
        for f in verdict.findings:
            if f.severity != "error" or f.artifact is None or f.part is None:
                continue
            ref = f"{f.artifact}/{f.part}"
            note = person_edit(s, ref)
            if note is not None:
                out.append(
                    (
                        ref,
                        f"{note.get('by')}'s version of {ref} (v{note.get('version')}) fails "
                        f"the visible check {name}: {f.message}",
                    )
                )
    return out


def _effect_notes(n: int, outcomes: Sequence[EffectOutcome]) -> list[dict[str, Any]]:
    """What the next context learns about the cycle's effects."""
    return [
        {
            "kind": "effect",
            "cycle": n,
            "effect": o.name,
            "key": o.key,
            "status": o.status,
            "result": o.result,
            "reused": o.reused,
        }
        for o in outcomes
        if o.status == "done"
    ]
