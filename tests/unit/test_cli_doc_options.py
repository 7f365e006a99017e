"""docs/cli.md names every option ``--help`` shows (docs55: ``runs --loop``, ``fork --by``,
``worker --poll`` and a dozen more were in the help and not on the page that says it has
"each one's options"). The converse, that every option the docs mention exists, is
test_command_mentions.

The options are read from the application (click's parameters of every command and
subcommand), the page's command table row by row: a command's options are in its row (the
row whose first cell names it: `` `loopwright NAME ...` `` or `` / `NAME ...` ``), but the
options every command alike takes, named once under "Options every command shares"."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from loopwright.cli._app import full_app

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
SHARED = ("--store", "--json", "--token")
# the commands whose --by stands for the OS user when not given (docs/cli.md, approve's row)
BY_DEFAULTS_TO_OS_USER = (
    "approve", "deny", "answer", "cancel", "pause", "unpause", "rollback", "settle", "fork",
    "edit",
)  # fmt: skip


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, cmd


def _options(cmd: Any) -> list[str]:
    return [
        o
        for p in cmd.params
        if p.param_type_name == "option" and not getattr(p, "hidden", False)
        for o in p.opts
        if o.startswith("--")
    ]


def _rows() -> list[tuple[str, str]]:
    """(first cell, whole row) of each row of the commands' table."""
    text = CLI_MD.read_text(encoding="utf-8")
    table = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    return [
        (line.split(" | ", 1)[0], line)
        for line in table.splitlines()
        if line.startswith("| `loopwright ")
    ]


def _row_for(name: str, rows: list[tuple[str, str]]) -> str:
    pattern = re.compile(rf"(`loopwright |/ `){re.escape(name)}(?![\w-])")
    found = [row for cell, row in rows if pattern.search(cell)]
    assert len(found) == 1, f"docs/cli.md: {len(found)} rows name `loopwright {name}`"
    return found[0]


def _names(option: str, text: str) -> bool:
    return re.search(rf"{re.escape(option)}(?![\w-])", text) is not None


def test_every_option_help_shows_is_on_the_page() -> None:
    app = typer.main.get_command(full_app())
    rows = _rows()
    shared = CLI_MD.read_text(encoding="utf-8").split("Options every command shares", 1)
    assert len(shared) == 2, "docs/cli.md: no paragraph on the options every command shares"
    for option in SHARED:
        assert _names(option, shared[1].split("\n\n", 1)[0]), option
    missing: dict[str, list[str]] = {}
    seen = 0
    for path, cmd in _commands(app):
        row = _row_for(path[0], rows)
        for option in _options(cmd):
            seen += 1
            if option not in SHARED and not _names(option, row):
                missing.setdefault(" ".join(path), []).append(option)
    assert seen > 100  # (every command was read, subcommands too)
    assert not missing, f"docs/cli.md leaves out: {missing}"


def test_by_says_it_defaults_to_the_os_user_where_it_does() -> None:
    app = typer.main.get_command(full_app())
    commands = dict(_commands(app))
    for name in BY_DEFAULTS_TO_OS_USER:
        (by,) = [p for p in commands[(name,)].params if "--by" in getattr(p, "opts", ())]
        assert "default: your OS user" in (by.help or ""), (name, by.help)


def test_the_map_names_each_command_in_its_module_s_row() -> None:
    # docs/architecture.md's row of cli/_decide_cmd.py left out pause, unpause and settle
    from loopwright.cli._app import _command_name

    arch = (CLI_MD.parent / "architecture.md").read_text(encoding="utf-8").splitlines()
    app = full_app()
    missing = []
    for info in app.registered_commands:
        module = info.callback.__module__.rsplit(".", 1)[1] if info.callback else ""
        (row,) = [line for line in arch if line.startswith(f"| `cli/{module}.py` |")]
        name = _command_name(info)
        if f"`{name}`" not in row:
            missing.append(f"{name} ({module})")
    assert len(app.registered_commands) > 20
    assert not missing, f"docs/architecture.md's cli/ rows leave out {missing}"


def test_the_exit_codes_name_every_command_that_drives_runs() -> None:
    # a command with --resume drives the run it decides and exits as `run` does (exit_code_for):
    # docs/cli.md's exit codes named approve, deny and answer, not unpause
    text = CLI_MD.read_text(encoding="utf-8")
    (row,) = [line for line in text.splitlines() if line.startswith("| 0 | done; ")]
    app = typer.main.get_command(full_app())
    resuming = sorted(" ".join(path) for path, cmd in _commands(app) if "--resume" in _options(cmd))
    assert {"approve", "unpause"} <= set(resuming)
    assert not [n for n in resuming if f"`{n}" not in row], row
