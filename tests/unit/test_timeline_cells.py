"""``show``'s wide timeline makes each cell's text once and shares it between rows alike:
what it prints is what the table of the cells' markup strings prints, byte for byte."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table

from loopwright.cli._render import _timeline_chunk


def _printed(renderable: object, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, highlight=False).print(renderable)
    return out.getvalue()


def _as_strings(rows: list[tuple[str, list[str], list[str], list[str], str, str, str]]) -> Table:
    # the table as it was built before: every cell its markup string
    t = Table(title="Timeline", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    t.add_column("cycle", justify="right", no_wrap=True)
    for col in ("proposal", "visible verdicts", "held-out verdicts"):
        t.add_column(col, overflow="fold")
    for col in ("score", "decision", "cost $"):
        t.add_column(col, no_wrap=True)
    for cycle, what, vis, held, score, decision, cost in rows:
        t.add_row(
            cycle,
            "\n".join(what) or "-",
            "\n".join(vis) or "-",
            "\n".join(held) or "-",
            score,
            decision,
            cost,
        )
    return t


def test_shared_cells_print_as_their_markup_strings() -> None:
    long = "doc/" + "x" * 150  # folded in its column, in every row that holds it
    rows = [
        (
            str(c),
            ["edit:", "doc/p1", long] if c % 3 else [],
            ["[red]✗[/] check 0.00", "[green]✓[/] style :smile: 1.00"] if c % 2 else [],
            ["[green]✓[/] held 1.00"] if c == 4 else [],
            "0.50" if c % 4 else "-",
            "[magenta]parked for approval[/]" if c == 5 else "revise",
            "0.003",
        )
        for c in range(1, 13)
    ]
    for width in (110, 160, 240):
        assert _printed(_timeline_chunk(rows, width, True), width) == _printed(
            _as_strings(rows), width
        )
