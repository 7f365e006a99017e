"""What the pages show, built from store records: timeline rows, artifacts with diffs, the chart.

Everything here returns plain data; the templates escape it. The one exception is the chart,
an SVG generated here from numbers and fixed labels only (no user or model text).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from .._contract import Contract
from .._packet import explain
from .._state import TaskState
from ..store import Checkpoint, RunRecord

__all__ = ["ChartPoint", "artifacts_view", "chart_points", "chart_svg", "stop_words", "timeline"]


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


def timeline(checkpoints: list[Checkpoint]) -> list[dict[str, Any]]:
    """One row per concluded or parked cycle, oldest first."""
    rows: list[dict[str, Any]] = []
    for ck in checkpoints:
        rec = ck.record
        if not rec:
            continue
        if "proposal" not in rec:
            if rec.get("decision") == "parked":
                rows.append(
                    {
                        "cycle": rec.get("cycle"),
                        "parked": True,
                        "held_out": _verdicts(rec.get("held_out")),
                    }
                )
            continue
        prop = rec["proposal"] or {}
        edits = [
            {
                "ref": f"{e.get('artifact')}/{e.get('part')}",
                "value": short(e.get("value"), 80),
                "svg": is_svg(e.get("value")),  # a drawn panel: shown as a thumbnail
            }
            for e in prop.get("edits") or ()
        ]
        usage = rec.get("usage") or {}
        rows.append(
            {
                "cycle": rec.get("cycle"),
                "parked": False,
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
        )
    return rows


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
        rec = ck.record
        if not rec or "proposal" not in rec:
            continue
        spent = (ck.state.get("spent") or {}).get("cost_usd") or 0.0
        best = ck.state.get("best_score")
        cycle = int(rec.get("cycle") or ck.cycle)
        by_cycle[cycle] = ChartPoint(
            cycle, float(best or 0.0), float(spent), bool(rec.get("improved"))
        )
    return [by_cycle[c] for c in sorted(by_cycle)]


def chart_svg(points: list[ChartPoint], total_cost: float) -> Markup:
    """Best score (left axis, 0–1) and cumulative spend (right axis) per cycle; the last
    material improvement is marked and the spend after it shaded."""
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
        parts.append(
            f'<rect class="after" x="{shade_from:.1f}" y="{top}" width="{shade_to - shade_from:.1f}" '
            f'height="{ph}"><title>spend after the last material improvement: '
            f"${max(0.0, total_cost - (last.spent if last else 0.0)):.4f}</title></rect>"
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
    series = [(min_cycle, 0.0, 0.0), *((p.cycle, p.best, p.spent) for p in points)]
    score_pts = " ".join(f"{x(c):.1f},{ys(b):.1f}" for c, b, _ in series)
    spend_pts = " ".join(f"{x(c):.1f},{yc(s):.1f}" for c, _, s in series)
    parts.append(f'<polyline class="score" points="{score_pts}"/>')
    parts.append(f'<polyline class="spend" points="{spend_pts}"/>')
    for p in points:
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


def artifacts_view(state: TaskState) -> list[PartView]:
    """Every part with its versions (accepted marked) and the diff of each to the one before."""
    out = []
    for ref, part in state.iter_parts():
        pv = PartView(ref, part.status)
        prev: Any = None
        for i, v in enumerate(part.versions):
            diff = ""
            if i:
                diff = "\n".join(
                    difflib.unified_diff(
                        _render(prev), _render(v.value), f"v{i}", f"v{i + 1}", lineterm="", n=1
                    )
                )
            pv.versions.append(
                {
                    "n": v.n,
                    "cycle": v.cycle,
                    "status": v.status,
                    "value": short(v.value, 200),
                    "diff": diff,
                    # An SVG part (a drawn panel) is shown as a picture, through /runs/…/svg.
                    "svg": is_svg(v.value),
                }
            )
            prev = v.value
        out.append(pv)
    return out


def is_svg(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip()[:200].lower().startswith(("<svg", "<?xml"))


def stop_words(rec: RunRecord) -> str:
    """The run's state or stop reason in plain words."""
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


def esc(text: str) -> Markup:
    return escape(text)
