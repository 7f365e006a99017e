"""`loopwright replay`: how other stop contracts would have ended recorded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._errors import ConfigError
from ._app import JsonOpt, StoreOpt, _print_json, app
from ._options import TracesLoopOpt, TracesProjectOpt, out_folder
from ._stores import store_traces

__all__ = ["replay_cmd"]


@app.command("replay", short_help="Replay recorded runs under other stop contracts.")
def replay_cmd(
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE",
            help="'store' (the runs in --store), a run-trace JSONL file, or LDB results JSONL.",
        ),
    ],
    contract: Annotated[
        list[Path],
        typer.Option(
            "--contract",
            metavar="FILE",
            help="A contract TOML (a loop spec or [contract] tables); repeatable.",
        ),
    ],
    loop: TracesLoopOpt = None,
    project: TracesProjectOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    save_traces: Annotated[
        Path | None,
        typer.Option("--save-traces", help="Also write the runs as run-trace JSONL here."),
    ] = None,
) -> None:
    """Replay recorded runs under other stop contracts, side by side with the record.

    For each contract: where each run would have stopped, with which reason and outcome, and
    the totals (accepted kept and lost, spend, cost per accepted outcome, stop reasons).
    """
    from ..replay import load_contract, load_source, replay, write_traces

    out_folder(save_traces, "--save-traces")  # (before the runs are read)

    if not contract:
        raise ConfigError("give at least one --contract FILE", field="--contract")
    contracts = {}
    for path in contract:
        name = path.stem
        while name in contracts:
            name += "'"
        contracts[name] = load_contract(path)
    if source in ("store", "runs"):
        traces = store_traces(store, source, loop=loop, project=project)
    else:
        traces = load_source(source, loop=loop, project=project)
    if not traces:
        raise ConfigError(f"{source}: no runs to replay", field="SOURCE")
    if save_traces is not None:
        from ._observe import _output

        with _output(save_traces, "--save-traces") as fh:  # (its folder checked first)
            write_traces(traces, fh)
    report = replay(traces, contracts)
    if as_json:
        _print_json(report.to_dict())
        return
    from rich.table import Table

    from ._render import console

    rows = [report.recorded] + [t for t, _ in report.contracts]
    title = f"{len(traces)} recorded run(s) from {source}"
    t = Table(title=title, title_justify="left")
    t.add_column("")
    for r in rows:
        t.add_column(r.name, justify="right")

    def money(v: float | None) -> str:
        return "-" if v is None else f"${v:,.4f}"

    def frac(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    base_cost = report.recorded.cost_usd
    lines: list[tuple[str, list[str]]] = [
        ("accepted", [str(r.accepted) for r in rows]),
        ("  kept / lost vs recorded", [f"{r.accepted_kept} / {r.accepted_lost}" for r in rows]),
        ("held-out passed", [str(r.held_out_passed) for r in rows]),
        ("false successes", [str(r.false_successes) for r in rows]),
        ("censored (would go on)", [str(r.censored) for r in rows]),
        ("cycles", [str(r.cycles) for r in rows]),
        ("spend", [money(r.cost_usd) for r in rows]),
        (
            "  saved vs recorded",
            [frac(None if base_cost <= 0 else 1 - r.cost_usd / base_cost) for r in rows],
        ),
        ("cost_per_accepted_usd", [money(r.cost_per_accepted_usd) for r in rows]),
        (
            "spend_after_last_improvement",
            [
                f"{money(r.spend_after_last_improvement_usd)} "
                f"({frac(r.spend_after_last_improvement_frac)})"
                for r in rows
            ],
        ),
        (
            "stop reasons",
            [", ".join(f"{k} {v}" for k, v in sorted(r.stop_reasons.items())) for r in rows],
        ),
    ]
    out = console()
    names = [r.name for r in rows]
    if out.width < _table_width(names, lines):
        # Narrower than the table (COLUMNS=40), it cut every label, contract and figure to
        # "…" (stop 50): each line a label, then each contract's figure whole under it, as
        # `metrics` and `diff` are shown narrow (outside49).
        out.print(_stacked(title, names, lines, out.width))
        return
    for label, cells in lines:
        t.add_row(label, *cells)
    out.print(t)


def _table_width(names: list[str], lines: list[tuple[str, list[str]]]) -> int:
    """The width the table needs to show every label, contract name and figure whole (the
    stop reasons wrap at their commas: their longest one counted)."""
    reasons = [w for _, cells in lines[-1:] for c in cells for w in c.split(", ")]
    widths = [max(len(label) for label, _ in lines)]
    for i, name in enumerate(names):
        figures = [len(cells[i]) for _, cells in lines[:-1]]
        widths.append(max(len(name), *figures, *(len(w) for w in reasons)))
    return sum(w + 3 for w in widths) + 1  # (a column's padding and its edge)


def _stacked(
    title: str, names: list[str], lines: list[tuple[str, list[str]]], width: int
) -> object:
    """The replay table as lines: each row's label, then each contract's figure beside its
    name, or under it where name and figure do not fit one line (the stop reasons one a
    line)."""
    from rich.console import Group
    from rich.text import Text

    pad = max(len(n) for n in names)
    said = [Text(title, style="bold")]
    for label, cells in lines:
        said.append(Text(label.strip()))
        for name, cell in zip(names, cells, strict=True):
            if 2 + pad + 2 + len(cell) <= width:
                said.append(Text(f"  {name:<{pad}}  {cell}"))
            else:
                said.append(Text(f"  {name}"))
                said += [Text(f"    {part}") for part in cell.split(", ")]
    return Group(*said)
