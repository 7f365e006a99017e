"""The ``loopwright`` command: a thin layer over the Python API.

``main()`` maps user mistakes to a one-line message and exit code 2, never a traceback; set
``LOOPWRIGHT_DEBUG=1`` to see tracebacks of internal errors.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (documented in README.md)."""
    from .._errors import LoopwrightError
    from ._app import command_for

    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # Click's standalone mode prints usage errors itself and exits with 2.
        command_for(args)(args=args, prog_name="loopwright")
    except SystemExit as exc:
        if exc.code is None:
            return 0
        code = exc.code if isinstance(exc.code, int) else 2
        if code == 130:  # Typer turns Ctrl-C into a silent exit 130: say what was kept
            _interrupted()
        return code
    except LoopwrightError as exc:
        print(f"loopwright: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _interrupted()
        return 130
    except Exception as exc:
        from ._damage import store_damage

        damage = store_damage(exc)  # a row or table damaged after the store was opened
        if damage is not None:
            print(f"loopwright: error: {_one_line(damage)}", file=sys.stderr)
            return 2
        if os.environ.get("LOOPWRIGHT_DEBUG"):
            raise
        print(
            f"loopwright: internal error: {type(exc).__name__}: {_one_line(exc)} "
            "(set LOOPWRIGHT_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1
    return 0


def _interrupted() -> None:
    print(
        "loopwright: interrupted; every finished cycle is checkpointed — `loopwright runs` "
        "lists the run, `loopwright resume RUN` continues it",
        file=sys.stderr,
    )


def _one_line(exc: BaseException) -> str:
    """The message on one line, secrets masked: a driver's error text can span several
    (PostgreSQL adds the statement and a caret under it), and a mistake is reported in one
    line."""
    from .._redact import redact_text

    # (a user's factory or hook can quote what it was given: invariant 9 covers error text)
    text = redact_text(str(exc))
    return " ".join(text.split()) if "\n" in text else text
