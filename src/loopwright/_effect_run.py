"""Effects under the run's journal: ``perform_effect`` runs one requested effect at most once
(invariant 2). Its intent is written under the run's fencing token before it runs and its
result after, in the ``effect:<key>`` journal entry; a resumed run that finds an intent without
a result reconciles it (the effect's own check, else ``in_doubt`` for a person) instead of
running it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

from ._backoff import backoff, held_for, left_of, since
from ._calls import CallTimeout, call_user
from ._effect_holders import holder, running_here, tracked
from ._effect_keys import (
    NOT_REUSED,
    _call_key,
    _refused,
    _undo_unsettled,
    args_digest,
    key_of,
    redo_key,
    reuse_standing,
    undid_for_origin,
)
from ._effects import Effect, EffectCall, EffectResult, _canon
from ._errors import EffectKeyHeld, EffectKeyMoved, StaleLeaseError
from ._exec import Execution, error_info, exc_text
from ._json import str_keys
from ._redact import redact, redact_text
from ._resume_ready import crash_bound
from ._retry import RetryPolicy
from ._store_threads import uncancelled, written
from ._usage import Usage
from .store import JournalEntry, NewEvent, Store

__all__ = ["EffectOutcome", "key_of", "perform_effect", "redo_key", "undid_for_origin"]


@dataclass(frozen=True, slots=True)
class EffectOutcome:
    """How one requested effect ended in this cycle."""

    name: str
    kind: str
    key: str
    status: str  # done | failed | in_doubt
    result: Any = None
    reused: bool = False  # the result of another run's or an earlier cycle's execution
    recovered: bool = False  # done by this attempt before a crash, read back from its journal
    reconciled: bool = False
    attempts: int = 0
    cause: str = ""
    error: dict[str, Any] | None = None
    usage: Usage | None = None  # what the call cost, to charge to this cycle

    @property
    def cost_unknown(self) -> bool:
        """Done without a cost anyone reported: settled by its reconcile hook (its reply lost
        to a crash or an error), which said it happened and not what it cost. Such an effect
        is not known to bill nothing (``_decide.free_call``), as one that ran here and
        returned a plain value is: its row in the cycle's calls says so (``unknown_cost``)."""
        return self.status == "done" and self.reconciled and self.usage is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "usage": self.usage.to_dict() if self.usage else None,
            "name": self.name,
            "kind": self.kind,
            "key": self.key,
            "status": self.status,
            "result": self.result,
            "reused": self.reused,
            "recovered": self.recovered,
            "reconciled": self.reconciled,
            "attempts": self.attempts,
            "cause": self.cause,
            "error": self.error,
        }


def _jsonable(value: Any) -> Any:
    """``value`` as it is recorded: JSON, secrets masked (invariant 9). An effect's result is
    recorded, shown to the actor and reused by later runs of the key in this form, whether
    it was just made or read back after a crash, so both see the same."""
    try:
        try:
            text = json.dumps(value, default=_text)
        except TypeError:  # a key json refuses (a date, a tuple): its str, as the stores write
            text = json.dumps(str_keys(value), default=_text)
    except (ValueError, RecursionError) as exc:
        # The action is done whatever its result looks like: it is recorded done (never run
        # again), with what says why its result could not be (a value that contains itself).
        text = json.dumps({"unrecordable_result": f"{type(value).__name__}: {exc}"})
    return redact(json.loads(text))


def _text(obj: Any) -> str:
    """``str(obj)`` for a result's part JSON cannot hold, or its type's name when even that
    raises (user code's object: it must not fail a recorded action)."""
    try:
        return str(obj)
    except Exception:
        return f"<{type(obj).__name__}>"


_DEFAULT_EFFECT_RETRY = RetryPolicy()

# Of the lease left when an effect starts, the part kept back from its execution deadline
# (capped): room for the result's write and for clocks that differ between hosts, so the
# deadline passes before anyone else can claim the run.
_LEASE_MARGIN = 0.1
_LEASE_MARGIN_MAX_S = 5.0


async def perform_effect(
    store: Store,
    ex: Execution,
    cycle: int,
    eff: Effect,
    call: EffectCall,
    *,
    fixed: tuple[str, bool] | None = None,
    reuse_only: bool = False,
) -> EffectOutcome:
    """Run one effect at most once, journaled: intent before, result after.

    A key already ``done`` returns its recorded result without running. An attempt whose
    outcome was never recorded (the process died, or the call failed in a way that may have
    acted) is in doubt: the reconcile hook decides; without one only an idempotent effect is
    run again, anything else ends in ``in_doubt`` for a person.

    Under a frozen or stuck holder: the call starts only under a lease just renewed (fenced)
    and gets an execution deadline inside it (``deadline_at`` in the intent), never starting
    after it; an intent whose holder may still be executing it (its deadline not passed, or
    its holder alive on this host) is settled only after that deadline, the hook asked again.

    ``fixed``: the key, and whether it is a business key, as the cycle's write-ahead recorded
    them (``key_of``): a resumed cycle settles the intent it journaled even when the loop's
    key function changed between the crash and the resume.
    ``reuse_only``: approved only as another run's execution, reused (``reuse_standing``).
    """
    ikey, business = fixed or key_of(eff, ex.run_id, cycle, call)
    found = store.journal(ex.run_id, key=f"effect:{ikey}")
    # A compensated (undone) execution, or a failed one retired by a rollback, does not
    # satisfy a new request for the same key: the request runs again under the journal's
    # next key ("key~2"), itself at most once. The key it hands the outside world is the next
    # generation's too, except after a failure that may have acted (not ``spent``: a bug after
    # the call, timeouts to the last try): that one's key again, which a provider that
    # deduplicates answers with what it did (a fresh key would act a second time).
    chain, generation, action = 1, 1, ikey
    while found and (found[0].status in ("compensated", "retired") or undid_for_origin(found[0])):
        handed = found[0].data.get("generation")
        handed = handed if isinstance(handed, int) else chain
        kept = found[0].status == "retired" and not found[0].data.get("spent")
        generation = max(generation, handed if kept else handed + 1)
        chain += 1
        found = store.journal(ex.run_id, key=f"effect:{redo_key(ikey, chain)}")
    ikey = redo_key(ikey, chain)
    jkey = f"effect:{ikey}"
    policy = eff.retry or _DEFAULT_EFFECT_RETRY
    base: dict[str, Any] = {"name": eff.name, "kind": eff.kind, "args": _jsonable(dict(call.args))}
    if not business and generation != chain:
        # a run-scoped key handed again (its journal key is the next): recorded with its intent
        base["generation"], base["call_key"] = generation, redo_key(action, generation)
    if business:
        base["action"] = action  # the claim's key, which a compensation frees
    # A business key (``key=`` on the effect or the call) names the action, not the run: it is
    # claimed store-wide, so no other run of this store performs it again (invariant 2). The
    # claim names the action whatever the generation: one undone and done again is done.
    claim = (eff.kind, action, args_digest(base["args"])) if business else None

    def call_key() -> str:
        """The key handed to the effect and its reconcile hook (a cause names it: what a
        person checks with the outside world)."""
        return str(base.get("call_key") or ikey)

    def named() -> str:
        """The effect as a cause names it: its name and the key it was handed."""
        return f"{eff.name} ({call_key()})"

    def out(status: str, **kw: Any) -> EffectOutcome:
        # Invariant 9: a cause quotes an exception, which can quote what the call was given.
        if kw.get("cause"):
            kw["cause"] = redact_text(kw["cause"])
        return EffectOutcome(eff.name, eff.kind, ikey, status, **kw)

    said_not_done: list[bool] = []  # the reconcile hook's "not done", for the next event

    async def put(
        status: str, data: dict[str, Any], attempts: int | None, event: str
    ) -> JournalEntry:
        if status == "done":
            # The checkpoint this attempt of the cycle builds on (its effects' write-ahead):
            # a resume after a crash builds on the same one, a rollback's redo on a later one.
            data = {**data, "base_seq": ex.seq}
        # Invariant 9: the journal entry, its event and the key's claim hold no secret (a
        # result is masked where it is made, a cause or an error here).
        data = redact({**base, **data})
        not_done_said = bool(said_not_done)
        said_not_done.clear()
        # (a store whose write can wait on the run's row lock: from a thread, so that the
        # other runs of the event loop go on meanwhile; evloop53)
        return await written(
            store,
            store.journal_put,
            ex.run_id,
            ex.token,
            key=jkey,
            kind="effect",
            cycle=cycle,
            status=status,
            data=data,
            attempts=attempts,
            events=[
                NewEvent(
                    cycle,
                    event,
                    {"effect": eff.name, "kind": eff.kind, "key": ikey, "status": status}
                    # the key the effect was handed, where it is not the journal's (a redo)
                    | ({"call_key": data["call_key"]} if data.get("call_key", ikey) != ikey else {})
                    | ({"cause": data["cause"]} if data.get("cause") else {})
                    | ({"deadline_at": data["deadline_at"]} if data.get("deadline_at") else {})
                    | ({"from_run": data["from_run"]} if data.get("from_run") else {})
                    # what it cost, on the event of its doing (a trace's effect span counts it)
                    | ({"usage": data["usage"]} if status == "done" and data.get("usage") else {})
                    | ({"hook_not_done": True} if not_done_said else {}),
                )
            ],
            claim=claim,
        )

    async def held(h: EffectKeyHeld) -> EffectOutcome:
        """Another run of the store holds the key: its recorded result when it did the same
        action; otherwise a person decides (different arguments, or an outcome not known).
        The entry, its event and a cause name the key the holder was handed: the claim read
        before the intent (``_call_key``) may have changed since (another run took the action
        under another generation), and a person checks with the outside world by that key."""
        assert claim is not None
        base["generation"] = h.generation
        base["call_key"] = redo_key(action, h.generation)
        if h.status == "done" and h.args_hash == claim[2]:
            try:
                await put(
                    "done", {"result": h.result, "from_run": h.run_id}, attempts, "effect_reused"
                )
            except EffectKeyHeld as moved:
                # The holder's claim changed between the intent's read and this write (its
                # undoing started: a refund): nothing was written; as it stands now.
                return await held(moved)
            return out("done", result=h.result, reused=True, attempts=attempts)
        if h.status == "done":
            cause = (
                f"{named()} was done by run {h.run_id} with other arguments; the "
                "same key with different arguments is not run — check which is right"
            )
        elif h.status == "undoing":
            cause = (
                f"{named()} is being undone by run {h.run_id} (its compensation started, and "
                "may have ended or been interrupted): its result is not reused, nor the "
                "action run again here — check whether it was undone"
            )
        else:
            cause = (
                f"{named()} is held by run {h.run_id}, whose attempt is {h.status} "
                "(it may be doing it now, or have done it) — not run again here"
            )
        await put("in_doubt", {"cause": cause, "from_run": h.run_id}, None, "effect_in_doubt")
        return out("in_doubt", attempts=attempts, cause=cause)

    async def reconcile() -> tuple[str, Any, Usage | None]:
        """('done', result, usage) | ('not_done', None, None) | ('error', message, None). A
        hook that knows what the action cost returns ``EffectResult(value, usage=…)``: the
        crashed attempt is then charged, as a finished one is."""
        assert eff.reconcile_fn is not None
        # bounded as the effect's own call is (its timeout, inside the lease): a hook that
        # hangs must not hold the run, nor act after its lease is gone. Asked before the hook
        # is called, as for the call itself: a lease lost there is the engine's, not the hook's
        limit = await call_limit()
        try:
            found, _ = await call_user(
                eff.reconcile_fn, call_key(), timeout=limit, threaded=ex.threaded
            )
        except CallTimeout as exc:
            return "error", f"the reconcile hook timed out ({exc})", None
        except Exception as exc:
            return "error", f"the reconcile hook raised {type(exc).__name__}: {exc_text(exc)}", None
        if isinstance(found, EffectResult):  # it happened (even with no value): its cost
            return "done", _jsonable(found.value), found.usage
        return ("done", _jsonable(found), None) if found is not None else ("not_done", None, None)

    entry = found[0] if found else None
    attempts = entry.attempts if entry else 0

    async def by_reconcile(doubt: str, info: dict[str, Any] | None) -> EffectOutcome | None:
        """The outcome when the reconcile hook settles it (done, or in doubt because the hook
        failed); ``None`` when the action did not happen and may run."""
        verdict, value, usage = await reconcile()
        if verdict == "done":
            data = {"result": value, "reconciled": True}
            if usage is not None:
                data["usage"] = usage.to_dict()
            await put("done", data, None, "effect_reconciled")
            return out("done", result=value, reconciled=True, attempts=attempts, usage=usage)
        if verdict == "error":
            cause = f"{named()} {doubt}: {value}"
            await put("in_doubt", {"cause": cause, "error": info}, None, "effect_in_doubt")
            return out("in_doubt", attempts=attempts, cause=cause, error=info)
        # the hook said it did not happen: the journal's next event says so (the trace showed
        # a second effect_started with nothing saying the hook was asked; outside51a)
        said_not_done.append(True)
        return None

    def not_reused() -> EffectOutcome:  # (``reuse_only``, undone since: nothing written)
        return out("failed", attempts=0, cause=NOT_REUSED.format(eff.name, action))

    async def grace(doubt: JournalEntry) -> bool:
        """Wait while an in-doubt attempt may still be executing elsewhere: until its deadline
        has passed on the store's clock (``held_for``), unless its holder is known gone.
        Returns whether it waited (the outside world is then asked again)."""
        mark = (ex.run_id, jkey)
        who = holder(doubt.data.get("holder"), mark)
        if who == "gone":
            return False
        ttl = ex.lease_ttl_s or 60.0
        until = doubt.data.get("deadline_at")
        if not isinstance(until, (int, float)):
            until = doubt.updated_at + ttl
        wait = held_for(doubt.data, doubt.updated_at, store.clock(), ttl)  # the store's clock
        if wait <= 0:
            return False  # past its deadline a holder never starts the call
        ex.events.append(
            NewEvent(
                cycle,
                "effect_grace",
                {
                    "effect": eff.name,
                    "key": ikey,
                    "holder": doubt.data.get("holder"),
                    "holder_alive": who == "alive",
                    "until": until,
                },
            )
        )
        await asyncio.sleep(wait)
        return True

    async def lease_room() -> float | None:
        """How long a call starting now may run inside the lease, renewed first (a fenced
        write: ``StaleLeaseError`` once another executor holds the run); ``None``: unbounded."""
        if ex.lease_ttl_s is not None:
            await written(store, store.renew_lease, ex.run_id, ex.token, ex.lease_ttl_s)
            left = ex.lease_ttl_s
        else:  # the TTL is not known here: what the run row says is left of the lease
            expires = store.get_run(ex.run_id).lease_expires_at
            if expires is None:
                return None
            left = expires - time.time()
        room = left - min(left * _LEASE_MARGIN, _LEASE_MARGIN_MAX_S)
        if room <= 0:
            raise StaleLeaseError(f"run {ex.run_id}: no time left in the lease to run {eff.name}")
        return room

    async def call_limit() -> float | None:
        """The timeout of a call of the effect (or its reconcile hook) starting now: its own
        ``timeout_s``, within ``lease_room``; ``None``: unbounded."""
        room = await lease_room()
        return room if eff.timeout_s is None else min(eff.timeout_s, room or eff.timeout_s)

    first_at = float(entry.data.get("first_at", time.time())) if entry else time.time()
    not_done = False
    uncharged = 0  # kills of this effect's attempts left uncharged (below)
    # Another run's result, reused by an earlier cycle of this one or inherited by this fork
    # from its origin: the claim is asked again at the intent below, since that run may have
    # undone it since (a refund frees the key). Reused again while it stands; done here once
    # the key is free (a fork whose origin refunded the payment it inherited was told "done"
    # and paid nothing).
    # Done by this very attempt of the cycle before a crash: recovered, not reused (reuse is
    # another run's or an earlier cycle's execution of the same key).
    recovered = (
        entry is not None
        and entry.status == "done"
        and entry.cycle == cycle
        and entry.data.get("base_seq") == ex.seq
    )
    stale = (
        entry is not None
        and entry.status == "done"
        and business
        and bool(entry.data.get("from_run") or entry.data.get("inherited_from"))
        and not recovered
    ) or (
        # In doubt about another run's claim as ``held`` found it (that run executing it, or
        # undoing it), not about an attempt of this run: asked again (a rollback's redo). The
        # old answer was kept for good: a run that asked while another paid stayed escalated
        # after that payment was done, a rollback past it too (effects53).
        entry is not None
        and entry.status == "in_doubt"
        and business
        and bool(entry.data.get("from_run"))
    )
    if reuse_only and (entry is None or stale):
        standing = reuse_standing(store, eff.kind, action, ex.run_id)
        if standing is None:
            return not_reused()
        # the key of the execution reused, as that one read found it: undone since, the
        # intent's claim write refuses it (``EffectKeyMoved``), it never takes the key freed
        base["generation"] = standing.generation
        base["call_key"] = redo_key(action, standing.generation)
    elif business and (entry is None or stale or entry.status in ("intent", "waiting")):
        # the key this call hands the effect, recorded with its intent (``_call_key``)
        base["generation"], base["call_key"] = _call_key(
            store, eff.kind, action, generation, None if stale else entry
        )

    if entry is not None and not stale:
        done_args = entry.data.get("args") if entry.status == "done" else None
        undo = _undo_unsettled(store, ex.run_id, eff.name, ikey) if entry.status == "done" else None
        doubt: tuple[str, str] | None = None
        if done_args is not None and _canon(done_args) != _canon(base["args"]):
            # This run did the action with other arguments (an earlier cycle, or an earlier
            # call of this proposal): as when another run did (``held``), a person decides
            # which is right; the journal keeps the execution that happened.
            doubt = (
                "effect_args_differ",
                (
                    f"{named()} was done by this run in cycle {entry.cycle} with other "
                    "arguments; the same key with different arguments is not run — check which "
                    "is right"
                ),
            )
        elif undo is not None:
            # This run started undoing it (a cancel's or a rollback's refund) and the outcome
            # is not known to be a refusal: the money may be back with the payer. Counted
            # paid, the work would be accepted on a refunded payment; paid again, it might be
            # paid twice. Nothing is written: the payment's entry and its claim (``undoing``)
            # stay as they are, for a person to settle.
            doubt = (
                "effect_undo_unsettled",
                (
                    f"{named()} was done by this run in cycle {entry.cycle}, and its undoing "
                    f"({undo.data.get('name')}) started and is {undo.status}: it is neither "
                    "counted done nor run again — check with the outside world whether it was "
                    "undone"
                ),
            )
        if doubt is not None:
            ex.events.append(NewEvent(cycle, doubt[0], {"effect": eff.name, "key": ikey}))
            return out("in_doubt", attempts=attempts, cause=doubt[1])
        if entry.status == "done":
            from_run = entry.data.get("from_run")
            if recovered:
                data = {"effect": eff.name, "kind": eff.kind, "key": ikey, "status": "done"}
                ex.events.append(
                    NewEvent(
                        cycle,
                        "effect_recovered",
                        data | ({"from_run": from_run} if from_run else {}),
                    )
                )
            else:
                ex.events.append(
                    NewEvent(cycle, "effect_reused", {"effect": eff.name, "key": ikey})
                )
            # Done in this very cycle before a crash: its cost was never checkpointed, so it is
            # charged now; done in an earlier cycle, it was charged then.
            cost = entry.data.get("usage") if entry.cycle == cycle else None
            return out(
                "done",
                result=entry.data.get("result"),
                # a recovered result is still another run's when that run did the action
                reused=not recovered or bool(from_run),
                recovered=recovered,
                # settled by its reconcile hook before the crash: a cost it did not report is
                # unknown, as it was when the hook settled it (``EffectOutcome.cost_unknown``)
                reconciled=recovered and bool(entry.data.get("reconciled")),
                attempts=attempts,
                usage=Usage.from_dict(cost) if cost else None,
            )
        if entry.status in ("failed", "in_doubt"):
            return out(
                entry.status,
                attempts=attempts,
                cause=str(entry.data.get("cause", "")),
                error=entry.data.get("error"),
            )
        if entry.status == "intent":
            # Started, never finished: did it happen?
            if eff.reconcile_fn is not None:
                settled = await by_reconcile("is in doubt", None)
                if settled is not None:
                    return settled
                not_done = True  # the hook says it did not happen (asked again after grace)
            elif not eff.idempotent:
                cause = (
                    f"{named()} started before a crash and its outcome was not "
                    "recorded; it is not idempotent and has no reconcile hook, so it is not run "
                    "again — check whether it happened"
                )
                await put("in_doubt", {"cause": cause}, None, "effect_in_doubt")
                return out("in_doubt", attempts=attempts, cause=cause)
            # Not done (or idempotent): its holder may still be executing it (a frozen or
            # stuck worker) — not run again before its deadline has passed.
            if await grace(entry) and eff.reconcile_fn is not None:
                settled = await by_reconcile("is in doubt", None)
                if settled is not None:
                    return settled
            uncharged = int(entry.data.get("uncharged") or 0)
            if not_done and uncharged < crash_bound(ex.contract):
                # The reconcile hook says the attempt the intent journaled never acted: cut off
                # before its call, it is no attempt of the retry bound's. Counted, one kill of
                # an effect with ``attempts=1`` ended a run an uninterrupted one accepted
                # (killcmp54). An attempt that may have acted (idempotent, no hook) still
                # counts: the bound holds the calls the outside world may have seen. As many
                # as ``max_crashes`` allows, no more: the crash bound is not judged on a resume
                # that finishes a cycle's effects, and a process dying there every time (a
                # native crash in the effect's client) was resumed for ever (review54c).
                attempts = max(0, attempts - 1)
                uncharged += 1  # (its intent's, the next: ``intent`` below)
        elif entry.status == "waiting":
            wait = left_of(float(entry.data.get("next_at", 0.0)), entry.updated_at)
            if wait > 0:
                await backoff(store, ex, wait, f"effect {eff.name}")
    # Whether the latest attempt's outcome is unknown (interrupted by a crash, and no reconcile
    # hook said it did not happen).
    unknown = entry is not None and entry.status == "intent" and not not_done
    while True:
        if attempts >= policy.attempts:
            if unknown:
                # Interrupted attempts count against the bound (a crash loop must end), but
                # an attempt that may have succeeded is in doubt, not failed.
                cause = (
                    f"{named()} was interrupted {attempts} time(s), its retry bound; "
                    "the last attempt's outcome is unknown — check whether it happened"
                )
                await put("in_doubt", {"cause": cause}, None, "effect_in_doubt")
                return out("in_doubt", attempts=attempts, cause=cause)
            cause = f"{named()} gave up after {attempts} attempt(s)"
            await put("failed", {"cause": cause}, None, "effect_failed")
            return out("failed", attempts=attempts, cause=cause)
        ex.at("before_effect_intent")
        attempts += 1
        while True:
            # The deadline lies inside a lease renewed just now: the lease cannot pass to
            # another executor before it, and the call never starts after it: counted here
            # from before the store's clock is read (``since``; a taker: ``held_for``).
            wall, mono = time.time(), time.monotonic()
            clock_at = store.clock()
            limit = await call_limit()
            deadline_at = None if limit is None else wall + limit
            intent = {"first_at": first_at, "deadline_at": deadline_at, "holder": ex.owner}
            if uncharged:
                intent["uncharged"] = uncharged  # (the kills not charged so far)
            if limit is not None:
                intent |= {"limit_s": limit, "clock_at": clock_at}
            try:
                # Written to its end, then the cancellation taken (a store thread's write,
                # which no cancellation stops, landed after it: crash53b)
                writing = asyncio.ensure_future(put("intent", intent, attempts, "effect_started"))
                await uncancelled(writing)
            except asyncio.CancelledError:
                if writing.cancelled() or writing.exception() is not None:
                    raise  # (nothing written)
                # Cancelled while its intent was written: the call was never started. The
                # intent is withdrawn (its attempt not made), so that the run resumed calls
                # it, not finds it in doubt; the withdrawal lost, it is found in doubt, as
                # after a crash there, never called twice.
                with contextlib.suppress(Exception):
                    withdrawn = {"first_at": first_at, "next_at": 0.0, "withdrawn": True}
                    await uncancelled(put("waiting", withdrawn, attempts - 1, "effect_withdrawn"))
                raise
            except EffectKeyMoved as moved:
                # another run took (and undid) the action since its claim was read: nothing
                # was written; the next generation's key, never handed out
                if reuse_only:
                    return not_reused()
                base["generation"] = moved.generation
                base["call_key"] = redo_key(action, moved.generation)
                continue
            except EffectKeyHeld as h:
                attempts -= 1  # nothing was written
                return await held(h)
            ex.at("after_effect_intent")
            left = None if limit is None else limit - since(wall, mono)
            if left is None or left > 0:
                break
            # Paused past the deadline before the call (a frozen process): another executor
            # may hold the run by now; renew (fenced) and write a fresh intent first.
        running_call = tracked(eff.bind(call.args, call_key()), (ex.run_id, jkey))
        try:
            try:
                result, _secs = await call_user(running_call, timeout=left, threaded=ex.threaded)
            finally:
                running_call.over()  # (before ``running_here`` is read below)
        except Exception as exc:
            unknown = False
            kind = policy.classify(exc)
            info = error_info(f"effect {eff.name}", exc)
            # A sync call past its timeout goes on in its thread: it may act after the hook
            # is asked (read first, so that a call ending now has acted before the hook looks).
            running = running_here((ex.run_id, jkey))
            checked = False  # the reconcile hook said it did not happen
            if eff.reconcile_fn is not None:
                # It may have acted before failing: ask the outside world before anything else.
                settled = await by_reconcile("raised and is in doubt", info)
                if settled is not None:
                    return settled
                checked = True
            elif kind == "transient" and not eff.idempotent:
                cause = (
                    f"{named()} failed with a transient error ({_what_failed(exc, eff)}) and "
                    "may have acted; it is not idempotent and has no reconcile hook, so it is "
                    "not retried"
                )
                await put("in_doubt", {"cause": cause, "error": info}, None, "effect_in_doubt")
                return out("in_doubt", attempts=attempts, cause=cause, error=info)
            elif not eff.idempotent and not eff.takes_key and not _refused(exc):
                # A failure that may have come after the action keeps its key for the next
                # attempt (another run's, a rollback's redo), which a provider that
                # deduplicates answers with what it did. A function that takes no ``key``
                # never hands it to a provider: recorded ``failed`` (its claim free), the
                # next run asking for the action did it a second time.
                cause = (
                    f"{named()} failed with {type(exc).__name__}: {exc_text(exc)} and may have "
                    "acted; it is not idempotent, has no reconcile hook and takes no key to "
                    "hand a provider, so it is not run again — check whether it happened "
                    "(raise RefusedError when the outside world refused it, having done nothing)"
                )
                await put("in_doubt", {"cause": cause, "error": info}, None, "effect_in_doubt")
                return out("in_doubt", attempts=attempts, cause=cause, error=info)
            if running and not eff.idempotent:
                # "Not done" is only true so far: run again, it would act twice.
                cause = (
                    f"{named()} timed out and its call is still running (a thread "
                    "cannot be stopped), so it may still act; it is not run again — check "
                    "whether it happened"
                )
                await put("in_doubt", {"cause": cause, "error": info}, None, "effect_in_doubt")
                return out("in_doubt", attempts=attempts, cause=cause, error=info)
            _, delay = policy.decide(exc, attempts, elapsed_s=time.time() - first_at)
            if delay is None:
                why = {
                    "permanent": "a permanent error",
                    "needs_human": "an error a person must resolve",
                    "transient": f"a transient error, {attempts} attempt(s) spent",
                }[kind]
                cause = f"{named()} failed with {why}: {type(exc).__name__}: {exc_text(exc)}"
                failed: dict[str, Any] = {"cause": cause, "error": info, "class": kind}
                if not running and (checked or _refused(exc)):
                    # A finished attempt: the outside world said no (or its check found
                    # nothing done), and a provider that keeps a failed answer by key (a
                    # declined card, for a day) gives it again: a retry is a new attempt,
                    # under the next generation's key (the claim ``refused``).
                    failed["spent"] = True
                await put("failed", failed, None, "effect_failed")
                return out("failed", attempts=attempts, cause=cause, error=info)
            await put(
                "waiting",
                {"first_at": first_at, "next_at": time.time() + delay, "error": info},
                None,
                "effect_retry",
            )
            ex.at("backoff:effect")
            await backoff(store, ex, delay, f"effect {eff.name}")
            continue
        ex.at("before_effect_result")
        usage = None
        if isinstance(result, EffectResult):
            result, usage = result.value, result.usage
        value = _jsonable(result)
        data = {"result": value, "first_at": first_at}
        if usage is not None:
            data["usage"] = usage.to_dict()
        await put("done", data, None, "effect_done")
        ex.at("after_effect_result")
        return out("done", result=value, attempts=attempts, usage=usage)


def _what_failed(exc: BaseException, eff: Effect) -> str:
    """The transient error named for a person settling the entry: its type and text, and for
    a timeout, where the limit came from (the effect's own ``timeout_s``, or its deadline inside
    the lease: an operator whose effects outlast ``--lease-ttl`` raises it)."""
    if isinstance(exc, CallTimeout):
        limit = (
            f"its timeout_s of {eff.timeout_s:g} s"
            if eff.timeout_s is not None and eff.timeout_s <= exc.seconds + 0.5
            else "its deadline inside the lease: raise --lease-ttl / lease_ttl_s for a longer call"
        )
        return f"no result after {exc.seconds:.3g} s, {limit}"
    return f"{type(exc).__name__}: {exc_text(exc)}"
