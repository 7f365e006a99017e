"""The run page's waterfall draws a long run's newest cycles from a window of the log read from
its end (``log_window``): the checkpoints of the window's commits are those written after the
cut's. Where a host's clock stepped back after the cut, they are not those *timed* after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("opentelemetry.sdk")
from test_trace_live_resume import TASK, _clock, _loop

import loopwright as lw
from loopwright.trace._spans import Span, build_spans
from loopwright.web import _waterfall


def _tree(spans: list[Span], keys: set[str]) -> dict[str, tuple[Any, ...]]:
    return {
        s.key: (s.start, s.end, s.status, s.incomplete, sorted(s.attributes.items(), key=str))
        for s in spans
        if s.key in keys
    }


@pytest.mark.parametrize("offset", [-3600, 3600], ids=["behind", "ahead"])
def test_the_windows_waterfall_is_the_whole_logs_where_a_clock_stepped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offset: float
) -> None:
    """Four cycles on one host, drained; four more on a host an hour behind (or ahead). The
    page's window (the last two cycles) draws them as the whole log's tree does, attributes
    read from their checkpoints (cost, verdicts) included: the window's checkpoints are those
    after the cut's commit, not those timed after it."""
    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        r = rt.run_sync(_loop(8, lambda c: rt.drain() if c == 4 else None), TASK)
    with _clock(offset), lw.Runtime(db) as rt:
        r = rt.resume_sync(r.run_id, _loop(8))
    assert (r.cycles, r.stop_reason) == (8, "budget_cycles")
    drawn: list[list[Span]] = []
    real = _waterfall.waterfall_rows

    def rows(spans: Any, **kw: Any) -> Any:
        drawn.append(list(spans))
        return real(spans, **kw)

    monkeypatch.setattr(_waterfall, "waterfall_rows", rows)
    with lw.Runtime(db) as rt:
        st = rt.store
        rec = st.get_run(r.run_id)
        events = st.events(r.run_id)
        approvals = st.approvals(run_id=r.run_id)
        win = _waterfall.log_window(st, r.run_id, 2, len(events))
        assert win.after_ts is not None and len(win.events) < len(events)  # a window
        # as the run page passes them: its newest checkpoints (here every one)
        _waterfall.waterfall_html(
            rec, events, st.checkpoints(r.run_id), approvals, window=win, cycles_total=8
        )
        whole = build_spans(rec, events, st.checkpoints(r.run_id), approvals)
    keys = {s.key for s in drawn[0] if s.kind != "run"}
    assert {"cycle/7#1", "cycle/8#1"} <= keys
    assert any("cost" in k for s in whole if s.key in keys for k in s.attributes)
    assert _tree(drawn[0], keys) == _tree(whole, keys)
