"""The live view while runs progress: per run cycle, best score, spend and status."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table

from .._contract import TERMINAL_STATUSES
from .._money_text import usd, usd_digits
from ..store import RunRecord
from ._render import status_text

__all__ = ["LiveView", "cycle_in"]

_ROWS = 12  # beyond this many runs, show the active ones and a progress bar


def cycle_in(r: RunRecord) -> str:
    """The cycle a run is in, as `approvals` names a parked run's ("cycle 3") and the timeline
    numbers them (from 1): a run under way or parked is in the cycle after those concluded
    (``RunRecord.cycle``); an ended one shows its last concluded; one not started, ``-``. The
    live table showed the count concluded: 0 for a run interrupted in its cycle 1, 2 for one
    parked in cycle 3 (polish54)."""
    if r.status in TERMINAL_STATUSES:
        return str(r.cycle)
    if r.status == "pending" and r.cycle == 0:
        return "-"
    return str(r.cycle + 1)


class LiveView:
    def __init__(self, total: int, title: str) -> None:
        self.total = total
        self.title = title
        self.runs: dict[str, RunRecord] = {}
        self.live: Any = None

    def update(self, rec: RunRecord) -> None:
        self.runs[rec.run_id] = rec
        if self.live is not None:
            self.live.update(self.render())

    def render(self) -> Group:
        ended = sum(1 for r in self.runs.values() if r.status in TERMINAL_STATUSES)
        parked = sum(1 for r in self.runs.values() if r.status == "awaiting_approval")
        spend = sum(r.cost_usd for r in self.runs.values())
        head = Table.grid(padding=(0, 1))
        head.add_row(
            f"[bold]{escape(self.title)}[/]",
            ProgressBar(total=max(1, self.total), completed=ended + parked, width=30),
            f"{ended} ended, {parked} awaiting approval, {usd(spend)} spent",
        )
        rows = sorted(self.runs.values(), key=lambda r: (r.status in TERMINAL_STATUSES, r.task_key))
        t = Table(box=None, pad_edge=False)
        for col in ("task", "cycle", "best", "spend $", "status"):
            t.add_column(col)
        for r in rows[:_ROWS]:
            best = "-" if r.best_score is None else f"{r.best_score:.2f}"
            t.add_row(
                escape(r.task_key),
                cycle_in(r),
                best,
                usd_digits(r.cost_usd),
                status_text(r.status),
            )
        if len(rows) > _ROWS:
            t.add_row(f"… {len(rows) - _ROWS} more", "", "", "", "")
        return Group(head, t)
