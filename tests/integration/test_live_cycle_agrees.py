"""polish54: `loopwright run`'s live table showed the cycles a run had concluded under the
heading ``cycle``: 2 for a run parked in cycle 3, while `approvals` said "cycle 3", and 0 for
a run interrupted in its cycle 1. It shows the cycle a run is in, as `approvals` does."""

from __future__ import annotations

import io

from rich.console import Console
from test_pause_surface import _parked_on_risk

import loopwright as lw
from loopwright.cli._live import LiveView


def _row(view: LiveView, task_key: str) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(view.render())
    [line] = [x for x in out.getvalue().splitlines() if x.split()[:1] == [task_key]]
    return line.split()


def test_a_parked_run_shows_the_cycle_approvals_names(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    rid = _parked_on_risk(url)
    with lw.Runtime(url) as rt:
        rec = rt.store.get_run(rid)
        [req] = rt.store.approvals(run_id=rid)
        ended = rt.run_sync(*_accepting(), task_key="done")
        done = rt.store.get_run(ended.run_id)
    view = LiveView(2, "t")
    view.update(rec)
    view.update(done)
    assert _row(view, "k")[1] == str(req.cycle) == "2", (req.cycle, _row(view, "k"))
    # an ended run: its last cycle, as `runs` counts them
    assert _row(view, "done")[1] == str(done.cycle) == str(ended.cycles)
    # a run under way in its first cycle (none concluded yet) is in cycle 1, not 0
    view.update(_as(rec, status="running", cycle=0))
    assert _row(view, "k")[1] == "1"
    view.update(_as(rec, status="pending", cycle=0))  # not started
    assert _row(view, "k")[1] == "-"


def _accepting() -> tuple[lw.Loop, dict[str, object]]:
    from doc_loop import TASK
    from test_engine_core import make_loop

    return make_loop(), TASK


def _as(rec: lw.store.RunRecord, **kw: object) -> lw.store.RunRecord:
    from dataclasses import replace

    return replace(rec, **kw)  # type: ignore[arg-type]
