"""Approval cards people act on: how old a request is, when it expires, who may decide it, the
findings that caused it (the rest folded), effect arguments as a table, and image parts (SVG,
PNG) as pictures — before and after side by side — served through ``<img>`` under a policy in
which nothing runs.

Everything here returns plain data (the templates escape it) except the image route, which
serves a part's bytes with their own content type and a script-free, sandboxed policy.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException
from fastapi.responses import Response

from .._effects import EffectCall
from .._errors import ConfigError, RunNotFoundError
from .._gates import call_digest
from .._proposal import Proposal
from .._state import Part, TaskState, match_any
from ..store import Approval, RunRecord, Store
from ..store._records import past_expiry
from ._pictures import inline_blob_refs, is_picture, picture_bytes
from ._values import is_svg

__all__ = [
    "IMAGE_CSP",
    "Card",
    "ago",
    "approval_card",
    "clock_for",
    "compact",
    "expiry",
    "image_kind",
    "owner_words",
    "png_bytes",
    "register_card_routes",
    "register_part_image_route",
]

# An image opened on its own (not through <img>) is a document: nothing may load or run in it.
IMAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_DATA_URL = "data:image/png;base64,"


CELL_MAX = 2000  # characters of a value shown in a card's table; the run's API has it whole


def compact(value: Any) -> str:
    """A value for a table cell: text as it is, anything else as compact JSON (never a repr)."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= CELL_MAX else text[: CELL_MAX - 1] + "…"


def _span(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h" if h >= 10 or not m else f"{h} h {m} min"
    return f"{s // 86400} d"


def ago(ts: float, now: float) -> str:
    """``asked 3 h ago``."""
    return f"asked {_span(now - ts)} ago"


def clock_for(store: Store, requests: Iterable[Approval]) -> float:
    """Now, for the cards of ``requests``: the store's clock (``Store.clock()``; PostgreSQL: the
    server's), on which their expiry is set and decided, when one of them expires; this
    host's otherwise (no round trip for cards that only say how long ago)."""
    return store.clock() if any(a.expires_at is not None for a in requests) else time.time()


def expiry(expires_at: float | None, now: float) -> tuple[str, bool]:
    """The expiry in words and whether it has passed (a request past it escalates when the run
    is next resumed)."""
    if expires_at is None:
        return "does not expire", False
    if past_expiry(expires_at, now):  # (the engine's rule: open at expires_at itself)
        return f"expired {_span(now - expires_at)} ago", True
    return f"expires in {_span(expires_at - now)}", False


def owner_words(who: Any, votes: list[str] | None = None) -> str:
    """Who may decide: the request's ``evidence["who"]`` (``{"role", "roles", "approvers",
    "separate"}`` from the approval rules naming people) with the approvals so far, in words;
    without a rule, any approver."""
    votes = list(votes or ())
    if isinstance(who, str) and who.strip():
        return who.strip()
    parts = []
    if isinstance(who, dict):
        roles = [str(r) for r in who.get("roles") or () if r] or (
            [str(who["role"])] if who.get("role") else []
        )
        need = who.get("approvers")
        need = need if isinstance(need, int) and not isinstance(need, bool) else 1
        if roles:
            parts.append(f"role {' or '.join(roles)}")
        if need > 1:
            parts.append(f"{need} approvers")
        if who.get("separate"):
            parts.append("not who started, edited, rolled back or cancelled the run")
        legacy = who.get("votes")  # a rule that carries its votes itself
        if not votes and isinstance(legacy, list):
            votes = [
                str(v.get("by") or v.get("who") or "?") if isinstance(v, dict) else str(v)
                for v in legacy
            ]
    if votes:
        parts.append(f"approved so far by {', '.join(votes)}")
    if not parts or parts[0].startswith(("not who", "approved so far")):
        parts.insert(0, "any approver")
    return " · ".join(parts)


def image_kind(value: Any) -> str | None:
    """``"svg"``, ``"png"`` (a base64 data URL or bare base64 PNG), the type of a picture kept
    as a blob (``adapters.openai_images``: ``"png"``, ``"jpeg"``…), or None."""
    if is_svg(value):
        return "svg"
    if png_bytes(value) is not None:
        return "png"
    if is_picture(value):
        return str(value["media_type"]).split("/")[-1]
    return None


def png_bytes(value: Any) -> bytes | None:
    """The bytes of a PNG part, or None when the value is not one."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.startswith(PNG_DATA_URL):
        text = text[len(PNG_DATA_URL) :]
    elif not text.startswith("iVBORw0KGgo"):  # base64 of the PNG signature
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if raw.startswith(PNG_MAGIC) else None


@dataclass
class Card:
    """What an approval card shows besides the request's own fields."""

    asked: str
    expires: str
    expired: bool
    owner: str
    causes: list[dict[str, str]] = field(default_factory=list)
    others: list[dict[str, str]] = field(default_factory=list)
    effects: list[dict[str, Any]] = field(default_factory=list)
    images: list[dict[str, str]] = field(default_factory=list)
    changes: list[dict[str, str]] = field(default_factory=list)  # part, before, after
    diff: str = ""  # the stored diff, when the pending proposal is not at hand


def _finding_row(f: dict[str, Any]) -> dict[str, str]:
    where = "/".join(str(x) for x in (f.get("artifact"), f.get("part")) if x)
    return {
        "where": where,
        "message": str(f.get("message", "")),
        "dimension": str(f.get("dimension") or ""),
    }


def _rule_of(rec: RunRecord, name: str | None) -> dict[str, Any]:
    for r in (rec.contract or {}).get("risk") or ():
        if isinstance(r, dict) and r.get("name") == name:
            return r
    return {}


def _pending(state: TaskState, a: Approval) -> Proposal | None:
    pend = state.pending or {}
    if pend.get("approval_id") != a.approval_id or not pend.get("proposal"):
        return None
    try:
        return Proposal.from_dict(pend["proposal"])
    except (KeyError, TypeError, ValueError):
        return None


# What a card says of an effect of the request: one approving runs, or one the request says
# was done before under its key (``_gates.done_before``). Approving that request runs it in no
# case: its result is reused, or (other arguments) it waits for a person, or (undone since,
# ``_reuse_now``) the run asks again. A reuse card read "Effect it would perform" under a
# heading saying its result is reused (names48).
EFFECT_WORDS = {
    False: "Effect it would perform",
    True: "Effect done before under its key (approving this request does not run it)",
}


def _digest(call: dict[str, Any]) -> str:
    """The digest a request's need names ``call`` by; ``""`` for one that does not read."""
    try:
        return call_digest(EffectCall.from_dict(call))
    except (KeyError, TypeError, ValueError, ConfigError):
        return ""


def _done_before(ev: dict[str, Any]) -> set[str]:
    """The digests of the calls a request's needs say were done before under their key."""
    needs = [x for x in ev.get("needs") or () if isinstance(x, dict)]
    return {str(x["call"]) for x in needs if x.get("done_already") and x.get("call")}


def approval_card(
    a: Approval,
    rec: RunRecord,
    state: TaskState | None,
    *,
    now: float | None = None,
    votes: list[str] | None = None,
) -> Card:
    """The card of request ``a`` of run ``rec`` (``state``: the run's latest state, for the
    before and after of image parts; ``votes``: who approved it so far, when it needs
    several)."""
    now = time.time() if now is None else now
    ev = a.evidence if isinstance(a.evidence, dict) else {}
    words, passed = expiry(a.expires_at, now)
    card = Card(ago(a.requested_at, now), words, passed, owner_words(ev.get("who"), votes))
    # The findings that caused it: the dimensions the rule pauses on, findings on the parts it
    # guards or the proposal changes, or the ones its reason quotes; the rest are folded.
    rule = _rule_of(rec, a.rule)
    dims = set(rule.get("findings") or ())
    touches = list(rule.get("touches") or ())
    proposal = _pending(state, a) if state is not None else None
    changed = {e.ref for e in proposal.changes()} if proposal is not None else set()
    for f in ev.get("findings") or ():
        if not isinstance(f, dict):
            continue
        row = _finding_row(f)
        ref = row["where"]
        caused = (
            (row["dimension"] and row["dimension"] in dims)
            or (ref and touches and match_any(ref, touches))
            or (ref and ref in changed)
            or (row["message"] and row["message"] in (a.why or ""))
        )
        (card.causes if caused else card.others).append(row)
    done = _done_before(ev)
    for e in ev.get("effects") or ():
        if not isinstance(e, dict):
            continue
        args = e.get("args")
        rows = (
            [{"key": str(k), "value": compact(v)} for k, v in args.items()]
            if isinstance(args, dict)
            else ([{"key": "(value)", "value": compact(args)}] if args is not None else [])
        )
        said = EFFECT_WORDS[bool(done) and _digest(e) in done]
        card.effects.append({"name": str(e.get("name") or "?"), "args": rows, "said": said})
    pictured: set[str] = set()
    if proposal is not None and state is not None:
        base = f"/approvals/{quote(a.approval_id, safe='')}/image?ref="
        for edit in proposal.changes():
            kind = image_kind(edit.value)
            if kind is None:
                continue
            part = state.part(edit.ref)
            before = part.value if part is not None else None
            card.images.append(
                {
                    "ref": edit.ref,
                    "kind": kind,
                    "before": base + quote(edit.ref, safe="") + "&side=before"
                    if image_kind(before)
                    else "",
                    "after": base + quote(edit.ref, safe="") + "&side=after",
                }
            )
            pictured.add(edit.ref)
        for edit in proposal.changes():
            if edit.ref in pictured:
                continue
            part = state.part(edit.ref)
            card.changes.append(
                {
                    "part": edit.ref,
                    "before": "∅" if part is None else compact(part.value),
                    "after": compact(edit.value),
                }
            )
        return card
    lines = (a.diff or "").splitlines()
    card.diff = "\n".join(
        ln for ln in lines if not any(ln[2:].startswith(ref + ":") for ref in pictured)
    )
    return card


def image_value(a: Approval, state: TaskState, ref: str, side: str) -> Any:
    """The value of part ``ref`` before or after the change request ``a`` asks about."""
    proposal = _pending(state, a)
    if proposal is None:
        raise HTTPException(404, f"request {a.approval_id} is not waiting for a decision")
    if side == "after":
        for e in proposal.changes():
            if e.ref == ref:
                return e.value
        raise HTTPException(404, f"request {a.approval_id} does not change {ref}")
    if side == "before":
        part = state.part(ref)
        if part is None:
            raise HTTPException(404, f"no part {ref} before the change")
        return part.value
    raise HTTPException(400, "side must be before or after")


def proposed_pictures(a: Approval, state: TaskState) -> set[str]:
    """The digests of the pictures the request ``a`` would set (a panel's new art, which its
    lettered SVG shows by ``lw-blob:`` before any version of the run holds it)."""
    proposal = _pending(state, a)
    if proposal is None:
        return set()
    return {str(e.value["image"]) for e in proposal.changes() if is_picture(e.value)}


def image_response(
    value: Any, store: Store, state: TaskState, also: Iterable[str] = ()
) -> Response:
    """An image part as an image: SVG (its ``lw-blob:`` pictures that the run, in ``state``,
    holds — or ``also`` names — put in), PNG or a picture kept as a blob, with its own type,
    nothing allowed to run."""
    headers = {
        "Content-Security-Policy": IMAGE_CSP,
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, max-age=60",
    }
    if is_svg(value):
        svg = inline_blob_refs(store, state, str(value), also)
        return Response(svg, media_type="image/svg+xml", headers=headers)
    raw = png_bytes(value)
    if raw is not None:
        return Response(raw, media_type="image/png", headers=headers)
    kept = picture_bytes(store, value)
    if kept is not None:
        return Response(kept[0], media_type=kept[1], headers=headers)
    raise HTTPException(404, "the part is not an image (SVG, PNG or a stored picture)")


def register_card_routes(app: FastAPI, store: Store) -> None:
    """``/approvals/{id}/image``: the before or after of an image part a request would change."""

    @app.get("/approvals/{approval_id}/image", include_in_schema=False)
    def approval_image(approval_id: str, ref: str, side: str = "after") -> Response:
        a = store.approval(approval_id)
        if a is None or a.status != "pending":
            raise HTTPException(404, f"no pending approval request {approval_id}")
        state = store.latest_checkpoint(a.run_id).task_state()
        also = proposed_pictures(a, state) if side == "after" else set()
        return image_response(image_value(a, state, ref, side), store, state, also)


def latest_part(store: Store, run_id: str, ref: str) -> tuple[TaskState, Part | None]:
    """A run's latest state and its part ``ref`` (None: no such part), for a picture link:
    the latest state only (each thumbnail of a run page asks), not every checkpoint, the
    timeline and every version's diff as the run's page reads them. An unknown run is a 404,
    a ref that is not artifact/part a 400 (a bad link, not a server error)."""
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    state = store.latest_checkpoint(rec.run_id).task_state()
    try:
        return state, state.part(ref)
    except ConfigError as exc:
        raise HTTPException(400, str(exc)) from exc


def register_part_image_route(app: FastAPI, store: Store) -> None:
    """``/runs/{id}/image?ref=&v=``: a version of an image part (SVG or PNG; latest when no
    ``v``), under the same script-free policy."""

    @app.get("/runs/{run_id}/image", include_in_schema=False)
    def part_image(run_id: str, ref: str, v: int = 0) -> Response:
        state, part = latest_part(store, run_id, ref)
        if part is None or not part.versions:
            raise HTTPException(404, f"no part {ref}")
        n = v or len(part.versions)
        if not 1 <= n <= len(part.versions):
            raise HTTPException(404, f"no version {n} of {ref}")
        return image_response(part.versions[n - 1].value, store, state)
