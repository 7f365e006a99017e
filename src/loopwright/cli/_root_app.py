"""The root Typer application every command registers on: its settings, its help and
``--version``. Kept apart from the commands so that each command's module can register on it
without importing the others (``_app`` imports them in the order the help lists them)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

__all__ = ["HELP", "app", "new_typer"]


def new_typer(**kwargs: Any) -> typer.Typer:
    """A Typer (sub-)application with the CLI's settings: plain help text (Rich markup would
    eat ``loopwright[plot]`` and ``[contract]``, and show flags as ``--json <bool>``)."""
    return typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        **kwargs,
    )


HELP = "loopwright: governed AI agent loops — durable state, independent checks, explicit stops."
app = new_typer(help=HELP)


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"loopwright {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    pass
