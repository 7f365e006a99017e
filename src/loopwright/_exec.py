"""A run under execution, and the actor's and verifiers' calls made within its lease.

Two journals live in the store beside the checkpoints, both written under the run's fencing
token:

* ``retry:<scope>:<cycle>`` counts the failed attempts of an actor or verifier call and when
  the next may start, so the attempt bound and the backoff survive a restart (invariant 4). It
  is written only when a call fails: a healthy cycle pays nothing for it (``call_with_retry``,
  here).
* ``effect:<key>`` records an effect's intent before it runs and its result after, so an
  effect is never executed twice (invariant 2): ``_effect_run.perform_effect``.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._backoff import backoff
from ._calls import CallTimeout, call_user
from ._contract import Contract
from ._decide import budget_crossed
from ._loop import Loop
from ._modelcalls import MODEL_CALL, SINK, clip_masked
from ._proposal import Context, Verdict
from ._redact import redact
from ._retry import ErrorClass, RetryPolicy
from ._state import Digests, TaskState, Version, part_ref
from ._state_codec import FORMAT
from ._usage import Usage
from .store import CommitRequest, JournalEntry, NewEvent, Store
from .store._base import with_newer

__all__ = [
    "NO_LOOP",
    "Execution",
    "GaveUp",
    "OutOfTime",
    "OverBudget",
    "call_with_retry",
    "exc_text",
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
    pending_req: CommitRequest | None = None  # what that commit carries (restored if it fails)
    grouped: bool = False  # driven by resume: may join group commits
    draining: Callable[[], bool] | None = None  # the runtime is shutting down (``backoff``)
    last_context: Context | None = None  # what the actor saw this cycle (for the reflector)
    # A cycle finished from its write-ahead or parked entry (its actor ran in an earlier
    # process): the ids of the feedback memory that actor was shown, as the entry stored them.
    shown_memory: list[str] = field(default_factory=list)
    last_visible: dict[str, Verdict] = field(default_factory=dict)  # this cycle's visible verdicts
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


def _who(scope: str) -> str:
    """A call's name in a message (``the actor``, ``verifier check``): built only where a
    message is (no string a successful call)."""
    return "the actor" if scope == "actor" else scope.replace(":", " ", 1)


async def call_with_retry(
    store: Store,
    ex: Execution,
    *,
    scope: str,
    cycle: int,
    policy: RetryPolicy,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    timeout: float | None,
    deadline: float | None = None,
    again: Callable[[], tuple[Any, ...]] | None = None,
) -> tuple[Any, float]:
    """Call ``fn(*args)`` under ``policy`` with attempts persisted in the run's journal;
    each attempt after the first is given ``again()`` when there is one (fresh copies: what a
    failed attempt changed in place of what it was given is not seen by the next).

    Raises ``GaveUp`` once the call is not to be tried again (a permanent or needs-human
    error, the attempts or the policy's deadline spent), and ``OutOfTime`` when the run's time
    budget (``deadline``, wall clock) leaves no room for an attempt or its backoff: each
    attempt's timeout is cut to what is left, so retries never overrun the budget.
    """

    # The common case (no failure on record, the call succeeds) is every actor and verifier
    # call of every cycle: it builds no closure and reads no journal entry.
    key = f"retry:{scope}:{cycle}"
    entry = ex.retries.get(key) if ex.retries else None
    ex.asked.add(key)  # what its entry owes is charged here (or by the caller, raised)
    # A call that succeeded after failed attempts, charged with its cycle's checkpoint: once
    # that is committed (a cycle judged again after a wait) this is a new call, its earlier
    # failures neither charged again nor counted; if it never was (a crash first: a resume's
    # status commit records no cycle), the cycle is redone and still owes them.
    if entry is not None and entry.status == "settled" and _charged(store, ex, entry):
        entry = None
    failed = entry.attempts if entry else 0
    first_at = float(entry.data.get("first_at", time.time())) if entry else time.time()
    # What this call's failed attempts cost (a malformed reply's tokens), journaled with each
    # failed attempt: charged when the call ends, whether it succeeds or not, even after a
    # restart in between (invariant 7).
    billed = _billed(entry.data) if entry is not None else ()
    if entry is not None:
        if billed and entry.status == "settled":
            # owed by a cycle killed before its commit (a billed call that succeeded, failed
            # attempts): charged first; past a budget, no new call is made (invariant 7: a
            # crash loop ends by its budget, not by the money it was never charged)
            # Their answers were lost with the killed cycle's events: a ``retry`` event each,
            # committed with whatever ends this cycle, carries what it was billed, so the
            # call's span (and the trace) adds up to the spend charged here.
            ex.events.extend(_lost_events(cycle, scope, entry))
            crossed = _crossed_with(ex, billed)
            if crossed is not None:
                over = OverBudget(crossed, _owed_message(_who(scope), crossed))
                over.billed = billed
                raise over
        stop = entry.data.get("budget") if entry.status == "gave_up" else None
        if stop == "budget_time":  # it failed with no time left for another attempt
            late = OutOfTime(
                f"{_who(scope)} failed with no time left in the budget for another attempt"
            )
            late.billed = billed
            raise late
        if isinstance(stop, str):  # its failed attempts had crossed a budget (_failed_attempt)
            over = OverBudget(stop, _over_message(_who(scope), stop))
            over.billed = billed
            raise over
        if entry.status == "gave_up" or failed >= policy.attempts:
            spent = GaveUp(
                entry.data.get("class", "transient"),
                dict(entry.data.get("error") or {"message": "attempts spent before a restart"}),
                failed,
                None,
            )
            spent.billed = billed
            raise spent
        wait = float(entry.data.get("next_at", 0.0)) - time.time()
        if wait > 0:  # killed during the backoff: wait out only what is left of it
            if deadline is not None and time.time() + wait >= deadline:
                late = OutOfTime(f"the time budget runs out during the backoff of {_who(scope)}")
                late.billed = billed
                raise late
            await backoff(store, ex, wait, scope)

    while True:
        per_call = timeout
        if deadline is not None:
            left = deadline - time.time()
            if left <= 0:
                late = OutOfTime(f"the time budget ran out before {_who(scope)} could be called")
                late.billed = billed
                raise late
            per_call = left if timeout is None else min(timeout, left)
        made: list[dict[str, Any]] = []  # the model calls this attempt reports
        sink = SINK.set(made)  # (``open_sink`` without its call)
        try:
            got = await call_user(fn, *args, timeout=per_call, threaded=ex.threaded)
        except Exception as exc:
            SINK.reset(sink)
            if again is not None:
                args = again()
            billed = await _failed_attempt(
                store,
                ex,
                exc,
                scope,
                cycle,
                policy,
                key,
                _who(scope),
                made,
                failed,
                first_at,
                billed,
                timeout,
                per_call,
                deadline,
            )
            failed += 1
            continue
        except BaseException:  # cancelled: the sink goes as ``collecting`` would
            SINK.reset(sink)
            raise
        SINK.reset(sink)
        # (most calls report no model call and had no billed failed attempt: nothing to do)
        if made:  # committed with the cycle, before its proposal or verdict event
            ex.events.extend(_call_events(cycle, scope, failed + 1, made, "ok"))
        if billed:
            charge(ex, scope, billed)  # the failed attempts before this one
        paid = _paid(got[0])
        if entry is not None or failed or paid is not None:
            # Charged with the next checkpoint: recorded, so that this call asked again (the
            # cycle judged again after a wait) does not charge or count them twice. A billed
            # call is journaled before its cycle commits: the provider billed it, so a cycle
            # killed before its commit still owes it when redone (read back by ``_billed``).
            settled = ex.retries.get(key) or entry
            data = {**(settled.data if settled else {}), "base_seq": ex.seq}
            if paid is not None:
                data["each"] = [[u.cost_usd, u.tokens] for u in billed]
                data["ok"] = [paid.cost_usd, paid.tokens]
                # answers charged here without an event of their own (killed again, the
                # events written above are lost with this cycle too)
                data["lost"] = _lost(entry.data) if entry is not None else []
            put: dict[str, Any] = {
                "run_id": ex.run_id,
                "token": ex.token,
                "key": key,
                "kind": "retry",
                "cycle": cycle,
                "status": "settled",
                "data": data,
                "attempts": failed,
            }
            # A bill must outlive the process, not the machine: the cycle's commit syncs it
            # (a store written before ``lazy`` was a keyword writes it as any other).
            wrote = with_newer(store.journal_put, put, {"lazy": True})
            ex.retries[key] = wrote if wrote is not None else store.journal_put(**put)
        return got


def settle_owed(store: Store, ex: Execution, cycle: int) -> None:
    """Charge what calls of ``cycle`` were billed before a restart when this execution did
    not ask them again (invariant 7): a redone cycle that stopped before a verifier killed
    after its answer (a budget crossed by the actor's owed calls), or skipped it (a proposal
    refused or repeated), still owes that verifier's calls; the entry then goes with the
    commit like any other (before: never charged, and left in the journal)."""
    for key, e in list(ex.retries.items()):
        if e.cycle != cycle or key in ex.asked or e.status == "retired":
            continue
        billed = _billed(e.data)
        if not billed or (e.status == "settled" and _charged(store, ex, e)):
            continue
        ex.asked.add(key)
        scope = key.removeprefix("retry:").rpartition(":")[0]
        ex.events.extend(_lost_events(cycle, scope, e))  # the trace adds them up too
        charge(ex, scope, billed)


def _paid(got: Any) -> Usage | None:
    """What a call that succeeded was billed (an actor's proposal, a verifier's verdict), if
    anything."""
    usage = getattr(got, "usage", None)
    if isinstance(usage, Usage) and (usage.cost_usd or usage.tokens):
        return usage
    return None


def _lost(data: Mapping[str, Any]) -> list[Any]:
    """The answers of earlier killed attempts of a call, as journaled: ``lost`` and ``ok``."""
    lost = data.get("lost")
    ok = data.get("ok")
    return [*(lost if isinstance(lost, list) else ()), *([ok] if isinstance(ok, list) else ())]


def _lost_events(cycle: int, scope: str, entry: JournalEntry) -> list[NewEvent]:
    """A ``retry`` event for each answer of ``scope``'s call a killed cycle lost (billed,
    charged again by the redone cycle), with its usage."""
    return [
        NewEvent(
            cycle,
            "retry",
            {
                "scope": scope,
                "attempt": entry.attempts,
                "class": "transient",
                "error": "the process stopped before the cycle committed its answer",
                "delay_s": 0.0,
                "interrupted": True,
                "usage": {"cost_usd": float(c or 0.0), "tokens": int(t or 0)},
            },
        )
        for c, t in _lost(entry.data)
    ]


def _owed_message(who: str, reason: str) -> str:
    return (
        f"what {who} was billed in this cycle before the process stopped (a restart) crossed "
        f"the {_budget_word(reason)} budget"
    )


def _crossed_with(ex: Execution, billed: Iterable[Usage]) -> str | None:
    """The budget the run's spend would cross once ``billed`` is charged too, if any."""
    spent = ex.state.spent
    for u in billed:
        spent = spent + Usage(u.cost_usd, u.tokens, 0.0)
    return budget_crossed(ex.contract, spent)


def _charged(store: Store, ex: Execution, entry: JournalEntry) -> bool:
    """Whether a checkpoint after a settled retry entry's ``base_seq`` recorded its cycle (the
    spend of the call's failed attempts committed with it). Read only for a settled entry
    asked for again: a few checkpoints, those since the settle."""
    base = int(entry.data.get("base_seq", -1))
    if ex.seq <= base:
        return False
    return any(
        ck.record is not None and ck.record.get("cycle") == entry.cycle
        for ck in store.checkpoints_after(ex.run_id, base)
    )


def owes(store: Store, ex: Execution, entry: JournalEntry) -> bool:
    """Whether a retry entry holds billing its cycle has not been charged: a billed answer or
    failed attempts of a cycle not yet recorded (a ``settled`` or ``gave_up`` one's cycle
    not committed since; a ``waiting`` one's call not ended)."""
    if not _billed(entry.data):
        return False
    return entry.status == "waiting" or (
        entry.status in ("settled", "gave_up") and not _charged(store, ex, entry)
    )


def charge(ex: Execution, who: str, billed: Iterable[Usage]) -> None:
    """Charge ``who``'s failed attempts (what each was billed) to the run (invariant 7): the
    spend, the held-out share the actor is not shown (invariant 3), the cycle's priced calls
    (one a billed attempt, in order: the budget was checked after each, and replay checks the
    cycle's calls one by one)."""
    held = held_out_scope(ex.loop, who)
    for usage in billed:
        if usage.cost_usd or usage.tokens:
            priced = Usage(usage.cost_usd, usage.tokens, 0.0)
            ex.state.spent = ex.state.spent + priced
            if held:
                ex.state.held_out_spent = ex.state.held_out_spent + priced
            ex.calls.append({"who": who, "cost_usd": usage.cost_usd, "tokens": usage.tokens})


def _over_message(who: str, reason: str) -> str:
    return (
        f"what the failed attempts of {who} were billed crossed the {_budget_word(reason)} budget"
    )


def _budget_word(reason: str) -> str:
    return "cost" if reason == "budget_cost" else "token" if reason == "budget_tokens" else "time"


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


def held_out_scope(loop: Loop, scope: str) -> bool:
    """Whether ``scope`` (``call_with_retry``'s) is a held-out verifier's call."""
    name = scope.removeprefix("verifier:")
    return name != scope and any(c.held_out and c.name == name for c in loop.verifiers)


async def _failed_attempt(
    store: Store,
    ex: Execution,
    exc: Exception,
    scope: str,
    cycle: int,
    policy: RetryPolicy,
    key: str,
    who: str,
    made: list[dict[str, Any]],
    failed: int,
    first_at: float,
    billed: tuple[Usage, ...],
    timeout: float | None,
    per_call: float | None,
    deadline: float | None,
) -> tuple[Usage, ...]:
    """One failed attempt of ``call_with_retry``'s call (``failed`` before it): journaled with
    its events, then either the backoff is waited out (returns what the failed attempts cost
    so far) or ``GaveUp`` / ``OutOfTime`` / ``OverBudget`` is raised, carrying that cost."""
    cost = getattr(exc, "usage", None)
    attempt: Usage | None = None
    if isinstance(cost, Usage) and (cost.cost_usd or cost.tokens):
        attempt = Usage._stored(cost.cost_usd, cost.tokens, 0.0)
        billed = (*billed, attempt)

    def billing(err: GaveUp | OutOfTime | OverBudget) -> GaveUp | OutOfTime | OverBudget:
        err.billed = billed
        return err

    if (
        isinstance(exc, CallTimeout)
        and deadline is not None
        and (timeout is None or (per_call is not None and per_call < timeout))
    ):
        # The budget, not the call's own limit, cut it short.
        raise billing(
            OutOfTime(
                f"{who} was still working when the time budget ran out (the call was given "
                f"the {exc.seconds:g} s the budget had left)"
            )
        ) from None
    failed += 1
    total = _NOTHING
    for u in billed:
        total = total + u
    info = error_info(scope, exc)
    kind, delay = policy.decide(exc, failed, elapsed_s=time.time() - first_at)
    over: str | None = None
    waited = delay  # the wait the policy asked for (a Retry-After), for the message
    if delay is not None and deadline is not None and time.time() + delay >= deadline:
        delay = None  # no time for another attempt; the run ends by its time budget
        out_of_time = True
    else:
        out_of_time = False
        if delay is not None and attempt is not None:
            # Invariant 7: at most the call in flight overshoots a budget. What the failed
            # attempts were billed counts before another is made (charged in this order when
            # the call ends: replay checks the cycle's calls the same way).
            over = _crossed_with(ex, billed)
            if over is not None:
                delay = None
    status = "gave_up" if delay is None else "waiting"
    next_at = time.time() + (delay or 0.0)
    ex.retries[key] = store.journal_put(
        ex.run_id,
        ex.token,
        key=key,
        kind="retry",
        cycle=cycle,
        status=status,
        data={
            "first_at": first_at,
            "next_at": next_at,
            "class": kind,
            "error": {k: v for k, v in info.items() if k != "traceback"},
            "billed": {"cost_usd": total.cost_usd, "tokens": total.tokens},
            "each": [[u.cost_usd, u.tokens] for u in billed],
            # why it was not tried again, when a budget said so: a restart before the stop's
            # commit stops the same way (out of time, not given up)
            **({"budget": "budget_time"} if out_of_time else {}),
            **({"budget": over} if over is not None else {}),
        },
        attempts=failed,
        events=[
            *_call_events(cycle, scope, failed, made, "retry" if delay is not None else "gave_up"),
            NewEvent(
                cycle,
                "retry" if delay is not None else "gave_up",
                {
                    "scope": scope,
                    "attempt": failed,
                    "class": kind,
                    "error": f"{info['type']}: {info['message']}"[:500],
                    "delay_s": delay,
                    **({"budget": over} if over is not None else {}),
                    # what this attempt was billed: its call's span in a trace counts it
                    **({"usage": priced_dict(attempt)} if attempt is not None else {}),
                },
            ),
        ],
    )
    if out_of_time:
        left = max(0.0, (deadline or 0.0) - time.time())
        raise billing(
            OutOfTime(
                f"{who} failed ({info['type']}: {info['message']}); another attempt would "
                f"start after a wait of {waited or 0.0:.3g} s, and the time budget has "
                f"{left:.3g} s left"
            )
        ) from exc
    if over is not None:
        raise billing(OverBudget(over, _over_message(who, over))) from exc
    if delay is None:
        raise billing(GaveUp(kind, error_info(scope, exc), failed, exc)) from exc
    ex.at(f"backoff:{scope}")
    await backoff(store, ex, delay, scope)
    return billed


_NOTHING = Usage()


def _billed(data: Mapping[str, Any]) -> tuple[Usage, ...]:
    """What each earlier attempt was billed, as journaled: ``each`` (and ``ok``, the attempt
    that succeeded in a cycle that was never committed), or the total ``billed`` as one (an
    entry written before attempts were listed), or none (before either was)."""
    each = data.get("each")
    ok = data.get("ok")
    if isinstance(each, list):
        rows = [*each, ok] if isinstance(ok, list) else each
        return tuple(Usage._stored(float(c or 0.0), int(t or 0), 0.0) for c, t in rows)
    total = data.get("billed")
    if not isinstance(total, Mapping):
        return ()
    u = Usage._stored(float(total.get("cost_usd") or 0.0), int(total.get("tokens") or 0), 0.0)
    return (u,) if u.cost_usd or u.tokens else ()


def _call_events(
    cycle: int, scope: str, attempt: int, made: list[dict[str, Any]], outcome: str
) -> list[NewEvent]:
    """The ``model_call`` events of one attempt of a call (``_modelcalls``)."""
    return [
        NewEvent(cycle, MODEL_CALL, {"scope": scope, "attempt": attempt, "outcome": outcome, **m})
        for m in made
    ]
