"""The records the Store protocol speaks in: runs, checkpoints, events, approvals, journal
entries, memory searches and the requests a commit carries (plain frozen data; the protocol
itself is in ``_base``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._frozen import quick_init
from .._state import TaskState, VersionLoader
from .._verdict import held_out_words, independent

__all__ = [
    "VERSION_COST",
    "Approval",
    "Checkpoint",
    "CheckpointRow",
    "ClosedApproval",
    "CommitRequest",
    "EffectClaim",
    "Event",
    "JournalEntry",
    "MemoryFound",
    "MemoryRecall",
    "MemorySearch",
    "NewApproval",
    "NewEvent",
    "RunRecord",
    "VersionRow",
    "concluded_cycles",
    "own_fields",
    "past_expiry",
]

VERSION_COST = 200
"""What holding one version in memory costs beside its value, about (the ``Version`` and its
numbers, its place in the part's map): measured at ≈ 170 B for small values."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run's row: identity, status and running totals (the state itself is in checkpoints)."""

    run_id: str
    task_key: str
    loop_name: str
    project: str
    status: str
    stop_reason: str | None
    cycle: int
    best_score: float | None
    cost_usd: float
    tokens: int
    seconds: float
    spec_ref: str | None
    loop_version: str | None
    contract: dict[str, Any]
    task: dict[str, Any]
    packet: dict[str, Any] | None
    created_at: float
    updated_at: float
    ended_at: float | None
    cancel_requested: bool
    lease_owner: str | None
    lease_expires_at: float | None
    fencing_token: int
    last_seq: int
    held_out_passed: bool | None = None
    forked_from: str | None = None  # the run this one was forked from (``Runtime.fork``)
    forked_at: int | None = None  # ... and the cycle whose state it started from
    created_by: str | None = None  # who started it, when known (separation of duties)
    # its pending requests, as the store counts them (``runs.open_requests``); ``None``: a
    # store that does not say (a parked run may then wait on a request or on a resume)
    open_requests: int | None = None
    # a fork nobody has started: no worker claims it until its maker starts it (``resume``)
    maker_starts: bool = False
    # how many tests behind ``held_out_passed`` the candidate's own process decided (a
    # sandbox check's self-reported tests): 0 when every one was judged outside it; ``None``
    # when unknown (no held-out verdict, or a run ended before stop 55). A pass with any is
    # not an independent one (``held_out_independent``).
    held_out_self_reported: int | None = None
    # What executions fenced out of the run (taken over while they called) spent that no
    # commit of the run has charged yet, as their words said it (``cost_usd``, ``tokens``,
    # ``seconds``, the held-out verifiers' share under ``held_out``): already in ``cost_usd``,
    # ``tokens`` and ``seconds`` above; the run's next resume charges it to its state (its
    # commit then takes it off). ``None``: nothing (fenced56).
    fenced: dict[str, Any] | None = None

    @property
    def held_out_independent(self) -> bool | None:
        """``held_out_passed`` as an independent verdict: ``None`` (no verdict to count) for a
        held-out pass that rests on a test the candidate could have forged, or a failure
        resting only on tests ``judged_only`` refused (``_verdict.independent``)."""
        return independent(self.held_out_passed, self.held_out_self_reported)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "task_key": self.task_key,
            "loop_name": self.loop_name,
            "project": self.project,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "cycle": self.cycle,
            "best_score": self.best_score,
            "cost_usd": self.cost_usd,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "spec_ref": self.spec_ref,
            "loop_version": self.loop_version,
            "contract": self.contract,
            "task": self.task,
            "packet": self.packet,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "ended_at": self.ended_at,
            "cancel_requested": self.cancel_requested,
            "held_out_passed": self.held_out_passed,
            "forked_from": self.forked_from,
            "forked_at": self.forked_at,
            "created_by": self.created_by,
            "maker_starts": self.maker_starts,
            "held_out_self_reported": self.held_out_self_reported,
            # the two as one word (``_verdict.held_out_words``): None, pass, fail,
            # pass_self_reported, fail_not_judged
            "held_out_verdict": held_out_words(
                self.held_out_passed, self.held_out_self_reported
            ).kind,
        }


class Checkpoint:
    """A checkpoint as read back: ``state`` is resolved (each part holds its current, accepted
    and best versions and its ``count``); ``task_state()`` reads the others from the store.

    Read-only. ``state`` may be resolved when first read (``Store.checkpoints``: a long run
    with many parts is listed without resolving every checkpoint's state). ``fields`` is the
    state without its parts, for readers of many checkpoints that want only those."""

    __slots__ = (
        "_fields",
        "_resolve",
        "_state",
        "created_at",
        "cycle",
        "loader",
        "record",
        "run_id",
        "seq",
    )

    def __init__(
        self,
        run_id: str,
        seq: int,
        cycle: int,
        state: dict[str, Any] | Callable[[], dict[str, Any]],
        record: dict[str, Any] | None,
        created_at: float,
        loader: VersionLoader | None = None,
        fields: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.run_id, self.seq, self.cycle = run_id, seq, cycle
        self.record, self.created_at, self.loader = record, created_at, loader
        self._state: dict[str, Any] | None = None
        self._resolve: Callable[[], dict[str, Any]] | None = None
        if callable(state):
            self._resolve = state
        else:
            self._state = state
        self._fields = fields

    @property
    def state(self) -> dict[str, Any]:
        state = self._state
        if state is None:
            assert self._resolve is not None
            state = self._state = self._resolve()
            self._resolve = None
        return state

    def read_state(self) -> dict[str, Any]:
        """``state``, not kept by the checkpoint when it was not read yet: a reader of every
        checkpoint of a long run holds one state at a time, not all of them."""
        if self._state is not None:
            return self._state
        assert self._resolve is not None
        return self._resolve()

    @property
    def fields(self) -> Mapping[str, Any]:
        """The state's own fields — ``pending``, ``notes``, ``spent``, ``best_score``,
        ``cycle``, ``history``, ``plan``... — without its parts (``artifacts`` and the
        per-part maps ``parts``, ``best_parts``, ``retries``): read from the checkpoint's
        delta chain, at the cost of the deltas, not of every part (a reader of every
        checkpoint of a long run with many parts would otherwise resolve cycles × parts).
        Read-only; the same values as ``state``'s. No ``task``: the run's row holds it
        (``RunRecord.task``), but in a checkpoint written before heads stopped carrying it."""
        f = self._fields
        if callable(f):
            f = self._fields = f()
        elif f is None:
            f = self._fields = own_fields(self.state)
        return f

    def _key(self) -> tuple[Any, ...]:
        return (self.run_id, self.seq, self.cycle, self.state, self.record, self.created_at)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Checkpoint(run_id={self.run_id!r}, seq={self.seq}, cycle={self.cycle})"

    def task_state(self) -> TaskState:
        """The state as a ``TaskState`` whose parts read older versions on demand."""
        return TaskState.from_dict(self.state, self.loader)


#: What ``Checkpoint.fields`` leaves out: a state's parts (resolved) and its per-part maps
#: (in a head, and as ``key$`` in a delta).
_PART_KEYS = frozenset({"artifacts", "parts", "best_parts", "retries"})


def own_fields(d: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` (a resolved state, a head or a delta) without its part entries (``_PART_KEYS``):
    folding such deltas on such a head gives the fields of the next head (``codec.fold``)."""
    return {k: v for k, v in d.items() if k.removesuffix("$") not in _PART_KEYS}


def concluded_cycles(checkpoints: Iterable[Checkpoint]) -> set[Any]:
    """The cycles with a concluding record (one holding its proposal). A cycle's effects
    write a record before they run (``decision: "effects"``, no proposal), and a parked
    cycle one when it parks: a cycle not in this set stopped there."""
    return {c.record.get("cycle") for c in checkpoints if c.record and "proposal" in c.record}


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """A stored checkpoint row before it is resolved (``Store._checkpoint_rows``)."""

    seq: int
    cycle: int
    state: dict[str, Any]
    record: dict[str, Any] | None
    created_at: float
    base: int


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    run_id: str
    cycle: int
    kind: str
    ts: float
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "cycle": self.cycle,
            "kind": self.kind,
            "ts": self.ts,
            "data": self.data,
        }


@dataclass(frozen=True, slots=True)
class NewApproval:
    """An approval request to persist together with the checkpoint that parks the run."""

    approval_id: str
    cycle: int
    kind: str
    rule: str | None
    what: str
    why: str
    evidence: dict[str, Any]
    diff: str | None
    action_hash: str
    expires_at: float | None


#: The kind of the request a person's pause files (``Runtime.pause``): the run parks at its
#: next cycle boundary and goes on once the request is approved.
PAUSE = "pause"


@dataclass(frozen=True, slots=True)
class ClosedApproval:
    """A pending approval request that a commit closes (status ``cancelled``), in the
    commit's transaction: a cancel or a rollback leaves no decision open on the run, even if
    the process dies just after. A request already decided is left as it is."""

    approval_id: str
    by: str
    note: str


def past_expiry(expires_at: float | None, now: float) -> bool:
    """Whether a request expiring at ``expires_at`` has expired at ``now`` (the store's clock):
    the one rule of the engine, the store's poll (``expired_requests``: ``expires_at < now``
    in its SQL), the CLI and the dashboard. At ``expires_at`` itself it is still open (stop 50:
    the dashboard's card and ``loopwright approvals`` said "expired" there, while the engine
    took a decision and the poll left it be)."""
    return expires_at is not None and expires_at < now


@dataclass(frozen=True, slots=True)
class Approval:
    approval_id: str
    run_id: str
    cycle: int
    kind: str
    rule: str | None
    what: str
    why: str
    evidence: dict[str, Any]
    diff: str | None
    action_hash: str
    status: str
    requested_at: float
    expires_at: float | None
    decided_by: str | None
    decided_at: float | None
    note: str | None
    answer: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "approval_id": self.approval_id,
            "run_id": self.run_id,
            "cycle": self.cycle,
            "kind": self.kind,
            "rule": self.rule,
            "what": self.what,
            "why": self.why,
            "evidence": self.evidence,
            "diff": self.diff,
            "action_hash": self.action_hash,
            "status": self.status,
            "requested_at": self.requested_at,
            "expires_at": self.expires_at,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "note": self.note,
            "answer": self.answer,
        }


# (ref, n, cycle, status, value): one version of a part (see ``loopwright._state_codec``)
VersionRow = tuple[str, int, int, str, Any]


@quick_init
@dataclass(frozen=True, slots=True)
class CommitRequest:
    """One run's cycle commit, for ``Store.commit_many`` (the arguments of ``commit``).

    ``state`` is a full head when ``base`` is None (a snapshot), else the delta from the
    previous checkpoint, which builds on the snapshot ``base``. ``versions`` are version rows
    to insert (or whose status to update); ``rejected`` are ``(digest, cycle)`` of proposals
    rejected in this commit. ``packed``: ``record`` is already in its stored form
    (``_record_codec.pack``, as the engine masks it), so the store writes it as it is.
    ``closes``: pending approval requests the commit closes, each with an
    ``approval_decided`` event (a store overriding ``commit_request`` must honour it).
    ``forget_rejected_after``: a rollback's cycle — digests rejected after it are forgotten
    (before this commit's own ``rejected`` are added). ``cleared``: journal keys of the run
    this commit makes moot (a call's billing, journaled ahead of the cycle that charges it),
    deleted with it; a store may keep them (the engine reads such an entry as charged once a
    later checkpoint records its cycle), but then the journal grows a row a billed call."""

    run_id: str
    token: int
    seq: int
    cycle: int
    state: dict[str, Any]
    record: dict[str, Any] | None
    events: Sequence[NewEvent]
    run: Mapping[str, Any]
    approvals: Sequence[NewApproval] = ()
    base: int | None = None
    versions: Sequence[VersionRow] = ()
    rejected: Sequence[tuple[str, int]] = ()
    packed: bool = False
    closes: Sequence[ClosedApproval] = ()
    forget_rejected_after: int | None = None
    cleared: Sequence[str] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class NewEvent:
    cycle: int
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JournalWrite:
    """One journal entry of ``journal_put_all``: ``journal_put``'s fields, less the run's."""

    key: str
    kind: str
    cycle: int
    status: str
    data: Mapping[str, Any]
    expect_status: str | None = None
    events: Sequence[NewEvent] = ()
    claim: tuple[str, str, str] | None = None


@dataclass(frozen=True, slots=True)
class MemorySearch:
    """One feedback-memory search (``Store.memory_search``): the active items of exactly
    these ``(scope, scope_key)`` pairs, ranked by the database."""

    scopes: Sequence[tuple[str, str]]
    terms: Sequence[str]
    """Query words (any may match); none: every item has the floor relevance."""
    limit: int
    floor: float
    """Relevance of an item matching no term; a match's is scaled into [floor, 1]."""
    ranked: int | None = None
    """The most matches scored for relevance: the newest (the last added); an older match
    ranks as an item matching no term. None: every match (its cost grows with them)."""
    reflections: bool | None = None
    """Which items: None every one; False what people said (every signal but
    ``reflection``); True only the loop's own reflections. A recall asks for people's
    feedback and for reflections apart (``_recall.recall_searches``), so that reflections only
    fill the slots people's feedback leaves free."""


MemoryRecall = tuple[MemorySearch, MemorySearch, int]
"""One recall's searches (``Store.memory_recall``): what people said, the loop's reflections
(read only when people's feedback leaves slots free), and the slots (a context's items)."""

MemoryFound = tuple[list[dict[str, Any]], list[dict[str, Any]] | None]
"""One recall's rows (``Store.memory_recall``): people's feedback's, best first, and the
reflections', or None where people's feedback filled the slots and they were not read."""


@dataclass(frozen=True, slots=True)
class EffectClaim:
    """The store-wide claim of a business effect key (``Store.effect_claim``): the run holding
    it, its status (``claimed``, ``done``, ``in_doubt``, ``undoing``: its compensation started,
    not yet settled; ``failed``, ``refused`` (failed for good under its key: the outside
    world said no) and ``compensated`` free it, the last two for the next generation) and the redo generation last handed out for the action (1: its own key; ``n``: the
    key with ``~n``)."""

    run_id: str
    status: str
    generation: int
    # the digest of the arguments it was taken with (``_effect_keys.args_digest``), when read;
    # not compared: a claim is the same claim whoever reads it
    args_hash: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class EffectReuse:
    """A run that reused the recorded result of a claim's current generation
    (``Store.effect_reuses``), and that run's status now."""

    run_id: str
    status: str


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One entry of a run's effect/retry journal, keyed by ``(run_id, key)``.

    The engine records an effect (or a retried step) here before and after performing it, so a
    resumed run can tell what already happened instead of doing it twice.
    """

    run_id: str
    key: str
    kind: str
    cycle: int
    status: str
    data: dict[str, Any]
    attempts: int
    created_at: float
    updated_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "key": self.key,
            "kind": self.kind,
            "cycle": self.cycle,
            "status": self.status,
            "data": self.data,
            "attempts": self.attempts,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
