"""What a run's page shows, read in a bounded number of rows however long the run: its newest
checkpoints (timeline and chart), its parts' newest versions, the log's end and the waterfall,
the requests pending with their cards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import HTTPException, Request

from .._contract import TERMINAL_STATUSES
from .._errors import RunNotFoundError
from .._inherited import inherited
from .._mid_cycle_records import by_id, edits_after_run_ended
from .._reflection import REFLECTION_KEY
from .._reuse_now import as_now
from .._state import TaskState
from ..store import Checkpoint, RunRecord, Store
from ._cards import approval_card, clock_for
from ._context import WebContext
from ._views import (
    artifacts_view,
    chart_points,
    chart_svg,
    decided_while_parked,
    edits_view,
    ended_row,
    events_view,
    journal_view,
    next_action_here,
    stop_cause_of,
    stop_words,
    timeline,
)
from ._waterfall import MAX_CYCLES, log_window, waterfall_html

__all__ = [
    "CHECKPOINTS_READ",
    "CYCLES_SHOWN",
    "EVENTS_SHOWN",
    "VERSIONS_SHOWN",
    "run_page_data",
    "run_payload",
]

EVENTS_SHOWN = 500
CYCLES_SHOWN = 200  # a run page's timeline: its newest cycles
VERSIONS_SHOWN = 50  # a run page's versions of each part: the newest
# A run page reads the newest this many checkpoints (its timeline and chart), not a long run's
# every one: the timeline's CYCLES_SHOWN cycles and more fit in it.
CHECKPOINTS_READ = 1000


def _inherited_usd(store: Store, rec: RunRecord, cks: Sequence[Checkpoint]) -> float:
    """What a fork inherited of its origin's spend (0 for any other run), from its first
    checkpoint: the one in hand when the page read the run from its start, else among the
    checkpoints of the cycle it was forked at (a long fork's page reads its newest only)."""
    if rec.forked_from is None:
        return 0.0
    first = cks[0] if cks and cks[0].seq == 0 else None
    if first is None:
        at = store.checkpoints_at(rec.run_id, rec.forked_at or 0)
        first = next((c for c in at if c.seq == 0), None)
    return inherited(rec, None if first is None else first.fields).cost_usd


def run_payload(store: Store, run_id: str) -> dict[str, Any]:
    """What a run's page shows: of each part's versions, the newest ``VERSIONS_SHOWN``
    (``/api/runs/{id}``, streamed by ``_run_json``, lists every one); of the checkpoints,
    the newest ``CHECKPOINTS_READ`` (``windowed`` says whether some were left out)."""
    newest, window = VERSIONS_SHOWN, CHECKPOINTS_READ
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    windowed = False
    try:
        last = store.latest_checkpoint(rec.run_id)
    except RunNotFoundError:
        cks, state = [], TaskState()
    else:
        # records and fields of the window, no state but the newest one's
        cks = store.checkpoints_after(rec.run_id, max(last.seq - window, -1))
        windowed = bool(cks) and last.seq - window >= 0
        state = last.task_state()
    nxt = state.next_step()
    approvals = as_now(store, store.approvals(run_id=rec.run_id))  # a reuse refunded since
    return {
        "rec": rec,
        "state": state,
        "next_step": nxt,
        # (a windowed page lists the newest CYCLES_SHOWN: only those rows are built)
        # (and the cycle the run ended inside, if it has no record: its cost, why)
        "timeline": [
            *(
                rows := timeline(
                    cks,
                    ended=rec.status in TERMINAL_STATUSES,
                    newest=CYCLES_SHOWN if windowed else None,
                    decided=by_id(approvals),  # a parked cycle: by its request's decision
                )
            ),
            *ended_row(store, rec),
        ],
        # An ended run's held-out verdict is its last judged candidate's (issue 17): say so
        # when that candidate was never applied (a failed effect, a denied request).
        "held_of_unapplied": rows[-1]["cycle"]
        if rows
        and rows[-1].get("unapplied")
        and rows[-1].get("held_out")
        and rec.status in TERMINAL_STATUSES
        else None,
        # the run's held-out verdict (its last judged candidate's) where tests behind a pass
        # were decided by the candidate's own process, or a failure rests only on tests
        # judged_only refused (``_verdict.undecided_note``)
        "held_note": next(
            (
                "; ".join(f"{v['name']}: {v['note']}" for v in r["held_out"] if v["note"])
                for r in reversed(rows)
                if r.get("held_out")
            ),
            "",
        ),
        "points": chart_points(cks),
        "inherited_usd": _inherited_usd(store, rec, cks),
        # (the page's newest versions of each part read alone, not a part's every one)
        "artifacts": artifacts_view(
            state,
            newest=newest,
            read=lambda ref, after, limit: store.versions_page(
                rec.run_id, ref, after=after, limit=limit
            ),
        ),
        "approvals": approvals,
        "stop_words": stop_words(rec, approvals),
        "resumable": rec.status not in TERMINAL_STATUSES
        and (rec.status != "awaiting_approval" or decided_while_parked(rec, approvals) is not None),
        "stop_cause": stop_cause_of(rec),
        "terminal": rec.status in TERMINAL_STATUSES,
        "checkpoints": cks,
        "windowed": windowed,
    }


def run_page_data(ctx: WebContext, request: Request, run_id: str, kind: str) -> dict[str, Any]:
    """The run page's template values (``kind``: the events of that kind only)."""
    store = ctx.store
    # What the page draws, not the whole run: the newest CHECKPOINTS_READ checkpoints
    # (timeline, chart), the log's end (events, waterfall) and counts read in the store;
    # a long run's every cycle and event are in /api/runs/{id} and `loopwright show`.
    data = run_payload(store, run_id)
    rec, points = data["rec"], data["points"]
    # (in the reader's terms: "Unpause it below" only to one the page offers Unpause)
    signed_in = ctx.auth.signed_in(request)
    # (the requests they may deny but not approve: each card offers Deny only, and says why)
    waiting = [a for a in data["approvals"] if a.status == "pending"]
    data["blocked"] = ctx.blocked(request, waiting, {rec.run_id: rec})
    data["next_here"] = next_action_here(
        rec,
        data["state"],
        data["approvals"],
        may_lift=ctx.auth.may(request, "operate"),
        may_decide=ctx.auth.may(request, "decide"),
        blocked=data["blocked"],
        who=ctx.auth.who(request) if signed_in else "",
    )
    # the commands the advice names, copied from the page, act on the store it shows: they
    # carry --store when a bare command reads another store here (hints55)
    from .._hints import carry_store, hint_flag, settle_command

    flag = hint_flag(ctx.store_url)
    data["next_here"] = carry_store(data["next_here"], flag)
    data["stop_cause"] = carry_store(data["stop_cause"], flag)
    packet = rec.packet or {}
    data["recommended"] = carry_store(str(packet.get("recommended_action") or ""), flag)
    data["summary"] = carry_store(str(packet.get("summary") or ""), flag)
    for row in data["timeline"]:
        if row.get("ended_inside"):  # (its note is the run's stop cause)
            row["note"] = carry_store(str(row["note"]), flag)
    first = (rec.forked_at or 0) + 1 if rec.forked_from else 1  # the run's own first cycle
    data["chart"] = chart_svg(
        points,
        rec.cost_usd,
        inherited_usd=data["inherited_usd"],
        # cycles of its own not drawn: its last improvement may be among them
        windowed=data["windowed"] and (not points or points[0].cycle > first),
    )
    data["timeline_total"] = len(data["timeline"])
    data["timeline"] = data["timeline"][-CYCLES_SHOWN:]
    rid = data["rec"].run_id
    entries = journal_view(store.journal(rid))
    counts = store.event_counts(rid)
    # (the journal's ``reflection`` entry marks the last cycle reflected on: no effect)
    data["effects"] = [e for e in entries if e["kind"] not in ("retry", REFLECTION_KEY)]
    for e in data["effects"]:  # the settle command the page prints, on the store it shows
        e["settle_command"] = settle_command(rid, e["settle_key"]) + flag if e["settle_key"] else ""
    data["retries"] = [e for e in entries if e["kind"] == "retry"]
    data["event_kinds"] = sorted(counts)
    if kind:
        # (a kind the log lacks is not asked of the database: it has none to show)
        shown = store.events_of_kinds(rid, {kind}, limit=EVENTS_SHOWN) if kind in counts else []
    else:
        shown = store.events_tail(rid, before_id=None, limit=EVENTS_SHOWN)[::-1]
    data["events"] = events_view(shown)
    data["events_total"] = counts.get(kind, 0) if kind else sum(counts.values())
    # the person's edits and the reruns asked for, in one read (none where the log has none)
    noted = [k for k in ("edited", "rerun_requested") if k in counts]
    extra = store.events_of_kinds(rid, set(noted)) if noted else []
    edited = [e for e in extra if e.kind == "edited"]
    # an edit after a parked cycle ended the run: in that cycle, as ``show`` lists it (read
    # from the checkpoints the page read: an older edit keeps its event's cycle)
    after_end = (
        edits_after_run_ended(
            data["checkpoints"],
            ended=data["rec"].status in TERMINAL_STATUSES,
            decided=by_id(data["approvals"]),
        )
        if edited
        else {}
    )
    data["edits"] = edits_view(edited, after_end)
    data["event_kind"] = kind
    win = log_window(store, rid, MAX_CYCLES, sum(counts.values()))
    data["waterfall"] = waterfall_html(
        data["rec"],
        win.events,
        data["checkpoints"],
        data["approvals"],
        window=win,
        cycles_total=counts.get("cycle_started", 0),
        # (where the window reaches before the newest checkpoints read: every one)
        read_all=(lambda: store.checkpoints_after(rid, -1)) if data["windowed"] else None,
    )
    now = clock_for(store, waiting)  # expiry on the store's clock, as it is decided
    data["cards"] = {
        a.approval_id: approval_card(a, data["rec"], data["state"], now=now, votes=ctx.voters(a))
        for a in waiting
    }
    data["reruns"] = [str(e.data.get("new_run")) for e in extra if e.kind == "rerun_requested"]
    return data
