"""What the pages show, built from store records: artifacts with diffs, edits, stop words and
next actions, summaries, the journal and events; the timeline rows (``_timeline``) and the
chart (``_chart``) are re-exported here, where the pages and the API import them from.

Everything here returns plain data; the templates escape it. The one exception is the chart,
an SVG generated from numbers and fixed labels only (no user or model text).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from .._contract import contract_from_snapshot
from .._decide import at_default_ceiling
from .._packet import explain
from .._state import Part, TaskState, Version
from .._stored_run_words import over_budget, run_stop_cause, waits_only_to_start
from .._verdict import held_out_words
from ..store import Approval, Event, JournalEntry, RunRecord
from ..store._records import PAUSE
from ._chart import CHART_DOTS, ChartPoint, chart_point, chart_points, chart_svg, per_pixel
from ._timeline import ended_row, timeline, timeline_row
from ._values import is_svg, picture_digest, short

__all__ = [
    "CHART_DOTS",
    "ChartPoint",
    "Cursor",
    "approval_summary",
    "artifacts_view",
    "chart_point",
    "chart_points",
    "chart_svg",
    "decided_while_parked",
    "edit_text",
    "edits_view",
    "ended_row",
    "event_view",
    "events_view",
    "held_or_stored",
    "journal_view",
    "next_action_here",
    "per_pixel",
    "run_summary",
    "stop_cause_of",
    "stop_words",
    "timeline",
    "timeline_row",
    "version_views",
    "waits_on",
]


def _render(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.splitlines() or [""]
    return json.dumps(value, indent=1, sort_keys=True, default=str, ensure_ascii=False).splitlines()


@dataclass
class PartView:
    ref: str
    status: str
    versions: list[dict[str, Any]] = field(default_factory=list)
    edit: str | None = ""  # the current value as a person edits it (None: too long for a page)
    text: bool = True  # whether the part is text (an edit is taken as typed) or JSON
    older: int = 0  # versions before the ones listed (a long run's page lists the newest)


# ``read(ref, after, limit)``: up to ``limit`` stored versions of a part numbered above
# ``after``, oldest first (``Store.versions_page`` of one run).
VersionReader = Callable[[str, int, int], Iterable[Version]]


def artifacts_view(
    state: TaskState, *, newest: int | None = None, read: VersionReader | None = None
) -> list[PartView]:
    """Every part with its versions (accepted marked) and the diff of each to the one before;
    ``newest``: only that many of each part's newest versions (the rest counted in ``older``),
    read with ``read`` when given (those and the one before them, not the part's every one)."""
    out = []
    for ref, part in state.iter_parts():
        pv = PartView(
            ref, part.status, edit=edit_text(part.value), text=isinstance(part.value, str)
        )
        skip = max(0, part.count - newest) if newest is not None else 0
        pv.older = skip
        # versions skip.. (the one before the first shown, for its diff), or every one
        shown = _newest_versions(ref, part, skip, read) if skip else part.versions
        prev: Any = shown[0].value if skip else None
        pv.versions.extend(version_views(shown[1:] if skip else shown, skip, prev))
        out.append(pv)
    return out


def version_views(versions: Iterable[Version], first: int, prev: Any) -> Iterator[dict[str, Any]]:
    """Each of ``versions`` (a part's, oldest first, the first of them at 0-based index
    ``first``, ``prev`` the value of the one before it) as the page and the API list it,
    with its diff to the one before."""
    for i, v in enumerate(versions, first):
        diff = ""
        if i:
            diff = "\n".join(
                difflib.unified_diff(
                    _render(prev), _render(v.value), f"v{i}", f"v{i + 1}", lineterm="", n=1
                )
            )
        yield {
            "n": v.n,
            "cycle": v.cycle,
            "status": v.status,
            "value": short(v.value, 200),
            "diff": diff,
            # An SVG part (a drawn panel) is shown as a picture, through /runs/…/svg.
            "svg": is_svg(v.value),
            # A picture kept as a blob (adapters.openai_images), through /runs/…/blob/…
            "picture": picture_digest(v.value),
        }
        prev = v.value


def _newest_versions(ref: str, part: Part, first: int, read: VersionReader | None) -> list[Version]:
    """The part's versions ``first``..``count``, oldest first: those it holds and the rest
    read with ``read`` (``held_or_stored``); every version read, as ``Part.versions`` reads
    them, without ``read`` or when the store lacks one of them."""
    count = part.count
    if read is not None:
        got = list(held_or_stored(part, lambda: read(ref, first - 1, count - first + 1), first - 1))
        if len(got) == count - first + 1:
            return got
    return part.versions[first - 1 :]


def held_or_stored(
    part: Part, read: Callable[[], Iterable[Version]], after: int = 0, last: int | None = None
) -> Iterator[Version]:
    """The versions of ``part`` numbered ``after + 1`` to ``last`` (its count when ``None``),
    oldest first: those it holds, and for the others those ``read()`` gives (stored versions,
    oldest first; read only when one is not held). Held versions are the newer truth (a held
    version's status is the state's, as ``Part.fill`` keeps them); a rollback's abandoned
    versions, above the count, are never given, nor is a version neither holds."""
    known = part.known
    last = part.count if last is None else min(last, part.count)
    wanted = range(after + 1, last + 1)
    if all(n in known for n in wanted):
        yield from (known[n] for n in wanted)
        return
    n = after + 1  # the next number to give
    for v in read():
        if v.n > last:
            break
        if v.n < n:
            continue
        for held in range(n, v.n):  # (held, not stored: given all the same)
            if held in known:
                yield known[held]
        yield known.get(v.n, v)
        n = v.n + 1
    yield from (known[m] for m in range(n, last + 1) if m in known)


EDIT_MAX_CHARS = 200_000  # a longer value is edited with `loopwright edit --file`, not a page


def edit_text(value: Any) -> str | None:
    """A part's value in the form the Edit box shows it: text as it is, anything else as JSON;
    None when it is too long to put in a page (every part's box is in the run page)."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, indent=1, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= EDIT_MAX_CHARS else None


def edits_view(
    events: list[Event], after_end: Mapping[tuple[str, object], int] | None = None
) -> list[dict[str, Any]]:
    """Who edited what, oldest first: the run's ``edited`` events (``Runtime.edit``).
    ``after_end``: the edits made after a cycle that never concluded ended the run, each with
    that cycle (``edits_after_run_ended``): listed in it, ``after_run_ended``, as ``loopwright
    show`` lists them (the event carries the last concluded cycle's number: "cycle 0")."""
    ended = after_end or {}
    return [
        {
            "id": e.id,
            "ts": e.ts,
            "cycle": ended.get(_edit_key(e), e.cycle),
            "after_run_ended": _edit_key(e) in ended,
            "by": str(e.data.get("by") or "?"),
            "part": str(e.data.get("part") or "?"),
            "version": e.data.get("version"),
            "changed": [str(c) for c in e.data.get("changed") or ()],
            "note": str(e.data.get("note") or ""),
            "override": bool(e.data.get("override")),
        }
        for e in events
        if e.kind == "edited"
    ]


def _edit_key(e: Event) -> tuple[str, object]:
    return str(e.data.get("part")), e.data.get("version")


_DECIDED_PARKED = "its request was decided; it waits to be resumed"


def stop_words(rec: RunRecord, approvals: list[Approval] | None = None) -> str:
    """The run's state or stop reason in plain words; a run parked whose request was decided
    elsewhere (``decided_while_parked``; an unpause before a worker resumes it) says it
    waits to be resumed: told by its ``approvals`` when given, else by the run row's count of
    its pending requests (a list of runs reads no requests); a store that keeps no count
    says it waits on either."""
    if waits_only_to_start(rec, approvals):
        # no worker takes a fork nobody has started: its maker does, after any edit (one
        # paused and unpaused before its start is parked, and no worker resumes it either)
        how = (
            f"loopwright resume {rec.run_id[:12]}"
            if rec.spec_ref
            else f"Runtime.resume({rec.run_id[:12]!r}, loop)"
        )
        return f"fork, not started: start it with {how} (no worker takes it until then)"
    if approvals is not None and decided_while_parked(rec, approvals) is not None:
        return _DECIDED_PARKED
    if approvals is None and rec.status == "awaiting_approval":
        if rec.open_requests is None:
            return "parked: waiting for a person to decide a request, or to be resumed"
        if rec.open_requests <= 0:
            return _DECIDED_PARKED
    if rec.stop_reason:
        try:
            spent = {"cost_usd": rec.cost_usd, "tokens": rec.tokens, "seconds": rec.seconds}
            contract = contract_from_snapshot(rec.contract)
            at_default = at_default_ceiling(contract, rec.task)
            return explain(rec.stop_reason, contract, spent=spent, at_default=at_default)
        except Exception:  # an older contract shape must not break the page
            return rec.stop_reason
    return {
        "awaiting_approval": "waiting for a person to decide a request (see Approvals)",
        "running": "running",
        "pending": "waiting to start",
    }.get(rec.status, rec.status)


def stop_cause_of(rec: RunRecord) -> str:
    """Why the run ended, one sentence (``""`` while it has not)."""
    try:
        return run_stop_cause(rec)
    except Exception:  # an odd stored packet must not break a list of runs
        return rec.stop_reason or ""


def waits_on(pending: list[Approval]) -> str:
    """Why a run parked on its ``pending`` requests is not resumed yet, and what lets it go
    on: a person's pause is lifted (unpaused) or its run cancelled, never denied (refused)."""
    if pending and all(a.kind == PAUSE for a in pending):
        return "the run is paused by a person: unpause it first (or cancel it)"
    if any(a.kind == PAUSE for a in pending):
        return "the run waits for a decision and is paused: decide the request and unpause it first"
    return "the run waits for a decision: approve or deny it first"


def next_action_here(
    rec: RunRecord,
    state: TaskState,
    approvals: list[Approval],
    *,
    may_lift: bool | None = None,
    may_decide: bool | None = None,
    blocked: Collection[str] = (),
    who: str = "",
) -> str:
    """What the person on the run page should do next, in the page's own terms (the CLI's
    advice names commands; here the buttons are on the page). ``may_lift``: whether the
    reader may lift a pause (the operator's permission), ``may_decide`` whether they may
    decide requests (the approver's), ``blocked`` the requests they may deny but not approve
    (``WebContext.blocked``: a rule's role, a limit, separation of duties), ``who`` the one
    signed in (``""``: no one); ``None`` (the API's document) says what one who may does."""
    pending = [a for a in approvals if a.status == "pending"]
    if pending and all(a.kind == PAUSE for a in pending):  # (denying a pause is refused)
        if may_lift is False:  # the page offers them no Unpause, nor a Cancel
            if who:
                return (
                    "The run is paused by a person: an operator lifts the pause (Unpause) or "
                    f"cancels the run; {who} may not (that needs the operator role)."
                )
            return (
                "The run is paused by a person: sign in (as an operator, where the store has "
                "users) to unpause it or cancel it."
            )
        return "The run is paused: Unpause it below to go on, or cancel it (signed in)."
    if pending:
        # a question is answered (or declined), not approved: its card's buttons say so
        asked = all(a.kind == "question" for a in pending if a.kind != PAUSE)
        said = (
            "Answer the question below, or decline it (you must be signed in)."
            if asked
            else "Decide the request below: approve or deny it (you must be signed in)."
        )
        if may_decide is False:  # the page offers them no Approve or Deny
            said = (
                "The run waits for a person to decide the request below: an approver "
                + ("answers it" if asked else "approves or denies it")
                + f"; {who} may not (that needs the approver role)."
                if who
                else "The run waits for a person to decide the request below: sign in (as an "
                "approver, where the store has users) to "
                + ("answer it." if asked else "approve or deny it.")
            )
        elif blocked and all(a.approval_id in blocked for a in pending if a.kind != PAUSE):
            said = (
                f"The run waits for a decision on the request below: {who or 'you'} may deny "
                "it, not approve it (its card says why); another approver may approve it."
            )
        if any(a.kind == PAUSE for a in pending):  # (parked on a request, and paused too)
            said += " The run is also paused by a person: " + (
                "an operator lifts the pause." if may_lift is False else "Unpause it to go on."
            )
        return said
    done = decided_while_parked(rec, approvals)
    if done is not None:
        return (
            f"The request was {done.status} by {done.decided_by or 'someone'} elsewhere; the run "
            "waits to carry that out. Use Resume below to continue it."
        )
    if rec.status == "accepted":
        return "Nothing: the result is accepted. The accepted artifacts are listed below."
    if rec.status == "running":
        return "Nothing yet: the run is working; this page refreshes as it changes."
    if rec.status == "pending":
        return (
            "It waits to start or to go on (after an edit or a rollback): a worker picks it up, "
            "or use Resume below."
        )
    advice = str((rec.packet or {}).get("recommended_action") or state.next_action or "")
    advice = re.sub(r"can be inspected with `loopwright show( \S+)?`", "is shown below", advice)
    # the run this page shows (advice47: the advice names `loopwright show RUN` to review it)
    advice = re.sub(r": `loopwright show \S+`", " below", advice)
    advice = re.sub(r"`loopwright show \S+`", "below", advice)
    # an error's advice names the rollback and resume commands; here they are buttons
    advice = re.sub(
        r"`loopwright rollback \S+ --to-cycle (\d+)(?: --by NAME)?`, then `loopwright resume \S+`",
        r"Roll back to a cycle below (cycle \1), resumed after",
        advice,
    )
    # (a run started from Python is resumed there, with its loop: no page can resume it)
    advice = re.sub(
        r"`loopwright rollback \S+ --to-cycle (\d+)(?: --by NAME)?`, then (`Runtime\.resume\(\S+, "
        r"loop\)` in Python)",
        r"Roll back to a cycle below (cycle \1), then resume it with \2",
        advice,
    )
    if rec.status in ("escalated", "stopped", "failed", "cancelled"):
        return advice or "Review the escalation packet below."
    return (advice + " Use Resume below to continue it.").strip()


def decided_while_parked(rec: RunRecord, approvals: list[Approval]) -> Approval | None:
    """The latest decision of a run still parked with nothing pending: its request was
    decided without resuming it (``loopwright approve`` without ``--resume``)."""
    if rec.status != "awaiting_approval" or any(a.status == "pending" for a in approvals):
        return None
    decided = [a for a in approvals if a.decided_at is not None]
    return max(decided, key=lambda a: a.decided_at or 0.0) if decided else None


def run_summary(rec: RunRecord) -> dict[str, Any]:
    """A run in a list: no task, contract or packet (those are in the run's own API)."""
    return {
        "run_id": rec.run_id,
        "task_key": rec.task_key,
        "loop_name": rec.loop_name,
        "project": rec.project,
        "status": rec.status,
        "stop_reason": rec.stop_reason,
        "stop_cause": stop_cause_of(rec),
        "stop_words": stop_words(rec),
        "cycle": rec.cycle,
        "best_score": rec.best_score,
        "cost_usd": rec.cost_usd,
        "tokens": rec.tokens,
        "seconds": rec.seconds,
        # how far past its budgets (0.0 and 0 within them), as /api/runs/{id} says (over56b)
        **over_budget(rec),
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
        "ended_at": rec.ended_at,
        "cancel_requested": rec.cancel_requested,
        "held_out_passed": rec.held_out_passed,
        # how many tests behind that verdict the candidate's own process decided (0: none;
        # None: unknown): a pass with any is not an independent one (false_success_rate)
        "held_out_self_reported": rec.held_out_self_reported,
        # the two as one word (``_verdict.held_out_words``): null, pass, fail,
        # pass_self_reported, fail_not_judged (the last two: not independent verdicts)
        "held_out_verdict": held_out_words(rec.held_out_passed, rec.held_out_self_reported).kind,
        "forked_from": rec.forked_from,
        "forked_at": rec.forked_at,
        # (a fork no worker takes until its maker starts it, as the run's own API says: a
        # rerun's response, which ui.md says carries it, and the list did not)
        "maker_starts": rec.maker_starts,
    }


def approval_summary(a: Approval) -> dict[str, Any]:
    """An approval request in a list; its evidence and diff are in ``/api/runs/{run_id}``
    only when small (a request's evidence can carry whole artifacts)."""
    d = a.to_dict()
    if len(json.dumps(d["evidence"], default=str)) > 4000:
        d["evidence"] = {"omitted": "large: see /api/runs/" + a.run_id}
    return d


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page ends: the sort key (a time) and the id of its last row."""

    at: float
    key: str

    def text(self) -> str:
        return f"{self.at!r}_{self.key}"

    @classmethod
    def parse(cls, text: str | None) -> Cursor | None:
        if not text:
            return None
        at, sep, key = text.partition("_")
        try:
            value = float(at)
        except ValueError:
            value = float("nan")
        if not sep or not key or not math.isfinite(value):
            raise ValueError(f"{text!r} is not a page cursor (use the X-Next-Cursor given)")
        return cls(value, key)


def journal_view(entries: list[JournalEntry]) -> list[dict[str, Any]]:
    """The effect/retry journal as rows: what, key, status, attempts and the result or error."""
    rows = []
    for e in entries:
        d = e.data or {}
        err = d.get("error")
        if isinstance(err, dict):
            err = f"{err.get('type')}: {err.get('message')}"
        rows.append(
            {
                "kind": e.kind,
                "name": str(d.get("name") or d.get("effect") or e.key),
                "effect_kind": d.get("kind"),
                "key": e.key,
                "cycle": e.cycle,
                "status": e.status,
                "in_doubt": e.status == "in_doubt",
                # what a person may settle here (``loopwright settle``'s): the run's own
                # effect in doubt, not one in doubt about another run's action
                "settle_key": (
                    e.key.removeprefix("effect:")
                    if e.kind == "effect" and e.status == "in_doubt" and not d.get("from_run")
                    else ""
                ),
                "attempts": e.attempts,
                "args": short(d.get("args"), 160) if d.get("args") is not None else "",
                "result": short(d.get("result"), 160) if d.get("result") is not None else "",
                "cause": short(d.get("cause"), 200) if d.get("cause") else "",
                "error": short(err, 200) if err else "",
                "class": d.get("class") or "",
                "wait_s": (
                    max(0.0, float(d["next_at"]) - e.updated_at)
                    if e.kind == "retry" and isinstance(d.get("next_at"), (int, float))
                    else None
                ),
                "created_at": e.created_at,
                "updated_at": e.updated_at,
            }
        )
    return rows


def event_view(e: Event) -> dict[str, Any]:
    return {"id": e.id, "cycle": e.cycle, "kind": e.kind, "ts": e.ts, "data": short(e.data, 240)}


def events_view(events: list[Event]) -> list[dict[str, Any]]:
    return [event_view(e) for e in events]


def esc(text: str) -> Markup:
    return escape(text)
