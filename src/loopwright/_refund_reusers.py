"""A refund of an action other runs reused: who they are, and the request that makes a person
decide it (never one of the refunding run's requesters). Used by ``_reversal`` when a
compensation is offered and again just before it runs."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from ._exec import Execution
from ._loop import Loop
from .store import EffectReuse, JournalEntry, NewApproval, Store


def reusers(store: Store, run_id: str, kind: str, action: Any) -> list[EffectReuse]:
    """The runs that reused ``run_id``'s business action ``action`` while it holds it done
    (none for an action not claimed store-wide, or no longer this run's)."""
    if not isinstance(action, str):
        return []
    # the reuses first: most payments have none, and then the claim is not read
    reused = store.effect_reuses(kind, action)
    if not reused:
        return []
    claim = store.effect_claim(kind, action)
    if claim is None or claim.run_id != run_id or claim.status != "done":
        return []
    return reused


def reuse_who(who: Mapping[str, Any] | None, field: str = "amount") -> dict[str, Any]:
    """Who may decide the refund of a payment other runs reused: whom its rule names (its
    role, approvers and the field its limits read; anyone with the approver role for a rule
    that names none, or an ``allow`` made ``require``), and never one of the refunding run's
    requesters (separation of duties: whoever started, edited, rolled back or cancelled it,
    or a run it was forked from). The refund leaves other runs on a payment that no longer
    stands: whoever asked for it is not the one who decides it, whatever the rule said."""
    base: dict[str, Any] = (
        dict(who) if who else {"role": None, "approvers": 1, "separate": True, "field": field}
    )
    base["separate"] = True
    return base


def limit_field(loop: Loop | None, rule: str | None) -> str:
    """The argument the limits of rule ``rule`` read (``amount`` when no rule is named)."""
    found = next((r for r in loop.approvals.rules if r.name == rule), None) if loop else None
    return found.field if found is not None else "amount"


def reuse_why(reused: list[EffectReuse]) -> str:
    named = ", ".join(f"{r.run_id} ({r.status})" for r in reused)
    return (
        f"reused by run(s) {named}: undone, it leaves them on a payment that no longer "
        "stands, so a person decides"
    )


def reuse_what(reused: list[EffectReuse]) -> str:
    if not reused:
        return ""
    return "; reused by run(s) " + ", ".join(f"{r.run_id} ({r.status})" for r in reused)


def repark(
    o: dict[str, Any],
    reused: list[EffectReuse],
    cycle: int,
    why: str,
    decided: dict[str, Any],
    field: str = "amount",
    *,
    now: float,
) -> NewApproval:
    """The request for offer ``o``, found reused by runs no person was told of when it was
    to run (it was allowed, or approved before they reused it): ``o`` now waits for it. Who
    may decide it is who could decide the request it replaces (its rule's roles, approvers,
    the field its limits read — ``field`` for an allowed offer, which had none), never one of
    the run's requesters (``reuse_who``), and it expires as that one did, ``now`` (the
    store's ``clock()``) plus as long."""
    prior = decided.get(str(o.get("approval_id")))
    who = (prior.evidence or {}).get("who") if prior is not None else None
    # ...and it expires as that one did, after as long (a rule's expiry left out: it waited
    # for ever, as the first refund requests did)
    lasts = None
    if prior is not None and prior.expires_at is not None:
        # as the offer recorded it: a request written before edit47 has ``requested_at`` on
        # the writer's clock and ``expires_at`` on the store's (PostgreSQL: the server's), so
        # their difference can carry the hosts' skew
        lasts = o.get("expires_after_s", prior.expires_at - prior.requested_at)
    aid = uuid.uuid4().hex[:12]
    o.update(
        action="require",
        approval_id=aid,
        why=reuse_why(reused),
        reused_by=[dataclasses.asdict(r) for r in reused],
    )
    return NewApproval(
        approval_id=aid,
        cycle=cycle,
        kind="compensation",
        rule=o.get("rule"),
        what=f"undo {o['effect']} (done in cycle {o.get('cycle')}, key "
        f"{o.get('call_key') or o['key']})" + reuse_what(reused),
        why=f"{why}; {o['why']}" if why else str(o["why"]),
        evidence={
            "effect": o["effect"],
            "kind": o.get("kind"),
            "args": o.get("args"),
            "result": o.get("result"),
            "who": reuse_who(who, field),
            "reused_by": o["reused_by"],
        },
        diff=None,
        action_hash=hashlib.sha256(
            f"compensate:{o['key']}:{','.join(r.run_id for r in reused)}".encode()
        ).hexdigest()[:32],
        expires_at=None if lasts is None else now + lasts,
    )


def told_runs(o: dict[str, Any]) -> list[str]:
    """The runs reusing offer ``o``'s action that a person was told of: those its request
    named (an ``allow`` offer was decided by no one: none)."""
    if o["action"] != "require":
        return []
    return [str(r["run_id"]) for r in o.get("reused_by") or ()]


def reused_since(
    store: Store,
    ex: Execution,
    offers: list[dict[str, Any]],
    decided: dict[str, Any],
    origs: dict[str, list[JournalEntry]],
) -> list[tuple[dict[str, Any], list[EffectReuse]]]:
    """The offers about to run (allowed, or approved) whose action runs reused that no
    person was told of, each with every run that reused it. ``origs`` is given each such
    offer's original journal entry, as read (by the offer's key)."""
    out = []
    for o in offers:
        req = decided.get(str(o.get("approval_id")))
        runs = o["action"] == "allow" or (
            o["action"] == "require" and req is not None and req.status == "approved"
        )
        if not runs:
            continue
        orig = origs[str(o["key"])] = store.journal(ex.run_id, key=f"effect:{o['key']}")
        if not orig or orig[0].status != "done":
            continue
        reused = reusers(store, ex.run_id, str(o.get("kind")), orig[0].data.get("action"))
        if any(r.run_id not in told_runs(o) for r in reused):
            out.append((o, reused))
    return out
