"""A run's chart: best score and cumulative spend per cycle, drawn as an SVG from numbers and
fixed labels only (no user or model text), a point a pixel column for a long run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from markupsafe import Markup

from .._money_text import usd
from ..store import Checkpoint

__all__ = ["CHART_DOTS", "ChartPoint", "chart_point", "chart_points", "chart_svg", "per_pixel"]


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
            what = f"spend after the last material improvement: {usd(after)}"
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
            f"<title>cycle {p.cycle}: best {p.best:.3f}, spent {usd(p.spent)}</title></circle>"
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
