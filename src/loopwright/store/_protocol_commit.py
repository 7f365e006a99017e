"""The Store protocol's writes of checkpoints (one commit, a built request, a group commit)
and the run's event log, appended and read (``CommitStore``, part of ``Store``)."""

from __future__ import annotations

import contextlib
import threading
import time
from abc import abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from .._errors import (
    ApprovalError,
    ConflictError,
    StaleLeaseError,
    StoreError,
    StoreUnavailableError,
)
from .._record_codec import fill_versions, referred_versions
from .._record_codec import unpack as unpack_record
from ._protocol_approvals import ApprovalsStore
from ._records import CommitRequest, Event, NewApproval, NewEvent, VersionRow

if TYPE_CHECKING:
    from ._base import Store

__all__ = ["BRIEF_LOCK_WAITS", "BRIEF_LOCK_WAIT_S", "CommitStore", "RowLocked", "RunBusy"]


class RunBusy(StoreError):
    """A commit of ``commit_many`` left out of its batch: its run's row is held locked by
    another session (PostgreSQL: a ``cancel``, the dashboard, a person in ``psql`` inside a
    transaction), so nothing of it was written; the others of the batch were. The group
    committer writes it again alone, waiting on the lock there while the other runs go on
    (evloop53). Only a batch of several runs leaves one out: a lone commit waits."""


class RowLocked(StoreUnavailableError):
    """A write made in a store thread (``_store_threads``) that waited past ``BRIEF_LOCK_WAIT_S``
    for a row another session holds locked (PostgreSQL: a ``cancel``, the dashboard, a person
    in ``psql`` inside a transaction): rolled back whole, nothing of it written, its connection
    given back to the pool. Tried again later (``in_store_thread``, the group committer), so
    that writes waiting on rows locked elsewhere never hold every pooled connection, nor every
    batch the committer writes at once (evloop53b)."""


# How long a write made in a store thread waits for a row lock before ``RowLocked``.
BRIEF_LOCK_WAIT_S = 0.25


class _BriefLockWaits(threading.local):
    on = False


# Set in the store threads (``_store_threads``): the writes made there wait for a row lock only
# ``BRIEF_LOCK_WAIT_S`` at a time (PostgreSQL); a store without row locks ignores it.
BRIEF_LOCK_WAITS = _BriefLockWaits()


class CommitStore(ApprovalsStore):
    """Checkpoints committed, fenced by the lease's token, and the event log (mixed into
    ``Store``)."""

    # --- checkpoints: writing -------------------------------------------------------------
    @abstractmethod
    def commit(
        self,
        run_id: str,
        token: int,
        *,
        seq: int,
        cycle: int,
        state: dict[str, Any],
        record: dict[str, Any] | None,
        events: Sequence[NewEvent],
        run: Mapping[str, Any],
        approval: NewApproval | None = None,
        approvals: Sequence[NewApproval] = (),
        base: int | None = None,
        versions: Sequence[VersionRow] = (),
        rejected: Sequence[tuple[str, int]] = (),
    ) -> bool:
        """Atomically: write checkpoint ``seq`` (a full state, or with ``base`` the delta from
        checkpoint ``seq - 1``), the version rows and rejected digests given, append events,
        update the run's columns given in ``run``, and persist the approval requests given
        (``approval`` and every one of ``approvals``). Rejects a stale ``token`` with
        ``StaleLeaseError`` and writes nothing then. Returns whether a person asked the run to
        stop: cancellation requested, or (the built-in stores) a request pending on it as the
        commit fenced it, which for a run executing is a person's pause (``request_pause``); a
        store that reports cancellation only has a paused run park when it next resumes."""

    def commit_request(self, it: CommitRequest) -> bool:
        """``commit`` of one request built already (the engine's: its record, events and run
        columns are the masked ones). Stores override it to skip building it again; ``commit``
        is given the record whole, as ever (a packed one is unpacked first)."""
        if it.forget_rejected_after is not None and (
            type(self).forget_rejected is CommitStore.forget_rejected
        ):  # refused before anything is written, not after the commit
            raise StoreError(
                f"{type(self).__name__} implements neither commit_request nor "
                "forget_rejected: a rollback's commit cannot forget what the abandoned "
                "cycles rejected (docs/storage.md)"
            )
        record = it.record
        if it.packed and record is not None:
            record = unpack_record(record)
        if record is not None and it.versions:
            # ``commit`` is given the record whole: an edit that names a version written with
            # it (``_record_codec.refer_versions``) holds its value again.
            record = fill_versions(record, {(v[0], v[1]): v[4] for v in it.versions})
        left = referred_versions(record) if record is not None else []
        if left and record is not None:
            # an edit that wrote a part's value again names the version stored before that
            # holds it (``refer_versions``'s ``held``): read back from this store
            rows = cast("Store", self)._version_rows(it.run_id, keys=left)
            record = fill_versions(record, {(v[0], v[1]): v[4] for v in rows})
        flag = self.commit(
            it.run_id,
            it.token,
            seq=it.seq,
            cycle=it.cycle,
            state=it.state,
            record=record,
            events=it.events,
            run=it.run,
            approvals=it.approvals,
            base=it.base,
            versions=it.versions,
            rejected=it.rejected,
        )
        # ``commit`` takes no closures: here they follow it (the built-in stores write them in
        # its transaction), as does a rollback's forgetting (``forget_rejected``; this
        # commit's own rejected digests are kept).
        if it.forget_rejected_after is not None:
            self.forget_rejected(
                it.run_id, it.forget_rejected_after, keep=[d for d, _c in it.rejected]
            )
        for c in it.closes:
            with contextlib.suppress(ApprovalError):
                self.decide_approval(
                    c.approval_id, status="cancelled", by=c.by, note=c.note, now=time.time()
                )
        return flag

    def forget_rejected(self, run_id: str, after_cycle: int, *, keep: Collection[str] = ()) -> None:
        """Forget the run's rejected digests of the cycles after ``after_cycle`` (a
        rollback's, ``CommitRequest.forget_rejected_after``), but those in ``keep``. The
        default ``commit_request`` calls it just after ``commit``, keeping that commit's own
        rejected digests; a store that implements only ``commit`` must implement it too (its
        rollbacks are refused otherwise). The built-in stores forget in the commit's
        transaction."""
        raise NotImplementedError(f"{type(self).__name__}.forget_rejected")

    def commit_many(self, items: Sequence[CommitRequest]) -> list[bool | StoreError]:
        """Group commit: several runs' commits, ideally in one transaction (one sync to disk).
        Each is fenced on its own; the result per item is ``commit``'s flag, or the
        ``StaleLeaseError``/``ConflictError`` that refused it (nothing of it written). This
        default commits them one by one; stores override it with one transaction."""
        out: list[bool | StoreError] = []
        for it in items:
            try:
                out.append(self.commit_request(it))
            except (StaleLeaseError, ConflictError) as exc:
                out.append(exc)
        return out

    def iter_events(self, run_id: str) -> Iterator[Event]:
        """The run's events, oldest first, as ``events`` returns them; a store that can reads
        them a page at a time."""
        yield from self.events(run_id)

    @abstractmethod
    def append_events(self, run_id: str, events: Sequence[NewEvent]) -> None:
        """Append events outside a cycle (resumed, approval decided...)."""

    def add_fenced_spend(
        self,
        run_id: str,
        spent: Mapping[str, Any],
        events: Sequence[NewEvent] = (),
        *,
        lease: int | None = None,
    ) -> None:
        """Add what an execution fenced out of the run spent and no commit charged
        (``spent``: ``cost_usd``, ``tokens``, ``seconds``, the held-out share under
        ``held_out``) to the run's ``fenced`` spend (``RunRecord.fenced``, in its totals), and
        append ``events`` (its word), in one transaction, with no lease: the executor taken
        over writes it, to a run open or ended. A commit whose run columns name ``fenced_*``
        takes those amounts off (what its execution charged of it). ``lease``: the fenced-out
        execution's, which names its word: a word said again (its first write durable, its
        answer lost: ``StoreUnavailableError``) writes nothing, so its bills are added once.

        This default, for a store of one's own that keeps no fenced spend (its ``RunRecord``
        has no ``fenced``): the word alone, saying the bills as ``spent``, which the run's next
        resume charges, if one comes (crash55b); nothing for an ended run."""
        said = [
            NewEvent(
                e.cycle,
                e.kind,
                {**{k: v for k, v in e.data.items() if k != "fenced"}, "spent": dict(spent)},
            )
            if "fenced" in e.data
            else e
            for e in events
        ]
        if said:
            self.append_events(run_id, said)

    @abstractmethod
    def events(self, run_id: str, *, after_id: int = 0) -> list[Event]:
        """A run's events in order."""

    # A reader that follows a run as it is written (``Runtime.events``, trace/_follow.py)
    # reads it a page at a time from where it is, and finds where a reconnecting reader left
    # off by its position. These defaults read the whole log; the built-in stores ask for a
    # page on the (run_id, id) index.
    def events_page(self, run_id: str, *, after_id: int, limit: int) -> list[Event]:
        """Up to ``limit`` of the run's events with an id above ``after_id``, oldest first."""
        return self.events(run_id, after_id=after_id)[:limit]

    def event_id_at(self, run_id: str, seq: int) -> int | None:
        """The id of the run's ``seq``-th event (1-based, the trace's ``seq``); ``None``
        when its log holds fewer."""
        for n, e in enumerate(self.iter_events(run_id), 1):
            if n == seq:
                return e.id
        return None

    # A reader that follows a long run from its end (the live tracer of a resumed session,
    # trace/_live.py) reads what it needs of the log's start through these five, not the
    # whole log. These defaults read the whole log; the built-in stores ask for what is
    # needed (the end of the log by its index; counts and a few rows for the rest).
    def events_tail(self, run_id: str, *, before_id: int | None, limit: int) -> list[Event]:
        """Up to ``limit`` of the run's events with an id below ``before_id`` (``None``: any),
        newest first: its log read backwards, a page at a time."""
        evs = [e for e in self.events(run_id) if before_id is None or e.id < before_id]
        return evs[::-1][:limit]

    def event_counts(self, run_id: str) -> dict[str, int]:
        """How many events of each kind the run's log holds (a run page's counts and kind
        list, without reading the log into Python)."""
        out: dict[str, int] = {}
        for e in self.iter_events(run_id):
            out[e.kind] = out.get(e.kind, 0) + 1
        return out

    def events_of_kinds(
        self, run_id: str, kinds: Collection[str], *, limit: int | None = None
    ) -> list[Event]:
        """The run's newest ``limit`` (``None``: all) events of the kinds in ``kinds``,
        oldest first."""
        evs = [e for e in self.iter_events(run_id) if e.kind in kinds]
        # (max: a limit over the count must not make the slice's start negative, from the end)
        return evs if limit is None else evs[max(0, len(evs) - limit) :] if limit > 0 else []

    def events_of_runs(
        self, run_ids: Collection[str], kinds: Collection[str], *, since: str | None = None
    ) -> dict[str, list[Event]]:
        """The events of the kinds in ``kinds`` of each run in ``run_ids`` (oldest first; a
        run with none is left out): a listing of many runs' requests reads them at once (the
        built-in stores, in one query). ``since``: only those after each run's newest event
        of that kind (none where the run has none), read from the end of its log."""
        out: dict[str, list[Event]] = {}
        for rid in dict.fromkeys(run_ids):
            evs = self.events_of_kinds(rid, {*kinds, since} if since else kinds)
            if since is not None:
                last = max((i for i, e in enumerate(evs) if e.kind == since), default=None)
                evs = [] if last is None else [e for e in evs[last + 1 :] if e.kind in kinds]
            if evs:
                out[rid] = evs
        return out

    def event_positions(
        self, run_id: str, *, before_id: int, skip: Collection[str]
    ) -> tuple[int, list[tuple[int, Event]]]:
        """How many of the run's events have an id below ``before_id``, and those among them
        not of the kinds in ``skip``, with their 1-based positions in the run's log, oldest
        first."""
        evs = [e for e in self.events(run_id) if e.id < before_id]
        return len(evs), [(i, e) for i, e in enumerate(evs, 1) if e.kind not in skip]

    def in_cycle(self, run_id: str, *, event_id: int, cycle: int) -> bool:
        """Whether an occurrence of ``cycle`` is open at the event ``event_id``: of the
        events before it, the last ``cycle_started`` or ``decision`` of that cycle, or
        ``stopped``/``rolled_back``, is a ``cycle_started``."""
        last = None
        for e in self.events(run_id):
            if e.id >= event_id:
                break
            if e.kind in ("stopped", "rolled_back") or (
                e.cycle == cycle and e.kind in ("cycle_started", "decision")
            ):
                last = e.kind
        return last == "cycle_started"

    def next_start(self, run_id: str, *, after_id: int, before_id: int, cycle: int) -> int | None:
        """The cycle of the first ``cycle_started`` between the events ``after_id`` and
        ``before_id`` (both left out) of ``cycle`` or a later one; ``None``: none."""
        for e in self.events(run_id, after_id=after_id):
            if e.id >= before_id:
                break
            if e.kind == "cycle_started" and e.cycle >= cycle:
                return e.cycle
        return None

    def cycle_starts(
        self, run_id: str, *, before_id: int, cycles: Collection[int]
    ) -> dict[int, int]:
        """How many times each of ``cycles`` started (``cycle_started`` events) before the
        event ``before_id``; a cycle that never did is left out."""
        out: dict[int, int] = {}
        for e in self.events(run_id):
            if e.id < before_id and e.kind == "cycle_started" and e.cycle in cycles:
                out[e.cycle] = out.get(e.cycle, 0) + 1
        return out


def after_failed(it: CommitRequest, first: StoreError, batch: bool = True) -> StoreError:
    """The refusal of a commit not written because an earlier one of its run under the same
    lease token failed (in the batch; ``batch=False``: in an earlier group commit, whose
    committer refuses it): stale, as the earlier was, when its token was."""
    said = (
        f"run {it.run_id}: commit of checkpoint {it.seq} not written: an earlier commit of "
        f"this run {'in the same batch' if batch else 'in the group commit'} failed"
    )
    if isinstance(first, StaleLeaseError):
        return StaleLeaseError(f"{said} (fencing token {it.token} is stale)")
    return StoreError(said)
