"""An actor's or verifier's call under the loop's ``RetryPolicy``, its attempts journaled in the
run's ``retry:<scope>:<cycle>`` entry (written only when a call fails), so the attempt bound,
the backoff and what failed attempts were billed survive a restart (invariants 4 and 7)."""

from __future__ import annotations

import time
from collections.abc import Callable
from time import perf_counter
from typing import Any

from . import _calls
from ._backoff import backoff, left_of
from ._call_billing import (
    billed_attempts,
    charge,
    crossed_with,
    cycle_charged,
    fenced_bill,
    lost_answers,
    lost_events,
    over_message,
    owed_message,
    paid_usage,
)
from ._calls import PLAIN_TYPES, CallTimeout, call_user, is_awaitable
from ._errors import ConfigError, StaleLeaseError
from ._exec import Execution, GaveUp, OutOfTime, OverBudget, error_info, priced_dict
from ._modelcalls import MODEL_CALL, SINK
from ._retry import RetryPolicy
from ._store_threads import written
from ._usage import Usage, plain_usage
from .store import JournalEntry, NewEvent, Store
from .store._base import with_newer

__all__ = ["call_with_retry"]


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
    if entry is not None and entry.status == "settled" and cycle_charged(store, ex, entry):
        entry = None
    # What this call's failed attempts cost (a malformed reply's tokens), journaled with each
    # failed attempt: charged when the call ends, whether it succeeds or not, even after a
    # restart in between (invariant 7).
    billed: tuple[Usage, ...]
    if entry is None:  # (the common case, in one test)
        failed, first_at, billed = 0, time.time(), ()
    else:
        failed = entry.attempts
        first_at = float(entry.data.get("first_at", time.time()))
        billed = billed_attempts(entry.data)
        if billed and entry.status == "settled":
            # owed by a cycle killed before its commit (a billed call that succeeded, failed
            # attempts): charged first; past a budget, no new call is made (invariant 7: a
            # crash loop ends by its budget, not by the money it was never charged)
            # Their answers were lost with the killed cycle's events: a ``retry`` event each,
            # committed with whatever ends this cycle, carries what it was billed, so the
            # call's span (and the trace) adds up to the spend charged here.
            ex.events.extend(lost_events(cycle, scope, entry))
            crossed = crossed_with(ex, billed)
            if crossed is not None:
                over = OverBudget(crossed, owed_message(_who(scope), crossed))
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
            over = OverBudget(stop, over_message(_who(scope), stop))
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
        wait = left_of(float(entry.data.get("next_at", 0.0)), entry.updated_at)
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
            if per_call is None and not ex.threaded and _calls._deadline.get() is None:
                # ``call_user``'s inline path (no deadline to set, no thread), written out:
                # no coroutine of its own a call, two calls a cycle
                t0 = perf_counter()
                result = fn(*args)  # (a TimeoutError of its own is its own: ``call_user``)
                if type(result) not in PLAIN_TYPES and is_awaitable(result):
                    result = await result
                got = (result, perf_counter() - t0)
            else:
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
        paid = paid_usage(got[0])
        if entry is not None or failed or paid is not None:
            # Charged with the next checkpoint: recorded, so that this call asked again (the
            # cycle judged again after a wait) does not charge or count them twice. A billed
            # call is journaled before its cycle commits: the provider billed it, so a cycle
            # killed before its commit still owes it when redone (read back by ``billed_attempts``).
            settled = ex.retries.get(key) or entry
            data = {**(settled.data if settled else {}), "base_seq": ex.seq}
            if paid is not None:
                data["each"] = [[u.cost_usd, u.tokens] for u in billed]
                data["ok"] = [paid.cost_usd, paid.tokens]
                # answers charged here without an event of their own (killed again, the
                # events written above are lost with this cycle too)
                data["lost"] = lost_answers(entry.data) if entry is not None else []
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
            # (a store whose write can wait on the run's row lock, PostgreSQL: from a thread;
            # on the event loop, a bill waiting on a row another session held stopped every
            # run of the process, once a billed call: review53a)
            try:
                ex.retries[key] = await written(store, _put_bill, store, put)
            except StaleLeaseError:
                if paid is not None:
                    # fenced out (taken over while it called): billed all the same, said by
                    # its word (``_lease_life``; crash55b); its failed attempts are journaled
                    fenced_bill(ex, scope, paid)
                raise
        return got


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
    if isinstance(cost, Usage) and type(cost) is not Usage:
        try:
            cost = plain_usage(cost)  # (a subclass's amounts, checked again)
        except ConfigError as bad:  # the user's mistake, named: the attempt failed by it
            bad.__cause__, exc, cost = exc, bad, None
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
            over = crossed_with(ex, billed)
            if over is not None:
                delay = None
    status = "gave_up" if delay is None else "waiting"
    next_at = time.time() + (delay or 0.0)
    try:
        ex.retries[key] = await written(
            store,
            store.journal_put,
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
                *_call_events(
                    cycle, scope, failed, made, "retry" if delay is not None else "gave_up"
                ),
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
    except StaleLeaseError:
        if attempt is not None:  # (refused by the fence: its word says it; crash55c)
            fenced_bill(ex, scope, attempt)
        raise
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
        raise billing(OverBudget(over, over_message(who, over))) from exc
    if delay is None:
        raise billing(GaveUp(kind, error_info(scope, exc), failed, exc)) from exc
    ex.at(f"backoff:{scope}")
    await backoff(store, ex, delay, scope)
    return billed


_NOTHING = Usage()


def _put_bill(store: Store, put: dict[str, Any]) -> JournalEntry:
    """A billed call's journal entry written: lazily where the store can (the cycle's commit
    syncs it), else as any other write."""
    wrote = with_newer(store.journal_put, put, {"lazy": True})
    return wrote if wrote is not None else store.journal_put(**put)


def _call_events(
    cycle: int, scope: str, attempt: int, made: list[dict[str, Any]], outcome: str
) -> list[NewEvent]:
    """The ``model_call`` events of one attempt of a call (``_modelcalls``)."""
    return [
        NewEvent(cycle, MODEL_CALL, {"scope": scope, "attempt": attempt, "outcome": outcome, **m})
        for m in made
    ]
