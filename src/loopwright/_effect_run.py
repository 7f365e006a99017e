"""Effects under the run's journal: ``perform_effect`` runs one requested effect at most once
(invariant 2). Its intent is written under the run's fencing token before it runs and its
result after, in the ``effect:<key>`` journal entry; a resumed run that finds an intent without
a result reconciles it (the effect's own check, else ``in_doubt`` for a person) instead of
running it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from ._backoff import backoff, left_of, since
from ._call_billing import fenced_bill
from ._calls import CallTimeout, call_user
from ._crash_bound import crash_bound
from ._effect_holders import running_here, tracked
from ._effect_journal import EffectJournal, EffectOutcome, jsonable
from ._effect_keys import (
    args_digest,
    key_of,
    next_call_key,
    redo_key,
    refused_by_world,
    reuse_standing,
    undid_for_origin,
    undo_unsettled,
)
from ._effects import Effect, EffectCall, EffectResult, canon
from ._errors import EffectKeyHeld, EffectKeyMoved, StaleLeaseError
from ._exec import Execution, error_info, exc_text
from ._retry import RetryPolicy
from ._store_threads import uncancelled
from ._usage import Usage
from .store import NewEvent, Store

__all__ = ["EffectOutcome", "key_of", "perform_effect", "redo_key", "undid_for_origin"]


_DEFAULT_EFFECT_RETRY = RetryPolicy()


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
    base: dict[str, Any] = {"name": eff.name, "kind": eff.kind, "args": jsonable(dict(call.args))}
    if not business and generation != chain:
        # a run-scoped key handed again (its journal key is the next): recorded with its intent
        base["generation"], base["call_key"] = generation, redo_key(action, generation)
    if business:
        base["action"] = action  # the claim's key, which a compensation frees
    # A business key (``key=`` on the effect or the call) names the action, not the run: it is
    # claimed store-wide, so no other run of this store performs it again (invariant 2). The
    # claim names the action whatever the generation: one undone and done again is done.
    claim = (eff.kind, action, args_digest(base["args"])) if business else None
    journal = EffectJournal(store, ex, cycle, eff, ikey, base, action, claim)

    entry = found[0] if found else None
    attempts = entry.attempts if entry else 0
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
            return journal.not_reused()
        # the key of the execution reused, as that one read found it: undone since, the
        # intent's claim write refuses it (``EffectKeyMoved``), it never takes the key freed
        base["generation"] = standing.generation
        base["call_key"] = redo_key(action, standing.generation)
    elif business and (entry is None or stale or entry.status in ("intent", "waiting")):
        # the key this call hands the effect, recorded with its intent (``next_call_key``)
        base["generation"], base["call_key"] = next_call_key(
            store, eff.kind, action, generation, None if stale else entry
        )

    if entry is not None and not stale:
        done_args = entry.data.get("args") if entry.status == "done" else None
        undo = undo_unsettled(store, ex.run_id, eff.name, ikey) if entry.status == "done" else None
        doubt: tuple[str, str] | None = None
        if done_args is not None and canon(done_args) != canon(base["args"]):
            # This run did the action with other arguments (an earlier cycle, or an earlier
            # call of this proposal): as when another run did (``held``), a person decides
            # which is right; the journal keeps the execution that happened.
            doubt = (
                "effect_args_differ",
                (
                    f"{journal.named()} was done by this run in cycle {entry.cycle} with other "
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
                    f"{journal.named()} was done by this run in cycle {entry.cycle}, and its "
                    f"undoing ({undo.data.get('name')}) started and is {undo.status}: it is "
                    "neither counted done nor run again — check with the outside world whether "
                    "it was undone"
                ),
            )
        if doubt is not None:
            ex.events.append(NewEvent(cycle, doubt[0], {"effect": eff.name, "key": ikey}))
            return journal.out("in_doubt", attempts=attempts, cause=doubt[1])
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
            return journal.out(
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
            return journal.out(
                entry.status,
                attempts=attempts,
                cause=str(entry.data.get("cause", "")),
                error=entry.data.get("error"),
            )
        if entry.status == "intent":
            # Started, never finished: did it happen?
            if eff.reconcile_fn is not None:
                settled = await journal.by_reconcile("is in doubt", None, attempts)
                if settled is not None:
                    return settled
                not_done = True  # the hook says it did not happen (asked again after grace)
            elif not eff.idempotent:
                cause = (
                    f"{journal.named()} started before a crash and its outcome was not "
                    "recorded; it is not idempotent and has no reconcile hook, so it is not run "
                    "again — check whether it happened"
                )
                await journal.put("in_doubt", {"cause": cause}, None, "effect_in_doubt")
                return journal.out("in_doubt", attempts=attempts, cause=cause)
            # Not done (or idempotent): its holder may still be executing it (a frozen or
            # stuck worker) — not run again before its deadline has passed.
            if await journal.grace(entry) and eff.reconcile_fn is not None:
                settled = await journal.by_reconcile("is in doubt", None, attempts)
                if settled is not None:
                    return settled
            uncharged = int(entry.data.get("uncharged") or 0)
            if not_done and entry.data.get("lease") in ex.alive:
                # Cut by a stop its execution said alive (Ctrl-C, the store failing under
                # it), by its lease: no crash (``_crash_bound``), so no kill of the cap below;
                # its attempt never acted, so none of the retry bound's either (crash55b:
                # past the cap, 5 + 3 Ctrl-Cs "gave up after 3 attempt(s)").
                attempts = max(0, attempts - 1)
            elif not_done and uncharged < crash_bound(ex.contract):
                # The reconcile hook says the attempt the intent journaled never acted: cut off
                # before its call, it is no attempt of the retry bound's. Counted, one kill of
                # an effect with ``attempts=1`` ended a run an uninterrupted one accepted
                # (killcmp54). An attempt that may have acted (idempotent, no hook) still
                # counts: the bound holds the calls the outside world may have seen. As many
                # as ``max_crashes`` allows, no more (review54c): the crash bound, judged on a
                # resume that finishes a cycle's effects too (crash55), ends a process dying
                # here every time first; this holds the attempts to it all the same.
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
                    f"{journal.named()} was interrupted {attempts} time(s), its retry bound; "
                    "the last attempt's outcome is unknown — check whether it happened"
                )
                await journal.put("in_doubt", {"cause": cause}, None, "effect_in_doubt")
                return journal.out("in_doubt", attempts=attempts, cause=cause)
            cause = f"{journal.named()} gave up after {attempts} attempt(s)"
            await journal.put("failed", {"cause": cause}, None, "effect_failed")
            return journal.out("failed", attempts=attempts, cause=cause)
        ex.at("before_effect_intent")
        attempts += 1
        while True:
            # The deadline lies inside a lease renewed just now: the lease cannot pass to
            # another executor before it, and the call never starts after it: counted here
            # from before the store's clock is read (``since``; a taker: ``held_for``).
            wall, mono = time.time(), time.monotonic()
            clock_at = store.clock()
            limit = await journal.call_limit()
            deadline_at = None if limit is None else wall + limit
            intent = {"first_at": first_at, "deadline_at": deadline_at, "holder": ex.owner}
            intent["lease"] = ex.token  # (a cut by a stop alive is told by it: ``ex.alive``)
            if uncharged:
                intent["uncharged"] = uncharged  # (the kills not charged so far)
            if limit is not None:
                intent |= {"limit_s": limit, "clock_at": clock_at}
            try:
                # Written to its end, then the cancellation taken (a store thread's write,
                # which no cancellation stops, landed after it: crash53b)
                writing = asyncio.ensure_future(
                    journal.put("intent", intent, attempts, "effect_started")
                )
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
                    await uncancelled(
                        journal.put("waiting", withdrawn, attempts - 1, "effect_withdrawn")
                    )
                raise
            except EffectKeyMoved as moved:
                # another run took (and undid) the action since its claim was read: nothing
                # was written; the next generation's key, never handed out
                if reuse_only:
                    return journal.not_reused()
                base["generation"] = moved.generation
                base["call_key"] = redo_key(action, moved.generation)
                continue
            except EffectKeyHeld as h:
                attempts -= 1  # nothing was written
                return await journal.held(h, attempts)
            ex.at("after_effect_intent")
            left = None if limit is None else limit - since(wall, mono)
            if left is None or left > 0:
                break
            # Paused past the deadline before the call (a frozen process): another executor
            # may hold the run by now; renew (fenced) and write a fresh intent first.
        running_call = tracked(eff.bind(call.args, journal.call_key()), (ex.run_id, jkey))
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
                settled = await journal.by_reconcile("raised and is in doubt", info, attempts)
                if settled is not None:
                    return settled
                checked = True
            elif kind == "transient" and not eff.idempotent:
                cause = (
                    f"{journal.named()} failed with a transient error "
                    f"({_what_failed(exc, eff)}) and may have acted; it is not idempotent and "
                    "has no reconcile hook, so it is not retried"
                )
                await journal.put(
                    "in_doubt", {"cause": cause, "error": info}, None, "effect_in_doubt"
                )
                return journal.out("in_doubt", attempts=attempts, cause=cause, error=info)
            elif not eff.idempotent and not eff.takes_key and not refused_by_world(exc):
                # A failure that may have come after the action keeps its key for the next
                # attempt (another run's, a rollback's redo), which a provider that
                # deduplicates answers with what it did. A function that takes no ``key``
                # never hands it to a provider: recorded ``failed`` (its claim free), the
                # next run asking for the action did it a second time.
                cause = (
                    f"{journal.named()} failed with {type(exc).__name__}: {exc_text(exc)} and "
                    "may have acted; it is not idempotent, has no reconcile hook and takes no key "
                    "to hand a provider, so it is not run again — check whether it happened "
                    "(raise RefusedError when the outside world refused it, having done nothing)"
                )
                await journal.put(
                    "in_doubt", {"cause": cause, "error": info}, None, "effect_in_doubt"
                )
                return journal.out("in_doubt", attempts=attempts, cause=cause, error=info)
            if running and not eff.idempotent:
                # "Not done" is only true so far: run again, it would act twice.
                cause = (
                    f"{journal.named()} timed out and its call is still running (a thread "
                    "cannot be stopped), so it may still act; it is not run again — check "
                    "whether it happened"
                )
                await journal.put(
                    "in_doubt", {"cause": cause, "error": info}, None, "effect_in_doubt"
                )
                return journal.out("in_doubt", attempts=attempts, cause=cause, error=info)
            _, delay = policy.decide(exc, attempts, elapsed_s=time.time() - first_at)
            if delay is None:
                why = {
                    "permanent": "a permanent error",
                    "needs_human": "an error a person must resolve",
                    "transient": f"a transient error, {attempts} attempt(s) spent",
                }[kind]
                cause = (
                    f"{journal.named()} failed with {why}: {type(exc).__name__}: {exc_text(exc)}"
                )
                failed: dict[str, Any] = {"cause": cause, "error": info, "class": kind}
                if not running and (checked or refused_by_world(exc)):
                    # A finished attempt: the outside world said no (or its check found
                    # nothing done), and a provider that keeps a failed answer by key (a
                    # declined card, for a day) gives it again: a retry is a new attempt,
                    # under the next generation's key (the claim ``refused``).
                    failed["spent"] = True
                await journal.put("failed", failed, None, "effect_failed")
                return journal.out("failed", attempts=attempts, cause=cause, error=info)
            await journal.put(
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
        value = jsonable(result)
        data = {"result": value, "first_at": first_at}
        if usage is not None:
            data["usage"] = usage.to_dict()
        try:
            await journal.put("done", data, None, "effect_done")
        except StaleLeaseError:
            if usage is not None:  # (refused by the fence: its word says it; fenced56)
                fenced_bill(ex, f"effect:{eff.name}", usage)
            raise
        ex.at("after_effect_result")
        return journal.out("done", result=value, attempts=attempts, usage=usage)


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
