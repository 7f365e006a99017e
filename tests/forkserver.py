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
            except TimeoutError:
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
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

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

    def __init__(self, preload: Sequence[str] = PRELOAD) -> None:
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
        return all(env.get(k) == self._env.get(k) for k in _STARTUP_VARS)

    def popen(
        self, args: Sequence[str], env: dict[str, str], cwd: str | Path | None = None
    ) -> Forked:
        """``python SCRIPT ARGS...`` (``args`` as for ``Popen``, ``args[0]`` the interpreter),
        stdin inherited, stdout and stderr piped."""
        script, *rest = [str(a) for a in args[1:]]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(self._path)
            req = {"argv": [script, *rest], "env": env, "cwd": str(cwd or os.getcwd())}
            socket.send_fds(conn, [json.dumps(req).encode()], [0, out_w, err_w])
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
    proc = child_process(args, env, cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode is not None
    return subprocess.CompletedProcess(list(map(str, args)), proc.returncode, out, err)


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
    """New ``sys.std*`` on fds 0-2, buffered as a fresh interpreter with ``env`` has them."""
    enc = sys.stdout.encoding
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))

    def writer(fd: int, errors: str, line: bool) -> io.TextIOWrapper:
        if unbuffered:
            raw = io.FileIO(fd, "w", closefd=False)
            return io.TextIOWrapper(raw, encoding=enc, errors=errors, write_through=True)  # type: ignore[arg-type]
        return io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(fd, "w", closefd=False)),
            encoding=enc,
            errors=errors,
            line_buffering=line,
        )

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=enc, errors="strict"
    )
    sys.stdout = sys.__stdout__ = writer(1, "strict", False)
    sys.stderr = sys.__stderr__ = writer(2, "backslashreplace", True)


def _main() -> None:
    import importlib
    import random
    import runpy

    path, *preload = sys.argv[1:]
    for name in preload:
        importlib.import_module(name)
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
