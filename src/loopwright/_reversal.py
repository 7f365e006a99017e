"""Reversal: offering and running the compensations of completed effects.

Cancelling a run, or rolling it back to an earlier checkpoint, offers the compensation of each
completed effect after that point. Each offer goes through the approval policy like any other
effect of its kind (a refund of a large payment needs the same approval the payment did);
``allow`` runs it when the run next resumes, ``require`` waits for a person, ``deny`` records
that it was not offered. Compensations are journaled effects themselves, so they too run at
most once. An effect without a compensation is listed as irreversible, never silently ignored.
A payment other runs reused (a fork that inherited it included) is refunded only with a
person's approval, whatever the rule: its request names them (an ``allow`` rule is about the
refund, not about leaving other runs accepted on a payment that no longer stands), never one
that whoever asked for the refund may give (separation of duties, ``reuse_who``), and once
refunded the store tells each of them. A run never undoes what it reused or inherited: the
run that did it can.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import time
import uuid
from typing import Any

from ._authority import expire
from ._effect_keys import redo_key, undid_for_origin
from ._effect_run import EffectOutcome, perform_effect
from ._effects import Effect, EffectCall
from ._errors import EffectReused
from ._exec import Execution
from ._loop import Loop
from ._policy import ApprovalPolicy
from ._refund_reusers import (
    limit_field,
    repark,
    reuse_what,
    reuse_who,
    reuse_why,
    reused_since,
    reusers,
    told_runs,
)
from ._store_threads import written
from .store import EffectReuse, JournalEntry, NewApproval, NewEvent, Store
from .store._records import past_expiry

__all__ = ["Reparked", "offer_compensations", "run_compensations"]


@dataclasses.dataclass(frozen=True)
class Reparked:
    """``run_compensations``' answer when a refund it was to run turned out reused by other
    runs that no person was told of: the requests naming them, to commit with the run's
    offers (updated in place); nothing of those refunds ran."""

    requests: list[NewApproval]


# Said of an irreversible effect with a run-scoped key that a rollback's redo may ask again.
_AGAIN = (
    ": it stands, and a redone cycle that asks for it runs it again (its key names the "
    "cycle; a business key, key=, names the action and reuses it)"
)

# Said of one whose cycle never ended: the redone cycle is numbered as it was.
_REUSED = (
    ": it stands, and the redone cycle {cycle} that asks for it with the same arguments "
    "reuses it (its key names that cycle)"
)


def offer_compensations(
    store: Store,
    run_id: str,
    *,
    after_cycle: int,
    loop: Loop | None,
    cycle: int,
    why: str,
    keep: list[dict[str, Any]] | None = None,
    redo: bool = False,
) -> tuple[dict[str, Any] | None, list[NewApproval]]:
    """The ``pending`` entry describing the offers (``None`` when there is nothing to offer
    or report) and the approval requests to persist with it. Offers in ``keep`` (made
    earlier, perhaps already decided) stay as they are. ``redo``: the cycles are done again
    (a rollback), so an irreversible effect whose key names its cycle is said to run again
    when asked."""
    if loop is None:
        return None, []  # which effects can be undone is known only to the loop
    keep = keep or []
    offered = {str(o["key"]) for o in keep}
    # The effects after the point (a range of the journal's index by cycle), not the run's
    # every entry: a long run rolled back by a few cycles reads those cycles' entries.
    after = store.journal_where(run_id, kind="effect", after_cycle=after_cycle)
    maybe = [
        e
        for e in after
        if e.status == "done"
        and not is_compensation(e)
        and e.key.removeprefix("effect:") not in offered
    ]
    # A compensation that ran but whose original was not yet marked (a crash in between)
    # still counts: never offer to undo twice.
    undone = _undone(store, run_id, maybe, after)
    done = [e for e in maybe if e.key.removeprefix("effect:") not in undone]
    if not done and not keep:
        return None, []
    offers: list[dict[str, Any]] = list(keep)
    requests: list[NewApproval] = []
    irreversible: list[str] = []
    for e in done:
        name = str(e.data.get("name"))
        ikey = e.key.removeprefix("effect:")
        # the key the effect was handed (a redo's ``~n`` the store gave): what a person
        # checks with the outside world, and what its undoing is handed
        handed = str(e.data.get("call_key") or ikey)
        owner = e.data.get("from_run") or e.data.get("inherited_from")
        if owner:
            # Another run did it (this one reused its result, or a fork inherited it): undoing
            # it here would undo that run's action. It is listed; that run can undo it.
            irreversible.append(f"{name} ({handed}): done by run {owner}, not by this run")
            continue
        eff = loop.effect(name)
        if eff is None or eff.compensate_fn is None:
            # A run-scoped key names the cycle: the redo's cycle asking for the same action
            # hands a new key and runs it a second time, beside the one that stands
            # (effects53: the rollback listed it, and nothing said it would be done again).
            again = redo and "action" not in e.data
            if again and e.cycle > cycle:
                # Its cycle never ended (in doubt after a crash, settled since): the redo's
                # next cycle has its number, so the same call has its key and reuses it.
                irreversible.append(f"{name} ({handed})" + _REUSED.format(cycle=e.cycle))
                continue
            irreversible.append(f"{name} ({handed})" + (_AGAIN if again else ""))
            continue
        args = dict(e.data.get("args") or {})
        # A rule naming the compensation itself ("pay.compensate") decides; otherwise it is
        # judged as the effect it undoes (a rule covering the payment covers its refund).
        comp_name = f"{eff.name}.compensate"
        explicit = ApprovalPolicy(
            tuple(
                r
                for r in loop.approvals.rules
                if r.effect
                and fnmatch.fnmatchcase(comp_name, r.effect)
                and not fnmatch.fnmatchcase(eff.name, r.effect)
            )
        )
        d = explicit.match(eff.kind, comp_name, args) or loop.approvals.decide(
            eff.kind, eff.name, args
        )
        reused = reusers(store, run_id, eff.kind, e.data.get("action"))
        if reused and d.action == "allow":
            # Other runs were accepted (or go on) on this payment: an ``allow`` rule is about
            # the refund, not about leaving them on a payment that no longer stands.
            d = dataclasses.replace(d, action="require", why=reuse_why(reused))
        elif reused and d.action == "deny":
            d = dataclasses.replace(d, why=f"{d.why}{reuse_what(reused)}".lstrip("; "))
        elif reused:
            d = dataclasses.replace(d, why=f"{d.why}; {reuse_why(reused)}".lstrip("; "))
        if reused and d.action == "require":
            d = dataclasses.replace(d, who=reuse_who(d.who, limit_field(loop, d.rule)))
        offer: dict[str, Any] = {
            "key": ikey,
            "effect": name,
            "kind": eff.kind,
            "args": args,
            "result": e.data.get("result"),
            "call_key": handed,
            "cycle": e.cycle,
            "action": d.action,
            "rule": d.rule,
            "why": d.why,
            "approval_id": None,
        }
        if reused:
            offer["reused_by"] = [dataclasses.asdict(r) for r in reused]
        if d.action == "require":
            aid = uuid.uuid4().hex[:12]
            offer["approval_id"] = aid
            if d.expires_after_s:
                offer["expires_after_s"] = d.expires_after_s
            requests.append(
                NewApproval(
                    approval_id=aid,
                    cycle=cycle,
                    kind="compensation",
                    rule=offer["rule"],
                    what=f"undo {eff.describe(args)} (done in cycle {e.cycle}, key {handed})"
                    + reuse_what(reused),
                    why=f"{why}; {offer['why']}" if offer["why"] else why,
                    evidence={
                        "effect": name,
                        "kind": eff.kind,
                        "args": args,
                        "result": e.data.get("result"),
                        "who": dict(d.who) if d.who else None,
                        **({"reused_by": offer["reused_by"]} if reused else {}),
                    },
                    diff=None,
                    action_hash=hashlib.sha256(f"compensate:{ikey}".encode()).hexdigest()[:32],
                    # the rule's expiry, as for any request it raises (it was left out: a
                    # refund request waited for ever)
                    expires_at=store.clock() + d.expires_after_s if d.expires_after_s else None,
                )
            )
        offers.append(offer)
    pending = {
        "stage": "compensations",
        "why": why,
        "offers": offers,
        "irreversible": irreversible,
        "offered_at": time.time(),
    }
    return pending, requests


def is_compensation(e: JournalEntry) -> bool:
    return str(e.data.get("name", "")).endswith(".compensate")


def _undone(
    store: Store, run_id: str, originals: list[JournalEntry], known: list[JournalEntry]
) -> set[Any]:
    """The keys (without ``effect:``) that a done compensation names as undone, of those among
    ``known`` and of ``originals``'s own, read by key: ``run_compensations`` journals the
    compensation of ``<name>`` ``<key>`` under ``effect:<name>.compensate:<key>``, and a try
    after a failed (retired) one under ``~2``, ``~3``... It journals one at the run's cycle
    then, at or after its original's (a rollback keeps the cycle counter), so one of an effect
    after the point is among ``known`` already; the read by key (one query of the primary key,
    most often finding nothing) does not rely on that, so a journal that says otherwise still
    never has an effect undone twice."""
    seen = {e.key: e for e in known}
    # each original's chain of compensation keys: (first key, generation)
    chains = {
        f"effect:{e.data.get('name')}.compensate:{e.key.removeprefix('effect:')}": 1
        for e in originals
    }

    while chains:
        missing = [redo_key(k, g) for k, g in chains.items() if redo_key(k, g) not in seen]
        if missing:
            seen.update((e.key, e) for e in store.journal_where(run_id, keys=missing))
        nxt: dict[str, int] = {}
        for first, gen in chains.items():
            found = seen.get(redo_key(first, gen))
            if found is not None and (
                found.status in ("compensated", "retired") or undid_for_origin(found)
            ):
                nxt[first] = gen + 1  # the key's next generation, as ``perform_effect`` tries
        chains = nxt
    return {
        (e.data.get("args") or {}).get("compensates")
        for e in seen.values()
        if is_compensation(e) and e.status == "done" and not undid_for_origin(e)
    }


async def _unless_refused(
    store: Store, ex: Execution, outcome: EffectOutcome, what: str
) -> EffectOutcome:
    """A failed compensation as it stands: failed when it was refused (its failure ``spent``:
    the outside world said no, or its hook found nothing done), the action standing; in doubt
    otherwise (an exception of its own code, timeouts to the last try: it may have come after
    the undoing was made), journaled so — put back to ``done``, the claim had another run
    reuse a refunded payment as paid, and a rollback retired the failure and refunded again."""
    jkey = f"effect:{outcome.key}"
    found = store.journal(ex.run_id, key=jkey)
    if not found or found[0].status != "failed" or found[0].data.get("spent"):
        return outcome
    cause = (
        f"{outcome.cause}; the failure may have come after it acted, so {what} may be "
        "undone — check whether it was"
    )
    await written(
        store,
        store.journal_put,
        ex.run_id,
        ex.token,
        key=jkey,
        kind="effect",
        cycle=found[0].cycle,
        status="in_doubt",
        data={**found[0].data, "cause": cause},
        events=[
            NewEvent(
                found[0].cycle,
                "effect_in_doubt",
                {
                    "effect": outcome.name,
                    "kind": outcome.kind,
                    "key": outcome.key,
                    "status": "in_doubt",
                    "cause": cause,
                },
            )
        ],
    )
    return dataclasses.replace(outcome, status="in_doubt", cause=cause)


async def _mark_undo(
    store: Store,
    ex: Execution,
    orig: JournalEntry,
    status: str,
    claim: tuple[str, str, str],
    told: list[str] | None = None,
) -> None:
    """Records on the run's ``undo:`` entry of ``orig`` (and on the store-wide claim of its
    business action, which this run holds) that its undoing started (``undoing``) or failed,
    the action standing (``done``, with its result). ``told``: the runs reusing the action a
    person was told of; its undoing starts only if no other run reused it (``EffectReused``)."""
    data = {"name": orig.data.get("name"), "result": orig.data.get("result")}
    await written(
        store,
        store.journal_put,
        ex.run_id,
        ex.token,
        key=f"undo:{orig.key.removeprefix('effect:')}",
        kind="undo",
        cycle=orig.cycle,
        status=status,
        data=data if told is None else {**data, "reusers_known": told},
        claim=claim,
    )


def _undo(fn: Any, ikey: str, result: Any, args: Any, /, **_: Any) -> Any:
    # ``**_`` takes the journal's ``key=`` and ``compensates=``; the compensation gets the
    # original effect's key, result and arguments.
    return fn(ikey, result, dict(args or {}))


def _ask(fn: Any, key: str, _journal_key: str, /) -> Any:
    # The compensation's reconcile hook is asked about the key the compensation was handed
    # (the original's), not the compensation's journal key.
    return fn(key)


async def run_compensations(
    store: Store, ex: Execution, pend: dict[str, Any]
) -> list[dict[str, Any]] | Reparked | None:
    """Run the allowed and approved compensations; ``None`` while a decision is still
    pending; ``Reparked`` when one to run was reused by runs no person was told of. Returns
    one note per offer (and per irreversible effect)."""
    offers = list(pend.get("offers") or ())
    # The offers' own requests, each by its id: not the run's every request (a long run asked
    # something every cycle has thousands). A store whose ``approval`` is the protocol's (it
    # reads them all) is read once, as before.
    ids = {str(o["approval_id"]) for o in offers if o.get("approval_id")}
    if type(store).approval is Store.approval:
        found = [a for a in store.approvals(run_id=ex.run_id) if a.approval_id in ids]
    else:
        found = [a for a in map(store.approval, sorted(ids)) if a is not None]
    decided = {a.approval_id: a for a in found if a.run_id == ex.run_id}
    for o in offers:
        req = decided.get(str(o.get("approval_id")))
        if o["action"] == "require" and req is not None and req.status == "pending":
            if not past_expiry(req.expires_at, store.clock()):
                return None
            # expired undecided: not run, as a parked cycle's expired request escalates
            # (decided meanwhile: as it was decided)
            decided[req.approval_id] = expire(store, req) or store.approval(req.approval_id) or req
    cycle = ex.state.cycle
    # Before any runs: each refund about to run whose payment runs reused since a person was
    # told (or that no one decided, being allowed) waits for one, naming them, all at once.
    why = str(pend.get("why") or "")
    # each offer about to run's original entry, read once (here, and by the loop below)
    origs: dict[str, list[JournalEntry]] = {}
    asks = [
        repark(
            o, reused, cycle, why, decided, limit_field(ex.loop, o.get("rule")), now=store.clock()
        )
        for o, reused in reused_since(store, ex, offers, decided, origs)
    ]
    if asks:
        return Reparked(asks)
    notes: list[dict[str, Any]] = []
    for o in offers:
        base = {"kind": "compensation", "effect": o["effect"], "key": o["key"]}
        req = decided.get(str(o.get("approval_id")))
        if o["action"] == "deny":
            notes.append({**base, "status": "not_run", "why": f"denied by policy: {o['why']}"})
            continue
        if o["action"] == "require" and (req is None or req.status != "approved"):
            status = req.status if req is not None else "missing"
            notes.append({**base, "status": "not_run", "why": f"request {status}"})
            continue
        eff = ex.loop.effect(o["effect"])
        if eff is None or eff.compensate_fn is None:
            notes.append({**base, "status": "not_run", "why": "the loop has no compensation"})
            continue
        key = str(o["key"])
        handed = str(o.get("call_key") or key)  # the key the effect was handed
        ask = eff.compensate_reconcile_fn
        comp = Effect(
            functools.partial(_undo, eff.compensate_fn, handed, o.get("result"), o.get("args")),
            kind=eff.kind,
            name=f"{eff.name}.compensate",
            retry=eff.retry,
            timeout_s=eff.timeout_s,
            # How a compensation a crash interrupted (intent journaled, no result) is settled
            # on resume, as the effect declared: asked of its hook (with the key the
            # compensation was handed), or run again when the provider deduplicates it;
            # without either it is in doubt for a person.
            idempotent=eff.compensate_idempotent,
            reconcile_fn=None if ask is None else functools.partial(_ask, ask, handed),
        )
        call = EffectCall(comp.name, {"compensates": key}, key=key)
        orig = origs.pop(key, None)
        if orig is None:
            orig = store.journal(ex.run_id, key=f"effect:{key}")
        action = orig[0].data.get("action") if orig else None
        claim = (eff.kind, str(action), "") if action else None
        # (an original recorded undone already, a process dying before the run's commit, is
        # reported as its compensation ended: marked undoing again, its claim would be
        # settled twice and the runs that reused it told twice of the one refund)
        if claim is not None and orig[0].status != "compensated":
            # Before the undoing starts, the store-wide claim says so (``undoing``): another
            # run asking for the action must not reuse the result being undone (a refunded
            # charge, reported paid) while the compensation runs, nor after a crash left it
            # unsettled; the outcome below settles the claim.
            try:
                await _mark_undo(store, ex, orig[0], "undoing", claim, told=told_runs(o))
            except EffectReused as exc:
                # reused between the read above and this write (which reads under the claim's
                # lock): nothing of it written; those before it ran (journaled: a resume
                # reports them as they ended, not running them again)
                reused = [EffectReuse(r, st) for r, st in exc.runs]
                field = limit_field(ex.loop, o.get("rule"))
                return Reparked([repark(o, reused, cycle, why, decided, field, now=store.clock())])
        # A run undoes its own execution: the compensation's key is this run's, never claimed
        # store-wide (another run's refund of the same invoice is not this one's).
        outcome = await perform_effect(
            store, ex, cycle, comp, call, fixed=(comp.key_for(ex.run_id, cycle, call), False)
        )
        if outcome.status == "failed":
            outcome = await _unless_refused(store, ex, outcome, f"{o['effect']} ({handed})")
        if outcome.status == "failed" and claim is not None:
            # refused: not undone, the action stands, and another run asking for it reuses
            # its result
            await _mark_undo(store, ex, orig[0], "done", claim)
        if outcome.status == "done":
            # The original is undone: a later request with its key runs again (next generation).
            if claim is not None:
                await _mark_undo(store, ex, orig[0], "compensated", claim)
            if orig:
                # ...and so may another run: the store-wide claim of a business key (the
                # ``action`` its journal entry names) is freed
                await written(
                    store,
                    store.journal_put,
                    ex.run_id,
                    ex.token,
                    key=orig[0].key,
                    kind="effect",
                    cycle=orig[0].cycle,
                    status="compensated",
                    data={**orig[0].data, "compensation": outcome.result},
                    claim=claim,
                )
        notes.append(
            {**base, "status": outcome.status, "result": outcome.result, "cause": outcome.cause}
            | ({"reused_by": o["reused_by"]} if o.get("reused_by") else {})
        )
    for item in pend.get("irreversible") or ():
        notes.append({"kind": "compensation", "effect": item, "status": "irreversible"})
    ex.events.append(NewEvent(cycle, "compensations", {"results": notes}))
    return notes
