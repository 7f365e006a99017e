"""A cycle's checkpoint: ``_commit`` (one atomic commit fenced by the run's lease token,
queued into a group commit when several runs share the event loop; ``_stage`` builds it, masked
by the redaction net) and ``_settle``, which waits for its durability. What a cycle commits is
concluded first (``_conclude``: effects → decide).
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import time
from collections.abc import Sequence
from typing import Any, cast

from . import _digests
from . import _state_codec as codec
from ._errors import StaleLeaseError, StoreError
from ._exec import Execution as _Exec
from ._group import GroupCommitter
from ._host import RuntimeHost
from ._record_codec import pack as pack_record
from ._record_codec import refer_versions
from ._redact import redact, redact_unique
from ._redact_logs import masked_logger
from ._state import Digests
from ._usage import MAX_RUN_TOKENS, Usage
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


class Checkpoints(RuntimeHost):
    """A cycle's commit and its durability (mixed into ``Runtime``)."""

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
        if s.spent.tokens > MAX_RUN_TOKENS:
            # a total no store holds (a cycle's calls charged on a park or an end before
            # ``_conclude`` checks them): kept at the bound, not failed in the commit (stop 52)
            s.spent = Usage._stored(s.spent.cost_usd, MAX_RUN_TOKENS, s.spent.seconds)
        cols = {
            "cycle": s.cycle,
            "best_score": s.best_score,
            "cost_usd": s.spent.cost_usd,
            "tokens": s.spent.tokens,
            "seconds": s.spent.seconds,
            "lease_expires_at": time.time() + self.lease_ttl_s,
            **run,
        }
        if ex.unfolded is not None:
            # the run's fenced spend this execution charged at resume, taken off the row by
            # the commit that writes it charged (once: ``_unstage`` puts it back if unwritten)
            cols.update(ex.unfolded)
            ex.unfolded = None
        status = cols.get("status")
        if status is not None and status == ex.row_status:
            del cols["status"]  # only this lease's holder writes it: unchanged since
        reqs = [*([approval] if approval is not None else []), *approvals]
        req = self._stage(ex, record, cols, reqs, closes, packed)
        if status is not None:
            ex.row_status = status  # _unstage forgets it if the commit fails
        if ex.grouped and (
            (self.group_commit and (self._active > 1 or ex.pending_commit is not None))
            or self.store.concurrent_writers
        ):
            # Several runs share this loop: queue it into the next group commit; the run
            # waits for durability at its next durability point (``_settle``). A store whose
            # write can wait on a row lock (``Store.concurrent_writers``) is written so with
            # one run too, or without group commit (batches of one): from a thread, while the
            # event loop goes on (evloop53).
            if ex.pending_commit is not None and ex.pending_req is not None:
                # (one not settled yet: kept, so that its failure is undone too)
                earlier = (ex.pending_req, ex.pending_commit)
                ex.queued = [*ex.queued, earlier] if ex.queued else [earlier]
            ex.pending_req = req
            ex.pending_commit = self._committer().submit(req)
            ex.seq += 1
            ex.events = []
            return False  # the stop flag (a cancel, a pause) arrives with durability
        ex.pending_req = None  # (a durable one, kept by _settle: see there)
        try:
            # The request as staged: its record, events and columns are the masked ones.
            cancel = self.store.commit_request(req)
        except BaseException:
            _unstage(ex, req)
            raise
        ex.seq += 1
        ex.events = []
        ex.charged = req.run  # (durable: what a word fenced out later leaves out)
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
            head, state = codec.advance(s, ex.head, changed, steps)
            base = ex.base
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
        if record is not None:
            # A large edit value is the new version's value: stored there only (its edit names
            # it), so a cycle writes its new work once (_record_codec, issue 14's bytes).
            # One holding what the redaction net masks stays in the record (masked below): the
            # record would read the version's value back, unmasked (invariant 9).
            # A large value sent again unchanged (no new version) names the stored version
            # that holds it: carried inline, it was written, and scanned by the net, every
            # cycle (bench/concurrent_runs.py: a 1.5 KB part, 10 % of its cycle's CPU).
            written = ex.written

            def held(ref: str, value: Any) -> int | None:
                return codec.stored_version(s, written, ref, value)

            record = refer_versions(record, rows, _unmasked, held)
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
        if len(digests) >= 2 * _digests.REJECTED_WINDOW and ex.pending_commit is None:
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
            try:
                rec = self.store.get_run(ex.run_id)
            except StoreError:
                # the store's failure, not the callback's: not said as "on_progress raised"
                # (that used up the one warning, and the callback's own error went unsaid);
                # the run's next write meets the store as it is, and says so
                return
            try:
                self.on_progress(rec)
            except Exception:
                # The run goes on, but the first failure is said (api49): it was swallowed with
                # no word, so a callback reading ``rec.cycles`` (RunResult's name; a RunRecord's
                # is ``cycle``) showed nothing, ever, and nothing said why.
                if not self._progress_said:
                    self._progress_said = True
                    masked_logger("loopwright.runs").warning(
                        "on_progress raised (the run goes on; its later errors are not logged)",
                        exc_info=True,
                    )

    def _committer(self) -> GroupCommitter:
        loop = asyncio.get_running_loop()
        if self._group is None or self._group.loop is not loop:
            self._group = GroupCommitter(self.store, together=self.group_commit)
        return self._group

    async def _settle(self, ex: _Exec) -> bool:
        """Wait until the run's queued commits are durable; returns the stop flag (a cancel
        or a pause: ``_pause._stop_asked``)."""
        fut = ex.pending_commit
        if fut is None:
            return False
        earlier = ex.queued
        try:
            cancel = await fut
            if earlier is not None:
                _unwritten(earlier, None)  # (each batch ended before the next: all known)
        except StaleLeaseError:
            ex.lost = True
            _unwritten(earlier, None)  # (read: the run is lost, nothing is undone)
            raise
        except Exception:
            # Not written: what it carried is still to be written (checkpoints stay contiguous),
            # with every commit queued after the first that failed (the store writes none of a
            # run's commits after a failed one: deltas on it).
            req = ex.pending_req
            if req is not None:
                lost = _unwritten(earlier, req)
                ex.seq = lost[0].seq - 1
                events: list[NewEvent] = []
                for r in lost:
                    events += r.events
                    _unstage(ex, r)
                ex.events = [*events, *ex.events]
            raise
        finally:
            if ex.pending_commit is fut:
                ex.queued = None
                # (``pending_req`` is kept until the next commit replaces it: only read while
                # ``pending_commit`` is set. Freed here, the requests of a hundred runs went
                # in one lump a batch, all before any of their next cycles began, and the
                # collector counted only those cycles' objects: a young-generation collection
                # every few runs, and promotions, instead of every few hundred cycles.)
                ex.pending_commit = None
        if ex.pending_req is not None:  # (the last queued, durable now: what it charged)
            ex.charged = ex.pending_req.run
        self._committed(ex)
        return cancel


_DATA = operator.attrgetter("data")


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
    # A cycle's record names its cycle: its text is never scanned twice, and is not kept
    # among the texts the net found clean (``redact_unique``; one hash of it less a cycle).
    out = redact_unique(whole) if record is not None else redact(whole)
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


def _unwritten(
    earlier: list[tuple[CommitRequest, asyncio.Future[bool]]] | None, last: CommitRequest | None
) -> list[CommitRequest]:
    """Of a run's commits queued since its last durability point (``earlier``, then ``last``,
    which failed; None: it was written), those not written: from the first that failed on.
    Every future of ``earlier`` is read (a failure no one reads is logged by asyncio)."""
    lost: list[CommitRequest] = []
    for req, fut in earlier or ():
        failed = fut.done() and not fut.cancelled() and fut.exception() is not None
        if lost or failed:
            lost.append(req)
    if last is not None:
        lost.append(last)
    return lost


def _unstage(ex: _Exec, req: CommitRequest) -> None:
    """``req`` was not written: the next commit is a full snapshot with every version held in
    memory and the digests ``req`` carried (written again where they were: harmless)."""
    ex.head = None
    ex.written = {}
    ex.row_status = None
    ex.rejected_written -= len(req.rejected)
    if "fenced_cost_usd" in req.run:  # (the fenced spend it took off: still the row's)
        ex.unfolded = {k: v for k, v in req.run.items() if k.startswith("fenced_")}
