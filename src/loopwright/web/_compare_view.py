"""Two runs side by side (``/compare?a=&b=``, ``/api/compare``): contract, cycles, the score
curve of both (an SVG drawn here from numbers only), spend, why each stopped, and the final
artifacts with a diff. The data is ``loopwright._compare.compare_runs`` (``loopwright diff``)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from .._compare import compare_runs, flatten
from .._errors import LoopwrightError, RunNotFoundError
from .._stored_run_words import over_budget_words
from ..store import Store
from ._cards import compact, image_kind
from ._views import CHART_DOTS, per_pixel, stop_cause_of, stop_words

__all__ = ["compare_doc", "part_diff", "register_compare", "score_curves_svg"]


def _lines(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.splitlines() or [""]
    return json.dumps(value, indent=1, sort_keys=True, default=str, ensure_ascii=False).splitlines()


def part_diff(a: Any, b: Any, name_a: str = "A", name_b: str = "B") -> str:
    """A unified diff of two final values (text as lines, anything else as indented JSON)."""
    la = [] if a is None else _lines(a)
    lb = [] if b is None else _lines(b)
    return "\n".join(difflib.unified_diff(la, lb, name_a, name_b, lineterm="", n=2))


SCORES_SHOWN = 200  # cycles listed as numbers under the comparison's chart


def score_curves_svg(curve: list[dict[str, Any]], w: int = 640, h: int = 170) -> Markup:
    """Score per cycle of run A (solid) and run B (dashed) on one 0–1 axis; only numbers and
    fixed labels go into the markup."""
    left, right, top, bottom = 36, 12, 12, 26
    pw, ph = w - left - right, h - top - bottom
    cycles = [int(c["cycle"]) for c in curve]
    if not cycles:
        return Markup(
            f'<svg class="sparkline" role="img" viewBox="0 0 {w} 40" width="{w}" height="40">'
            '<text x="8" y="24">no concluded cycles</text></svg>'
        )
    lo, hi = min(0, *cycles), max(cycles)
    span = max(1, hi - lo)

    def x(c: float) -> float:
        return left + (c - lo) / span * pw

    def y(v: float) -> float:
        return top + (1 - max(0.0, min(1.0, v))) * ph

    out = [
        f'<svg class="sparkline" role="img" aria-label="score per cycle of both runs" '
        f'viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">',
        f'<line class="axis" x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}"/>',
    ]
    for v in (0.0, 0.5, 1.0):
        out.append(
            f'<text class="tick" x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>'
        )
    out.append(f'<text class="tick" x="{x(lo):.1f}" y="{h - 8}" text-anchor="middle">{lo}</text>')
    out.append(f'<text class="tick" x="{x(hi):.1f}" y="{h - 8}" text-anchor="middle">{hi}</text>')
    for side, cls in (("a", "run-a"), ("b", "run-b")):
        pts = [(int(c["cycle"]), float(c[side])) for c in curve if c.get(side) is not None]
        if not pts:
            continue
        # A point a pixel, and a dot a cycle only while they fit: two runs of thousands of
        # cycles drew 1 MB of circles.
        line = " ".join(f"{x(c):.1f},{y(v):.1f}" for c, v in per_pixel(pts, lambda p: x(p[0])))
        out.append(f'<polyline class="{cls}" data-run="{side}" points="{line}"/>')
        for c, v in pts if len(pts) <= CHART_DOTS else ():
            out.append(
                f'<circle class="{cls}" cx="{x(c):.1f}" cy="{y(v):.1f}" r="2.5">'
                f"<title>run {side.upper()} cycle {c}: {v:.3f}</title></circle>"
            )
    out.append(
        f'<text class="legend run-a" x="{left + 8}" y="{top + 10}">— A</text>'
        f'<text class="legend run-b" x="{left + 48}" y="{top + 10}">- - B</text></svg>'
    )
    return Markup("".join(out))


def compare_doc(store: Store, a: str, b: str) -> dict[str, Any]:
    """``compare_runs`` with each side's stop cause in words, the whole contracts side by side
    and a diff per final part; a missing run is 404, any other mistake 400."""
    try:
        doc = compare_runs(store, a, b)
        recs = store.get_run(a), store.get_run(b)
    except RunNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    except LoopwrightError as exc:
        raise HTTPException(400, str(exc)) from exc
    for side, rec in zip(("a", "b"), recs, strict=True):
        doc[side].update(
            stop_cause=stop_cause_of(rec),
            stop_words=stop_words(rec),
            project=rec.project,
            created_at=rec.created_at,
            ended_at=rec.ended_at,
            # what a starred spend cell says (None within its budgets: over56b)
            over_budget_words=over_budget_words(rec),
        )
    ca, cb = flatten(recs[0].contract), flatten(recs[1].contract)
    doc["contract_rows"] = [
        {"key": k, "a": ca.get(k), "b": cb.get(k), "differs": ca.get(k) != cb.get(k)}
        for k in sorted({*ca, *cb})
    ]
    for p in doc["parts"]:
        va = p["a"]["value"] if p["a"] else None
        vb = p["b"]["value"] if p["b"] else None
        kind = image_kind(va) or image_kind(vb)
        p["image"] = kind
        p["diff"] = "" if p["same"] or kind else part_diff(va, vb)
        p["shown"] = compact(va) if p["same"] else ""
    return doc


def register_compare(app: FastAPI, store: Store, page: Callable[..., HTMLResponse]) -> None:
    def pick(a: str, b: str, run: list[str]) -> tuple[str, str]:
        if a and b:
            return a, b
        chosen = [r for r in run if r] + [x for x in (a, b) if x]
        if len(chosen) != 2:
            raise HTTPException(400, f"pick exactly two runs to compare ({len(chosen)} given)")
        return chosen[0], chosen[1]

    @app.get("/compare", response_class=HTMLResponse, include_in_schema=False)
    def compare_page(
        request: Request,
        a: str = "",
        b: str = "",
        run: list[str] = Query([]),  # noqa: B008
    ) -> HTMLResponse:
        ra, rb = pick(a, b, run)
        doc = compare_doc(store, ra, rb)
        curve = score_curves_svg(doc["scores"])
        # The newest cycles as numbers (every one in /api/compare), as a run page's timeline.
        scores_total = len(doc["scores"])
        doc["scores"] = doc["scores"][-SCORES_SHOWN:]
        return page(request, "compare.html", d=doc, curve=curve, scores_total=scores_total)

    @app.get("/api/compare", tags=["runs"])
    def api_compare(a: str, b: str) -> dict[str, Any]:
        """Two runs side by side (id, prefix or task key): ``a``, ``b`` (status, stop reason
        and cause, cycles, best score, spend), ``contract`` (the keys that differ),
        ``contract_rows`` (every key), ``scores`` (score per cycle of each), ``parts`` (each
        final part of both, whether the same, and a unified diff)."""
        return compare_doc(store, a, b)
