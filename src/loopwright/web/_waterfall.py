"""Time and calls on the run page: the span waterfall and each model call's detail.

The waterfall is the run's span tree from ``trace.build_spans`` — the model the OTLP export
and live tracing use, so the page, ``trace --format otlp-json`` and a collector show the same
spans, times, tokens and costs — drawn here as inline SVG: one row per span (run → cycle →
actor / verifiers → model calls, effects, approval waits), a bar at its start and proportional
to its duration, and its latency, tokens and cost. Every text is escaped here (span names hold
loop, verifier, effect and model names, which users and models choose); nothing is scripted,
so the dashboard's Content-Security-Policy stays as it is. A model-call row links to
``/runs/{id}/calls/{event id}``: the prompt and raw reply the adapter recorded (masked and cut
to size when stored, ``loopwright._modelcalls``), model, tokens, cost and latency; ``/api``
serves the same.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from markupsafe import Markup, escape

from .._errors import RunNotFoundError
from .._modelcalls import MODEL_CALL
from .._money_text import usd
from ..store import Approval, Checkpoint, Event, RunRecord, Store
from ..store._rows import SQL_INT_MAX
from ..trace._spans import APPROVAL_KINDS, Span, build_spans, iter_spans
from ..trace._window import read_window
from ._run_json import CHUNK_CHARS, dump
from ._values import reveal

__all__ = [
    "MAX_CYCLES",
    "Row",
    "call_detail",
    "call_summary",
    "duration",
    "install_waterfall",
    "iter_waterfall_rows",
    "span_rows_json",
    "waterfall_html",
    "waterfall_rows",
    "waterfall_svg",
]

MAX_CYCLES = 30
"""Cycles drawn on the page (the last ones); ``/api/runs/{id}/spans`` has them all."""

# Geometry of the drawing, in SVG user units.
_WIDTH, _LABEL_W, _NUM_W, _ROW_H, _TOP = 1100, 300, 210, 20, 24
_BAR_W = _WIDTH - _LABEL_W - _NUM_W - 16
_MIN_BAR = 1.0  # an instant still shows


@dataclass(frozen=True, slots=True)
class Row:
    """One span as the waterfall draws it; times in seconds from the run's start."""

    key: str
    kind: str
    label: str
    depth: int
    offset_s: float
    seconds: float
    at: float
    status: str
    incomplete: bool
    tokens: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    model: str | None
    call_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


def duration(seconds: float | None) -> str:
    """``0.5 ms``, ``120 ms``, ``2.35 s``, ``3 min 4 s``, ``2 h 5 min``."""
    if seconds is None:
        return "-"
    s = max(0.0, float(seconds))
    if s < 0.01:
        return f"{s * 1000:.1f} ms"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.2f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def _label(s: Span) -> str:
    a = s.attributes
    if s.kind == "cycle":
        return f"cycle {a.get('loopwright.cycle')} · {_clock(s.start)}"
    if s.kind == "actor":
        return "actor"
    if s.kind == "verifier":
        held = " · held out" if a.get("loopwright.verifier.held_out") else ""
        return f"verifier {a.get('loopwright.verifier.name')}{held}"
    if s.kind == "model":
        attempt = a.get("loopwright.attempt")
        return f"{s.name}" + (f" · attempt {attempt}" if attempt else "")
    if s.kind == "effect":
        return f"effect {a.get('gen_ai.tool.name')} · {a.get('loopwright.effect.status')}"
    if s.kind == "approval":
        return (
            f"approval {a.get('loopwright.approval.kind')} · {a.get('loopwright.approval.status')}"
        )
    return s.name


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def waterfall_rows(spans: Sequence[Span], *, max_cycles: int | None = MAX_CYCLES) -> list[Row]:
    """The spans in drawing order (each followed by its children, depth first), of the last
    ``max_cycles`` cycles (``None``: all) and whatever belongs to the run itself."""
    if not spans:
        return []
    root = spans[0]
    children: dict[str | None, list[Span]] = {}
    for s in spans[1:]:
        children.setdefault(s.parent, []).append(s)
    top = children.get(root.key, [])
    cycles = [s for s in top if s.kind == "cycle"]
    if max_cycles is not None and len(cycles) > max_cycles:
        hidden = {s.key for s in cycles[: len(cycles) - max_cycles]}
        top = [s for s in top if s.key not in hidden]
    rows: list[Row] = []
    origin = root.start

    def visit(s: Span, depth: int) -> None:
        rows.append(_row(s, depth, origin))
        for c in children.get(s.key, []) if s is not root else top:
            visit(c, depth + 1)

    visit(root, 0)
    return rows


def _row(s: Span, depth: int, origin: float) -> Row:
    """``s`` as a row at ``depth``, its times from ``origin`` (the run's start)."""
    a = s.attributes
    tin, tout = (
        _int(a.get("gen_ai.usage.input_tokens")),
        _int(a.get("gen_ai.usage.output_tokens")),
    )
    total = _int(a.get("loopwright.usage.total_tokens"))
    if total is None and (tin is not None or tout is not None):
        total = (tin or 0) + (tout or 0)
    cost = a.get("loopwright.cost_usd")
    return Row(
        key=s.key,
        kind=s.kind,
        label=_label(s),
        depth=depth,
        offset_s=max(0.0, s.start - origin),
        seconds=max(0.0, s.end - s.start),
        at=s.start,
        status=s.status,
        incomplete=s.incomplete,
        tokens=total,
        input_tokens=tin,
        output_tokens=tout,
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        model=str(a["gen_ai.request.model"]) if a.get("gen_ai.request.model") else None,
        call_id=_int(a.get("loopwright.call.id")) if s.kind == "model" else None,
    )


def iter_waterfall_rows(spans: Iterable[Span], origin: float) -> Iterator[Row]:
    """``waterfall_rows(..., max_cycles=None)`` of a tree given as ``trace.iter_spans`` gives
    it — each subtree of the run span whole, parents first, **the run span last** — in the
    same order but for the run span's row, which comes last here too (its end is known
    last): each subtree's rows as soon as it is read. ``origin``: the run span's start (the
    run's creation), the rows' times are from it."""
    group: list[Span] = []
    keys: set[str] = set()

    def rows_of(group: list[Span], keys: set[str], origin: float) -> Iterator[Row]:
        children: dict[str | None, list[Span]] = {}
        for s in group:
            children.setdefault(s.parent, []).append(s)

        def visit(s: Span, depth: int) -> Iterator[Row]:
            yield _row(s, depth, origin)
            for c in children.get(s.key, []):
                yield from visit(c, depth + 1)

        for s in group:
            if s.parent not in keys:
                yield from visit(s, 1)

    for s in spans:
        if s.parent is None:  # the run span: every subtree has come
            if group:
                yield from rows_of(group, keys, origin)
            yield _row(s, 0, origin)
            return
        if s.parent not in keys and group:
            yield from rows_of(group, keys, origin)
            group, keys = [], set()
        group.append(s)
        keys.add(s.key)


def _figures(r: Row) -> str:
    out = [duration(r.seconds)]
    if r.tokens:
        out.append(f"{r.tokens:,} tok")
    if r.cost_usd:
        out.append(usd(r.cost_usd))
    return " · ".join(out)


def _tip(r: Row) -> str:
    bits = [r.label, f"starts +{duration(r.offset_s)}", f"lasts {duration(r.seconds)}"]
    if r.input_tokens is not None or r.output_tokens is not None:
        bits.append(f"tokens in {r.input_tokens or 0:,} / out {r.output_tokens or 0:,}")
    elif r.tokens:
        bits.append(f"{r.tokens:,} tokens")
    if r.cost_usd is not None:
        bits.append(f"cost ${r.cost_usd:.6f}")
    if r.status == "error":
        bits.append("failed")
    if r.incomplete:
        bits.append("still open")
    return "; ".join(bits)


def waterfall_svg(rows: Sequence[Row], run_id: str) -> Markup:
    """``rows`` as an inline SVG (no script, every text escaped); model calls link to their
    detail page."""
    if not rows:
        return Markup('<p class="muted">No spans yet.</p>')
    total = max([r.offset_s + r.seconds for r in rows] + [1e-3])
    h = _TOP + len(rows) * _ROW_H + 8
    x0 = _LABEL_W
    parts = [
        f'<svg class="waterfall" role="img" aria-labelledby="wf-title" viewBox="0 0 {_WIDTH} {h}" '
        f'width="{_WIDTH}" height="{h}" xmlns="http://www.w3.org/2000/svg">',
        '<title id="wf-title">Spans of the run: when each started, how long it took, its tokens '
        "and cost</title>",
    ]
    for i in range(5):  # the time axis: 0, ¼, ½, ¾, all of it
        x = x0 + _BAR_W * i / 4
        parts.append(
            f'<line class="wf-grid" x1="{x:.1f}" y1="{_TOP - 6}" x2="{x:.1f}" y2="{h - 4}"/>'
            f'<text class="wf-tick" x="{x:.1f}" y="{_TOP - 10}" text-anchor="middle">'
            f"+{escape(duration(total * i / 4))}</text>"
        )
    for i, r in enumerate(rows):
        y = _TOP + i * _ROW_H
        x = x0 + r.offset_s / total * _BAR_W
        w = max(_MIN_BAR, r.seconds / total * _BAR_W)
        w = min(w, x0 + _BAR_W - x + _MIN_BAR)
        cls = f"wf-row wf-{r.kind}" + (" wf-error" if r.status == "error" else "")
        cls += " wf-open" if r.incomplete else ""
        row = (
            f'<g class="{cls}" data-key="{escape(r.key)}" data-kind="{r.kind}" '
            f'data-seconds="{r.seconds:.6f}">'
            f"<title>{escape(reveal(_tip(r)))}</title>"
            f'<rect class="wf-band" x="0" y="{y}" width="{_WIDTH}" height="{_ROW_H}"/>'
            f'<text class="wf-label" x="{6 + 12 * r.depth}" y="{y + 14}">'
            f"{escape(reveal(_clip(r.label, 40 - 2 * r.depth)))}</text>"
            f'<rect class="wf-bar" x="{x:.2f}" y="{y + 4}" width="{w:.2f}" height="{_ROW_H - 8}"/>'
            f'<text class="wf-num" x="{_WIDTH - 6}" y="{y + 14}" text-anchor="end">'
            f"{escape(_figures(r))}</text></g>"
        )
        if r.call_id is not None:
            href = f"/runs/{escape(run_id)}/calls/{r.call_id}"
            row = f'<a class="wf-link" href="{href}">{row}</a>'
        parts.append(row)
    parts.append("</svg>")
    return Markup("".join(parts))


def _clip(text: str, limit: int) -> str:
    limit = max(limit, 12)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class LogWindow:
    """The end of a run's log from just after a ``decision`` with ``cycles`` cycles started
    after it (``build_spans``' window, as the live tracer reads one): ``events`` start at
    position ``first_seq``, after an event at ``after_ts`` (``None``: the whole log)."""

    events: list[Event]
    first_seq: int = 1
    after_ts: float | None = None
    occurrences: dict[int, int] | None = None
    #: the cycle of the ``decision`` the window starts after (its commit's checkpoint is the
    #: last before the window's: ``LogWindow.checkpoints``)
    cut_cycle: int | None = None

    def checkpoints(self, checkpoints: Sequence[Checkpoint]) -> list[Checkpoint] | None:
        """Of ``checkpoints`` (a run's, oldest first), those the window's commits wrote: the
        ones after the cut's commit's (the last whose time is the cut's, a tag matched, and
        whose record concludes the cut's cycle). By order, not time: a host's clock may have
        stepped back after the cut. ``None`` when the cut's commit is not among them, or the
        window is the whole log (it has no cut)."""
        if self.after_ts is None:
            return None
        at = None
        for i, c in enumerate(checkpoints):
            rec = c.record
            if (
                c.created_at == self.after_ts
                and rec is not None
                and "proposal" in rec
                and rec.get("cycle") == self.cut_cycle
            ):
                at = i
        return None if at is None else list(checkpoints[at + 1 :])


#: Events read at first, and at most, at a time when the page reads the log from its end.
_TAIL_PAGE = (64, 1024)


def log_window(store: Store, run_id: str, cycles: int, total: int) -> LogWindow:
    """The log from the last ``decision`` before the newest ``cycles`` cycle starts on, read
    backwards a page at a time (``read_window``, as the live tracer reads its window): what
    draws the last ``cycles`` cycles, the same spans as the whole log's tree (nothing of a
    cycle before the cut is in the window). ``total``: how many events the log holds (its
    positions). The whole log when there is no such place."""
    read = read_window(store, run_id, page=_TAIL_PAGE, cycles=cycles)
    window, cut = read.events, read.cut
    if cut is None:
        return LogWindow(window)
    again = {e.cycle for e in window if e.kind == "cycle_started"}
    first_id = window[0].id if window else cut.id + 1
    return LogWindow(
        window,
        first_seq=total - len(window) + 1,
        after_ts=cut.ts,
        occurrences=store.cycle_starts(run_id, before_id=first_id, cycles=again),
        cut_cycle=cut.cycle,
    )


def waterfall_html(
    rec: RunRecord,
    events: Sequence[Event],
    checkpoints: Sequence[Checkpoint],
    approvals: Sequence[Approval],
    *,
    window: LogWindow | None = None,
    cycles_total: int | None = None,
    read_all: Callable[[], Sequence[Checkpoint]] | None = None,
) -> Markup:
    """The run page's section: the SVG, and a line saying what is left out. ``window``: the
    log's end read by ``log_window`` (then ``events`` is ignored and ``checkpoints`` need
    only cover it), of a run with ``cycles_total`` cycle starts in all. ``read_all``: the
    run's every checkpoint, read when ``checkpoints`` (the newest) may not cover the window:
    there is none, or the cut's commit is not among them."""
    own = None if window is None else window.checkpoints(checkpoints)
    if own is None and read_all is not None:
        # the drawn cycles may reach before the checkpoints given (the cut's commit is not
        # among them: found by order, a host's clock may have stepped back since)
        checkpoints = read_all()
        own = None if window is None else window.checkpoints(checkpoints)
    if window is not None and window.after_ts is not None:
        cut = window.after_ts
        # the requests the window's events name (as the live tracer passes them): one made
        # before it would be drawn on the run's own row
        named = {str(e.data.get("approval_id")) for e in window.events if e.kind in APPROVAL_KINDS}
        # the window's commits' (those timed after the cut where the cut's is not found)
        spans = build_spans(
            rec,
            window.events,
            [c for c in checkpoints if c.created_at > cut] if own is None else own,
            [a for a in approvals if a.approval_id in named],
            first_seq=window.first_seq,
            after_ts=cut,
            occurrences=window.occurrences,
        )
    else:
        spans = build_spans(rec, window.events if window else events, checkpoints, approvals)
    rows = waterfall_rows(spans)
    cycles = sum(1 for s in spans if s.kind == "cycle")
    if window is not None and cycles_total is not None:
        cycles = max(cycles, cycles_total)
    calls = sum(1 for s in spans if s.kind == "model")
    note = (
        f"The last {MAX_CYCLES} of {cycles} cycles; every span in "
        f'<a href="/api/runs/{escape(rec.run_id)}/spans">the API</a>. '
        if cycles > MAX_CYCLES
        else ""
    )
    note += (
        "Open a model call for its prompt and reply."
        if calls
        else "No model calls were recorded (the actor and verifiers are plain functions)."
    )
    return Markup(
        f'<figure class="waterfall">{waterfall_svg(rows, rec.run_id)}'
        f'<figcaption class="muted">Times from the run\'s start (cycle rows show the UTC '
        f"time). {note}</figcaption></figure>"
    )


# --- model calls ------------------------------------------------------------------------------
_SUMMARY_FIELDS = (
    "scope",
    "attempt",
    "outcome",
    "model",
    "response_model",
    "provider",
    "server",
    "started_at",
    "seconds",
    "first_token_s",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "priced_by",
    "finish_reason",
    "http_status",
    "error",
    "repair",
    "streamed",
    "prompt_chars",
    "reply_chars",
    "truncated",
)


def call_summary(ev: Event) -> dict[str, Any]:
    """A recorded model call without its prompt and reply."""
    d = ev.data
    out: dict[str, Any] = {"id": ev.id, "cycle": ev.cycle}
    out.update({k: d.get(k) for k in _SUMMARY_FIELDS})
    return out


def call_detail(ev: Event) -> dict[str, Any]:
    """A recorded model call with the prompt (``[{"role", "content"}]``) and raw reply."""
    return {
        **call_summary(ev),
        "prompt": ev.data.get("prompt") or [],
        "reply": ev.data.get("reply"),
    }


def _model_call(store: Store, run_id: str, call_id: int) -> tuple[RunRecord, Event]:
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    # the one event at or before the id (not every event after it: a call of a long run's
    # first cycle read the whole log)
    # (an id past the databases' bigint names no event: asked, it failed the request with 500)
    found = (
        store.events_tail(rec.run_id, before_id=call_id + 1, limit=1)
        if 0 < call_id < SQL_INT_MAX
        else []
    )
    if not found or found[0].id != call_id or found[0].kind != MODEL_CALL:
        raise HTTPException(404, f"run {rec.run_id[:12]} has no model call {call_id}")
    return rec, found[0]


Page = Callable[..., HTMLResponse]


def install_waterfall(app: FastAPI, store: Store, page: Page) -> None:
    """Add the call-detail page and the ``/api`` routes for calls and spans to ``app``."""

    @app.get("/runs/{run_id}/calls/{call_id}", response_class=HTMLResponse, include_in_schema=False)
    def call_page(request: Request, run_id: str, call_id: int) -> HTMLResponse:
        rec, ev = _model_call(store, run_id, call_id)
        return page(request, "call.html", rec=rec, call=call_detail(ev), duration=duration)

    @app.get("/api/runs/{run_id}/calls", tags=["runs"])
    def api_calls(run_id: str, cycle: int | None = None) -> list[dict[str, Any]]:
        """The run's recorded model calls (of one ``cycle`` if given), oldest first: model,
        tokens, cost, start and latency, attempt and how it ended (``ok``, ``retry``,
        ``gave_up``); the prompt and reply are in ``/api/runs/{run_id}/calls/{id}``."""
        try:
            rec = store.get_run(run_id)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        return [  # the log a page at a time: a long run's events are not all held at once
            call_summary(e)
            for e in store.iter_events(rec.run_id)
            if e.kind == MODEL_CALL and (cycle is None or e.cycle == cycle)
        ]

    @app.get("/api/runs/{run_id}/calls/{call_id}", tags=["runs"])
    def api_call(run_id: str, call_id: int) -> dict[str, Any]:
        """One model call with the prompt and raw reply the adapter recorded (secrets
        masked, cut to size with a marker)."""
        return call_detail(_model_call(store, run_id, call_id)[1])

    @app.get("/api/runs/{run_id}/spans", tags=["runs"], response_class=JSONResponse)
    def api_spans(run_id: str) -> Response:
        """The run's spans as the waterfall draws them (every cycle): kind, label, depth,
        start (seconds from the run's start, and UTC), duration, tokens, cost, status and the
        model call's id. Built a cycle at a time from the log read in pages
        (``trace.iter_spans``), not the run's whole tree: the run's own row comes first but is
        known last, so the others wait in a temporary file (on disk past 256 KB)."""
        try:
            rec = store.get_run(run_id)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        return StreamingResponse(span_rows_json(store, rec), media_type="application/json")


def span_rows_json(store: Store, rec: RunRecord) -> Iterator[str]:
    """``/api/runs/{id}/spans``: the JSON of every row (``waterfall_rows(..., max_cycles=None)``),
    the bytes ``JSONResponse`` wrote of the list, from ``trace.iter_spans``."""
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_CHARS, mode="w+", encoding="utf-8") as f:
        last: Row | None = None
        for row in iter_waterfall_rows(iter_spans(store, rec), rec.created_at):
            if last is not None:
                f.write("," + dump(last.to_dict()))
            last = row
        assert last is not None and last.depth == 0  # the run span, last
        yield "[" + dump(last.to_dict())
        f.seek(0)
        while chunk := f.read(CHUNK_CHARS):
            yield chunk
    yield "]"


SPOOL_CHARS = 256 * 1024  # a run's span rows kept in memory up to this, then on disk
