"""`loopwright replay`: how other stop contracts would have ended recorded runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from .._errors import ConfigError
from .._money_text import usd
from ._app import JsonOpt, StoreOpt, app, print_json
from ._options import TracesLoopOpt, TracesProjectOpt, out_folder
from ._stores import iter_store_traces

if TYPE_CHECKING:
    from ..replay import RunTrace

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
    from ..replay import iter_source, load_contract, replay, write_traces

    # (before the runs are read; never over the runs or a contract it reads)
    out_folder(save_traces, "--save-traces", [source, *(contract or ())])

    if not contract:
        raise ConfigError("give at least one --contract FILE", field="--contract")
    contracts = {}
    for path in contract:
        name = path.stem
        while name in contracts:
            name += "'"
        contracts[name] = load_contract(path)
    # The runs one at a time, each judged under every contract as it is read (and written to
    # --save-traces): a replay of many long runs holds one run's cycles, not all (stop 50).
    if source in ("store", "runs"):
        runs = iter_store_traces(store, source, loop=loop, project=project)
    else:
        runs = iter_source(source, loop=loop, project=project)
    first = next(runs, None)
    if first is None:
        raise ConfigError(f"{source}: no runs to replay", field="SOURCE")
    held = [first]  # (given up once read: a name, or a chain's arguments, held it to the end)
    del first
    count = [0]

    def counted(fh: IO[str] | None) -> Iterator[RunTrace]:
        t: RunTrace | None = held.pop()
        while t is not None:
            count[0] += 1
            if fh is not None:
                write_traces((t,), fh)
            yield t
            t = next(runs, None)

    if save_traces is None:
        report = replay(counted(None), contracts)
    else:
        from ._observe import output

        # written beside it and moved in place once every run was read: a source that
        # fails at a later run leaves the file as it was, as before, when all were read first
        part = save_traces.with_name(f".{save_traces.name}.part")
        try:
            with output(part, "--save-traces") as fh:  # (its folder checked first)
                report = replay(counted(fh), contracts)
            part.replace(save_traces)
        except OSError as exc:
            raise ConfigError(
                f"cannot write {save_traces}: {exc.strerror or exc}", field="--save-traces"
            ) from None
        finally:
            part.unlink(missing_ok=True)
    if as_json:
        print_json(report.to_dict())
        return
    from rich.markup import escape
    from rich.table import Table

    from ._say import console

    rows = [report.recorded] + [t for t, _ in report.contracts]
    title = f"{count[0]} recorded run(s) from {source}"
    # the path and the contracts' file names as given (a table's title and headers are markup)
    t = Table(title=escape(title), title_justify="left")
    t.add_column("")
    for r in rows:
        t.add_column(escape(r.name), justify="right")

    def money(v: float | None) -> str:
        return "-" if v is None else usd(v)

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
