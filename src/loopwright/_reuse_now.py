"""Approval requests as they read now: a pending request whose card says an action is done
already (approving reuses it, ``_gates.done_before``) is listed with what is true of that
action now. Its payment refunded since, the card said "its result is reused" until the run
resumed and asked again (advice47): a listing reads the claims of every such request in one
query a kind (``Store.effect_claims``), and says the reuse is gone.

A part a person edited while the request waited: its card's diff and evidence still show the
state before the edit, and approving judges the cycle again on the edited state
(``Parking._judge_again``). A listing reads the edits of its runs in one query
(``Store.events_of_runs``: each ``edited`` event names the request it was made beside) and
says which parts were edited since, by whom, and that approving judges the edited state."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .store import Approval, EffectClaim, Event, Store

# The words for a claim no longer done, by its status (``EffectClaim``).
_GONE = {
    "compensated": "refunded since",
    "undoing": "being refunded since",
    "refused": "refused since",
    "failed": "failed since",
    "claimed": "being done again since",
    "in_doubt": "in doubt since",
}


def as_now(store: Store, approvals: Sequence[Approval]) -> list[Approval]:
    """``approvals`` with the ``what`` of each pending one said again where it no longer
    holds: its reuse gone ("was done by run X under its key; refunded since: approving asks
    again"), a part edited since it was made ("inv/x edited by ana since the request: ...").
    Others as they are. One read of the claims for the whole list (none when no request
    claims a reuse), one of the edits (none when no request is pending)."""
    wanted = {(r["kind"], r["key"]) for a in approvals for r in _reuses(a)}
    claims = store.effect_claims(wanted) if wanted else {}
    waiting = {a.run_id for a in approvals if a.status == "pending"}
    # (an edit beside a request follows its parking: the run's newest request)
    edits = (
        store.events_of_runs(waiting, ("edited",), since="approval_requested") if waiting else {}
    )
    if not claims and not edits:
        return list(approvals)
    out: list[Approval] = []
    for a in approvals:
        what = a.what
        for r in _reuses(a):
            said = _now(a.run_id, r, claims.get((r["kind"], r["key"])))
            if said is not None:
                what = what.replace(r["said"], said, 1)
        if a.status == "pending":
            what += _edited_since(a, edits.get(a.run_id, ()))
        out.append(a if what == a.what else dataclasses.replace(a, what=what))
    return out


def _edited_since(a: Approval, edits: Iterable[Event]) -> str:
    """What the card of ``a`` says of the parts edited while it waited (its run's ``edits``
    that name it), or "" where none was."""
    by_part: dict[str, list[str]] = {}
    for e in edits:
        if e.data.get("approval_id") != a.approval_id:
            continue
        who = by_part.setdefault(str(e.data.get("part")), [])
        by = str(e.data.get("by") or "someone")
        if by not in who:
            who.append(by)
    if not by_part:
        return ""
    said = "; ".join(f"{part} by {', '.join(who)}" for part, who in by_part.items())
    return (
        f" (edited since the request: {said}; the diff shows the state before the edit, "
        "and approving judges the edited state)"
    )


def _reuses(a: Approval) -> Iterator[dict[str, str]]:
    """The reuses a pending request's card claims (needs made before they were recorded
    carry none: their card is shown as it was written)."""
    if a.status != "pending" or not isinstance(a.evidence, dict):
        return
    for need in a.evidence.get("needs") or ():
        r = need.get("reuse") if isinstance(need, Mapping) else None
        if not isinstance(r, Mapping) or not all(isinstance(r.get(k), str) for k in _FIELDS):
            continue
        if r["said"] and r["said"] in a.what:
            yield {k: str(r[k]) for k in _FIELDS}


_FIELDS = ("kind", "key", "run", "said")


def _now(run_id: str, r: Mapping[str, Any], claim: EffectClaim | None) -> str | None:
    """What the card says of the reuse ``r`` now, or None where it is true as written."""
    was = "this run" if r["run"] == run_id else f"run {str(r['run'])[:12]}"
    if claim is None:
        return f" (was done by {was} under its key; not recorded since: approving asks again)"
    if claim.status == "done":
        if claim.run_id == r["run"]:
            return None
        by = "this run" if claim.run_id == run_id else f"run {claim.run_id[:12]}"
        return (
            f" (was done by {was} under its key, undone since and done again by {by}: "
            "approving does not run it again)"
        )
    since = _GONE.get(claim.status, f"{claim.status} since")
    return f" (was done by {was} under its key; {since}: approving asks again)"
