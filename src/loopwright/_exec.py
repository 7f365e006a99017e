"""A run under execution, and the actor's and verifiers' calls made within its lease.

Two journals live in the store beside the checkpoints, both written under the run's fencing
token:

* ``retry:<scope>:<cycle>`` counts the failed attempts of an actor or verifier call and when
  the next may start, so the attempt bound and the backoff survive a restart (invariant 4). It
  is written only when a call fails: a healthy cycle pays nothing for it (``call_with_retry``,
  in ``_call_retry``; what it was billed: ``_call_billing``).
* ``effect:<key>`` records an effect's intent before it runs and its result after, so an
  effect is never executed twice (invariant 2): ``_effect_run.perform_effect``.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from math import copysign as _copysign
from typing import Any

from ._calls import CallTimeout
from ._contract import Contract
from ._decide import budget_crossed, budget_exhausted, call_stop, declared_free
from ._decide import no_attempt as _no_attempt
from ._loop import Loop
from ._modelcalls import clip_masked
from ._proposal import Context, Verdict
from ._record_codec import DROP_CALL
from ._redact import redact
from ._retry import ErrorClass
from ._state import Digests, TaskState, Version, part_ref
from ._state_codec import FORMAT
from ._usage import Usage
from .store import CommitRequest, JournalEntry, NewEvent, Store

__all__ = [
    "NO_LOOP",
    "Execution",
    "GaveUp",
    "OutOfTime",
    "OverBudget",
    "exc_text",
    "fit_history",
]

PhaseHook = Callable[[str], None]


@dataclass(slots=True)
class Execution:
    """A run being executed under a lease."""

    run_id: str
    loop: Loop
    contract: Contract
    token: int
    seq: int
    state: TaskState
    lost: bool = False
    # Its start event written ahead of its first commit (a cycle's effects finished on resume:
    # ``_driving``), so that a stop alive is said by its lease as after a commit (``_wind_down``)
    started_said: bool = False
    # The leases its resume read that stopped alive (``crashes_and_alive``): an effect's intent
    # written under one was cut by a stop alive, no crash (``_effect_run``'s uncharged kills)
    alive: frozenset[int] = frozenset()
    # What of ``state.spent`` the store holds charged (``cost_usd``, ``tokens``): as loaded,
    # then the run columns of each commit made durable (a reference, nothing built a cycle).
    # Fenced out, its word says the seconds past it (its bills: ``refused``), charged at resume.
    charged: Mapping[str, Any] | None = None
    # The bills the fence refused to journal (taken over while it called), and the held-out
    # share of them: all its word charges (``_lease_life``), each bill journaled before the
    # takeover being charged by the cycle redone from the journal (``settle_owed``; crash55c)
    refused: tuple[Usage, Usage] | None = None
    # What this execution charged to its state at resume of the run's fenced spend (the row's
    # ``fenced_*``: ``RunRecord.fenced``), as the run columns that take it off the row, until
    # a commit carrying them is staged (restored if it is not written: ``_unstage``)
    unfolded: dict[str, Any] | None = None
    events: list[NewEvent] = field(default_factory=list)
    record: dict[str, Any] | None = None  # the loaded checkpoint's record (a parked cycle's)
    retries: dict[str, JournalEntry] = field(default_factory=dict)
    # The ``retries`` keys this cycle asked for again (``call_with_retry``): their journaled
    # billing is charged there; any other of the cycle's is owed (``settle_owed``).
    asked: set[str] = field(default_factory=set)
    phase: PhaseHook | None = None
    deadline: float | None = None  # wall clock at which the time budget runs out (this cycle)
    calls: list[dict[str, Any]] = field(default_factory=list)  # this cycle's priced calls
    threaded: bool = False  # run sync user code in threads (other runs share the loop)
    pending_commit: asyncio.Future[bool] | None = None  # queued in a group commit, not durable
    # What that commit carries (restored if it fails); after it is durable, kept until the
    # next commit (``_settle``) and read only while ``pending_commit`` is set.
    pending_req: CommitRequest | None = None
    # Commits queued before ``pending_commit`` and not settled since, oldest first, with their
    # futures: None but where a run commits twice without a durability point between (no
    # engine path known): a failure of the older is then undone with it (``_settle``).
    queued: list[tuple[CommitRequest, asyncio.Future[bool]]] | None = None
    grouped: bool = False  # driven by resume: may join group commits
    draining: Callable[[], bool] | None = None  # the runtime is shutting down (``backoff``)
    last_context: Context | None = None  # what the actor saw this cycle (for the reflector)
    # A cycle finished from its write-ahead or parked entry (its actor ran in an earlier
    # process): the ids of the feedback memory that actor was shown, as the entry stored them.
    shown_memory: list[str] = field(default_factory=list)
    last_visible: dict[str, Verdict] = field(default_factory=dict)  # this cycle's visible verdicts
    # This cycle judges a person's edit with no actor call (``_edit_check``): its record and
    # history say so, and it counts no cycle without progress.
    check_only: bool = False
    # The effects a check-only cycle's accepted parts were not the values of when they ran
    # (``_edit_check.effects_behind``): its record says so (``effects_not_rerun``).
    effects_behind: list[dict[str, Any]] = field(default_factory=list)
    # This check-only cycle judges a person's edit made beside a request that was then denied
    # (or expired): unless the edited state succeeds, the run escalates with this cause and
    # evidence, as the denial does (``Parking._judge_denied``).
    denied: tuple[str, dict[str, Any]] | None = None
    # The cycle this execution last started and what the run had spent when it did: a run
    # ending inside it, before its record, logs what it cost (``stopped``'s ``ended_in``).
    cycle_at: int = 0
    cycle_from: Usage | None = None
    # Whether the last candidate every held-out check judged passed them all, once known in
    # this execution (``held_out_known``): what a run ended between judged cycles reports.
    held_out_last: bool | None = None
    held_out_known: bool = False
    held_out_verdicts: dict[str, Any] | None = None  # those verdicts (stored form): the packet's
    # What the store holds of ``state`` (``loopwright._state_codec``): the last committed head
    # (None: the next checkpoint is a snapshot), the statuses of the versions held in memory
    # as written, how many rejected digests are written, and the snapshot deltas build on.
    head: dict[str, Any] | None = None
    written: dict[tuple[str, int], str] = field(default_factory=dict)
    rejected_written: int = 0
    # A rollback's: the digests rejected in cycles after this one no longer count (its commit
    # forgets them, so the cycles redone may try them again, as a fork at that cycle may).
    forget_rejected_after: int | None = None
    # The parts the last staged commit wrote (None: all, a snapshot): what ``trim`` looks at.
    trim: Collection[str] | None = None
    # How the state's parts read their older versions from the store (``adopt``): given to
    # parts made after it, once committed (``TaskState.trim``).
    loader: Callable[[str], Iterable[Version]] | None = None
    base: int = 0
    since_base: int = 0
    # The run row's status as this execution last wrote it (None: not known): a commit that
    # would write it again leaves it out (an unchanged status still costs its index a page).
    row_status: str | None = None
    # The lease this execution holds: its TTL (renewed before each effect; None where the
    # runtime did not say, e.g. a cancel from the CLI: the run row's expiry is read instead)
    # and the owner's name (``host:pid:…``), recorded in an effect's intent.
    lease_ttl_s: float | None = None
    owner: str | None = None
    # The checkpoint this execution opened the run at (``seq`` when it was made): the last
    # commit before it, an earlier session's or another operation's. The live tracer sends
    # nothing that had ended by then (that session sent it).
    opened_at: int = field(init=False)

    def __post_init__(self) -> None:
        self.opened_at = self.seq

    @property
    def operation(self) -> bool:
        """A person's operation on the run (rollback, cancel, edit: one commit under its own
        lease), not a session driving it (``resume``)."""
        return not self.grouped

    def adopt(self, store: Store, stored: Mapping[str, Any]) -> None:
        """Note what the store already holds of ``state``, loaded from ``stored`` (a resolved
        checkpoint state), and let its parts read older versions from the store. A state of
        the layout before v4 holds every version inline: its first commit writes them all."""
        s = self.state
        self.loader = lambda ref: store.versions(self.run_id, ref)
        s.attach(self.loader)
        current = stored.get("format") == FORMAT
        # Earlier rejected digests stay in the store, asked about one at a time (at cycle 0
        # there are none to ask about until some leave memory: ``Digests.durable``). A state
        # of the layout before v4 holds every digest: its first commit writes them all.
        s.rejected = Digests(
            s.rejected, lambda d: store.is_rejected(self.run_id, d), stored=current and s.cycle > 0
        )
        if current:
            self.written = {
                (part_ref(a.name, p.name), n): v.status
                for a in s.artifacts.values()
                for p in a.parts.values()
                for n, v in p.known.items()
            }
            self.rejected_written = len(s.rejected)

    def at(self, name: str) -> None:
        """A phase boundary of the cycle (the crash-point tests kill the process here)."""
        if self.phase is not None:
            self.phase(name)


class _NoLoop:
    """Stands in for the loop where a run is handled without one (cancel from the CLI)."""

    name = "-"
    verifiers = ()
    effects = ()

    def effect(self, name: str) -> None:
        return None


NO_LOOP: Any = _NoLoop()


def held_execution(
    store: Store,
    run_id: str,
    contract: Contract,
    token: int,
    loop: Loop | None = None,
    phase: PhaseHook | None = None,
) -> Execution:
    """The run as its latest checkpoint has it, under the lease ``token`` an operation of a
    person took (a cancel, a pause): what that operation commits through."""
    ck = store.latest_checkpoint(run_id)
    ex = Execution(
        run_id, loop or NO_LOOP, contract, token, ck.seq, TaskState.from_dict(ck.state), phase=phase
    )
    ex.adopt(store, ck.state)
    return ex


def exc_text(exc: BaseException) -> str:
    """``str(exc)``, or what says it could not be had: an exception raised by user code whose
    ``__str__`` raises is still the user's failure to record, not the engine's."""
    try:
        return str(exc)
    except Exception as inner:
        return f"<str() of this {type(exc).__name__} raised {type(inner).__name__}>"


def error_info(where: str, exc: BaseException) -> dict[str, Any]:
    """An error as stored in events, the journal and packets, secrets masked (invariant 9).
    Its message and traceback are cut to ``ERROR_CHARS`` each (``clip_masked``: masked in time
    bounded by the limit, only a head kept): a 10 MB error body is neither stored in every
    copy nor scanned whole by the redaction net."""
    if isinstance(exc, CallTimeout):
        return {"where": where, "type": "Timeout", "message": clip_masked(exc_text(exc))}
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    out: dict[str, Any] = redact({"where": where, "type": type(exc).__name__})
    out["message"] = clip_masked(exc_text(exc))
    out["traceback"] = clip_masked("".join(tb[-6:]))
    return out


class GaveUp(Exception):
    """A call failed and will not be tried again: ``kind`` says why."""

    def __init__(
        self, kind: ErrorClass, error: dict[str, Any], attempts: int, exc: BaseException | None
    ) -> None:
        self.kind = kind
        self.error = error
        self.attempts = attempts
        self.exc = exc
        # What the failed attempts were billed, one entry an attempt that was (an attempt's
        # error may carry ``usage``, as a model adapter's malformed reply does): charged to the
        # run by the engine (invariant 7).
        self.billed: tuple[Usage, ...] = ()
        super().__init__(f"{kind} after {attempts} attempt(s): {error.get('message')}")


class OutOfTime(Exception):
    """The run's time budget ran out before or during a call (a budget stop, not a failure)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.billed: tuple[Usage, ...] = ()  # as GaveUp.billed


class OverBudget(Exception):
    """What a call's failed attempts were billed crossed the run's cost or token budget
    (``reason``: which), so the call is not tried again: at most the one call in flight may
    overshoot a budget (invariant 7). A budget stop, not a failure."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.billed: tuple[Usage, ...] = ()  # as GaveUp.billed


def priced_dict(usage: Usage) -> dict[str, Any]:
    """A call's cost and tokens as an event records them."""
    return {"cost_usd": usage.cost_usd, "tokens": usage.tokens}


def memory_shown(ex: Execution) -> list[str]:
    """The ids of the feedback memory the cycle's actor was shown (its record's ``memory``,
    what ``context_reuse_rate`` counts): from its context, or, for a cycle finished from its
    write-ahead or parked entry after its actor ran in an earlier process, from that entry."""
    if ex.last_context is not None:
        shown = ex.last_context.memory
        return [str(m["memory_id"]) for m in shown] if shown else []
    return list(ex.shown_memory)


def calls_usage(calls: Iterable[Mapping[str, Any]]) -> Usage:
    """What a cycle's priced calls (``_Exec.calls``) cost together, failed attempts and a
    judgement made again included: the cycle record's ``usage``."""
    # summed in call order, as the cycle's Usage was added up call by call (the same floats)
    cost, tokens = 0.0, 0
    for c in calls:  # (every cycle: ``in`` and subscripts, no call a key; adding 0 is a no-op)
        if "cost_usd" in c and (cost_usd := c["cost_usd"]):
            cost += cost_usd
        if "tokens" in c and (n := c["tokens"]):
            tokens += n
    return Usage._stored(cost, tokens, 0.0)


def no_attempt(ex: Execution) -> bool:
    """Whether this cycle makes no attempt (``_decide.no_attempt``, the rule replay and the
    metrics read a record by): not counted as a cycle without progress nor in the mean an
    attempt is projected at (``TaskState.paid_cycles``)."""
    return ex.check_only and _no_attempt(True, [c.get("who") for c in ex.calls])


def cycle_calls(
    calls: Iterable[Mapping[str, Any]], billed: dict[str, bool]
) -> tuple[float, int, dict[str, bool], list[Any]]:
    """A concluded cycle's priced calls read once: what they cost together (``calls_usage``'s
    sums, in call order), ``billed`` with them noted (``_decide.noted_calls`` of
    ``call_rows``: a new dict only when it changes) and the record's ``calls`` as ``pack``
    leaves them (``_record_codec.packed_calls``). Three walks of the same rows, each with its
    rows or dicts built, cost about 4 % of a trivial cycle's bytecodes (bench/RESULTS.md,
    "stop 52"); ``tests/unit/test_cycle_calls.py`` holds this to the three."""
    cost, tokens = 0.0, 0
    out = billed
    packed: list[Any] = []
    for c in calls:  # (a loop: every cycle, a row a call)
        if type(c) is dict and len(c) == 3:
            # The common row, a call that billed nothing (``{who, 0.0, 0}``, +0.0 a float, 0
            # an int: the defaults ``pack`` drops): it adds nothing to the sums, notes its
            # caller as not paid, and packs to its ``who`` alone.
            x, t = c.get("cost_usd"), c.get("tokens")
            if (
                x == 0.0
                and t == 0
                and type(x) is float
                and type(t) is int
                and "who" in c
                and _copysign(1.0, x) > 0.0
            ):
                who = c["who"]
                name = who if type(who) is str else str(who)
                if name not in out:
                    if out is billed:
                        out = dict(billed)
                    out[name] = False
                packed.append({"who": who})
                continue
        # (``calls_usage``: adding 0 is a no-op)
        if "cost_usd" in c and (cost_usd := c["cost_usd"]):
            cost += cost_usd
        if "tokens" in c and (n := c["tokens"]):
            tokens += n
        # (``call_rows`` then ``noted_calls``: a row whose cost is unknown tells nothing)
        if not c.get("unknown_cost"):
            name = str(c.get("who", ""))
            paid = bool(c.get("cost_usd") or c.get("tokens"))
            if name not in out or (paid and not out[name]):
                if out is billed:
                    out = dict(billed)
                out[name] = paid
        packed.append(DROP_CALL(c) if type(c) is dict else c)
    return cost, tokens, out, packed


def call_rows(calls: Iterable[Mapping[str, Any]]) -> list[tuple[str, float, int]]:
    """A cycle's priced calls as ``(who, cost_usd, tokens)`` rows (``_decide.CallRow``): what
    they tell of who bills. A row whose cost is unknown (``unknown_cost``: an effect settled
    by its reconcile hook without a cost) tells nothing, and is left out."""
    return [
        (str(c.get("who", "")), c.get("cost_usd") or 0.0, c.get("tokens") or 0)
        for c in calls
        if not c.get("unknown_cost")
    ]


def budget_before(ex: Execution, who: str, *, free: bool = False) -> tuple[str, str] | None:
    """The budget that forbids starting call ``who`` in this cycle now (``call_stop``), with
    how it stands: ``"crossed"`` (a call in flight overshot it) or ``"reached"``; None: the
    call may start. ``free``: ``who`` is declared to bill nothing (``Effect.free``): a budget
    reached does not forbid it, until it has billed something all the same; one crossed does,
    as it does a call known free (``call_stop``): the overshoot is the one call in flight
    (invariant 7), where each further effect declared free, but billing, ran and added its
    own."""
    s = ex.state
    if budget_exhausted(ex.contract, s.spent) is None:
        return None  # (every call of every cycle asks: nothing built while no budget is used up)
    rows = call_rows(ex.calls)
    if free and declared_free(s.billed, rows, who) and budget_crossed(ex.contract, s.spent) is None:
        return None
    why = call_stop(ex.contract, s.spent, s.billed, rows, who)
    if why is None:
        return None
    return why, "crossed" if budget_crossed(ex.contract, s.spent) else "reached"


def held_out_scope(loop: Loop, scope: str) -> bool:
    """Whether ``scope`` (``call_with_retry``'s) is a held-out verifier's call."""
    name = scope.removeprefix("verifier:")
    return name != scope and any(c.held_out and c.name == name for c in loop.checks)


def fit_history(store: Store, run_id: str, state: TaskState, window: int) -> None:
    """Fit a loaded state's history to this runtime's ``window`` before its first cycle, as an
    uninterrupted run with that window has it: a runtime resuming a run written with a smaller
    window reads the entries it lacks from the run's earlier checkpoints (each holds the window
    as written after its cycle: one read per step back, at most ``window``), a larger one's
    window is cut. A fork's first checkpoint holds the window it was forked with: the entries
    before it are the origin's and are not read."""
    h: list[dict[str, Any]] = list(state.history)
    for _ in range(window):
        first = h[0].get("cycle") if h and isinstance(h[0], Mapping) else None
        if len(h) >= window or not isinstance(first, int) or first <= 1:
            break
        earlier = [c for c in store.checkpoints_at(run_id, first - 1) if c.cycle == first - 1]
        older = [
            dict(e)
            for e in (earlier[-1].fields.get("history") or () if earlier else ())
            if isinstance(e, Mapping) and isinstance(e.get("cycle"), int) and e["cycle"] < first
        ]
        if not older:
            break
        h = [*older, *h]
    if len(h) > window or len(h) != len(state.history):
        state.history = h[-window:]
