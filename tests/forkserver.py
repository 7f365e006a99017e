"""A fork server for the suite's kill tests: their child processes start without paying for
Python's start and loopwright's import each time.

Each SIGKILL trial starts several ``python runner.py ...`` processes, and each spent most of its
CPU (about 0.15 s of 0.22 s for a money-kill runner) importing loopwright before doing anything
the test looks at. A ``ForkServer`` is one process that imports loopwright once and then, for
each request, forks a child that runs the script as ``python SCRIPT ARGS`` would
(``runpy.run_path`` as ``__main__``, the script's folder first on ``sys.path``, the request's
argv, environment, working folder and stdin/stdout/stderr), with its own pid, SQLite and
PostgreSQL connections opened by itself, and its own end: a child that SIGKILLs itself (or is
SIGKILLed) ends with ``-9`` exactly as the subprocess did, and holds its lease and store writes
as it did. Only what the server imported is shared (copy-on-write); it opens no connection and
starts no thread, so a fork copies no lock or socket in use.

``ForkServer.popen`` returns a ``Forked``, the part of ``subprocess.Popen`` the tests use
(``pid``, ``returncode``, ``communicate``, ``wait``, ``poll``, ``kill``). A request whose
environment differs from the server's in a ``PYTHON*`` setting read at start-up (other than
``PYTHONUNBUFFERED``, honoured per child) gets a real subprocess instead: ``child_process``
picks. Run as a script, this file is the server.

``run_cli`` is the same for the e2e tests' ``loopwright ARGS`` subprocesses (about 400 in
tests/e2e, each ≈ 0.2-0.35 s of CPU importing Typer, Rich and the command's modules): a second
server (``CLI_PRELOAD``: those modules imported once) forks a child that runs the installed
console script itself (``.venv/bin/loopwright``, as ``python SCRIPT ARGS``: its ``sys.argv[0]``,
its folder first on ``sys.path``), with the request's environment, folder, stdin (inherited, or a
pipe holding ``input``) and piped stdout/stderr, and its exit code. The modules it preloads read
nothing of the environment at import but the settings in ``CLI_STARTUP_VARS``; a request that
differs from the server in one of them, a console script for another interpreter, or
``LOOPWRIGHT_TEST_CLI_SUBPROCESS=1`` gets the real subprocess. What only a fresh interpreter
shows (what a command imports, Python's own start-up, signals sent to the CLI) is tested with
real subprocesses.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# What the server imports before it forks anything: loopwright's modules the engine, the stores
# and the CLI's runs reach (``import loopwright`` alone is lazy, PEP 562).
PRELOAD = (
    "asyncio",
    "sqlite3",
    "loopwright",
    "loopwright._contract",
    "loopwright._effects",
    "loopwright._engine",
    "loopwright._errors",
    "loopwright._loop",
    "loopwright._memory",
    "loopwright._metrics",
    "loopwright._owncalls",
    "loopwright._policy",
    "loopwright._proposal",
    "loopwright._question",
    "loopwright._redact",
    "loopwright._retry",
    "loopwright._spec",
    "loopwright._state",
    "loopwright._usage",
    "loopwright._verdict",
    "loopwright._worker",
    "loopwright.store",
    "loopwright.store.sqlite",
)

# Start-up settings a forked child cannot take from its request (the interpreter read them once).
_STARTUP_VARS = (
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONWARNINGS",
    "PYTHONDEVMODE",
    "PYTHONFAULTHANDLER",
    "PYTHONTRACEMALLOC",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONSAFEPATH",
    "PYTHONOPTIMIZE",
    "PYTHONNOUSERSITE",
)

# What the CLI's server imports before it forks a ``loopwright`` child: the modules the commands
# import (Typer, Rich, the engine, the stores, the people and trace modules) and every command
# module, in ``full_app``'s order (a command module registers its commands on ``app`` when
# imported; ``app_for`` picks the command by name, ``full_app`` imports them all in this order).
# Not the dashboard's (FastAPI, uvicorn) nor Ray: a command that needs them imports them itself.
CLI_PRELOAD = (
    *PRELOAD,
    "importlib.metadata",
    "multiprocessing",
    "tomllib",
    "typer",
    "typer.main",
    "typer.completion",
    "rich.console",
    "rich.live",
    "rich.markup",
    "rich.table",
    "loopwright.cli",
    "loopwright.cli._app",
    "loopwright.cli._check",
    "loopwright.cli._interrupt",
    "loopwright.cli._live",
    "loopwright.cli._plain_params",
    "loopwright.cli._render",
    "loopwright.cli._stores",
    "loopwright.cli._summary",
    "loopwright.cli._table",
    "loopwright.cli._tasks",
    *(  # full_app's order: sorted(set(_ELSEWHERE.values()))
        f"loopwright.cli.{m}"
        for m in (
            "_decide_cmd",
            "_diff_cmd",
            "_fit_cmd",
            "_fork_cmd",
            "_memory_cmd",
            "_metrics_cmd",
            "_observe",
            "_people_cmd",
            "_replay_cmd",
            "_ui_cmd",
            "_worker_cmd",
        )
    ),
    "loopwright._audit",
    "loopwright._authority",
    "loopwright._fork",
    "loopwright._people",
    "loopwright._settle",
    "loopwright.importers.ldb",
    "loopwright.replay",
    "loopwright.store._people",
    "loopwright.store.postgres",
    "loopwright.trace",
    "loopwright.verifiers.sandbox",
    "psycopg",
)

# Settings the CLI's preloaded modules read at import (Typer's terminal and colour settings,
# psycopg's implementation), and those of the standard streams' encoding and the time zone.
CLI_STARTUP_VARS = (
    *_STARTUP_VARS,
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TYPER_USE_RICH",
    "TERMINAL_WIDTH",
    "_TYPER_FORCE_DISABLE_TERMINAL",
    "GITHUB_ACTIONS",
    "FORCE_COLOR",
    "PY_COLORS",
    "PSYCOPG_IMPL",
    "PSYCOPG_WAIT_FUNC",
)


class Forked:
    """A child of the fork server, seen as ``subprocess.Popen`` with text pipes shows one."""

    def __init__(self, conn: socket.socket, pid: int, out: int, err: int, args: list[str]):
        self._conn, self.pid, self.args = conn, pid, args
        self._out, self._err = out, err
        self.returncode: int | None = None

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                msg = self._conn.recv(64)
            except (TimeoutError, BlockingIOError):  # (timeout 0, poll: a non-blocking recv)
                return None
            self._conn.close()
            if not msg:
                raise RuntimeError(f"fork server went away before child {self.pid} ended")
            self.returncode = int(msg)
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both pipes read to their end, then the exit status (as ``Popen.communicate``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks: dict[int, list[bytes]] = {self._out: [], self._err: []}
        with selectors.DefaultSelector() as sel:
            for fd in chunks:
                if fd >= 0:
                    sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        sel.unregister(key.fd)
                        os.close(key.fd)
        self._out = self._err = -1
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        return tuple(b"".join(c).decode() for c in chunks.values())  # type: ignore[return-value]

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in (self._out, self._err):
            if fd >= 0:
                os.close(fd)
        self._out = self._err = -1
        self.wait()


class ForkServer:
    """One server process (started on first use); ``popen`` asks it for a child."""

    def __init__(
        self, preload: Sequence[str] = PRELOAD, startup_vars: Sequence[str] = _STARTUP_VARS
    ) -> None:
        self._startup_vars = tuple(startup_vars)
        self._folder = tempfile.mkdtemp(prefix="lwfork-")
        self._path = os.path.join(self._folder, "s")
        self._env = dict(os.environ)
        self._proc = subprocess.Popen(
            [sys.executable, __file__, self._path, *preload],
            stdin=subprocess.PIPE,  # its end: the server leaves when this process does
            stdout=subprocess.DEVNULL,
            env=self._env,
        )
        deadline = time.monotonic() + 300  # a hang guard only: the imports take ~0.2 s
        while not os.path.exists(self._path) and self._proc.poll() is None:
            if time.monotonic() > deadline:
                self._proc.kill()
                break
            time.sleep(0.01)  # the server binds its socket once its imports are done
        if not os.path.exists(self._path):
            raise RuntimeError(f"fork server did not start ({self._proc.wait()})")
        atexit.register(self.close)

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a child with ``env`` starts as a fresh interpreter would from the server."""
        return all(env.get(k) == self._env.get(k) for k in self._startup_vars)

    def popen(
        self,
        args: Sequence[str],
        env: dict[str, str],
        cwd: str | Path | None = None,
        stdin: int = 0,
        outputs: tuple[int, int] | None = None,
    ) -> Forked:
        """``python SCRIPT ARGS...`` (``args`` as for ``Popen``, ``args[0]`` the interpreter),
        stdin inherited (or the file descriptor ``stdin``), stdout and stderr piped (or the
        file descriptors ``outputs``: the child's own copies, nothing to read here)."""
        script, *rest = [str(a) for a in args[1:]]
        if outputs is None:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
        else:
            out_r, out_w = -1, os.dup(outputs[0])
            err_r, err_w = -1, os.dup(outputs[1])
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(self._path)
            req = {"argv": [script, *rest], "env": env, "cwd": str(cwd or os.getcwd())}
            socket.send_fds(conn, [json.dumps(req).encode()], [stdin, out_w, err_w])
        finally:
            os.close(out_w)
            os.close(err_w)
        pid = int(conn.recv(64))
        return Forked(conn, pid, out_r, err_r, [str(a) for a in args])

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(30)
        for name in (self._path,):
            if os.path.exists(name):
                os.unlink(name)
        if os.path.isdir(self._folder):
            os.rmdir(self._folder)


_SERVER: list[ForkServer] = []


def child_process(
    args: Sequence[str], env: dict[str, str], cwd: str | Path | None = None
) -> Forked | subprocess.Popen[str]:
    """``python SCRIPT ARGS`` with text stdout/stderr pipes: forked by this process's server
    (started on first use) where the environment allows, else a real subprocess."""
    if not _SERVER:
        _SERVER.append(ForkServer())
    if _SERVER[0].serves(env):
        return _SERVER[0].popen(args, env, cwd)
    return subprocess.Popen(
        list(map(str, args)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


def run_child(
    args: Sequence[str], env: dict[str, str], timeout: float, cwd: str | Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)`` for
    ``python SCRIPT ARGS``, through ``child_process``."""
    code, out, err = _ended(child_process(args, env, cwd), timeout)
    return subprocess.CompletedProcess(list(map(str, args)), code, out, err)


def _ended(proc: Forked | subprocess.Popen[str], timeout: float | None) -> tuple[int, str, str]:
    """Its exit code and both pipes read to their end; killed and reaped on a timeout (as
    ``subprocess.run`` does), the ``TimeoutExpired`` raised."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode is not None
    return proc.returncode, out, err


_CLI_SERVER: list[ForkServer] = []
_CONSOLE_SCRIPT: dict[str, bool] = {}  # a console script's path: whether it runs in this Python
# The most ``input`` a request writes into its stdin pipe before the child starts (a pipe holds
# 64 KiB on Linux, so the write never waits for a reader); more goes to a real subprocess.
_INPUT_MAX = 32768


def _this_python(script: str) -> bool:
    """Whether ``script`` is a console script this interpreter runs (its ``#!`` line names it)."""
    if script not in _CONSOLE_SCRIPT:
        try:
            with open(script, "rb") as f:
                first = f.readline().decode().strip()
        except (OSError, UnicodeDecodeError):
            first = ""
        _CONSOLE_SCRIPT[script] = first == f"#!{sys.executable}"
    return _CONSOLE_SCRIPT[script]


def run_cli(
    args: Sequence[str],
    env: dict[str, str],
    timeout: float | None,
    cwd: str | Path | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args, env=env, cwd=cwd, input=input, capture_output=True, text=True,
    timeout=timeout, check=False)`` for a console script (``args[0]``, the installed
    ``loopwright``): forked by this process's CLI server (``CLI_PRELOAD`` imported once, started
    on first use) where the request allows, else that real subprocess."""
    argv = [str(a) for a in args]
    fresh = (
        os.environ.get("LOOPWRIGHT_TEST_CLI_SUBPROCESS") == "1"
        or not _this_python(argv[0])
        or (input is not None and len(input.encode()) > _INPUT_MAX)
    )
    if not fresh and not _CLI_SERVER:
        _CLI_SERVER.append(ForkServer(CLI_PRELOAD, CLI_STARTUP_VARS))
    if fresh or not _CLI_SERVER[0].serves(env):
        return subprocess.run(
            argv,
            check=False,
            cwd=cwd,
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    piped = input is not None
    stdin = 0
    if input is not None:  # a pipe holding the text, its end closed: as ``input=`` gives it
        stdin, feed = os.pipe()
        try:
            os.write(feed, input.encode())
        finally:
            os.close(feed)
    try:
        proc = _CLI_SERVER[0].popen([sys.executable, *argv], env, cwd, stdin=stdin)
    finally:
        if piped:
            os.close(stdin)
    code, out, err = _ended(proc, timeout)
    return subprocess.CompletedProcess(argv, code, _lines(out), _lines(err))


def cli_popen(
    args: Sequence[str], env: dict[str, str], stdout: int, stderr: int
) -> Forked | subprocess.Popen[bytes]:
    """``subprocess.Popen(args, env=env, stdout=stdout, stderr=stderr)`` for a console script
    (``args[0]``, the installed ``loopwright``) whose output goes to files (the descriptors
    given): forked by the CLI server where ``run_cli`` would fork it, else that subprocess. The
    child is a process of its own (its pid, signals, exit code: ``-9`` when SIGKILLed), as
    ``popen``'s are; ``wait``, ``poll``, ``send_signal`` and ``returncode`` as ``Popen``'s."""
    argv = [str(a) for a in args]
    fresh = os.environ.get("LOOPWRIGHT_TEST_CLI_SUBPROCESS") == "1" or not _this_python(argv[0])
    if not fresh and not _CLI_SERVER:
        _CLI_SERVER.append(ForkServer(CLI_PRELOAD, CLI_STARTUP_VARS))
    if fresh or not _CLI_SERVER[0].serves(env):
        return subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr)
    return _CLI_SERVER[0].popen([sys.executable, *argv], env, outputs=(stdout, stderr))


def _lines(text: str) -> str:
    """Newlines as ``text=True`` reads them from a pipe (universal newlines)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --- the server --------------------------------------------------------------------------------
def _serve(path: str) -> dict[str, Any]:
    """Forks a child for each request until stdin ends; returns only in a child, its request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)  # the client waits for the name: bound and listening
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd: (pid, connection)
    while True:
        for key, _ in sel.select():
            if key.data == "stdin":
                if os.read(key.fd, 4096):
                    continue
                for pid, _conn in children.values():  # the tests' process is gone
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                raise SystemExit(0)
            if key.data == "accept":
                conn, _ = listener.accept()
                msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 22, 3)
                req = json.loads(msg)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    for pidfd, (_pid, other) in children.items():
                        os.close(pidfd)
                        other.close()
                    conn.close()
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                        os.close(fd)
                    return dict(req)
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, conn)
                sel.register(pidfd, selectors.EVENT_READ, "child")
                conn.send(str(pid).encode())
                continue
            pid, conn = children.pop(key.fd)
            sel.unregister(key.fd)
            os.close(key.fd)
            _, status = os.waitpid(pid, 0)
            with contextlib.suppress(OSError):  # the client stopped waiting
                conn.send(str(os.waitstatus_to_exitcode(status)).encode())
            conn.close()


def _stdio(env: dict[str, str]) -> None:
    """New ``sys.std*`` on fds 0-2, buffered and named as a fresh interpreter with ``env`` has
    them."""
    enc = sys.stdout.encoding
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))

    def raw(fd: int, mode: str) -> io.FileIO:
        f = io.FileIO(fd, mode, closefd=False)
        f.name = f"<{('stdin', 'stdout', 'stderr')[fd]}>"  # type: ignore[misc]
        return f

    def writer(fd: int, errors: str, line: bool) -> io.TextIOWrapper:
        if unbuffered:
            stream = io.TextIOWrapper(raw(fd, "w"), encoding=enc, errors=errors, write_through=True)  # type: ignore[arg-type]
        else:
            stream = io.TextIOWrapper(
                io.BufferedWriter(raw(fd, "w")), encoding=enc, errors=errors, line_buffering=line
            )
        stream.mode = "w"  # type: ignore[misc]
        return stream

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(raw(0, "r")), encoding=enc, errors="strict"
    )
    sys.stdin.mode = "r"  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = writer(1, "strict", False)
    sys.stderr = sys.__stderr__ = writer(2, "backslashreplace", True)


def _main() -> None:
    import gc
    import importlib
    import random
    import runpy

    path, *preload = sys.argv[1:]
    for name in preload:
        with contextlib.suppress(ImportError):  # (an extra not installed: the child fails alike)
            importlib.import_module(name)
    # What the imports made is kept out of the children's garbage collections: a collection in
    # a child (at the latest, the one at its exit) went through every object of every preloaded
    # module, writing to each one's header, so each page of them was copied (a forked `runs`
    # spent about 0.1 s of its 0.13 s there). Nothing of it is garbage: the collection first.
    gc.collect()
    gc.freeze()
    req = _serve(path)
    for mod in list(sys.modules.values()):  # a module's own Random (retry jitter): as unseen
        for value in list(getattr(mod, "__dict__", {}).values()):
            if type(value) is random.Random:
                value.seed()
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    _stdio(req["env"])
    script = req["argv"][0]
    sys.argv = list(req["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    _main()
