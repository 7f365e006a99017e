"""Effect keys: the idempotency key a call is handed (``key_of``), an undone or refused
action's redo generation (``redo_key``, ``next_call_key``), whether a failure refused the call
(``refused_by_world``: its key spent), and whether this run's undoing of an execution is unsettled
(``undo_unsettled``) — what ``_effect_run.perform_effect`` asks before a call.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ._effects import Effect, EffectCall, canon
from ._errors import ConfigError
from ._retry import RefusedError
from .store import EffectClaim, JournalEntry, Store

__all__ = ["args_digest", "key_of", "redo_key", "undid_for_origin"]


def undid_for_origin(entry: JournalEntry) -> bool:
    """Whether ``entry`` is a compensation a fork inherited: its origin's undoing of its origin's
    own execution (which the fork did not inherit, being undone), never this run's. Taken for
    this run's, a fork's own payment of the same key counted as refunded already: a rollback
    offered nothing, and its refund was reported done without running."""
    return bool(entry.data.get("inherited_from")) and str(entry.data.get("name", "")).endswith(
        ".compensate"
    )


def key_of(eff: Effect, run_id: str, cycle: int, call: EffectCall) -> tuple[str, bool]:
    """The call's idempotency key (without ``effect:``), and whether it is a business key (one
    the call or the effect's ``key`` gives: it names the action store-wide). A business key
    ending in ``~`` and digits is refused (``ConfigError``): that is how a redo of an undone
    action is keyed (``pay:A-1~2``), so it would name another action's redo to the outside
    world (a payment provider would answer with that charge)."""
    key, business = eff.key_for(run_id, cycle, call), bool(call.key or eff.key_fn is not None)
    if business and _redo_like(key):
        raise ConfigError(
            f"the key {key!r} of effect {eff.name} ends in '~' and a number, which names the "
            f"redo of an undone action ({key.rpartition('~')[0]!r} done again); give the "
            "action a key that does not end so (another separator, or a letter after it)",
            field=f"effects.{eff.name}.key",
        )
    return key, business


def args_digest(recorded: Any) -> str:
    """The digest of a call's arguments as recorded (``_effect_journal.jsonable``) that its claim
    keeps (``args_hash``): a claim done with another digest was done with other arguments."""
    return hashlib.sha256(canon(recorded).encode()).hexdigest()[:24]


def redo_key(key: str, generation: int) -> str:
    """The key of ``key``'s redo generation ``generation`` (1: ``key`` itself, then
    ``key~2``, ``key~3``...)."""
    return key if generation == 1 else f"{key}~{generation}"


def _redo_like(key: str) -> bool:
    """Whether ``key`` ends as a redo generation's key does: ``~`` and digits."""
    head, sep, gen = key.rpartition("~")
    return bool(sep and head and gen.isdigit())


def refused_by_world(exc: BaseException) -> bool:
    """Whether ``exc`` says the outside world refused the call, having done nothing: user
    code's ``RefusedError``, raised for a refusal (a declined card). Anything else may have
    come after it acted, so its next attempt keeps the key: a bug in the effect, a timeout,
    a 5xx, an HTTP 4xx (it says only that *some* request of the effect was refused: an effect
    that charged, then recorded the charge in a ledger answering 422, was charged twice when
    a 4xx spent the key), and a plain ``PermanentError`` too ("do not retry", which user code
    also raises after the provider acted: a fresh key would charge again). A provider that
    deduplicates answers a kept key with what it did."""
    return isinstance(exc, RefusedError)


def undo_unsettled(store: Store, run_id: str, name: str, ikey: str) -> JournalEntry | None:
    """This run's compensation of its execution ``ikey`` of effect ``name`` when one started
    and was not refused (``intent``, ``waiting``, ``in_doubt``, ``failed`` in a way that may
    have acted, or ``done`` with the original not yet marked undone: a crash between the two
    writes); ``None`` when none was tried, or the last try was refused (the action stands). ``run_compensations`` journals it under
    ``effect:<name>.compensate:<ikey>``, a try after a retired one under ``~2``, ``~3``..."""
    first, gen = f"effect:{name}.compensate:{ikey}", 1
    while True:
        found = store.journal(run_id, key=redo_key(first, gen))
        if not found:
            return None
        if found[0].status in ("compensated", "retired") or undid_for_origin(found[0]):
            gen += 1
            continue
        # refused (its failure ``spent``): the action stands; any other failure may have
        # come after it acted (``run_compensations`` reports it in doubt)
        refused = found[0].status == "failed" and found[0].data.get("spent")
        return None if refused else found[0]


# The claim statuses whose key is spent: the action's next attempt gets the next generation.
_SPENT = ("compensated", "refused")


def next_call_key(
    store: Store, kind: str, action: str, generation: int, entry: JournalEntry | None
) -> tuple[int, str]:
    """The redo generation of a business key's call about to start, and the key handed to the
    effect (``action``, or ``action~n`` from the second generation): the run's own count
    (its journal's undone generations, ``generation``) or the store's, whichever is higher,
    so that an action another run (or a fork's origin) undid is done again under a key no
    run was handed before — the refunded charge's key would get the refunded charge back
    from a provider that deduplicates by key, and nothing would be paid. So is one the outside
    world refused (``refused``: a provider keeps a declined card's answer by key); one that
    failed in a way that may have acted is tried again under its key. An intent (or a retry's wait) this run journaled keeps the key
    it recorded: a resume hands out the key of the attempt it settles (an entry an earlier
    release wrote: its journal key)."""
    if entry is not None and entry.status in ("intent", "waiting"):
        gen, key = entry.data.get("generation"), entry.data.get("call_key")
        if isinstance(gen, int) and isinstance(key, str):
            return gen, key
        return generation, entry.key.removeprefix("effect:")
    claim = store.effect_claim(kind, action)
    if claim is not None:
        generation = max(generation, claim.generation + (claim.status in _SPENT))
    return generation, redo_key(action, generation)


# Why a call a person approved only as another run's execution, reused, is not run: that
# execution was undone (refunded) before the call came to run (``reuse_standing``).
NOT_REUSED = (
    "{} ({}) was approved as already done by another run (its result reused, nothing run "
    "again), and was undone since: neither reused nor run — approved now, it would run again"
)


def reuse_standing(store: Store, kind: str, action: str, run_id: str) -> EffectClaim | None:
    """The claim of business key ``action`` while it is another run's execution, done; ``None``
    once it is not: a call approved only as its reuse (``perform_effect``'s ``reuse_only``) is
    then not run. Read before the intent, whose key is this claim's generation: a claim undone
    after this read is ``EffectKeyMoved`` at the intent's claim write, never a fresh execution
    (review49a: the key was read again, and a refund between the two reads paid again)."""
    claim = store.effect_claim(kind, action)
    if claim is None or claim.status != "done" or claim.run_id == run_id:
        return None
    return claim
