"""The ``loopwright`` command: a thin layer over the Python API.

``main()`` maps user mistakes to a one-line message and exit code 2, never a traceback; set
``LOOPWRIGHT_DEBUG=1`` to see tracebacks of internal errors.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

__all__ = ["main"]

# Whether the interrupted command may hold a run (`_interrupted` then points at `runs` and
# `resume`): a command that starts runs clears it until it created the first one.
_RUNS: dict[str, bool] = {"may_exist": True}
# The runs the command now driving them (``_interrupt.run_async``) named: the Ctrl-C hints
# name the run by its id (`resume RUN`, typed as printed, was refused as no run RUN).
DRIVING: list[str] = []
# The commands that drive runs: Ctrl-C in any other (runs, metrics, fit-stop, trace...) leaves
# no cycle behind, so pointing at `resume` would send a person looking for a run to continue.
DRIVES_RUNS = frozenset({"run", "demo", "resume", "worker", "approve", "deny", "answer", "ui"})


def runs_may_exist(flag: bool) -> None:
    """Say whether a Ctrl-C now leaves a run behind (what ``main`` then points at)."""
    _RUNS["may_exist"] = flag


# SIGTERMs `loopwright worker` received while it started (its modules loading), noted by
# ``note_term`` instead of killing it: the worker stops gracefully once it can (exit 0).
EARLY_TERM: list[int] = []
# The SIGTERM handler ``note_term`` replaced, put back by ``end_term``.
_TERM_BEFORE: list[Any] = []


def note_term() -> None:
    """From now on a SIGTERM is noted in ``EARLY_TERM`` (until the worker's event loop
    installs its own handler): installed first thing, before the modules load."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():  # (where signals are handled)
        before = signal.signal(signal.SIGTERM, lambda signum, _frame: EARLY_TERM.append(signum))
        if not _TERM_BEFORE:
            _TERM_BEFORE.append(before)


def end_term() -> None:
    """SIGTERM handled as before ``note_term``, once the worker is done or never started (a
    bad option, a store that would not open): a process that called ``main`` itself went on
    noting SIGTERMs instead of ending."""
    import signal
    import threading

    EARLY_TERM.clear()
    if _TERM_BEFORE and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _TERM_BEFORE.pop())


# 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away (`| head`).
EXIT_PIPE_CLOSED = 141


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (documented in docs/cli.md)."""
    try:
        code = _main(argv)
    finally:
        end_term()  # (nothing to do unless a worker noted SIGTERMs)
    if argv is None:
        # The process: what is still buffered is written now, where a reader that went away
        # is found, not in the interpreter's last flush (a traceback, exit code 120).
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            return _pipe_closed(True)
    return code


def _pipe_closed(process: bool) -> int:
    """stdout's reader went away (``loopwright runs | head -1``): quiet, as Unix tools are,
    with their exit code. The process's stdout is pointed at the null device, so that what
    is left in its buffer goes nowhere instead of failing again when Python exits."""
    if process:
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.__stdout__.fileno() if sys.__stdout__ else 1)
            os.close(null)
    return EXIT_PIPE_CLOSED


def _stdout_closed() -> bool:
    """Whether the process's stdout is a pipe (or terminal) whose reader has gone: a broken
    pipe found while writing elsewhere (a socket) is not this."""
    try:
        import select

        fd = (sys.__stdout__ or sys.stdout).fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no file descriptor
        return False


def _stdout_to_null() -> bool:
    """Whether the process's stdout is the null device: where Rich's console points it when
    its write to stdout found a broken pipe (``Console.on_broken_pipe``, then exit 1)."""
    try:
        fd = (sys.__stdout__ or sys.stdout).fileno()
        return os.path.samestat(os.fstat(fd), os.stat(os.devnull))
    except (AttributeError, OSError, ValueError):
        return False


def _main(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    null_before = _stdout_to_null()  # (`> /dev/null`: then no write to stdout broke a pipe)
    _replace_unwritable()
    bad = _not_text(args)
    if bad is not None:
        print(f"loopwright: error: {bad}", file=sys.stderr)
        return 2
    _RUNS["may_exist"] = False  # Ctrl-C while the modules load: no run has started
    if args[:1] == ["worker"]:
        note_term()  # a SIGTERM while the modules load stops the worker, not kills it
    try:
        from .._errors import LoopwrightError
        from ._app import command_for
        from ._options import forget_store

        # (in one process, main() again: the last command's store and runs are not this one's)
        forget_store()
        DRIVING.clear()

        command = command_for(args)
        _RUNS["may_exist"] = bool(args) and args[0] in DRIVES_RUNS
        # Click's standalone mode prints usage errors itself and exits with 2.
        command(args=args, prog_name="loopwright")
    except KeyboardInterrupt:
        _interrupted(argv is None)
        return 130
    except SystemExit as exc:
        if exc.code is None:
            return 0
        code = exc.code if isinstance(exc.code, int) else 2
        pipe = exc.__context__ if isinstance(exc.__context__, BrokenPipeError) else None
        moved = pipe is not None and not null_before and _stdout_to_null()
        if code == 1 and (_stdout_closed() or moved):
            # Typer's own reading of a broken pipe: a silent exit 1, an internal error's code;
            # Rich's (a live view's last write) points stdout at the null device first
            return _pipe_closed(argv is None)
        if code == 1 and pipe is not None:
            # Typer's silent exit 1 for a broken pipe that is not stdout's (a socket's, a
            # child process's): an error no one was told of
            print(
                f"loopwright: internal error: {type(pipe).__name__}: {one_line(pipe)} "
                "(a connection or pipe other than stdout was closed by its other end)",
                file=sys.stderr,
            )
            return 1
        if code == 130:  # Typer turns Ctrl-C into a silent exit 130: say what was kept
            _interrupted(argv is None)
        return code
    except LoopwrightError as exc:
        from ._options import carry_store

        # (a refusal's hint, `loopwright users add ana approver`, names the store it was for)
        print(f"loopwright: error: {carry_store(one_line(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) and _stdout_closed():
            return _pipe_closed(argv is None)
        from ..store._damage import store_damage

        damage = store_damage(exc)  # a row or table damaged after the store was opened
        if damage is not None:
            print(f"loopwright: error: {one_line(damage)}", file=sys.stderr)
            return 2
        if os.environ.get("LOOPWRIGHT_DEBUG"):
            raise
        print(
            f"loopwright: internal error: {type(exc).__name__}: {one_line(exc)} "
            "(set LOOPWRIGHT_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1
    return 0


def _replace_unwritable() -> None:
    """On a terminal or pipe whose encoding is not UTF-8 (a Latin-1 locale, a Windows code
    page, ``PYTHONIOENCODING=ascii``), a character it cannot hold is written as ``?``: a
    run's text (a name, an accent, an emoji) and the tables' rules failed every listing
    with an internal ``UnicodeEncodeError`` before. (``LC_ALL=C`` is UTF-8 since Python 3.7,
    but for ``PYTHONUTF8=0``: then ascii, its errors ``surrogateescape``, which fails alike.)"""
    import codecs
    import io

    for stream in (sys.stdout, sys.stderr):
        if not isinstance(stream, io.TextIOWrapper) or stream.errors not in (
            "strict",
            "surrogateescape",
        ):
            continue
        try:
            utf = codecs.lookup(stream.encoding).name.startswith("utf")
        except LookupError:
            utf = False
        if not utf:
            with contextlib.suppress(ValueError, OSError):  # closed, or already written to
                stream.reconfigure(errors="replace")


def _not_text(args: list[str]) -> str | None:
    """Why an argument is not text (a byte that is not UTF-8, which Python keeps as a lone
    surrogate): nothing can store, compare or print it. None when every one is text."""
    for n, arg in enumerate(args, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            try:  # the bytes as given (\xff), else the code point (\ud800)
                raw = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            except UnicodeEncodeError:
                raw = arg.encode("utf-8", "backslashreplace").decode("utf-8")
            return (
                f"argument {n} ('{_clip(raw)}') is not valid text (it holds a lone surrogate: "
                "a byte that is not UTF-8); give it as UTF-8 text"
            )
    return None


def _interrupted(process: bool) -> None:
    if process:  # the command is the process: more Ctrl-C while it ends change nothing
        import signal

        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _RUNS["may_exist"]:
        print("loopwright: interrupted", file=sys.stderr)
        return
    from ._interrupt import resume_command
    from ._options import store_flag

    at = store_flag()  # (the commands named read the default store without it: newuser52)
    # the run by its id when this command drove one (`resume RUN` was refused as no run RUN)
    again = (
        f"{resume_command(at)} continues it (`loopwright resume --all{at}`: every interrupted run)"
        if len(DRIVING) == 1
        else f"{resume_command(at)} continues every interrupted run"
    )
    print(
        "loopwright: interrupted; every finished cycle is checkpointed — `loopwright runs"
        f"{at}` lists the run, {again}",
        file=sys.stderr,
    )


ECHO_MAX = 80  # the most of one long word (a pasted blob given as a run id) a message repeats


def _clip(text: str) -> str:
    """``text`` with each word longer than twice ``ECHO_MAX`` cut short in its middle (with
    how much was left out): a message names what it was given, not all of it."""
    import re

    def cut(m: re.Match[str]) -> str:
        word = m.group(0)
        left = len(word) - ECHO_MAX
        return f"{word[: ECHO_MAX - 10]}…({left} more characters)…{word[-10:]}"

    return re.sub(rf"\S{{{ECHO_MAX * 2 + 1},}}", cut, text)


def one_line(exc: BaseException | str) -> str:
    """The message on one line, secrets masked: a driver's error text can span several
    (PostgreSQL adds the statement and a caret under it), and a mistake is reported in one
    line."""
    from .._redact import redact_text

    # (a user's factory or hook can quote what it was given: invariant 9 covers error text)
    from ._table import printable

    text = _clip(redact_text(str(exc)))
    return printable(" ".join(text.split()) if "\n" in text else text)
