"""What the pages show, built from store records: timeline rows, artifacts with diffs, the chart.

Everything here returns plain data; the templates escape it. The one exception is the chart,
an SVG generated here from numbers and fixed labels only (no user or model text).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from markupsafe import Markup, escape

from .._contract import Contract
from .._finishing import ended_inside
from .._packet import explain, run_stop_cause
from .._state import Part, TaskState, Version
from ..store import Approval, Checkpoint, Event, JournalEntry, RunRecord, Store
from ..store._records import concluded_cycles

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
]


def short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _verdicts(d: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for name, v in (d or {}).items():
        out.append(
            {
                "name": name,
                "passed": bool(v.get("passed")),
                "score": v.get("score"),
                "findings": [
                    {
                        "where": "/".join(
                            str(x) for x in (f.get("artifact"), f.get("part")) if x is not None
                        ),
                        "message": str(f.get("message", "")),
                    }
                    for f in v.get("findings") or []
                ],
            }
        )
    return out


def timeline(
    checkpoints: list[Checkpoint], *, ended: bool = False, newest: int | None = None
) -> list[dict[str, Any]]:
    """One row per concluded or parked cycle, oldest first; also a cycle whose effects never
    completed (the run stopped on a failed effect before the cycle concluded). A parked or
    unconcluded cycle's row shows its proposal and visible verdicts from the write-ahead state,
    marked ``unapplied``: the candidate was judged but is not in the run's state (a parked
    cycle that later concluded keeps a plain "parked" row; its concluded row follows).
    ``ended``: the run has ended, so what was not applied never will be. ``newest``: only
    the last that many rows (built from the end: a checkpoint gives a row at most)."""
    concluded = concluded_cycles(checkpoints)
    rows: list[dict[str, Any]] = []
    for ck in checkpoints if newest is None else reversed(checkpoints):
        if newest is not None and len(rows) >= newest:
            break
        row = timeline_row(ck, concluded, ended=ended)
        if row is not None:
            rows.append(row)
    return rows if newest is None else rows[::-1]


def timeline_row(ck: Checkpoint, concluded: set[Any], *, ended: bool) -> dict[str, Any] | None:
    """``ck``'s row of the timeline (``timeline``), if it has one; ``concluded``: the run's
    ``concluded_cycles``."""
    rec = ck.record
    if not rec:
        return None
    if "proposal" not in rec:
        decision = rec.get("decision")
        done = rec.get("cycle") in concluded
        if decision == "parked" or (decision == "effects" and not done):
            return _unapplied_row(ck, rec, parked=decision == "parked", done=done, ended=ended)
        return None
    return _cycle_row(ck, rec)


def ended_row(store: Store, rec: RunRecord) -> list[dict[str, Any]]:
    """The row of the cycle an ended run ended inside (the actor asked for a person, a
    verifier gave up, a budget crossed mid-cycle), which has no record: what it cost and why
    it ended (``_finishing.ended_inside``); none if the run ended otherwise."""
    end = ended_inside(store, rec)
    if end is None:
        return []
    usage = end["usage"]
    return [
        {
            "cycle": end["cycle"],
            "at": None,
            "parked": False,
            "unapplied": False,
            "ended_inside": True,
            "kind": "ended inside this cycle",
            "replace": [],
            "edits": [],
            "note": str(end["cause"]),
            "effects": [],
            "duplicate": False,
            "visible": [],
            "held_out": [],
            "score": None,
            "improved": False,
            "decision": str(end["decision"]),
            "cost_usd": float(usage.get("cost_usd") or 0.0),
            "tokens": int(usage.get("tokens") or 0),
        }
    ]


def _unapplied_row(
    ck: Checkpoint, rec: dict[str, Any], *, parked: bool, done: bool, ended: bool
) -> dict[str, Any] | None:
    pend = ck.fields.get("pending")
    if done or not isinstance(pend, dict) or not isinstance(pend.get("proposal"), dict):
        if not parked:
            return None
        return {  # concluded later (its own row follows), or an older store: a plain marker
            "cycle": rec.get("cycle"),
            "at": ck.created_at,
            "parked": True,
            "unapplied": False,
            "held_out": _verdicts(rec.get("held_out")),
        }
    row = _cycle_row(
        ck,
        {
            "cycle": rec.get("cycle"),
            "proposal": pend["proposal"],
            "visible": pend.get("visible"),
            "held_out": rec.get("held_out"),
            "usage": pend.get("usage"),
            "decision": _why_unapplied(parked, ended),
        },
    )
    row["unapplied"] = True
    for e in row["edits"]:
        # a proposed value, not a version of the run: shown as text (the routes that serve
        # an SVG part or a picture serve the run's versions only; the approval card shows it)
        e["svg"] = False
        e["picture"] = None
    return row


def _why_unapplied(parked: bool, ended: bool) -> str:
    if not parked:
        return "not applied: its effects did not complete"
    return "parked for approval: " + ("never applied" if ended else "not applied yet")


def _cycle_row(ck: Checkpoint, rec: dict[str, Any]) -> dict[str, Any]:
    prop = rec["proposal"] or {}
    edits = [
        {
            "ref": f"{e.get('artifact')}/{e.get('part')}",
            "value": short(e.get("value"), 80),
            "svg": is_svg(e.get("value")),  # a drawn panel: shown as a thumbnail
            "picture": picture_digest(e.get("value")),  # a picture kept as a blob
        }
        for e in prop.get("edits") or ()
    ]
    usage = rec.get("usage") or {}
    return {
        "cycle": rec.get("cycle"),
        "at": ck.created_at,  # when the cycle was committed
        "parked": False,
        "unapplied": False,
        "kind": prop.get("kind"),
        "replace": list(prop.get("replace") or []),
        "edits": edits,
        "note": prop.get("note") or "",
        "effects": [str(e.get("name")) for e in prop.get("effects") or ()],
        "duplicate": bool(rec.get("duplicate")),
        "visible": _verdicts(rec.get("visible")),
        "held_out": _verdicts(rec.get("held_out")),
        "score": rec.get("score"),
        "improved": bool(rec.get("improved")),
        "decision": rec.get("decision") or "-",
        "cost_usd": float(usage.get("cost_usd") or 0.0),
        "tokens": int(usage.get("tokens") or 0),
    }


@dataclass(frozen=True, slots=True)
class ChartPoint:
    cycle: int
    best: float
    spent: float
    improved: bool


def chart_points(checkpoints: list[Checkpoint]) -> list[ChartPoint]:
    """Best score and cumulative spend after each concluded cycle (the last checkpoint wins)."""
    by_cycle: dict[int, ChartPoint] = {}
    for ck in checkpoints:
        point = chart_point(ck)
        if point is not None:
            by_cycle[point.cycle] = point
    return [by_cycle[c] for c in sorted(by_cycle)]


def chart_point(ck: Checkpoint) -> ChartPoint | None:
    """``ck``'s point of the chart (``chart_points``): a concluded cycle's, else ``None``."""
    rec = ck.record
    if not rec or "proposal" not in rec:
        return None
    fields = ck.fields  # not every part of every checkpoint: a long run's chart
    spent = (fields.get("spent") or {}).get("cost_usd") or 0.0
    best = fields.get("best_score")
    cycle = int(rec.get("cycle") or ck.cycle)
    return ChartPoint(cycle, float(best or 0.0), float(spent), bool(rec.get("improved")))


T = TypeVar("T")
CHART_DOTS = 200  # cycles drawn with a dot each on a run's chart


def per_pixel(series: list[T], px: Callable[[T], float]) -> list[T]:
    """The first item of ``series`` (in cycle order) and the last in each pixel column ``px``
    puts the items in: what a line through every one of them draws, a point a pixel."""
    out: list[T] = []
    last_col: int | None = None
    for item in series:
        col = round(px(item))
        if col == last_col and len(out) > 1:
            out[-1] = item
        else:
            out.append(item)
        last_col = col
    return out


def chart_svg(
    points: list[ChartPoint],
    total_cost: float,
    *,
    inherited_usd: float = 0.0,
    windowed: bool = False,
) -> Markup:
    """Best score (left axis, 0–1) and cumulative spend (right axis) per cycle; the last
    material improvement is marked and the spend after it shaded, its amount the metric's
    (``spend_after_last_improvement_usd``): a fork none of whose own cycles improved spent
    after it only what it spent itself (``inherited_usd``, its origin's, is not counted), and
    a ``windowed`` chart (a long run's newest checkpoints) that shows no improvement does not
    know the amount: the improvement is before the cycles drawn."""
    w, h, left, right, top, bottom = 640, 260, 48, 64, 24, 36
    pw, ph = w - left - right, h - top - bottom
    if not points:
        return Markup(
            '<svg class="chart" role="img" viewBox="0 0 640 60" width="640" height="60">'
            '<title>no concluded cycles yet</title><text x="10" y="35">no concluded cycles yet</text></svg>'
        )
    max_cycle = max(p.cycle for p in points)
    min_cycle = min(0, *(p.cycle for p in points))
    span = max(1, max_cycle - min_cycle)
    top_spend = max(total_cost, *(p.spent for p in points)) or 1.0

    def x(c: float) -> float:
        return left + (c - min_cycle) / span * pw

    def ys(v: float) -> float:
        return top + (1 - max(0.0, min(1.0, v))) * ph

    def yc(v: float) -> float:
        return top + (1 - v / top_spend) * ph

    parts = [
        f'<svg class="chart" role="img" aria-labelledby="chart-title" viewBox="0 0 {w} {h}" '
        f'width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">',
        '<title id="chart-title">Best score and cumulative spend per cycle</title>',
    ]
    improved = [p for p in points if p.improved]
    last = improved[-1] if improved else None
    shade_from = x(last.cycle) if last else x(min_cycle)
    shade_to = x(max_cycle)
    if shade_to > shade_from:
        if last is None and windowed:
            what = (
                "the last material improvement is before the cycles drawn (its spend after: "
                "loopwright metrics --per-run)"
            )
        else:
            after = max(0.0, total_cost - (last.spent if last else inherited_usd))
            what = f"spend after the last material improvement: ${after:.4f}"
        parts.append(
            f'<rect class="after" x="{shade_from:.1f}" y="{top}" width="{shade_to - shade_from:.1f}" '
            f'height="{ph}"><title>{what}</title></rect>'
        )
    parts.append(
        f'<line class="axis" x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}"/>'
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}"/>'
        f'<line class="axis" x1="{left + pw}" y1="{top}" x2="{left + pw}" y2="{top + ph}"/>'
    )
    for v in (0.0, 0.5, 1.0):
        parts.append(
            f'<text class="tick" x="{left - 6}" y="{ys(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>'
        )
    for v in (0.0, top_spend / 2, top_spend):
        parts.append(f'<text class="tick" x="{left + pw + 6}" y="{yc(v) + 4:.1f}">${v:.3f}</text>')
    step = max(1, span // 10)
    for c in range(min_cycle, max_cycle + 1, step):
        parts.append(
            f'<text class="tick" x="{x(c):.1f}" y="{top + ph + 16}" text-anchor="middle">{c}</text>'
        )
    parts.append(
        f'<text class="tick" x="{left + pw / 2:.1f}" y="{h - 4}" text-anchor="middle">cycle</text>'
    )
    series = per_pixel(
        [(min_cycle, 0.0, 0.0), *((p.cycle, p.best, p.spent) for p in points)], lambda t: x(t[0])
    )
    score_pts = " ".join(f"{x(c):.1f},{ys(b):.1f}" for c, b, _ in series)
    spend_pts = " ".join(f"{x(c):.1f},{yc(s):.1f}" for c, _, s in series)
    parts.append(f'<polyline class="score" points="{score_pts}"/>')
    parts.append(f'<polyline class="spend" points="{spend_pts}"/>')
    # A dot a cycle while they fit; past CHART_DOTS cycles, the material improvements and the
    # last cycle (one a pixel), so a run of thousands of cycles draws a chart of bounded size.
    dotted = points
    if len(points) > CHART_DOTS:
        keep = {id(p) for p in per_pixel([p for p in points if p.improved], lambda p: x(p.cycle))}
        dotted = [p for p in points if id(p) in keep or p is points[-1]]
    for p in dotted:
        parts.append(
            f'<circle class="score-dot" cx="{x(p.cycle):.1f}" cy="{ys(p.best):.1f}" r="3">'
            f"<title>cycle {p.cycle}: best {p.best:.3f}, spent ${p.spent:.4f}</title></circle>"
        )
    if last is not None:
        parts.append(
            f'<line class="mark" x1="{x(last.cycle):.1f}" y1="{top}" x2="{x(last.cycle):.1f}" y2="{top + ph}"/>'
            f'<text class="mark-label" x="{x(last.cycle) - 4:.1f}" y="{top + 12}" text-anchor="end">'
            f"last improvement (cycle {last.cycle})</text>"
        )
    parts.append(
        f'<text class="legend score-l" x="{left}" y="14">— best score</text>'
        f'<text class="legend spend-l" x="{left + 110}" y="14">— cumulative spend $</text>'
        f'<text class="legend after-l" x="{left + 270}" y="14">▮ spend after last improvement</text>'
    )
    parts.append("</svg>")
    return Markup("".join(parts))


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


def edits_view(events: list[Event]) -> list[dict[str, Any]]:
    """Who edited what, oldest first: the run's ``edited`` events (``Runtime.edit``)."""
    return [
        {
            "id": e.id,
            "ts": e.ts,
            "cycle": e.cycle,
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


def picture_digest(value: Any) -> str | None:
    """The digest of a picture part's blob (``/runs/{id}/blob/{digest}`` serves it), or None."""
    from ._pictures import is_picture

    return str(value["image"]) if is_picture(value) else None


def is_svg(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip()[:200].lower().startswith(("<svg", "<?xml"))


def stop_words(rec: RunRecord, approvals: list[Approval] | None = None) -> str:
    """The run's state or stop reason in plain words; given its ``approvals``, a run parked
    whose request was decided elsewhere (``decided_while_parked``) says it waits to be
    resumed."""
    if approvals is not None and decided_while_parked(rec, approvals) is not None:
        return "its request was decided; it waits to be resumed"
    if rec.stop_reason:
        try:
            return explain(rec.stop_reason, Contract.from_dict(rec.contract))
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


def next_action_here(rec: RunRecord, state: TaskState, approvals: list[Approval]) -> str:
    """What the person on the run page should do next, in the page's own terms (the CLI's
    advice names commands; here the buttons are on the page)."""
    if any(a.status == "pending" for a in approvals):
        return "Decide the request below: approve or deny it (you must be signed in)."
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
    advice = advice.replace("can be inspected with `loopwright show`", "is shown below")
    # an error's advice names the rollback and resume commands; here they are buttons
    advice = re.sub(
        r"`loopwright rollback \S+ --to-cycle (\d+) --by NAME`, then `loopwright resume \S+`",
        r"Roll back to a cycle below (cycle \1), resumed after",
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
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
        "ended_at": rec.ended_at,
        "cancel_requested": rec.cancel_requested,
        "held_out_passed": rec.held_out_passed,
        "forked_from": rec.forked_from,
        "forked_at": rec.forked_at,
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
