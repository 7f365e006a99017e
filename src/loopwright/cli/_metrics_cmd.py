"""`loopwright metrics`: outcome metrics over runs (docs/metrics.md), thin over ``compute_metrics``."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Annotated

import typer

from .._errors import ConfigError
from .._money_text import usd, usd_digits
from ._app import JsonOpt, StoreOpt, app, as_options, print_json
from ._stores import existing_store, open_existing, unknown_filters

if TYPE_CHECKING:
    from .._metrics import Metrics

__all__ = ["metrics"]


@app.command(short_help="Outcome metrics over runs (docs/metrics.md).")
def metrics(
    project: Annotated[str | None, typer.Option(help="Only runs of this project.")] = None,
    loop: Annotated[str | None, typer.Option(help="Only runs of this loop (by name).")] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only runs created at or after this ISO 8601 date or time (local time unless "
            "it names a zone)."
        ),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only runs created at or before this ISO date or time.")
    ] = None,
    days: Annotated[
        float | None,
        typer.Option(help="Only runs created in the last N days (instead of --since)."),
    ] = None,
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    review_cost: Annotated[
        float | None,
        typer.Option(
            "--review-cost",
            help="Cost in USD of one human review; adds human_review_cost_per_accepted_usd.",
        ),
    ] = None,
    per_run: Annotated[bool, typer.Option("--per-run", help="Each run's figures too.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Outcome metrics over runs: time, cycles and cost per accepted outcome, spend after the
    last improvement, false successes, regressions, recoveries, approvals, reuse and stop
    reasons. Definitions: docs/metrics.md."""
    from .._metrics import compute_metrics

    start: str | float | None = since
    if days is not None:
        if since is not None:
            raise ConfigError("give --since or --days, not both", field="--days")
        if not (math.isfinite(days) and days > 0):
            raise ConfigError("must be a positive number of days", field="--days")
        start = max(0.0, time.time() - days * 86400.0)  # more days than since 1970: all
    with as_options(
        since="--since", until="--until", status="--status", review_cost_usd="--review-cost"
    ):
        m = compute_metrics(
            existing_store(store),
            project=project,
            loop=loop,
            since=start,
            until=until,
            status=status,
            review_cost_usd=review_cost,
        )
    if not m.runs and (project is not None or loop is not None):
        with open_existing(store) as st:
            for line in unknown_filters(st, project=project, loop=loop):
                typer.echo(line, err=True)
    if as_json:
        print_json(m.to_dict(per_run=per_run))
        return
    from ._say import console

    out = console()
    out.print(_table(m, width=out.width))
    out.print(_reasons(m))
    out.print(_stopped_by(m))
    if per_run:
        out.print(_runs(m, out.width))


_WIDE = 110  # narrower, the definitions go under the table (a column of them would be a sliver)


def _fmt(name: str, v: float | None) -> str:
    if v is None:
        return "n/a"
    if name.endswith("per_usd"):
        return f"{v:,.3f} /$"
    if name.endswith("_usd"):
        return usd(v)
    if name.endswith("_s"):
        return f"{v:,.2f} s"
    return f"{v:.3f}"


def _num(x: float) -> str:
    return f"{x:,.4f}".rstrip("0").rstrip(".") if x != int(x) else f"{int(x):,}"


# the basis's dollar figures (numerator, denominator), as the values show dollars: a spend of
# "681.9129 / 28" beside whole counts read as another unit; `--json` keeps full precision
_USD_BASIS = {
    "cost_per_accepted_usd": (True, False),
    "human_review_cost_per_accepted_usd": (True, False),
    "spend_after_last_improvement_frac": (True, True),
    "progress_per_usd": (False, True),
}


def _basis(name: str, num: float, den: float) -> str:
    """A metric's ``numerator / denominator`` in the units of each: dollars as values show
    them, seconds to 2 decimals, counts whole (a progress sum to 4 decimals at most)."""
    dollars = _USD_BASIS.get(name, (False, False))
    top = usd(num) if dollars[0] else f"{num:,.2f} s" if name.endswith("_s") else _num(num)
    return f"{top} / {usd(den) if dollars[1] else _num(den)}"


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _table(m: Metrics, *, width: int) -> object:
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from .._metrics import DEFINITIONS, METRIC_NAMES, REVIEW_COST_METRIC

    wide = width >= _WIDE
    sel = (
        ", ".join(
            f"{k}={_when(v) if k in ('since', 'until') else v}"
            for k, v in m.selection.items()
            if v is not None
        )
        or "all runs"
    )
    title = (
        f"Outcome metrics: {m.runs} run(s), {m.accepted} accepted, "
        f"{usd(m.spend_usd)} spent ({escape(sel)})"
    )
    names = [*METRIC_NAMES, *([REVIEW_COST_METRIC] if m.review_cost_usd is not None else [])]
    cells = []
    for name in names:
        num_den = m.basis.get(name)
        basis = _basis(name, *num_den) if num_den else ""
        cells.append((name, _fmt(name, m.value(name)), basis))
    notes = [f"{n} is n/a: {escape(m.undefined[n])}" for n in names if n in m.undefined]
    # the runs without an independent held-out verdict, by kind (``Metrics``' split of
    # ``held_out_self_reported``: a failure resting only on refused tests read as a pass)
    which = [
        f"{n} {what}"
        for n, what in (
            (
                m.held_out_pass_self_reported,
                "held-out pass(es) resting on self-reported tests (the candidate's own process "
                "decided them)",
            ),
            (
                m.held_out_fail_not_judged,
                "held-out failure(s) resting only on tests judged_only refused (nothing "
                "decided them)",
            ),
        )
        if n
    ]
    if not which and m.held_out_self_reported:  # (a Metrics without its rows)
        which = [
            f"{m.held_out_self_reported} held-out verdict(s) resting on tests not decided "
            "outside the candidate's process"
        ]
    left_out = (
        " and ".join(which) + " left out of false_success_rate and verified_completion_rate"
        if which
        else ""
    )
    notes += [left_out] if left_out else []
    hint = "definitions: docs/metrics.md (or a terminal of 110 columns or more)"
    # A table too wide for the terminal cut its figures to "…" (40 columns: nothing left to
    # read; outside49): narrower than the table, each metric is a line and its figures the next.
    if width < sum(max(len(c[i]) for c in cells) for i in range(3)) + 10:  # (+ edges, padding)
        lines = [Text.from_markup(f"[bold]{title}[/]")]
        for name, value, basis in cells:
            lines += [Text(name), Text(f"  {value}" + (f"  ({basis})" if basis else ""))]
        return Group(*lines, *(Text.from_markup(n) for n in notes), Text(hint))
    t = Table(title=title, title_justify="left")
    t.add_column("metric", no_wrap=True, overflow="ellipsis", min_width=18)
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("basis", justify="right", no_wrap=True, overflow="ellipsis")
    if wide:
        t.add_column("definition", overflow="fold", min_width=30)
    for name, value, basis in cells:
        why = m.undefined.get(name)
        definition = escape(DEFINITIONS[name]) + (f" [yellow]({escape(why)})[/]" if why else "")
        t.add_row(name, value, basis, *([definition] if wide else []))
    if not wide or left_out:
        t.caption = "\n".join([*notes, hint]) if not wide else left_out
        t.caption_justify = "left"
    return t


def _reasons(m: Metrics) -> object:
    from rich.table import Table

    t = Table(title="Stop reasons", title_justify="left")
    t.add_column("stop reason")
    t.add_column("runs", justify="right")
    t.add_column("share", justify="right")
    for reason, n in m.stop_reasons.items():
        if n:
            t.add_row(reason, str(n), f"{n / m.runs:.1%}")
    open_runs = m.runs - m.runs_ended
    if open_runs:
        t.add_row("[dim](open: no stop reason yet)[/]", str(open_runs), f"{open_runs / m.runs:.1%}")
    return t


def _stopped_by(m: Metrics) -> object:
    """The stop reasons grouped (success, plateau, budget, risk, escalation, ...): each group
    shown, 0 included, so that a reader sees what did not happen as well."""
    from rich.table import Table

    t = Table(title="Stopped by", title_justify="left")
    t.add_column("stopped by")
    t.add_column("runs", justify="right")
    t.add_column("share", justify="right")
    for group, n in m.stopped_by.items():
        t.add_row(group, str(n), f"{n / m.runs:.1%}" if m.runs else "n/a")
    return t


def _runs(m: Metrics, width: int) -> object:
    import io

    from rich.text import Text

    from ._table import Col, render

    cols = (
        Col("run", 0),
        Col("task", 0, flex=True, min_width=16),
        Col("status", 1),
        Col("cycles", 3, right=True),
        Col("cost $", 2, right=True),
        Col("after last impr. $", 5, right=True),
        Col("regr.", 4, right=True),
        Col("fail.", 4, right=True),
    )
    rows = [
        [
            (r.run_id[:12], ""),
            (r.task_key, ""),
            (r.status, ""),
            (str(r.cycles), ""),
            (usd_digits(r.cost_usd), ""),
            (usd_digits(r.spend_after_last_improvement_usd), ""),
            (str(len(r.regressions)), ""),
            (str(sum(r.failures.values())), ""),
        ]
        for r in m.per_run
    ]
    # The plain fitted table of `loopwright runs`: one line per run at any width.
    buf = io.StringIO()
    render("Per run", cols, rows, width=width, out=buf)
    return Text(buf.getvalue().rstrip("\n"), no_wrap=True, overflow="ellipsis")
