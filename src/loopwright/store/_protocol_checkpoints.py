"""The Store protocol's reads of checkpoints and versions, one implementation for every store
over the few raw reads a store supplies (``CheckpointsStore``, part of ``Store``), and the
loader that reads a run's versions after its store is closed."""

from __future__ import annotations

import functools
import weakref
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from .. import _state_codec as codec
from .._errors import RunNotFoundError, StoreError
from .._json import dumps
from .._state import PartStatus, Version, VersionLoader
from ._protocol_runs import RunsStore
from ._records import VERSION_COST, Checkpoint, CheckpointRow, VersionRow, own_fields
from ._with_newer import with_newer

if TYPE_CHECKING:
    from ._base import Store

__all__ = ["CheckpointsStore"]


def _folded(rows: Sequence[CheckpointRow], base: int, i: int) -> dict[str, Any]:
    """The state of ``rows[i]``: the snapshot ``rows[base]`` (-1: none) with the deltas after
    it up to ``i`` applied."""
    return codec.fold(
        rows[base].state if base >= 0 else {}, [r.state for r in rows[base + 1 : i + 1]]
    )


class CheckpointsStore(RunsStore):
    """A run's checkpoints and part versions, read (mixed into ``Store``)."""

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


class _LastingVersions:
    """``Store.lasting_loader``: a run's versions from its store, open or closed since. Once
    the store is closed, one read-only store is opened for all of the result's parts and
    closed when the result is gone (not one per part read)."""

    __slots__ = ("__weakref__", "_again", "_run_id", "_store")

    def __init__(self, store: CheckpointsStore, run_id: str) -> None:
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
