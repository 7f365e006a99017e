"""The second half of a cycle: run its effects (``_apply``), decide it by the contract
(``_conclude``), and commit the checkpoint (``_commit``: one atomic commit fenced by the run's
lease token, queued into a group commit when several runs share the event loop; ``_settle``
waits for its durability).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import operator
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from . import _decide as rules
from . import _state as state_mod
from . import _state_codec as codec
from ._effect_run import EffectOutcome, key_of, perform_effect
from ._effects import EffectCall
from ._errors import StaleLeaseError
from ._exec import Execution as _Exec
from ._exec import calls_usage, memory_shown, settle_owed
from ._gates import _effect
from ._group import GroupCommitter
from ._host import RuntimeHost
from ._proposal import Proposal, Verdict
from ._record_codec import pack as pack_record
from ._record_codec import packed_calls, packed_record, packed_usage, refer_versions
from ._redact import redact
from ._state import Digests, Finding, TaskState, person_edit
from ._usage import Usage
from .store import ClosedApproval, CommitRequest, NewApproval, NewEvent

__all__ = ["NOTES_WINDOW", "Checkpoints"]

NOTES_WINDOW = 100  # the newest notes a state keeps (invariant 8: they would grow every cycle)
# The newest approved proposals' digests a state keeps: every approval is in the store's
# requests, bound to its digest; a run approved every cycle grew every snapshot by 36 bytes a
# cycle (120 KB at cycle 3,000).
APPROVED_WINDOW = 20
# A snapshot's part and plan-step entries per cycle between snapshots, at most (``_stage``):
# with more than ``snapshot_every`` × this, snapshots come every entries ÷ this checkpoints.
SNAPSHOT_SHARE = 20

# What ``_evaluate`` found of a cycle's verdicts, handed to ``_conclude`` (which would
# otherwise find it again from the same inputs): the visible score, whether the cycle
# succeeds, and the proposal's effective digest (None: not computed).
Judged = tuple[float | None, bool, str | None]


class Checkpoints(RuntimeHost):
    """Effects, the cycle's decision and its commit (mixed into ``Runtime``)."""

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
    ) -> bool:
        """Run the cycle's effects (journaled, at most once), then conclude it. ``keys``: the
        calls' keys as a stored write-ahead fixed them (a resumed cycle). ``judged``: what
        ``_evaluate`` found of these verdicts, handed on to ``_conclude``."""
        outcomes: list[EffectOutcome] = []
        if calls:
            # Never start an effect once a budget is crossed (invariant 7).
            crossed = rules.budget_crossed(ex.contract, ex.state.spent)
            if crossed:
                ex.state.pending = None
                return self._abort(
                    ex,
                    t0,
                    crossed,
                    cause=f"crossed before the effects {[c.name for c in calls]} ran",
                    unverified=proposal.to_dict(),
                )
            if not staged:
                # Each call's key is fixed here, as its journal entry will be named: a resume
                # settles this key, whatever the loop's key function says by then (a deploy
                # between a crash and its resume must not pay a second time).
                keys = [key_of(_effect(ex.loop, c), ex.run_id, n, c) for c in calls]
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
                if cancel:  # cancelled while this cycle was verified: pay for nothing
                    self._cancel_now(ex, "cancellation requested before the effects ran")
                    return True
            for i, c in enumerate(calls):
                outcome = await perform_effect(
                    self.store, ex, n, _effect(ex.loop, c), c, fixed=keys[i] if keys else None
                )
                outcomes.append(outcome)
                if outcome.usage is not None:
                    u = Usage(outcome.usage.cost_usd, outcome.usage.tokens, 0.0)
                    ex.calls.append(
                        {"who": f"effect:{c.name}", "cost_usd": u.cost_usd, "tokens": u.tokens}
                    )
                    ex.state.spent = ex.state.spent + u
                stop: tuple[str, str] | None = None
                if outcome.status != "done":
                    stop = ("escalated", outcome.cause)
                elif i + 1 < len(calls):
                    rest = [x.name for x in calls[i + 1 :]]
                    crossed = rules.budget_crossed(ex.contract, ex.state.spent)
                    if crossed:
                        stop = (crossed, f"crossed during effect {c.name}; {rest} not run")
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
    ) -> bool:
        """Decide the cycle by the contract and commit it. Returns True when the run ended.
        What the cycle cost is what its priced calls (``ex.calls``) cost. ``judged``: the
        score, success and effective digest (None: not asked) ``_evaluate`` found of the
        same verdicts, proposal and state, not computed again."""
        if ex.retries:  # (most cycles owe nothing: no call of settle_owed's loop)
            settle_owed(self.store, ex, n)  # a call killed after its answer, not asked again
        old, loop, contract = ex.state, ex.loop, ex.contract
        s = candidate if candidate is not None else old
        effective: str | None = None
        if judged is not None and decision is None:
            score, ok, effective = judged
        else:
            score = rules.aggregate_score(loop.verifiers, visible) if visible else None
            ok = decision is None and rules.success(contract, loop.verifiers, visible, score)
        if decision is None:
            found: list[Finding] = []
            for v in visible.values():  # (a loop and C extends: no comprehension a cycle)
                found.extend(v.findings)
            s.findings = found
            rules.accept_clean_parts(
                s,
                loop.verifiers,
                visible,
                all_parts=ok,
                when_clean=contract.success.accept_parts == "when_clean",
            )
            s.refresh_plan()
        # the checks success needs: those flagged required, or all when none is (as success)
        checks = loop.visible  # (a tuple built each time it is asked: once here)
        required: set[str] = set()
        optional: list[str] = []  # (the visible checks the loop does not require: below)
        for c in checks:  # (one loop, no comprehension a cycle)
            if c.required:
                required.add(c.name)
            else:
                optional.append(c.name)
        if not required:
            required = {c.name for c in checks}
        newly: list[str] = []
        for k, v in visible.items():  # (a loop: no comprehension a cycle)
            if v.passed and k in required and k not in old.passed_checks:
                newly.append(k)
        newly.sort()
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
        elif decision == "asked":
            s.stall = old.stall  # waiting for an answer is not a cycle without progress
        else:
            s.stall = old.stall + 1
        s.passed_checks = sorted(set(old.passed_checks) | set(newly))
        if not ok and not duplicate and decision != "asked":
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
        priced = calls_usage(ex.calls)
        # (a Usage first, as ever: its checks refuse a sum no usage may hold)
        spent = Usage(priced.cost_usd, priced.tokens, s.spent.seconds - old.spent.seconds)
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
            packed_calls(ex.calls),
            # All of them: a call's failed attempts and a judgement made again cost too (the
            # cycle's figure in show, the dashboard and a trace adds up to the run's spend).
            packed_usage(spent.cost_usd, spent.tokens, spent.seconds),
        )
        # The visible checks the loop does not require (``Check.required=False``): replay
        # needs them to judge success and progress as this cycle was judged. Only when there
        # are some, so the common record (every check required) costs nothing more.
        if optional:
            record["not_required"] = optional
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
                },
            )
        )
        if ok:
            s.next_action = ""
            self._finish(ex, "success", record=record, held_out=held_d)
            return True
        edited: list[str] = _failed_edits(s, visible) if decision == "revise" else []
        if edited:
            # A person's version fails a visible check: the actor may not overwrite it (it is
            # accepted), so waiting would only spend the budget. The person decides.
            self._finish(
                ex,
                "escalated",
                record=record,
                held_out=held_d,
                cause="; ".join(edited)
                + " — a person's edit is not overwritten by the loop: edit the part again, "
                "roll back, or accept the run as it is",
            )
            return True
        reason: str | None = None
        if contract.no_progress is not None and s.stall >= contract.no_progress.cycles:
            reason = "no_progress"
        else:
            reason = rules.stop_before_cycle(contract, s)
        if reason is not None:
            self._finish(
                ex,
                reason,
                record=record,
                held_out=held_d,
                evidence={k: dict(v.evidence) for k, v in visible.items()},
            )
            return True
        nxt = s.next_step()
        s.next_action = (f"repair {len(s.findings)} finding(s)" if s.findings else "continue") + (
            f"; next step: {nxt.id}" if nxt else ""
        )
        cancel = self._commit(ex, record, {"status": "running"}, packed=True)
        if cancel:
            self._cancel_now(ex, "cancellation requested")
            return True
        return False

    def _commit_status(self, ex: _Exec, status: str) -> None:
        """A commit that changes only the status (same cycle, same state)."""
        self._commit(ex, None, {"status": status})

    def _commit(
        self,
        ex: _Exec,
        record: dict[str, Any] | None,
        run: dict[str, Any],
        approval: NewApproval | None = None,
        approvals: Sequence[NewApproval] = (),
        closes: Sequence[ClosedApproval] = (),
        *,
        packed: bool = False,
    ) -> bool:
        """Commit ``ex.state`` with the cycle's ``record`` (``packed``: already in its
        stored form, ``pack_record``'s) and run columns ``run``."""
        if ex.lost:
            raise StaleLeaseError(f"run {ex.run_id}: lease lost; another executor owns it")
        if ex.phase is not None:  # (a phase hook is set by the crash tests only)
            ex.at("before_checkpoint")
        s = ex.state
        cols = {
            "cycle": s.cycle,
            "best_score": s.best_score,
            "cost_usd": s.spent.cost_usd,
            "tokens": s.spent.tokens,
            "seconds": s.spent.seconds,
            "lease_expires_at": time.time() + self.lease_ttl_s,
            **run,
        }
        status = cols.get("status")
        if status is not None and status == ex.row_status:
            del cols["status"]  # only this lease's holder writes it: unchanged since
        reqs = [*([approval] if approval is not None else []), *approvals]
        req = self._stage(ex, record, cols, reqs, closes, packed)
        if status is not None:
            ex.row_status = status  # _unstage forgets it if the commit fails
        if self.group_commit and ex.grouped and (self._active > 1 or ex.pending_commit is not None):
            # Several runs share this loop: queue it into the next group commit; the run
            # waits for durability at its next durability point (``_settle``).
            ex.pending_req = req
            ex.pending_commit = self._committer().submit(req)
            ex.seq += 1
            ex.events = []
            return False  # the cancel flag arrives with durability
        try:
            # The request as staged: its record, events and columns are the masked ones.
            cancel = self.store.commit_request(req)
        except BaseException:
            _unstage(ex, req)
            raise
        ex.seq += 1
        ex.events = []
        self._committed(ex)
        return cancel

    def _stage(
        self,
        ex: _Exec,
        record: dict[str, Any] | None,
        cols: dict[str, Any],
        reqs: Sequence[NewApproval],
        closes: Sequence[ClosedApproval] = (),
        packed: bool = False,
    ) -> CommitRequest:
        """The commit of ``ex.state``: a delta from the last head (a full head every
        ``snapshot_every`` checkpoints), the versions not yet written, the new rejected
        digests. What the store will then hold is noted in ``ex`` now (``_unstage`` undoes it
        if the commit fails)."""
        s = ex.state
        if len(s.notes) > NOTES_WINDOW:
            # Notes (effect results, answers, edits...) are a window too: the state, and so the
            # actor's context, keeps the newest; every one is in the events and records.
            del s.notes[:-NOTES_WINDOW]
        if len(s.approved) > APPROVED_WINDOW:
            del s.approved[:-APPROVED_WINDOW]
        seq = ex.seq + 1
        # Only the parts changed since the last checkpoint are looked at (invariant 8 with many
        # parts); a snapshot walks them all, which also makes good anything changed in place
        # behind the state's back (a verifier writing to the candidate).
        changed = s.take_changes()  # the codec reads them in sorted order
        steps = s.take_plan_changes()
        # A snapshot holds an entry per part: with many parts it comes less often, so that
        # its share of each cycle stays about SNAPSHOT_SHARE entries (loading the latest state
        # then reads as many bytes of deltas as of snapshot, at most).
        every = self.snapshot_every
        if ex.head is not None:
            # (the plan's steps count too: a plan that gains a step a cycle grows the snapshot)
            size = len(ex.head["parts"]) + len(ex.head["plan"])
            every = max(every, size // SNAPSHOT_SHARE)
        if ex.head is None or ex.since_base + 1 >= every:
            s.reindex()
            head = codec.head(s)
            state, base = head, None
            ex.base, ex.since_base = seq, 0
            rows, ex.written = codec.unwritten_versions(s, ex.written)
            ex.trim = None
        else:
            head = codec.head(s, ex.head, changed, steps)
            hints: dict[str, Collection[Any]] = {"parts": changed}
            if steps is not None:
                hints["plan"] = steps
            best = s.best_diff(ex.head["best_parts"])
            if best is not None:
                hints["best_parts"] = best
            state, base = codec.delta(ex.head, head, hints), ex.base
            ex.since_base += 1
            rows, ex.written = codec.unwritten_versions(s, ex.written, changed)
            ex.trim = changed
        # (``_Exec.adopt`` made it a Digests: every execution is adopted before it commits)
        # (typed by the annotation: ``typing.cast`` is a Python call a cycle)
        staged: Digests = s.rejected  # type: ignore[assignment]
        added, ex.rejected_written = staged.since(ex.rejected_written)
        rejected = []
        for d in added:  # (a loop: no comprehension a cycle)
            rejected.append((d, s.cycle))
        cleared: list[str] = []
        if ex.retries and record is not None:
            # A call's billing journaled ahead of its cycle (``call_with_retry``) is charged by
            # this commit, which records the cycle: the entry goes with it, so the journal does
            # not grow a row a billed call (read back, it would count as charged anyway). One
            # that also counts failed attempts stays, as the record of invariant 4's bound.
            n = record.get("cycle")
            cleared = [
                k
                for k, e in ex.retries.items()
                if e.status == "settled" and e.cycle == n and not e.attempts
            ]
        elif ex.retries and cols.get("ended_at") is not None:
            # A run ended inside (or before) the cycle after its last checkpoint: what that
            # cycle's calls were billed is charged (``settle_owed``, ``call_with_retry``) and
            # the entries go with this commit; left, a run reopened later (an edit) would
            # charge them again, its cycle never recorded.
            n = s.cycle + 1
            cleared = [
                k
                for k, e in ex.retries.items()
                if e.status == "settled" and e.cycle == n and k in ex.asked
            ]
        for k in cleared:
            del ex.retries[k]
        ex.head = head
        if record is not None and rows:
            # A large edit value is the new version's value: stored there only (its edit names
            # it), so a cycle writes its new work once (_record_codec, issue 14's bytes).
            # One holding what the redaction net masks stays in the record (masked below): the
            # record would read the version's value back, unmasked (invariant 9).
            record = refer_versions(record, rows, _unmasked)
        # Invariant 9, the last net before the store: what the engine records about the cycle
        # (proposal, verdicts, errors, packet, events) with secrets masked. Part values and the
        # task are the work itself and are not rewritten (the task was masked at creation).
        stored, events, run = _masked(record, ex.events, cols, packed)
        # (every field by position: a class called with keywords goes through a dict of them,
        # about a microsecond a call more; the order is CommitRequest's)
        return CommitRequest(
            ex.run_id,
            ex.token,
            seq,
            s.cycle,
            state,
            stored,
            events,
            run,
            [_masked_request(a) for a in reqs] if reqs else reqs,
            base,
            rows,
            rejected,
            True,  # packed
            closes,
            ex.forget_rejected_after,
            cleared,
        )

    def _committed(self, ex: _Exec) -> None:
        # Durable: versions the engine no longer needs can leave memory (the store has them).
        ex.state.trim(ex.trim, ex.loader)
        digests = ex.state.rejected
        if len(digests) >= 2 * state_mod.REJECTED_WINDOW and ex.pending_commit is None:
            # every digest staged is written: the older ones may leave memory
            cast(Digests, digests).durable(ex.rejected_written)
        if ex.phase is not None:  # (a phase hook is set by the crash tests only)
            ex.at("after_checkpoint")
        if self._live is not None:
            # Live tracing: the spans this durable commit started or completed go out now
            # (trace/_live.py; it never raises into the run). What had ended by the commit
            # this execution opened the run at was sent then; an operation ends its session.
            self._live.committed(ex.run_id, opened_at=ex.opened_at, session_ends=ex.operation)
        if self.on_progress is not None:
            with contextlib.suppress(Exception):
                self.on_progress(self.store.get_run(ex.run_id))

    def _committer(self) -> GroupCommitter:
        loop = asyncio.get_running_loop()
        if self._group is None or self._group.loop is not loop:
            self._group = GroupCommitter(self.store)
        return self._group

    async def _settle(self, ex: _Exec) -> bool:
        """Wait until the run's queued commits are durable; returns the cancel flag."""
        fut = ex.pending_commit
        if fut is None:
            return False
        try:
            cancel = await fut
        except StaleLeaseError:
            ex.lost = True
            raise
        except Exception:
            # Not written: what it carried is still to be written (checkpoints stay contiguous).
            req = ex.pending_req
            if req is not None:
                ex.seq = req.seq - 1
                ex.events = [*req.events, *ex.events]
                _unstage(ex, req)
            raise
        finally:
            if ex.pending_commit is fut:
                ex.pending_commit = None
                ex.pending_req = None
        self._committed(ex)
        return cancel


_KIND = operator.methodcaller("get", "kind")
_DATA = operator.attrgetter("data")


def _failed_edits(s: TaskState, visible: Mapping[str, Verdict]) -> list[str]:
    """For each part whose current version a person wrote and a visible check's error finding
    touches: who edited it and what the check says."""
    # Every cycle asks, over up to NOTES_WINDOW notes: a scan in C, no Python call per note.
    if "edit" not in map(_KIND, s.notes):
        return []
    out: list[str] = []
    for name, verdict in visible.items():
        for f in verdict.findings:
            if f.severity != "error" or f.artifact is None or f.part is None:
                continue
            ref = f"{f.artifact}/{f.part}"
            note = person_edit(s, ref)
            if note is not None:
                out.append(
                    f"{note.get('by')}'s version of {ref} (v{note.get('version')}) fails the "
                    f"visible check {name}: {f.message}"
                )
    return out


# The types of a run column ``redact`` has nothing to mask in (it never masks a number).
_PLAIN = frozenset((int, float, bool, type(None)))


def _masked(
    record: dict[str, Any] | None,
    events: Sequence[NewEvent],
    cols: dict[str, Any],
    packed: bool = False,
) -> tuple[dict[str, Any] | None, list[NewEvent], dict[str, Any]]:
    """``record`` in its stored form (``pack_record``; ``packed``: it is already), ``events``
    and ``cols`` with secrets masked: one ``redact`` over all three (its clean-case scan is
    one pass, so one call costs less than one per event)."""
    # The scan's cost follows the length of the text it reads: the packed record leaves out
    # the defaults (about 40 % of a trivial cycle's record), which hold nothing to mask, and
    # columns that are all numbers are passed over (``redact`` never masks a number).
    if record is not None and not packed:
        record = pack_record(record)
    datas = list(map(_DATA, events))
    plain = _PLAIN.issuperset(map(type, cols.values()))  # (a C loop: no call a column)
    whole = [record, datas, None if plain else cols]
    out = redact(whole)
    if out is whole:
        return record, list(events), cols
    if plain:
        out[2] = cols
    rec, masked, c = out
    return (
        rec,
        [
            e if d is e.data else NewEvent(e.cycle, e.kind, d)
            for e, d in zip(events, masked, strict=True)
        ],
        c,
    )


def _unmasked(value: Any) -> bool:
    """Whether the redaction net leaves ``value`` as it is (nothing in it to mask)."""
    whole = [value]
    return redact(whole) is whole


def _masked_request(a: NewApproval) -> NewApproval:
    """An approval request as stored and shown: what it asks, why, its evidence (the actor's
    note, findings) and its diff, secrets masked. Its ``action_hash`` binds it to the exact
    action whatever the display says."""
    shown = (a.what, a.why, a.evidence, a.diff)
    masked = redact(shown)
    if masked is shown:
        return a
    what, why, evidence, diff = masked
    return dataclasses.replace(a, what=what, why=why, evidence=evidence, diff=diff)


def _unstage(ex: _Exec, req: CommitRequest) -> None:
    """``req`` was not written: the next commit is a full snapshot with every version held in
    memory and the digests ``req`` carried (written again where they were: harmless)."""
    ex.head = None
    ex.written = {}
    ex.row_status = None
    ex.rejected_written -= len(req.rejected)


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
