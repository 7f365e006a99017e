"""One effect's journal entry: its writes, events and outcomes, the reconcile hook, its lease."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from ._backoff import held_for
from ._calls import CallTimeout, call_user
from ._effect_holders import holder
from ._effect_keys import NOT_REUSED, redo_key
from ._effects import Effect, EffectResult
from ._errors import EffectKeyHeld, StaleLeaseError
from ._exec import Execution, exc_text
from ._json import str_keys
from ._redact import redact, redact_text
from ._store_threads import written
from ._usage import Usage
from .store import JournalEntry, NewEvent, Store


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


def jsonable(value: Any) -> Any:
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


# Of the lease left when an effect starts, the part kept back from its execution deadline
# (capped): room for the result's write and for clocks that differ between hosts, so the
# deadline passes before anyone else can claim the run.
_LEASE_MARGIN = 0.1
_LEASE_MARGIN_MAX_S = 5.0


class EffectJournal:
    """What ``perform_effect`` writes of one requested effect, and how it ends: the entry
    ``effect:<key>`` under the run's fencing token with its event (``put``), the outcome
    (``out``), another run's claim met (``held``), the reconcile hook asked (``by_reconcile``),
    an in-doubt attempt waited for (``grace``) and a call's room in the lease (``call_limit``).
    ``base`` is the entry's data every write starts from (its generation and handed key may
    change as the claim is read); ``attempts`` is passed in as the caller counts it."""

    __slots__ = (
        "action", "base", "claim", "cycle", "eff", "ex", "ikey", "jkey", "said_not_done", "store",
    )  # fmt: skip

    def __init__(
        self,
        store: Store,
        ex: Execution,
        cycle: int,
        eff: Effect,
        ikey: str,
        base: dict[str, Any],
        action: str,
        claim: tuple[str, str, str] | None,
    ) -> None:
        self.store, self.ex, self.cycle, self.eff = store, ex, cycle, eff
        self.ikey, self.jkey = ikey, f"effect:{ikey}"
        self.base, self.action, self.claim = base, action, claim
        self.said_not_done: list[bool] = []  # the reconcile hook's "not done", for the next event

    def call_key(self) -> str:
        """The key handed to the effect and its reconcile hook (a cause names it: what a
        person checks with the outside world)."""
        return str(self.base.get("call_key") or self.ikey)

    def named(self) -> str:
        """The effect as a cause names it: its name and the key it was handed."""
        return f"{self.eff.name} ({self.call_key()})"

    def out(self, status: str, **kw: Any) -> EffectOutcome:
        # Invariant 9: a cause quotes an exception, which can quote what the call was given.
        if kw.get("cause"):
            kw["cause"] = redact_text(kw["cause"])
        return EffectOutcome(self.eff.name, self.eff.kind, self.ikey, status, **kw)

    async def put(
        self, status: str, data: dict[str, Any], attempts: int | None, event: str
    ) -> JournalEntry:
        if status == "done":
            # The checkpoint this attempt of the cycle builds on (its effects' write-ahead):
            # a resume after a crash builds on the same one, a rollback's redo on a later one.
            data = {**data, "base_seq": self.ex.seq}
        # Invariant 9: the journal entry, its event and the key's claim hold no secret (a
        # result is masked where it is made, a cause or an error here).
        data = redact({**self.base, **data})
        not_done_said = bool(self.said_not_done)
        self.said_not_done.clear()
        # (a store whose write can wait on the run's row lock: from a thread, so that the
        # other runs of the event loop go on meanwhile; evloop53)
        return await written(
            self.store,
            self.store.journal_put,
            self.ex.run_id,
            self.ex.token,
            key=self.jkey,
            kind="effect",
            cycle=self.cycle,
            status=status,
            data=data,
            attempts=attempts,
            events=[
                NewEvent(
                    self.cycle,
                    event,
                    {
                        "effect": self.eff.name,
                        "kind": self.eff.kind,
                        "key": self.ikey,
                        "status": status,
                    }
                    # the key the effect was handed, where it is not the journal's (a redo)
                    | (
                        {"call_key": data["call_key"]}
                        if data.get("call_key", self.ikey) != self.ikey
                        else {}
                    )
                    | ({"cause": data["cause"]} if data.get("cause") else {})
                    | ({"deadline_at": data["deadline_at"]} if data.get("deadline_at") else {})
                    | ({"from_run": data["from_run"]} if data.get("from_run") else {})
                    # what it cost, on the event of its doing (a trace's effect span counts it)
                    | ({"usage": data["usage"]} if status == "done" and data.get("usage") else {})
                    | ({"hook_not_done": True} if not_done_said else {}),
                )
            ],
            claim=self.claim,
        )

    async def held(self, h: EffectKeyHeld, attempts: int) -> EffectOutcome:
        """Another run of the store holds the key: its recorded result when it did the same
        action; otherwise a person decides (different arguments, or an outcome not known).
        The entry, its event and a cause name the key the holder was handed: the claim read
        before the intent (``_call_key``) may have changed since (another run took the action
        under another generation), and a person checks with the outside world by that key."""
        assert self.claim is not None
        self.base["generation"] = h.generation
        self.base["call_key"] = redo_key(self.action, h.generation)
        if h.status == "done" and h.args_hash == self.claim[2]:
            try:
                await self.put(
                    "done", {"result": h.result, "from_run": h.run_id}, attempts, "effect_reused"
                )
            except EffectKeyHeld as moved:
                # The holder's claim changed between the intent's read and this write (its
                # undoing started: a refund): nothing was written; as it stands now.
                return await self.held(moved, attempts)
            return self.out("done", result=h.result, reused=True, attempts=attempts)
        if h.status == "done":
            cause = (
                f"{self.named()} was done by run {h.run_id} with other arguments; the "
                "same key with different arguments is not run — check which is right"
            )
        elif h.status == "undoing":
            cause = (
                f"{self.named()} is being undone by run {h.run_id} (its compensation started, and "
                "may have ended or been interrupted): its result is not reused, nor the "
                "action run again here — check whether it was undone"
            )
        else:
            cause = (
                f"{self.named()} is held by run {h.run_id}, whose attempt is {h.status} "
                "(it may be doing it now, or have done it) — not run again here"
            )
        await self.put("in_doubt", {"cause": cause, "from_run": h.run_id}, None, "effect_in_doubt")
        return self.out("in_doubt", attempts=attempts, cause=cause)

    async def reconcile(self) -> tuple[str, Any, Usage | None]:
        """('done', result, usage) | ('not_done', None, None) | ('error', message, None). A
        hook that knows what the action cost returns ``EffectResult(value, usage=…)``: the
        crashed attempt is then charged, as a finished one is."""
        assert self.eff.reconcile_fn is not None
        # bounded as the effect's own call is (its timeout, inside the lease): a hook that
        # hangs must not hold the run, nor act after its lease is gone. Asked before the hook
        # is called, as for the call itself: a lease lost there is the engine's, not the hook's
        limit = await self.call_limit()
        try:
            found, _ = await call_user(
                self.eff.reconcile_fn, self.call_key(), timeout=limit, threaded=self.ex.threaded
            )
        except CallTimeout as exc:
            return "error", f"the reconcile hook timed out ({exc})", None
        except Exception as exc:
            return "error", f"the reconcile hook raised {type(exc).__name__}: {exc_text(exc)}", None
        if isinstance(found, EffectResult):  # it happened (even with no value): its cost
            return "done", jsonable(found.value), found.usage
        return ("done", jsonable(found), None) if found is not None else ("not_done", None, None)

    async def by_reconcile(
        self, doubt: str, info: dict[str, Any] | None, attempts: int
    ) -> EffectOutcome | None:
        """The outcome when the reconcile hook settles it (done, or in doubt because the hook
        failed); ``None`` when the action did not happen and may run."""
        verdict, value, usage = await self.reconcile()
        if verdict == "done":
            data = {"result": value, "reconciled": True}
            if usage is not None:
                data["usage"] = usage.to_dict()
            await self.put("done", data, None, "effect_reconciled")
            return self.out("done", result=value, reconciled=True, attempts=attempts, usage=usage)
        if verdict == "error":
            cause = f"{self.named()} {doubt}: {value}"
            await self.put("in_doubt", {"cause": cause, "error": info}, None, "effect_in_doubt")
            return self.out("in_doubt", attempts=attempts, cause=cause, error=info)
        # the hook said it did not happen: the journal's next event says so (the trace showed
        # a second effect_started with nothing saying the hook was asked; outside51a)
        self.said_not_done.append(True)
        return None

    def not_reused(self) -> EffectOutcome:  # (``reuse_only``, undone since: nothing written)
        return self.out("failed", attempts=0, cause=NOT_REUSED.format(self.eff.name, self.action))

    async def grace(self, doubt: JournalEntry) -> bool:
        """Wait while an in-doubt attempt may still be executing elsewhere: until its deadline
        has passed on the store's clock (``held_for``), unless its holder is known gone.
        Returns whether it waited (the outside world is then asked again)."""
        mark = (self.ex.run_id, self.jkey)
        who = holder(doubt.data.get("holder"), mark)
        if who == "gone":
            return False
        ttl = self.ex.lease_ttl_s or 60.0
        until = doubt.data.get("deadline_at")
        if not isinstance(until, (int, float)):
            until = doubt.updated_at + ttl
        wait = held_for(doubt.data, doubt.updated_at, self.store.clock(), ttl)  # the store's clock
        if wait <= 0:
            return False  # past its deadline a holder never starts the call
        self.ex.events.append(
            NewEvent(
                self.cycle,
                "effect_grace",
                {
                    "effect": self.eff.name,
                    "key": self.ikey,
                    "holder": doubt.data.get("holder"),
                    "holder_alive": who == "alive",
                    "until": until,
                },
            )
        )
        await asyncio.sleep(wait)
        return True

    async def lease_room(self) -> float | None:
        """How long a call starting now may run inside the lease, renewed first (a fenced
        write: ``StaleLeaseError`` once another executor holds the run); ``None``: unbounded."""
        if self.ex.lease_ttl_s is not None:
            await written(
                self.store,
                self.store.renew_lease,
                self.ex.run_id,
                self.ex.token,
                self.ex.lease_ttl_s,
            )
            left = self.ex.lease_ttl_s
        else:  # the TTL is not known here: what the run row says is left of the lease
            expires = self.store.get_run(self.ex.run_id).lease_expires_at
            if expires is None:
                return None
            left = expires - time.time()
        room = left - min(left * _LEASE_MARGIN, _LEASE_MARGIN_MAX_S)
        if room <= 0:
            raise StaleLeaseError(
                f"run {self.ex.run_id}: no time left in the lease to run {self.eff.name}"
            )
        return room

    async def call_limit(self) -> float | None:
        """The timeout of a call of the effect (or its reconcile hook) starting now: its own
        ``timeout_s``, within ``lease_room``; ``None``: unbounded."""
        room = await self.lease_room()
        return (
            room
            if self.eff.timeout_s is None
            else min(self.eff.timeout_s, room or self.eff.timeout_s)
        )
