"""The Store protocol: everything the engine persists goes through these methods.

The engine relies on transactions only (never on file locks or SQLite quirks), so a PostgreSQL
implementation can satisfy the same protocol. Every write that belongs to a running run carries
the run's fencing token; a store must reject a write whose token is not the current one.
"""

from __future__ import annotations

import contextlib
import functools
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Self, cast

from .. import _state_codec as codec
from .._errors import (
    ApprovalError,
    ConflictError,
    RunNotFoundError,
    StaleLeaseError,
    StoreError,
)
from .._json import dumps
from .._record_codec import fill_versions
from .._record_codec import unpack as unpack_record
from .._state import PartStatus, Version, VersionLoader
from ._live import LiveStore
from ._people import PeopleStore
from ._records import (  # noqa: F401  (re-exported: their home before the split)
    VERSION_COST,
    Approval,
    Checkpoint,
    CheckpointRow,
    ClosedApproval,
    CommitRequest,
    EffectClaim,
    EffectReuse,
    Event,
    JournalEntry,
    MemoryFound,
    MemoryRecall,
    MemorySearch,
    NewApproval,
    NewEvent,
    RunRecord,
    VersionRow,
    concluded_cycles,
    own_fields,
)

__all__ = [
    "Approval",
    "Checkpoint",
    "CheckpointRow",
    "CommitRequest",
    "Event",
    "JournalEntry",
    "MemoryFound",
    "MemoryRecall",
    "MemorySearch",
    "NewApproval",
    "NewEvent",
    "RunRecord",
    "Store",
    "VersionRow",
]


def _folded(rows: Sequence[CheckpointRow], base: int, i: int) -> dict[str, Any]:
    """The state of ``rows[i]``: the snapshot ``rows[base]`` (-1: none) with the deltas after
    it up to ``i`` applied."""
    return codec.fold(
        rows[base].state if base >= 0 else {}, [r.state for r in rows[base + 1 : i + 1]]
    )


def with_newer(fn: Callable[..., Any], kwargs: Mapping[str, Any], newer: Mapping[str, Any]) -> Any:
    """``fn(**kwargs)`` plus the keywords of ``newer`` that are set (not None), or None when a
    store's method has an older signature (a ``TypeError`` naming one of them): the caller
    then applies them itself. Keywords a release added to a Store method are passed so, and
    only when used, so a third-party store written against the older method keeps working."""
    extra = {k: v for k, v in newer.items() if v is not None}
    if extra.keys() & kwargs.keys():
        raise TypeError(f"with_newer: {sorted(extra.keys() & kwargs.keys())} given twice")
    if not extra:
        return fn(**kwargs)
    try:
        return fn(**kwargs, **extra)
    except TypeError as exc:
        if not any(f"'{k}'" in str(exc) for k in extra):
            raise
        return None


def approvals_matching(rows: list[Approval], search: str | None) -> list[Approval]:
    """The requests ``search`` finds (``Store.page_approvals``), in their order."""
    needle = (search or "").strip().lower()
    if not needle:
        return list(rows)
    return [
        a
        for a in rows
        if a.approval_id.lower().startswith(needle)
        or a.run_id.lower().startswith(needle)
        or any(needle in (x or "").lower() for x in (a.what, a.why, a.rule, a.kind))
    ]


class Store(LiveStore, PeopleStore, ABC):
    """Durable storage for runs, checkpoints, events and approvals."""

    url: str

    # --- runs ---------------------------------------------------------------------------
    @abstractmethod
    def create_run(
        self,
        *,
        run_id: str,
        task_key: str,
        loop_name: str,
        project: str,
        spec_ref: str | None,
        loop_version: str | None,
        contract: dict[str, Any],
        task: dict[str, Any],
        initial_state: dict[str, Any],
        initial_versions: Sequence[VersionRow] = (),
        forked_from: tuple[str, int] | None = None,
        inherited: Sequence[JournalEntry] = (),
        initial_rejected: Sequence[tuple[str, int]] = (),
        created_by: str | None = None,
        copy_versions: Sequence[tuple[str, str, int]] = (),
        copy_effects: tuple[str, int] | None = None,
        copy_rejected: tuple[str, int] | None = None,
        fork_seq: int | None = None,
    ) -> tuple[RunRecord, bool]:
        """Create a run with its first checkpoint (a full state, and its version rows), or
        return the existing run with that ``task_key``. Returns ``(run, created)``.

        ``copy_versions`` (a fork's: ``(origin_run_id, ref, upto)`` each) copies the origin's
        stored versions 1..``upto`` of part ``ref`` to the new run, in the same transaction,
        before ``initial_versions`` are written over them (``LookupError`` when one is
        missing). A store whose ``create_run`` predates it is given every version in
        ``initial_versions`` instead (``Runtime.fork`` asks through ``with_newer``).

        ``copy_effects`` (a fork's: ``(origin_run_id, upto_cycle)``) copies, in the same
        transaction, the origin's done effect entries (``kind="effect"``, ``status="done"``)
        of cycles up to ``upto_cycle``, written as ``inherited`` writes them (their data with
        ``inherited_from``: the origin's own when set, else the origin's run id), none read
        into Python (not with ``inherited`` too: one key each). A store whose ``create_run``
        predates it is given them as ``inherited``.

        ``copy_rejected`` (a fork's: ``(origin_run_id, upto_cycle)``) copies, in the same
        transaction, the digests the origin rejected up to ``upto_cycle``, as
        ``initial_rejected`` writes them, none read into Python. A store whose ``create_run``
        predates it is given them as ``initial_rejected``.

        ``fork_seq`` (a fork's): the ``seq`` of the origin's checkpoint the fork starts from,
        kept in the fork's ``run_created`` event (``data["forked_from"]["seq"]``), so that what
        the fork inherited is found by it, not by comparing times written on two hosts'
        clocks. A store whose ``create_run`` predates it is not given it (``Runtime.fork``
        asks through ``with_newer``); its forks are found by time, as before.

        A fork (``forked_from=(run_id, cycle)``) is created in the same one transaction with
        the origin's journal entries it inherits (``inherited``: done effects, kept under their
        keys and marked inherited, so they are not done again) and the digests of proposals
        the origin rejected up to that cycle (``initial_rejected``). ``created_by``: the
        person who started it, when known (the requester, for separation of duties)."""

    @abstractmethod
    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id, or with an id starting with this prefix (unique), or with this
        task key. Raises ``RunNotFoundError``, also when ``run_id`` is one run's task key and,
        8 characters or more, the start of another run's id (a whole run id always names its
        run). A prefix is compared as written."""

    @abstractmethod
    def list_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        limit: int | None = None,
        stop_reason: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first (by ``created_at``, then ``run_id``). ``search``: a
        case-insensitive substring of the task key, loop, project, stop reason or packet, or a
        run id prefix; ``after``: the ``(created_at, run_id)`` of the last run of the previous
        page (keyset pagination); ``since``/``until``: epoch seconds, ``since ≤ created_at ≤
        until`` (either optional), selected by the database, so a window reads only its runs."""

    @abstractmethod
    def count_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        stop_reason: str | None = None,
        search: str | None = None,
    ) -> int:
        """How many runs ``list_runs`` would return with these filters and no limit."""

    def run_projects(self) -> list[str]:
        """The distinct non-empty projects of the runs, sorted."""
        return sorted({r.project for r in self.list_runs() if r.project})

    def first_accepted(self, loop_names: Sequence[str]) -> dict[tuple[str, str], float]:
        """(loop name, loop version) → the earliest ``ended_at`` of an accepted run of it, over
        the whole store, for the loops named (runs without a version or an end are left out)."""
        first: dict[tuple[str, str], float] = {}
        for name in sorted(set(loop_names)):
            for r in self.list_runs(status="accepted", loop_name=name):
                if r.ended_at is None or r.loop_version is None:
                    continue
                key = (r.loop_name, r.loop_version)
                first[key] = min(first.get(key, r.ended_at), r.ended_at)
        return first

    # --- leases -------------------------------------------------------------------------
    @abstractmethod
    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> int:
        """Take the run's lease and return a new fencing token. Raises ``ConflictError`` when
        another live owner holds it."""

    @abstractmethod
    def claim_runs(
        self,
        owner: str,
        ttl_s: float,
        *,
        limit: int = 1,
        now: float | None = None,
        exclude: Collection[str] | None = None,
    ) -> list[tuple[str, int]]:
        """Atomically claim up to ``limit`` runnable runs for ``owner``; returns
        ``(run_id, fencing_token)`` for each, oldest ``updated_at`` first. Runs named in
        ``exclude`` are never claimed: a worker names those it is driving, so that after a
        freeze longer than their leases it does not take its own runs over (fencing its own
        cycles in flight, to do them again).

        Runnable: status ``pending`` or ``running``, or ``awaiting_approval`` with no pending
        approval request (decided, so the run can go on); and the lease free (no owner, no
        expiry) or expired (``lease_expires_at < now``; ``now`` defaults to the store's clock —
        the database server's on PostgreSQL — and one passed in is used as is, a hook for
        tests). A claim is exactly an ``acquire_lease`` of each run: owner set, expiry ``now +
        ttl_s``, fencing token incremented, so a previous holder's writes are refused from then
        on. Unlike ``acquire_lease`` it never takes a live lease over — except, on SQLite (one
        host by nature), one held by a process of this host that no longer exists.

        Concurrent claimers (threads, processes, hosts) never claim the same run and never
        wait for each other's choice: PostgreSQL locks candidates with ``FOR UPDATE SKIP
        LOCKED``; SQLite claims in one ``BEGIN IMMEDIATE`` transaction."""

    @abstractmethod
    def renew_lease(self, run_id: str, token: int, ttl_s: float) -> None:
        """Extend a held lease; ``StaleLeaseError`` when the token is no longer current."""

    @abstractmethod
    def release_lease(self, run_id: str, token: int) -> None:
        """Give the lease up (no error when it was already taken over)."""

    # --- checkpoints: reading (one implementation for every store) ----------------------
    # A checkpoint row holds a full state (a snapshot, or a pre-v4 state) or the delta from
    # the row before; ``base`` is the seq of the snapshot it builds on. Version values are rows
    # of their own. See ``loopwright._state_codec``.
    @abstractmethod
    def _checkpoint_rows(
        self, run_id: str, *, latest: bool, since: int | None = None, until: int | None = None
    ) -> list[CheckpointRow]:
        """The run's raw rows, oldest first: all of them, those from ``seq`` ``since`` on (up
        to ``until`` when given), or (``latest``) those from the latest row's base on.
        ``record`` is parsed for the last row always, for others when neither ``latest`` nor
        ``until`` is given (a range is read for its states and its last row's record: a store
        may give the others' too); ``base`` is the row's own seq for a full state."""

    def _rows_between(self, run_id: str, since: int, until: int) -> list[CheckpointRow]:
        """``_checkpoint_rows`` from ``since`` up to ``until``; a store whose method predates
        ``until`` (docs/storage.md: older signatures are served) is read from ``since`` on
        and cut here."""
        kwargs = {"run_id": run_id, "latest": False, "since": since}
        rows: list[CheckpointRow] | None = with_newer(
            self._checkpoint_rows, kwargs, {"until": until}
        )
        if rows is None:
            rows = self._checkpoint_rows(run_id, latest=False, since=since)
        return [r for r in rows if r.seq <= until]

    def _cycle_marks(self, run_id: str, cycle: int) -> list[tuple[int, int]]:
        """``(seq, base)`` of the run's first checkpoint and of those of ``cycle``, oldest
        first (a store that can asks for them alone)."""
        rows = self._checkpoint_rows(run_id, latest=False)
        return [(r.seq, r.base) for i, r in enumerate(rows) if i == 0 or r.cycle == cycle]

    @abstractmethod
    def _version_rows(
        self,
        run_id: str,
        *,
        ref: str | None = None,
        keys: Collection[tuple[str, int]] | None = None,
    ) -> list[VersionRow]:
        """Version rows of a run: all, one part's (``ref``), or exactly ``keys``."""

    @abstractmethod
    def rejected_digests(self, run_id: str) -> list[str]:
        """Digests of the run's rejected proposals (a duplicate is no progress)."""

    @abstractmethod
    def rejected_rows(self, run_id: str, *, upto_cycle: int | None = None) -> list[tuple[str, int]]:
        """``(digest, cycle)`` of each rejected proposal of the run (of a cycle at most
        ``upto_cycle``: those a fork at that cycle copies)."""

    @abstractmethod
    def is_rejected(self, run_id: str, digest: str) -> bool:
        """Whether the run rejected a proposal with this digest (one indexed read)."""

    def versions(self, run_id: str, ref: str) -> list[Version]:
        """Every version of one part, oldest first (what ``Part.versions`` loads)."""
        return [
            Version(n, value, cycle, cast(PartStatus, status))
            for _r, n, cycle, status, value in self._version_rows(run_id, ref=ref)
        ]

    def iter_versions(self, run_id: str, ref: str) -> Iterator[Version]:
        """Every version of one part, oldest first, as ``versions`` returns them; a store that
        can reads them a page at a time, so a reader writing them out holds one page."""
        yield from self.versions(run_id, ref)

    def versions_page(self, run_id: str, ref: str, *, after: int, limit: int) -> list[Version]:
        """Up to ``limit`` stored versions of one part numbered above ``after``, oldest first
        (a rollback's abandoned versions, above a part's ``count``, included: the caller
        bounds by the count it holds); a store that can reads only those rows."""
        out: list[Version] = []
        for v in self.iter_versions(run_id, ref):
            if v.n > after:
                out.append(v)
                if len(out) >= limit:
                    break
        return out

    def written_after(
        self, run_id: str, ref: str, *, upto: int, cycle: int, limit: int
    ) -> list[int]:
        """Up to ``limit`` numbers, lowest first, of the part's versions numbered 1 to ``upto``
        whose stored version was written by a cycle after ``cycle`` (a rollback's numbers
        written again: ``refuse_rewritten``); a store that can answers from the rows' numbers
        and cycles, reading no value."""
        out: list[int] = []
        for v in self.iter_versions(run_id, ref):  # oldest first, a page at a time
            if v.n > upto or len(out) >= limit:
                break
            if v.cycle > cycle:
                out.append(v.n)
        return out

    def iter_events(self, run_id: str) -> Iterator[Event]:
        """The run's events, oldest first, as ``events`` returns them; a store that can reads
        them a page at a time."""
        yield from self.events(run_id)

    def iter_records(self, run_id: str) -> Iterator[tuple[int, int, dict[str, Any] | None]]:
        """Every checkpoint's ``(seq, cycle, record)``, oldest first, without its state; a
        store that can reads them a page at a time."""
        for c in self.checkpoints(run_id):
            yield c.seq, c.cycle, c.record

    def iter_fields(
        self, run_id: str
    ) -> Iterator[tuple[int, int, dict[str, Any] | None, Mapping[str, Any]]]:
        """Every checkpoint's ``(seq, cycle, record, fields)``, oldest first: ``fields`` as
        ``Checkpoint.fields`` reads them (folded along the delta chain, no parts); a store
        that can reads them a page at a time, so a reader of a long run holds one page."""
        for c in self.checkpoints(run_id):
            yield c.seq, c.cycle, c.record, c.fields

    def iter_checkpoints(self, run_id: str) -> Iterator[Checkpoint]:
        """Every checkpoint, oldest first, with its record, ``created_at`` and ``fields`` (a
        state is read from the store when first read): ``checkpoints`` for a reader of each
        one's record and fields in turn; a store that can reads them a page at a time, so
        the reader holds a page, not the run."""
        yield from self.checkpoints(run_id)

    def latest_checkpoint(self, run_id: str) -> Checkpoint:
        """The newest checkpoint, its state resolved (``TaskState.from_dict`` reads it): one
        snapshot, the deltas after it and the versions it holds, whatever the run's length."""
        rows = self._checkpoint_rows(run_id, latest=True)
        if not rows:
            raise RunNotFoundError(f"run {run_id!r} has no checkpoint in {self.url}")
        bases = [i for i, r in enumerate(rows) if r.seq == r.base]
        state = _folded(rows, bases[-1] if bases else -1, len(rows) - 1)
        if codec.is_head(state):
            keys = codec.wanted_versions(state)
            found = {(v[0], v[1]): v for v in self._version_rows(run_id, keys=keys)}
            state = codec.resolve(state, found, self._task_reader(run_id))
        last = rows[-1]
        return Checkpoint(
            run_id, last.seq, last.cycle, state, last.record, last.created_at, self._loader(run_id)
        )

    def _known_task(self, run_id: str) -> tuple[Any] | None:
        """The run's task if this store read it lately (a run's task never changes), else
        ``None``: a store that keeps none reads the run's row. The store's own: the reader
        below hands out copies."""
        return None

    def _task_reader(self, run_id: str, *, now: bool = False) -> Callable[[], Any]:
        """The run's task, for a head that does not hold it (``codec.resolve``): read once,
        when first asked (``now``: read at once, as a state may be read after the store is
        closed). Each state is given its own copy (its containers): a reader changing one
        state's task changes neither another's nor the task the store keeps."""
        held: list[Any] = []

        def fetch() -> None:
            known = self._known_task(run_id)
            held.append(self.get_run(run_id).task if known is None else known[0])

        def task() -> Any:
            if not held:
                fetch()
            return codec.copy_json(held[0])

        if now:
            fetch()  # (read, not copied: no state asked for it yet)
        return task

    def _loader(self, run_id: str) -> VersionLoader:
        return lambda ref: self.versions(run_id, ref)

    closed = False  # set by ``close``: a closed store reads nothing more

    def versions_within(self, run_id: str, budget: int | None) -> dict[str, list[Version]] | None:
        """Every version of a run by part, oldest first — or ``None`` when holding them would
        cost more than ``budget`` bytes (about: each value's stored size plus
        ``VERSION_COST``; ``None``: no bound). One read; a store that can stops reading at
        the budget."""
        out: dict[str, list[Version]] = {}
        total = 0
        for ref, n, cycle, status, value in self._version_rows(run_id):
            total += len(dumps(value)) + VERSION_COST
            if budget is not None and total > budget:
                return None
            out.setdefault(ref, []).append(Version(n, value, cycle, cast(PartStatus, status)))
        return out

    @property
    def reopenable(self) -> bool:
        """Whether ``reopen`` can open this store's database again (not one in memory)."""
        return False

    def reopen(self) -> Store | None:
        """A new store over the same database, to read from after this one is closed;
        ``None`` where there is none to open again (a database in memory)."""
        return None

    def lasting_loader(self, run_id: str) -> VersionLoader:
        """Reads a run's versions through this store while it is open and, once it is closed,
        through the same database opened again for the read (``reopen``): a run's result
        reads its older versions when they are wanted, not all of them when the run ends
        (invariant 8: a 5,000-cycle run of 50 KB values would otherwise end holding 250 MB)."""
        return _LastingVersions(self, run_id)

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """All checkpoints of a run, oldest first, each state as it was then: resolved when
        first read (from its snapshot and the deltas after it), so that listing a long run
        with many parts costs its records, not every checkpoint's every part (nor does
        reading their ``fields``)."""
        rows = self._checkpoint_rows(run_id, latest=False)
        loader = self._loader(run_id)
        # every version, read now: a state may be read after the store is closed
        found = {(v[0], v[1]): v for v in self._version_rows(run_id)} if rows else {}
        task = self._task_reader(run_id, now=bool(rows))

        last: list[Any] = [None, -1, {}]  # (base, i, head) of the last state read
        lite: list[Any] = [None, -1, {}]  # (base, i, fields) of the last fields read

        def resolve(base: int, i: int) -> dict[str, Any]:
            b, j, h = last
            if b == base and j < i:  # read in order (most readers): from the last one
                head = codec.fold(h, [r.state for r in rows[j + 1 : i + 1]])
            else:
                head = _folded(rows, base, i)
            last[:] = [base, i, head]
            return codec.resolve(head, found, task) if codec.is_head(head) else head

        def fields(base: int, i: int) -> dict[str, Any]:
            b, j, f = lite
            if not (b == base and j < i):
                j, f = base, own_fields(rows[base].state) if base >= 0 else {}
            f = codec.fold(f, [own_fields(r.state) for r in rows[j + 1 : i + 1]])
            lite[:] = [base, i, f]
            return f

        out: list[Checkpoint] = []
        base = -1
        for i, r in enumerate(rows):
            if r.seq == r.base:
                base = i
            out.append(
                Checkpoint(
                    run_id,
                    r.seq,
                    r.cycle,
                    functools.partial(resolve, base, i),
                    r.record,
                    r.created_at,
                    loader,
                    functools.partial(fields, base, i),
                )
            )
        return out

    def checkpoints_after(
        self, run_id: str, seq: int, fields: Mapping[str, Any] | None = None
    ) -> list[Checkpoint]:
        """The run's checkpoints after ``seq``, oldest first, with their records and
        ``fields``; a state is read from the store when first read. ``fields``: those of
        checkpoint ``seq`` when the caller has them (the next ones are folded on from them,
        so a reader following a run reads what it gained, not its snapshot again)."""
        rows = self._checkpoint_rows(run_id, latest=False, since=seq + 1)
        if rows and rows[0].seq != rows[0].base and fields is None:
            # a delta on checkpoints not in hand: read its chain from the snapshot
            # (up to ``seq``: not the rows above, read again)
            chain = self._rows_between(run_id, rows[0].base, seq)
            fields = codec.fold({}, [own_fields(r.state) for r in chain])
        loader = self._loader(run_id)
        out: list[Checkpoint] = []
        f: Mapping[str, Any] = fields or {}
        for r in rows:
            own = own_fields(r.state)
            f = own if r.seq == r.base else codec.fold(f, [own])
            out.append(
                Checkpoint(
                    run_id,
                    r.seq,
                    r.cycle,
                    functools.partial(self._state_at, run_id, r.seq, r.base),
                    r.record,
                    r.created_at,
                    loader,
                    f,
                )
            )
        return out

    def checkpoints_at(self, run_id: str, cycle: int) -> list[Checkpoint]:
        """The run's first checkpoint and those that carry cycle number ``cycle``, oldest
        first, as ``checkpoints`` gives them (a state is read when first read): what a fork's
        or a rollback's target is chosen among (``concluded_at``), read from each one's
        snapshot on, not a long run's every checkpoint."""
        loader = self._loader(run_id)
        marks = self._cycle_marks(run_id, cycle)
        chains: dict[int, list[int]] = {}  # the marks built on each snapshot
        for seq, base in marks:
            chains.setdefault(base, []).append(seq)
        found: dict[int, Checkpoint] = {}
        for base, seqs in chains.items():
            # the chain read once up to its last mark: each mark's fields folded on from the
            # one before's (a range gives its last row's record: another mark's is read alone)
            last = max(seqs)
            rows = self._rows_between(run_id, base, last)
            at = {r.seq: i for i, r in enumerate(rows)}
            fields: dict[str, Any] = {}
            done = -1
            for seq in sorted(seqs):
                i = at.get(seq)
                if i is None:
                    continue
                deltas = [own_fields(r.state) for r in rows[max(done, 0) + 1 : i + 1]]
                fields = codec.fold(own_fields(rows[0].state) if done < 0 else fields, deltas)
                done = i
                r = rows[i]
                record = r.record
                if record is None and seq != last:
                    alone = self._rows_between(run_id, seq, seq)
                    record = alone[-1].record if alone and alone[-1].seq == seq else None
                found[seq] = Checkpoint(
                    run_id,
                    r.seq,
                    r.cycle,
                    functools.partial(self._state_at, run_id, r.seq, base),
                    record,
                    r.created_at,
                    loader,
                    fields,
                )
        return [found[seq] for seq, _base in marks if seq in found]

    def _state_at(self, run_id: str, seq: int, base: int) -> dict[str, Any]:
        """The resolved state of checkpoint ``seq`` (built on the snapshot ``base``)."""
        rows = self._rows_between(run_id, base, seq)
        state = _folded(rows, 0, len(rows) - 1)
        if codec.is_head(state):
            keys = codec.wanted_versions(state)
            found = {(v[0], v[1]): v for v in self._version_rows(run_id, keys=keys)}
            state = codec.resolve(state, found, self._task_reader(run_id))
        return state

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
        ``StaleLeaseError`` and writes nothing then. Returns whether cancellation was
        requested for this run."""

    def commit_request(self, it: CommitRequest) -> bool:
        """``commit`` of one request built already (the engine's: its record, events and run
        columns are the masked ones). Stores override it to skip building it again; ``commit``
        is given the record whole, as ever (a packed one is unpacked first)."""
        if it.forget_rejected_after is not None and (
            type(self).forget_rejected is Store.forget_rejected
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
        Each is fenced on its own; the result per item is the cancel flag, or the
        ``StaleLeaseError``/``ConflictError`` that refused it (nothing of it written). This
        default commits them one by one; stores override it with one transaction."""
        out: list[bool | StoreError] = []
        for it in items:
            try:
                out.append(self.commit_request(it))
            except (StaleLeaseError, ConflictError) as exc:
                out.append(exc)
        return out

    @abstractmethod
    def append_events(self, run_id: str, events: Sequence[NewEvent]) -> None:
        """Append events outside a cycle (resumed, approval decided...)."""

    @abstractmethod
    def events(self, run_id: str, *, after_id: int = 0) -> list[Event]:
        """A run's events in order."""

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

    # --- effect/retry journal -----------------------------------------------------------
    @abstractmethod
    def journal_put(
        self,
        run_id: str,
        token: int,
        *,
        key: str,
        kind: str,
        cycle: int,
        status: str,
        data: Mapping[str, Any],
        attempts: int | None = None,
        expect_status: str | None = None,
        events: Sequence[NewEvent] = (),
        claim: tuple[str, str, str] | None = None,
        lazy: bool = False,
    ) -> JournalEntry:
        """Insert or update the journal entry ``(run_id, key)`` and append ``events``, in one
        transaction. ``lazy``: the write must survive the process, not the machine (a call's
        bill, written ahead of the commit that records it: that commit syncs both), so a store
        may commit it without waiting for the disk; a store may also ignore it. An update keeps ``created_at`` and sets ``updated_at`` to now;
        ``attempts=None`` keeps the stored count (0 for a new entry).

        ``expect_status`` guards the write: ``""`` means the entry must not exist yet, any
        other string means it must exist with exactly that status; otherwise ``ConflictError``.
        A stale ``token`` raises ``StaleLeaseError``. Either error writes nothing.

        ``claim=(effect kind, idempotency key, hash of the arguments)`` makes the key the
        store's, not the run's (invariant 2 per business action), in the same transaction:
        an ``intent`` takes the key for this run — unless another run holds it (done, or not
        known to have failed or been undone): then ``EffectKeyHeld`` says which run and how,
        and nothing is written; any other status is recorded on this run's claim (``done``
        with ``data["result"]``; ``failed`` and ``compensated`` free the key: an intent of any
        run, its own included, takes it back as ``claimed``; ``failed`` with ``data["spent"]``
        is recorded ``refused``, which frees it for the next generation as ``compensated``
        does). A ``done`` entry with ``data["from_run"]`` (another run's result reused) leaves
        the claim as it is, and is written only while that run's claim is still ``done``:
        otherwise ``EffectKeyHeld`` with the claim as it is now, and nothing is written;
        the reuse is recorded on the claim (``effect_reuses``). An ``undoing`` entry whose
        ``data["reusers_known"]`` lists run ids starts the undoing only when every run that
        reused the action is among them (``EffectReused`` otherwise, nothing written); a
        ``compensated`` one appends an ``effect_reuse_refunded`` event to each such run (the
        ``undoing`` one, an ``effect_reuse_refunding`` event)."""

    @abstractmethod
    def effect_claim(self, kind: str, key: str) -> EffectClaim | None:
        """The store-wide claim of the business effect key ``key`` of ``kind``, or ``None``
        when no run ever claimed it (``journal_put``'s ``claim``)."""

    def effect_reuses(self, kind: str, key: str) -> list[EffectReuse]:
        """The runs that reused the recorded result of the claim of ``key`` of ``kind`` (its
        current generation), oldest first: ``journal_put`` records them with the reuse. A
        store that records none (this default) has its refunds run as their rules say."""
        return []

    @abstractmethod
    def journal(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        key: str | None = None,
        cycle: int | None = None,
    ) -> list[JournalEntry]:
        """A run's journal entries (optionally of one ``kind``, one ``key``, one ``cycle``),
        oldest first (by ``created_at``, then ``key``)."""

    def journal_where(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        after_cycle: int | None = None,
        statuses: Collection[str] | None = None,
        keys: Collection[str] | None = None,
        limit: int | None = None,
        upto_cycle: int | None = None,
    ) -> list[JournalEntry]:
        """The run's journal entries that match every filter given (of ``kind``, of a cycle
        above ``after_cycle`` and at most ``upto_cycle``, with one of ``statuses``, under one
        of ``keys``), oldest first as ``journal`` gives them, at most ``limit`` (the oldest):
        what a rollback, a cancel or a fork reads (the effects after its point, their
        compensations by key, the entries in flight, the failed ones, the done effects up to
        a fork's cycle), not the long run's every entry; a store that can reads only those
        rows. This default reads ``journal`` (by key when ``keys`` are given) and filters."""
        if keys is not None:
            found = [e for k in dict.fromkeys(keys) for e in self.journal(run_id, key=k)]
            found.sort(key=lambda e: (e.created_at, e.key))
        else:
            found = self.journal(run_id, kind=kind)
        out = [
            e
            for e in found
            if (kind is None or e.kind == kind)
            and (after_cycle is None or e.cycle > after_cycle)
            and (upto_cycle is None or e.cycle <= upto_cycle)
            and (statuses is None or e.status in statuses)
        ]
        return out if limit is None else out[: max(limit, 0)]

    def count_journal(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        statuses: Collection[str] | None = None,
        limit: int | None = None,
    ) -> int:
        """How many of the run's journal entries are of ``kind`` with one of ``statuses``,
        counted up to ``limit`` (``limit=1``: whether there is one): what ``loopwright
        cancel`` tells of the done effects it could not offer to undo, whether a cancel or a
        rollback without its loop left any; the built-in stores count in the database and
        stop at ``limit``. This default reads ``journal_where``."""
        return len(self.journal_where(run_id, kind=kind, statuses=statuses, limit=limit))

    # --- approvals and cancellation ----------------------------------------------------
    @abstractmethod
    def approvals(self, *, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        """Approval requests, oldest first."""

    def approval(self, approval_id: str) -> Approval | None:
        """One request by its id (``None``: no such request). This default reads them all;
        the built-in stores read one row."""
        return next((a for a in self.approvals() if a.approval_id == approval_id), None)

    def approvals_by_prefix(
        self, run_id: str, prefix: str, *, limit: int | None = None
    ) -> list[Approval]:
        """The run's requests whose id starts with ``prefix`` (case as given), oldest first
        as ``approvals`` gives them, at most ``limit``: what a person's few typed characters
        name (``limit=2`` tells one from several). This default reads the run's every
        request; the built-in stores read the matching rows."""
        found = [a for a in self.approvals(run_id=run_id) if a.approval_id.startswith(prefix)]
        return found if limit is None else found[: max(limit, 0)]

    def count_approvals(
        self, *, status: str | None = None, run_id: str | None = None, search: str | None = None
    ) -> int:
        """How many requests there are (of one ``status``, one run, matching ``search`` as
        ``page_approvals`` does): what every page's badge shows. This default reads them all;
        the built-in stores count in the database."""
        return len(approvals_matching(self.approvals(run_id=run_id, status=status), search))

    def page_approvals(
        self,
        *,
        status: str | None = None,
        run_id: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
        limit: int,
    ) -> list[Approval]:
        """One page of requests, newest first (``requested_at`` descending, then
        ``approval_id``): those after the keyset ``after`` (``(requested_at, approval_id)`` of
        the last row of the page before), at most ``limit``. ``search``: a case-insensitive
        prefix of the request's or the run's id, or a substring of its what, why, rule or
        kind. This default reads them all; the built-in stores read one page."""
        rows = approvals_matching(self.approvals(run_id=run_id, status=status), search)
        rows.sort(key=lambda a: (-a.requested_at, a.approval_id))
        if after is not None:
            at, key = after
            rows = [
                a
                for a in rows
                if a.requested_at < at or (a.requested_at == at and a.approval_id > key)
            ]
        return rows[: max(0, limit)]

    def decided_approvals(self, limit: int) -> list[Approval]:
        """The ``limit`` decided requests most recently requested, newest first (what the
        inbox shows under its pending ones). This default reads them all; the built-in stores
        read ``limit`` rows."""
        done = [a for a in self.approvals() if a.status != "pending"]
        return done[::-1][:limit]

    @abstractmethod
    def decide_approval(
        self,
        approval_id: str,
        *,
        status: str,
        by: str,
        note: str | None,
        now: float,
        answer: Any = None,
    ) -> Approval:
        """Record a decision on a pending request (atomically: two deciders cannot both win),
        with an optional JSON-serialisable ``answer`` from the decider. Raises
        ``ApprovalError`` when there is no such request or it is no longer pending."""

    @abstractmethod
    def request_cancel(self, run_id: str) -> RunRecord:
        """Flag the run for cancellation; the executor honours it at the next cycle boundary."""

    # --- feedback memory (``loopwright._memory``) ---------------------------------------
    # Not fenced by a run lease: people write memory too. Items are plain dicts with the keys
    # of ``MemoryItem.to_dict()``; validation is ``FeedbackMemory``'s job.
    @abstractmethod
    def memory_add(self, item: Mapping[str, Any]) -> None:
        """Insert one memory item. ``ConflictError`` when its ``memory_id`` exists already."""

    @abstractmethod
    def memory_query(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
        limit: int | None = None,
        memory_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Memory items, newest first (``created_at``, then ``memory_id``, descending).

        ``scopes``: only items whose ``(scope, scope_key)`` is one of these pairs (a ``None``
        key matches any key of that scope; an empty sequence matches nothing). ``status``,
        ``memory_id``: only items with exactly that value."""

    def memory_count(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
    ) -> int:
        """How many items ``memory_query`` with these filters would return, unbounded. This
        default reads them all; the built-in stores count in the database."""
        return len(self.memory_query(scopes=scopes, status=status))

    def memory_recall(self, recalls: Sequence[MemoryRecall]) -> list[MemoryFound]:
        """Each recall's rows (``_recall.recall``): its people's search's, and its reflections'
        search's only when people's feedback came back with fewer rows than its ``slots``
        (None: not read), read in one go. This default asks ``memory_search`` for the people's
        searches, then for the short ones' reflections; the built-in stores answer a recall's
        two sides with one probe on one connection (an empty scope answers both unsearched)."""
        people = self.memory_search([r[0] for r in recalls])
        if len(people) != len(recalls):
            raise ValueError(f"{len(people)} answers to {len(recalls)} memory searches")
        short = [i for i, rows in enumerate(people) if len(rows) < recalls[i][2]]
        out: list[MemoryFound] = [(rows, None) for rows in people]
        if short:
            loop = self.memory_search([recalls[i][1] for i in short])
            if len(loop) != len(short):
                raise ValueError(f"{len(loop)} answers to {len(short)} memory searches")
            for i, rows in zip(short, loop, strict=True):
                out[i] = (people[i], rows)
        return out

    @abstractmethod
    def memory_search(self, searches: Sequence[MemorySearch]) -> list[list[dict[str, Any]]]:
        """Each search's items (dicts as ``memory_query``'s), best first, at most its
        ``limit``, read in one go. Rank: ``strength × relevance`` (full-text relevance to the
        terms, divided by the best match's in those scopes, scaled into [floor, 1]; rounded to
        9 places), ties by scope (task, project, global), strength, newer ``updated_at``, then
        ``memory_id``."""

    @abstractmethod
    def memory_set_status(
        self,
        memory_id: str,
        status: str,
        *,
        by: str,
        now: float,
        expect: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Atomically set an item's status, append ``{"status", "by", "at": now}`` to its
        history and set ``updated_at``; returns the item. Setting the status it already has
        writes nothing. ``expect``: the current status must be one of these, else
        ``ConflictError``. ``MemoryNotFoundError`` for an unknown id."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LastingVersions:
    """``Store.lasting_loader``: a run's versions from its store, open or closed since. Once
    the store is closed, one read-only store is opened for all of the result's parts and
    closed when the result is gone (not one per part read)."""

    __slots__ = ("__weakref__", "_again", "_run_id", "_store")

    def __init__(self, store: Store, run_id: str) -> None:
        self._store, self._run_id = store, run_id
        self._again: Store | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> _LastingVersions:
        return self  # a handle on the store, shared by copies (as a function would be)

    def __call__(self, ref: str) -> list[Version]:
        store = self._store
        if not store.closed:
            return store.versions(self._run_id, ref)
        if self._again is None:
            again = store.reopen()
            if again is None:
                raise StoreError(
                    f"{store.url} is closed and cannot be opened again: read older versions "
                    f"of {ref} before closing it"
                )
            self._again = again
            weakref.finalize(self, again.close)
        return self._again.versions(self._run_id, ref)
