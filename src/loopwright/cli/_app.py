"""The Typer application: one function per command, each thin over the Python API.

Start-up time matters here (``loopwright runs`` should answer in well under a second): this
module, and the core commands' modules it imports (``_run_cmd``, ``_read_cmd``, ``_resume_cmd``,
``_setup_cmd``), import only Typer at load time; each command imports what it needs when it
runs, and ``app_for`` builds only the command being run (commands of the other modules, in
``_ELSEWHERE``, are imported then).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import Any

import typer

# The commands defined in this package's core modules register on ``app`` when imported, and
# the help lists commands in the order they registered: these imports are kept in that order.
# isort: off
from ._root_app import HELP, app, new_typer
from ._options import (
    ByOpt,
    JsonOpt,
    NoteOpt,
    RequestOpt,
    RunArg,
    StoreOpt,
    TokenOpt,
    as_options,
    by_name,
    print_json,
    run_ref,
)
from ._run_cmd import execute, run
from ._read_cmd import APPROVALS_SHOWN, RUNS_SHOWN, runs, show, write_show_json, wrote_ahead_of
from ._resume_cmd import continue_hint, loop_for, loop_or_none, resume
from ._setup_cmd import check, demo, import_
# isort: on

# (re-exported: the commands' modules and the tests import them from here, their home before
# the split)
__all__ = [
    "APPROVALS_SHOWN",
    "HELP",
    "RUNS_SHOWN",
    "ByOpt",
    "JsonOpt",
    "NoteOpt",
    "RequestOpt",
    "RunArg",
    "StoreOpt",
    "TokenOpt",
    "app",
    "app_for",
    "as_options",
    "by_name",
    "check",
    "command_for",
    "continue_hint",
    "demo",
    "execute",
    "full_app",
    "import_",
    "loop_for",
    "loop_or_none",
    "new_typer",
    "print_json",
    "resume",
    "run",
    "run_ref",
    "runs",
    "show",
    "write_show_json",
    "wrote_ahead_of",
]


# Commands defined in other modules of this package, which register themselves on ``app``
# when imported; `app_for` imports only the one a command line names.
_ELSEWHERE = {
    "answer": "_decide_cmd",
    "approvals": "_decide_cmd",
    "approve": "_decide_cmd",
    "audit": "_people_cmd",
    "authority": "_people_cmd",
    "cancel": "_decide_cmd",
    "deny": "_decide_cmd",
    "diff": "_diff_cmd",
    "edit": "_fork_cmd",
    "fit-stop": "_fit_cmd",
    "fork": "_fork_cmd",
    "memory": "_memory_cmd",
    "metrics": "_metrics_cmd",
    "pause": "_decide_cmd",
    "unpause": "_decide_cmd",
    "trace": "_observe",
    "export": "_observe",
    "replay": "_replay_cmd",
    "rollback": "_decide_cmd",
    "settle": "_decide_cmd",
    "ui": "_ui_cmd",
    "users": "_people_cmd",
    "worker": "_worker_cmd",
}


def full_app() -> typer.Typer:
    """``app`` with every command registered (for the overall help and unknown commands)."""
    for module in sorted(set(_ELSEWHERE.values())):
        import_module(f"{__package__}.{module}")
    return app


def app_for(args: Sequence[str]) -> typer.Typer:
    """An application holding only the command ``args`` names, when it names one.

    Typer builds (introspects) every registered command on each start, and the commands'
    modules cost their imports: building one keeps ``loopwright runs`` fast.
    """
    name = next((a for a in args if not a.startswith("-")), None)
    if name is None:
        return full_app()
    if name in _ELSEWHERE:
        import_module(f"{__package__}.{_ELSEWHERE[name]}")
    one = new_typer(help=HELP)
    one.registered_callback = app.registered_callback
    one.registered_commands = [c for c in app.registered_commands if _command_name(c) == name]
    one.registered_groups = [g for g in app.registered_groups if g.name == name]
    if not one.registered_commands and not one.registered_groups:
        return full_app()  # an unknown command: the full list answers it
    return one


def command_for(args: Sequence[str]) -> Any:
    """The click command to run ``args`` with (``app_for``'s, its options converted without
    pydantic: see ``_plain_params``)."""
    from typer.main import get_command

    from ._plain_params import lighten

    command = get_command(app_for(args))
    lighten(command)
    return command


def _command_name(info: Any) -> str | None:
    if info.name:
        return str(info.name)
    return info.callback.__name__.replace("_", "-") if info.callback else None
