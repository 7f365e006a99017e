"""The console the commands print on, and their one-line messages (``say``): what a terminal
would act on written out, never folded at the console's width."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ._table import printable

if TYPE_CHECKING:
    from .._engine import RunResult

__all__ = ["console", "say", "say_ended"]


class _Console(Console):
    """A console that writes out what a terminal would act on in the text it is given
    (``_table.printable``): its own styles are applied after, so they still colour."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        from ._options import store_flag

        # a `loopwright ...` command in the engine's words (a run's advice, its stop cause)
        # names this command's store: copied as printed it acts there, not on the default's
        flag = store_flag()
        if flag:
            from .._hints import carry_store

            text = carry_store(text, flag if kwargs.get("markup") is False else escape(flag))
        return super().render_str(printable(text), **kwargs)


def console(stderr: bool = False) -> Console:
    return _Console(stderr=stderr, highlight=False)


def say(
    text: str,
    *,
    out: Console | None = None,
    stderr: bool = False,
    style: str | None = None,
    markup: bool = False,
) -> None:
    """Print a message of one line (a summary, ``wrote X to PATH``, a hint, a note) as written:
    never folded at the console's width (80 columns in a pipe: a script reading the line found
    half of it), and the text as given, not read as markup (a path or a name holding ``[b]``
    printed as another). ``style`` colours the whole line; ``markup=True`` only for a line
    whose every user-given part the caller escaped (``rich.markup.escape``). ``out``: the
    console to print on (a live view's), else ``console(stderr)``."""
    con = out if out is not None else console(stderr=stderr)
    con.print(text, markup=markup, highlight=False, soft_wrap=True, style=style)


def say_ended(res: RunResult, task_key: str, out: Console) -> None:
    """A run's line after a command drove it (``worker``, ``resume``): its status and stop
    reason, then why, as ``show`` says it ("escalated (escalated)" told no one why): masked,
    one line."""
    from . import one_line

    # a parked run has no stop reason: "awaiting_approval (-)" read as a missing value
    reason = f" ({res.stop_reason})" if res.stop_reason else ""
    say(f"run {res.run_id[:12]} ({task_key}): {res.status}{reason}", out=out)
    cause = str((res.packet or {}).get("stop_cause") or "")
    if cause:
        say(f"  why it stopped: {one_line(cause)}", out=out)
