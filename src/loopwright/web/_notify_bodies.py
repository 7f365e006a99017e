"""The bodies of the webhook notifications (``_notify``): the JSON posted when a run asks a
person for a decision, for the requests already waiting, when a person settles an effect left
in doubt and when a run ends: a one-line ``text`` chat tools show, the structured fields
beside it."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from .._money_text import usd
from .._stored_run_words import run_stop_cause
from ..store import Approval, Event, RunRecord

__all__ = [
    "EVIDENCE_MAX",
    "HANDOFF_LISTED",
    "approval_body",
    "run_end_body",
    "settled_body",
    "waiting_body",
]

WAITING_LISTED = 50  # requests listed in one "already waiting" message
TEXT_MAX = 300  # characters of what / why in the one-line text
HANDOFF_LISTED = 20  # unresolved findings listed in a run's hand-off (all are counted)
EVIDENCE_MAX = 1_000  # characters of a listed finding's evidence (as JSON) sent whole


def _one_line(text: str | None, limit: int = TEXT_MAX) -> str:
    words = " ".join(str(text or "").split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def _shown(text: str | None, limit: int = TEXT_MAX) -> str:
    """A run's text for the chat ``text`` line, on one line, ``&``, ``<`` and ``>`` escaped as
    Slack's incoming webhooks require (Rocket.Chat, Mattermost and Google Chat read the same
    syntax): a model's or a task's words (an effect's argument, a stop cause) can then neither
    make a link that shows other words than its target (``<https://…|Approve>``) nor notify
    everyone (``<!channel>``). The structured fields beside it keep the text as it is."""
    line = _one_line(text, limit)
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _args_text(args: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{k}={v if isinstance(v, str | int | float | bool) else json.dumps(v, default=str)}"
        for k, v in args.items()
    )


def waiting_body(requests: list[dict[str, Any]], link_base: str | None) -> dict[str, Any]:
    """The JSON posted once for the requests already waiting when notifying began (when more
    than ``NotifyConfig.baseline_posts``): how many, and each one's ``approval_body``
    (the first ``WAITING_LISTED``)."""
    url = f"{link_base}/approvals" if link_base else None
    text = f"{len(requests)} approval requests were already waiting when notifications started" + (
        f" — {url}" if url else " — loopwright approvals"
    )
    return {
        "text": text,
        "event": "approvals_waiting",
        "count": len(requests),
        "approvals": requests[:WAITING_LISTED],
        "url": url,
    }


def approval_body(a: Approval, run: RunRecord | None, link_base: str | None) -> dict[str, Any]:
    """The JSON posted for a new approval request."""
    ev = a.evidence or {}
    effects: list[dict[str, Any]] = [
        {"name": str(e.get("name")), "args": dict(e.get("args") or {})}
        for e in ev.get("effects") or ()
        if isinstance(e, Mapping)
    ]
    question = ev.get("question") if isinstance(ev.get("question"), Mapping) else None
    summary = "; ".join(f"{e['name']}({_args_text(e['args'])})" for e in effects)
    url = f"{link_base}/approvals?q={quote(a.approval_id)}" if link_base else None
    kind = _shown(a.kind + (f" ({a.rule})" if a.rule else ""))
    task = f" ({_shown(run.task_key)})" if run is not None else ""
    text = (
        f"{'Question' if question else 'Approval needed'}: {_shown(a.what)} — "
        f"run {_shown(a.run_id[:12])}{task}, {kind}"
        + (f"; effects: {_shown(summary, 200)}" if summary else "")
        + (f"; expires {_iso(a.expires_at)}" if a.expires_at else "")
        + (f" — {url}" if url else f" — loopwright show {a.run_id[:12]}")
    )
    return {
        "text": text,
        "event": "approval_requested",
        "approval_id": a.approval_id,
        "run_id": a.run_id,
        "task_key": run.task_key if run else None,
        "loop": run.loop_name if run else None,
        "project": run.project if run else None,
        "cycle": a.cycle,
        "kind": a.kind,
        "rule": a.rule,
        "what": a.what,
        "why": a.why,
        "question": question.get("text") if question else None,
        "effects": effects,
        "summary": summary or None,
        "requested_at": _iso(a.requested_at),
        "expires_at": _iso(a.expires_at),
        "url": url,
    }


def _handoff(packet: Mapping[str, Any]) -> dict[str, Any]:
    """What the stop contract's escalation routes (the loop-engineering seed's row: "the
    trace, evidence, unresolved state, and recommended next action"), from a run's packet: its
    owner and route, the recommended action, the unresolved findings (how many, the first
    ``HANDOFF_LISTED`` with where they are and their evidence) and the trace reference."""
    found = [f for f in packet.get("unresolved_findings") or () if isinstance(f, Mapping)]
    trace = packet.get("trace")
    return {
        "owner": packet.get("owner"),
        "route": packet.get("route"),
        "recommended_action": packet.get("recommended_action") or None,
        "unresolved": len(found),
        "unresolved_findings": [_finding(f) for f in found[:HANDOFF_LISTED]],
        "trace": dict(trace) if isinstance(trace, Mapping) else None,
    }


def _finding(f: Mapping[str, Any]) -> dict[str, Any]:
    """One unresolved finding of a hand-off: where, what, and its evidence when that is short
    (a longer one, a test log say, is named by its size: the run page holds it whole)."""
    out = {k: f.get(k) for k in ("artifact", "part", "dimension", "message")}
    evidence = f.get("evidence")
    size = len(json.dumps(evidence, default=str))
    out["evidence"] = evidence if size <= EVIDENCE_MAX else {"omitted_chars": size}
    return out


def run_end_body(rec: RunRecord, link_base: str | None) -> dict[str, Any]:
    """The JSON posted when a run ends; a run that ends without being accepted is handed
    over with its packet's owner, route, recommended action and unresolved findings."""
    url = f"{link_base}/runs/{quote(rec.run_id)}" if link_base else None
    cause = run_stop_cause(rec) or rec.stop_reason or ""
    packet = rec.packet if isinstance(rec.packet, Mapping) else None
    handoff = _handoff(packet) if packet is not None and rec.status != "accepted" else None
    owner = handoff["owner"] if handoff else None
    route = handoff["route"] if handoff else None
    text = (
        f"Run {_shown(rec.run_id[:12])} ({_shown(rec.task_key)}) {rec.status.replace('_', ' ')}"
        + (f": {_shown(cause)}" if cause else "")
        + f" — {rec.cycle} cycle(s), {usd(rec.cost_usd)}"
        + (f" — for {_shown(owner)}" if owner else "")
        + (f" via {_shown(route)}" if route else "")
        + (f" — {url}" if url else "")
    )
    return {
        "text": text,
        "event": "run_ended",
        "run_id": rec.run_id,
        "task_key": rec.task_key,
        "loop": rec.loop_name,
        "project": rec.project,
        "status": rec.status,
        "stop_reason": rec.stop_reason,
        "stop_cause": cause or None,
        "cycles": rec.cycle,
        "cost_usd": rec.cost_usd,
        "ended_at": _iso(rec.ended_at),
        "url": url,
        "handoff": handoff,
    }


def settled_body(event: Event, rec: RunRecord | None, link_base: str | None) -> dict[str, Any]:
    """The JSON posted when a person settles an effect left in doubt (``effect_settled``,
    whatever settled it: `loopwright settle`, the API, the dashboard, a refund's settling):
    who settled which effect of which run, done or not, and what is left to do."""
    d = event.data
    done = bool(d.get("done"))
    url = f"{link_base}/runs/{quote(event.run_id)}" if link_base else None
    task = f" ({_shown(rec.task_key)})" if rec is not None else ""
    note = f": {_shown(str(d['note']), 200)}" if d.get("note") else ""
    left = (
        f"roll the run back to before cycle {event.cycle} and resume it"
        if rec is not None and rec.status == "escalated"
        else None
    )
    text = (
        f"Effect settled: {_shown(str(d.get('effect')))} ({_shown(str(d.get('key')))}) of run "
        f"{_shown(event.run_id[:12])}{task} settled {'done' if done else 'not done'} by "
        f"{_shown(str(d.get('by')))}{note}"
        + (f"; next: {left}" if left else "")
        + (f" — {url}" if url else f" — loopwright show {event.run_id[:12]}")
    )
    return {
        "text": text,
        "event": "effect_settled",
        "run_id": event.run_id,
        "task_key": rec.task_key if rec is not None else None,
        "loop": rec.loop_name if rec is not None else None,
        "project": rec.project if rec is not None else None,
        "cycle": event.cycle,
        "effect": d.get("effect"),
        "key": d.get("key"),
        "done": done,
        "status": d.get("status"),
        "by": d.get("by"),
        "note": d.get("note"),
        "settled_at": _iso(event.ts),
        "run_status": rec.status if rec is not None else None,
        "next": left,
        "url": url,
    }
