"""Run untrusted Python candidate code with its tests in a sandboxed subprocess.

Every call gets a fresh child interpreter (``python -I -S -B``) in a fresh temporary working
directory, with an environment stripped to ``PATH`` and ``LANG``, and these limits:

* **time** — each test has its own ``test_timeout_s`` of **CPU time** (``ITIMER_PROF`` inside
  the child: user + system seconds of the process), so a slow-but-correct program gets the same
  verdict on an idle and on a loaded machine, and one looping test fails alone (``TIMEOUT``)
  while the others still report. A generous wall-clock backstop per test (``test_wall_s``,
  default ``max(10 × test_timeout_s, test_timeout_s + 10)``) catches a test that waits without
  computing (a sleep, a blocked read), and the parent kills the child's whole process group
  after ``timeout_s`` (twice the sum of the backstops plus 10 s) whatever happens; the child's
  ``RLIMIT_CPU`` is twice the sum of the per-test limits plus 10 s;
* **packages** — ``-I -S``: no site-packages, so only the standard library imports, unless
  ``allow_packages`` lists vetted third-party packages (``["numpy"]``): each is found in this
  interpreter's environment (``package_paths``), linked from a directory of the work directory
  that is the only site directory on ``sys.path``, bound read-only under ``bwrap`` (nothing
  else of site-packages is in the sandbox), and imported before the audit hook goes in (numpy
  loads its libraries with ``ctypes``; the candidate's own ``ctypes`` calls stay refused). A
  package's dependencies must be listed too;
* **resources** — ``RLIMIT_AS`` (memory), ``RLIMIT_CPU``, ``RLIMIT_FSIZE`` (``SIGXFSZ`` is
  ignored, so an oversized write fails with an error instead of killing the child),
  ``RLIMIT_NPROC``, ``RLIMIT_NOFILE`` and ``RLIMIT_CORE = 0``; they are set by the child itself
  before it runs candidate code (no ``preexec_fn``, which is unsafe in a threaded parent);
* **boundary** (``SandboxResult.isolation``, the verdict's ``evidence["isolation"]``) — the
  child runs in its own PID, mount, network, IPC and UTS namespaces with a private ``/proc``, so
  no other process (the parent, with its API keys in its environment, included) is visible:
  ``bwrap`` (bubblewrap, also unprivileged) shows it only read-only ``/usr``, the interpreter's
  prefix, a private ``/dev``, an empty ``/tmp`` and its own work directory; ``unshare``
  (``unshare --pid --mount-proc --fork --net``, root only, when bubblewrap is missing) keeps the
  host's file system in view, read as ``nobody`` where the interpreter allows. Where neither is
  possible (``none``), ``run_tests`` refuses with ``SandboxUnavailableError`` unless told to
  run anyway (``allow_unisolated=True`` or ``LOOPWRIGHT_SANDBOX_ALLOW_UNISOLATED=1``; and
  ``isolate=False`` asks for ``none`` outright); a warning is logged and the verdict's evidence
  carries one;
* **environment** — the child and its wrapper get ``PATH`` and ``LANG`` only; the job comes on
  stdin; no file descriptor is inherited;
* **user** — when running as root the child drops to ``nobody`` before candidate code runs;
* **audit hook** (always, a second layer) — a ``sys.addaudithook`` hook installed before any
  candidate code runs refuses socket creation, process creation (``fork``, ``exec``,
  ``subprocess``, ``os.system``, ``posix_spawn``), signalling other processes, ``ctypes``,
  writes, deletions and renames outside the working directory, and reads of other processes'
  ``/proc`` entries (by the path's text and where it really leads).

Limitations, stated plainly: an audit hook is not a security boundary against code written to
defeat it (with ``isolation="none"`` it is all there is); and the child reports its results on
a pipe the candidate could in principle write to, so a deliberately adversarial candidate could
forge its own per-test results. docs/security.md has the threat model.

Per-test semantics follow LDB's executor (``programming/executors/py_executor.py``): each test
is executed after re-executing ``preamble + code`` in one namespace shared by the tests of a
call; a failing ``assert f(x) == y`` reports the *actual output*, the value of ``f(x)`` (or the
error it raised, or ``TIMEOUT``), as in LDB's ``"# Real Execution Output: <value or error>"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigError
from .._proposal import Proposal, Verdict
from .._state import Finding, TaskState, part_ref
from .._usage import Usage

__all__ = [
    "ALLOW_UNISOLATED_ENV",
    "DEFAULT_PREAMBLE",
    "Boundary",
    "CommandVerifier",
    "Limits",
    "SandboxResult",
    "SandboxUnavailableError",
    "TestResult",
    "package_paths",
    "python_tests_verifier",
    "run_tests",
    "sandbox_boundary",
]

_log = logging.getLogger("loopwright.sandbox")

DEFAULT_PREAMBLE = "from typing import *"
"""Executed before the candidate code, as LDB's executor does."""

SandboxStatus = Literal["completed", "timeout", "crashed", "error"]

Boundary = Literal["bwrap", "unshare", "none"]
"""What separates the candidate from the host: ``bwrap`` (bubblewrap: own PID, mount, network,
IPC and UTS namespaces, a private ``/proc``, only read-only system directories and the work
directory visible), ``unshare`` (own PID, mount, network, IPC and UTS namespaces with a private
``/proc``, but the host's file system, read as the ``nobody`` user where possible) or ``none``
(the audit hook alone, which code written to defeat it can get past)."""

ALLOW_UNISOLATED_ENV = "LOOPWRIGHT_SANDBOX_ALLOW_UNISOLATED"
"""Set to ``1`` to run candidates even where no namespace isolation is possible."""


class SandboxUnavailableError(ConfigError):
    """No namespace isolation is possible here and running without it was not allowed."""


_MAX_TEXT = 2000  # characters kept of any output or message


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one sandboxed run.

    Attributes:
        memory_mb: address-space limit (``RLIMIT_AS``).
        cpu_s: CPU-seconds limit of the whole child (``RLIMIT_CPU``); ``None`` means twice the
            sum of the per-test CPU limits plus 10 s.
        file_mb: largest file the child may write (``RLIMIT_FSIZE``).
        processes: ``RLIMIT_NPROC`` (applies to the unprivileged user; root ignores it, which
            is why process creation is also refused by the audit hook).
        open_files: ``RLIMIT_NOFILE``.
    """

    memory_mb: int = 1024
    cpu_s: int | None = None
    file_mb: int = 16
    processes: int = 64
    open_files: int = 256


@dataclass(frozen=True, slots=True)
class TestResult:
    """The outcome of one test.

    Attributes:
        test: the test's source (usually one ``assert`` line).
        passed: whether it ran without an exception.
        actual: LDB's "Real Execution Output": the value of the assert's left-hand call, the
            error it raised, or ``TIMEOUT``; ``None`` when the test passed.
        error: the exception that failed the test, ``"Type: message"``.
        seconds: how long the test ran.
    """

    test: str
    passed: bool
    actual: str | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def feedback(self) -> str:
        """LDB's feedback line: ``"<test> # Real Execution Output: <actual>"``."""
        return f"{self.test} # Real Execution Output: {self.actual}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "passed": self.passed,
            "actual": self.actual,
            "error": self.error,
            "seconds": self.seconds,
        }


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """The outcome of one sandboxed run.

    Attributes:
        status: ``completed`` (every test ran), ``timeout`` (killed at the wall-clock limit),
            ``crashed`` (the child died: a signal, a resource limit, a hard exit) or ``error``
            (the sandbox could not start).
        tests: one result per test, in order; tests the child never finished are failed with
            the reason.
        reason: why the run did not complete, in words (empty when it completed).
        seconds: wall-clock time of the whole run.
        output: the tail of what the candidate printed.
        isolation: the boundary in force (``Boundary``: ``bwrap``, ``unshare`` or ``none``).
        layers: every layer in force: ``boundary``, ``network`` (``namespace`` or
            ``audit-hook``), ``user`` (``nobody`` or ``unchanged``).
    """

    status: SandboxStatus
    tests: tuple[TestResult, ...]
    reason: str = ""
    seconds: float = 0.0
    output: str = ""
    isolation: str = "none"
    layers: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "completed" and all(t.passed for t in self.tests)

    @property
    def n_passed(self) -> int:
        return sum(t.passed for t in self.tests)

    @property
    def failed(self) -> tuple[TestResult, ...]:
        return tuple(t for t in self.tests if not t.passed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "passed": self.passed,
            "tests": [t.to_dict() for t in self.tests],
            "reason": self.reason,
            "seconds": self.seconds,
            "output": self.output,
            "isolation": self.isolation,
            "layers": dict(self.layers),
        }


# The child. It is passed with ``-c`` (no file to tamper with) and reads its job from stdin.
# Everything it needs is imported before the audit hook goes in.
_HARNESS = r"""
import ast, builtins, io, json, os, resource, signal, sys, time, traceback
MAX = 2000
job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
def emit(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()
cand = os.open("output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
cand_r = os.open("output.txt", os.O_RDONLY)
os.dup2(cand, 1)
os.dup2(cand, 2)
def reset_output():
    # Each test starts with the output as the first one did (a test that closed or replaced
    # stdout must not fail the next ones) and with the whole file-size limit: what earlier
    # tests printed is cut to its tail (all the parent reads), or a chatty test would fail the
    # later ones with EFBIG.
    try:
        os.dup2(cand, 1)
        os.dup2(cand, 2)
        size = os.fstat(cand).st_size
        if size > 4 * MAX:
            tail = os.pread(cand_r, MAX, size - MAX)
            os.ftruncate(cand, 0)
            os.lseek(cand, 0, os.SEEK_SET)  # shared with fds 1 and 2
            os.write(cand, tail)
        global cand_out
        if cand_out.closed:
            cand_out = candidate_stdout()
        sys.stdout = sys.stderr = cand_out
    except BaseException:
        pass
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
os.close(devnull)
def candidate_stdout():
    return io.TextIOWrapper(os.fdopen(1, "wb", buffering=0, closefd=False), write_through=True)
cand_out = candidate_stdout()
sys.stdout = sys.stderr = cand_out
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
iso = {"boundary": job["boundary"], "network": "audit-hook", "user": "unchanged"}
if job["netns"]:
    iso["network"] = "namespace"
elif job["isolate"] and os.geteuid() == 0:
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x40000000) == 0:
            iso["network"] = "namespace"
    except Exception:
        pass
uid, gid = job["uid"], job["gid"]
lim = job["limits"]
def setlim(which, value):
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        pass
setlim(resource.RLIMIT_CORE, 0)
setlim(resource.RLIMIT_AS, lim["memory_mb"] * 1024 * 1024)
setlim(resource.RLIMIT_CPU, lim["cpu_s"])
setlim(resource.RLIMIT_FSIZE, lim["file_mb"] * 1024 * 1024)
setlim(resource.RLIMIT_NOFILE, lim["open_files"])
if uid is not None and os.geteuid() == 0:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    iso["user"] = "nobody"
setlim(resource.RLIMIT_NPROC, lim["processes"])
emit({"isolation": iso})
HOME = os.path.realpath(os.getcwd())
MYPID = str(os.getpid())
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
def inside(path):
    if isinstance(path, int):
        return True
    try:
        p = os.fsdecode(path)
    except Exception:
        return False
    real = os.path.realpath(os.path.join(HOME, p))
    return real == HOME or real.startswith(HOME + os.sep)
def proc_ok(path):
    if isinstance(path, int):
        return True
    try:
        joined = os.path.join(HOME, os.fsdecode(path))
        raw = os.path.normpath(joined)
        # realpath too (of the unnormalised path: ".." after a link is taken from the link's
        # target): /proc/self/root/proc/<pid> and /proc/self/cwd/../.. lead elsewhere than
        # their text. A relative path under a dir_fd still escapes: the namespaces are the
        # boundary, this hook is a second layer.
        real = os.path.realpath(joined)
    except Exception:
        return False
    for p in (raw, real):
        if p.startswith("/proc/"):
            head = p.split("/")[2]
            if head.isdigit() and head != MYPID:
                return False
    return True
DENY_PREFIX = ("socket.", "ctypes.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
               "os.kill", "os.killpg", "signal.pthread_kill")
DENY = {"subprocess.Popen", "os.system", "os.forkpty", "pty.spawn", "os.startfile",
        "_posixsubprocess.fork_exec", "os.setuid", "sys.settrace", "sys.setprofile"}
PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
               "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree",
               "shutil.copyfile", "shutil.move", "os.mkfifo", "os.mknod", "os.chdir"}
def why(event, args):
    if event.startswith("socket."):
        return "network access is not allowed in the sandbox (%s)" % event
    if event.startswith("ctypes."):
        return "ctypes is not allowed in the sandbox (%s)" % event
    if event in DENY or event.startswith(DENY_PREFIX):
        return "process creation and control are not allowed in the sandbox (%s)" % event
    if event == "open" and args:
        path, mode, flags = (list(args) + [None, None])[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE)
        if writes and not inside(path):
            return "writing outside the sandbox directory is not allowed: %r" % (path,)
        if not proc_ok(path):
            return "reading other processes' /proc entries is not allowed: %r" % (path,)
        return None
    if event in PATH_EVENTS:
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)) and not inside(a):
                return "%s outside the sandbox directory is not allowed: %r" % (event, a)
    return None
def hook(event, args):
    reason = why(event, args)
    if reason is not None:
        raise PermissionError("sandbox: " + reason)
fired = [None]
def alarm(signum, frame):
    fired[0] = "wall" if signum == signal.SIGALRM else "cpu"
    raise TimeoutError("TIMEOUT")
signal.signal(signal.SIGALRM, alarm)
signal.signal(signal.SIGPROF, alarm)
def clip(s):
    s = str(s)
    return s if len(s) <= MAX else s[:MAX] + "...[%d more characters]" % (len(s) - MAX)
def describe(exc):
    try:
        return describe_(exc)
    except BaseException:  # the harness must outlive any exception the candidate makes
        return clip(type(exc).__name__)
def describe_(exc):
    try:
        msg = str(exc)
    except BaseException:
        msg = ""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.startswith("<test ") or name == "<candidate>":
            # tb_lineno is None for an instruction with no line (a loop's back-edge, hit by
            # the timer): "%d" would raise here and kill the child, failing every test.
            line = tb.tb_lineno
            where = " (%s line %s)" % (name.strip("<>"), "?" if line is None else line)
        tb = tb.tb_next
    return clip(type(exc).__name__ + where + (": " + msg if msg else ""))
def text(exc):
    try:
        return clip(str(exc) or type(exc).__name__)
    except BaseException:  # an exception whose __str__ raises must not kill the harness
        return clip(type(exc).__name__)
def timed(fn, seconds, wall):
    # The limit is CPU time (ITIMER_PROF: this process's user + system time), so a verdict
    # does not depend on how loaded the machine is; the wall-clock timer is a generous
    # backstop for a candidate that waits without computing (sleep, a blocked read).
    # Both timers repeat, so a candidate that catches the TimeoutError is hit again.
    fired[0] = None
    signal.setitimer(signal.ITIMER_PROF, seconds, 0.05)
    signal.setitimer(signal.ITIMER_REAL, wall, 0.5)
    try:
        return fn()
    finally:
        disarm()
def disarm():
    while True:  # a timer may fire while it is being disarmed
        try:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        except TimeoutError:
            continue
def limit_note():
    if fired[0] == "cpu":
        return " [CPU-time limit of %gs per test]" % per_test
    if fired[0] == "wall":
        return " [wall-clock backstop of %gs per test]" % per_wall
    return ""
def call_expr(test):
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    t = tree.body[0].test
    if isinstance(t, ast.Compare):
        t = t.left
    return compile(ast.Expression(t), "<test>", "eval")
preamble, code, tests = job["preamble"], job["code"], job["tests"]
per_test = job["test_timeout_s"]
per_wall = job["test_wall_s"]
try:
    pre_c = compile(preamble, "<preamble>", "exec")
    code_c = compile(code, "<candidate>", "exec")
    compile_error = None
except BaseException as exc:
    pre_c = code_c = None
    compile_error = exc
sys.dont_write_bytecode = True
if job.get("site"):
    sys.path.append(job["site"])  # the allowed packages, and nothing else installed
    # Vetted code is imported before the hook: numpy loads its libraries with ctypes, which
    # the hook refuses the candidate (a later ctypes call from it is still refused).
    for name in job["preload"]:
        try:
            __import__(name)
        except BaseException:
            pass  # the candidate's own import reports it
sys.addaudithook(hook)
ns = {"__name__": "__sandbox__", "__builtins__": builtins}
for i, test in enumerate(tests):
    reset_output()
    t0 = time.perf_counter()
    try:
        if compile_error is not None:
            raise compile_error
        test_c = compile(test, "<test %d>" % i, "exec")
        def run_one():
            exec(pre_c, ns)
            exec(code_c, ns)
            exec(test_c, ns)
        timed(run_one, per_test, per_wall)
        emit({"i": i, "passed": True, "seconds": time.perf_counter() - t0})
        continue
    except BaseException as exc:
        error = describe(exc)
        if isinstance(exc, TimeoutError) and str(exc) == "TIMEOUT":
            actual = "TIMEOUT"
            error = clip(error + limit_note())
        else:
            actual = text(exc) if not isinstance(exc, AssertionError) else None
    seconds = time.perf_counter() - t0
    expr = None if compile_error is not None else call_expr(test)
    if actual == "TIMEOUT":
        expr = None  # re-running the call would only time out again, at the same cost
    if expr is not None:
        try:
            def get_output():
                exec(pre_c, ns)
                exec(code_c, ns)
                return eval(expr, ns)
            actual = clip(timed(get_output, per_test, per_wall))
        except TimeoutError as exc:
            actual = "TIMEOUT" if str(exc) == "TIMEOUT" else text(exc)
        except BaseException as exc:
            actual = text(exc)
    elif actual is None:
        actual = error
    emit({"i": i, "passed": False, "actual": clip(actual), "error": error, "seconds": seconds})
emit({"done": True})
os._exit(0)
"""


def _world_readable(path: str) -> bool:
    """Whether an unprivileged user can reach and list ``path`` (every ancestor o+x, it o+rx)."""
    p = os.path.realpath(path)
    try:
        if os.stat(p).st_mode & 0o005 != 0o005:
            return False
        while True:
            parent = os.path.dirname(p)
            if parent == p:
                return True
            if not os.stat(parent).st_mode & 0o001:
                return False
            p = parent
    except OSError:
        return False


@functools.lru_cache(maxsize=8)
def _nobody(python: str, boundary: str) -> tuple[int, int] | None:
    """The ``nobody`` user's ids, when the child can still import the standard library as it.

    A Python installed under a private directory (``/root/.pyenv``) cannot be read by
    ``nobody`` on the host; under ``bwrap`` the prefix's parents are the sandbox's own
    (world-readable) directories, so only the standard library itself must be readable.
    Otherwise the child keeps its user.
    """
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        return None
    stdlib = os.path.dirname(os.__file__)
    if python != sys.executable:
        return None
    if boundary == "bwrap":
        try:
            readable = all(
                os.stat(p).st_mode & 0o005 == 0o005
                for p in (os.path.realpath(stdlib), os.path.realpath(sys.base_prefix))
            )
        except OSError:
            readable = False
    else:
        readable = _world_readable(stdlib)
    return (pw.pw_uid, pw.pw_gid) if readable else None


# --- the boundary: bubblewrap, else unshare (root), else none -------------------------------
_CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
# Top-level system directories the interpreter may need (shared libraries, the loader); on a
# merged-/usr system most are symlinks into /usr and are recreated as symlinks.
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _prefixes(python: str) -> list[str]:
    """Directories the interpreter reads: its installation prefix (and this process's base
    prefix when it is this interpreter), outside ``/usr``, which is bound whole."""
    real = os.path.realpath(python)
    found = [os.path.dirname(os.path.dirname(real))]
    if python == sys.executable:
        found.append(os.path.realpath(sys.base_prefix))
    out: list[str] = []
    for p in found:
        if p in ("/", "") or p == "/usr" or p.startswith("/usr/") or p in out:
            continue
        out.append(p)
    return out


def _parents(path: str) -> list[str]:
    """``/a/b/c`` → ``["/a", "/a/b"]``."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def package_paths(names: Sequence[str], *, python: str | None = None) -> list[tuple[str, str]]:
    """Where each allowed package lives: ``[(entry name, real path), ...]`` for the package
    (or single module) and its companions in the same site directory (``<name>.libs``,
    bundled shared libraries; ``<name>-*.dist-info``, its metadata). Found in this
    interpreter's environment without importing anything; a name that is not installed, is
    not a top-level module name, or is part of the standard library is a ``ConfigError``.
    A package's own dependencies are not added: list them too."""
    if isinstance(names, str):
        names = [names]
    if not names:
        return []
    if python is not None and os.path.realpath(python) != os.path.realpath(sys.executable):
        raise ConfigError(
            "allow_packages finds packages in this interpreter's environment; the sandbox's "
            f"python ({python}) is another one",
            field="allow_packages",
        )
    import importlib.machinery
    import importlib.util

    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    out: list[tuple[str, str]] = []
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(
                f"{name!r} is not a top-level module name (e.g. 'numpy')", field="allow_packages"
            )
        spec = importlib.machinery.PathFinder.find_spec(name, sys.path)
        if spec is None:
            raise ConfigError(
                f"package {name!r} is not installed in {sys.prefix}", field="allow_packages"
            )
        locations = list(spec.submodule_search_locations or ())
        path = os.path.realpath(locations[0] if locations else str(spec.origin))
        site = os.path.dirname(path)
        if site == stdlib or (site.startswith(stdlib + os.sep) and "site-packages" not in site):
            raise ConfigError(
                f"{name!r} is part of the standard library: it is always importable",
                field="allow_packages",
            )
        entries = [(os.path.basename(path), path)]
        with contextlib.suppress(OSError):
            norm = name.lower().replace("-", "_")
            for entry in sorted(os.listdir(site)):
                low = entry.lower()
                if low == f"{norm}.libs" or (
                    low.startswith(f"{norm}-") and low.endswith(".dist-info")
                ):
                    entries.append((entry, os.path.realpath(os.path.join(site, entry))))
        out += [e for e in entries if e not in out]
    return out


def _stage_packages(workdir: str, packages: Sequence[tuple[str, str]]) -> str | None:
    """A directory in ``workdir`` holding one symbolic link per allowed entry: the only
    site directory the child puts on ``sys.path``, so nothing else installed is importable
    (under ``bwrap`` the targets are the only parts of site-packages bound at all)."""
    if not packages:
        return None
    staged = os.path.join(workdir, ".packages")
    os.mkdir(staged, 0o755)
    for entry, path in packages:
        os.symlink(path, os.path.join(staged, entry))
    return staged


def _bwrap_argv(bwrap: str, python: str, workdir: str, read_only: Sequence[str] = ()) -> list[str]:
    argv = [
        bwrap,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
    ]
    if os.geteuid() != 0:
        argv.append("--unshare-user")  # what lets an unprivileged bwrap make the others
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr"]
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    made: set[str] = {"/tmp", "/usr", "/proc", "/dev", *_SYSTEM_DIRS}
    prefixes = _prefixes(python)
    # a package inside a prefix is already there (read-only, with the whole prefix)
    extra = [p for p in read_only if not any(p.startswith(q + os.sep) for q in prefixes)]
    binds = [(p, "--ro-bind") for p in [*prefixes, *extra]] + [(workdir, "--bind")]
    for path, mode in binds:
        if path in made:
            continue
        for parent in _parents(path):
            if parent not in made:  # bwrap would copy the host's mode (/root is 0700)
                argv += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        argv += [mode, path, path]
        made.add(path)
    argv += ["--chdir", workdir, "--clearenv"]
    for k, v in _CLEAN_ENV.items():
        argv += ["--setenv", k, v]
    return argv


def _unshare_argv(unshare: str) -> list[str]:
    return [
        unshare,
        "--pid",
        "--mount-proc",
        "--fork",
        "--kill-child",
        "--net",
        "--ipc",
        "--uts",
        "--",
    ]


def _wrap(boundary: str, python: str, workdir: str, read_only: Sequence[str] = ()) -> list[str]:
    if boundary == "bwrap":
        return _bwrap_argv(shutil.which("bwrap") or "bwrap", python, workdir, read_only)
    if boundary == "unshare":
        return _unshare_argv(shutil.which("unshare") or "unshare")
    return []


@functools.lru_cache(maxsize=16)
def _works(boundary: str, python: str) -> bool:
    """Whether ``boundary`` can start ``python`` here (checked once per process: kernels and
    containers refuse user or PID namespaces in ways only trying reveals)."""
    if boundary == "bwrap" and shutil.which("bwrap") is None:
        return False
    if boundary == "unshare" and (os.geteuid() != 0 or shutil.which("unshare") is None):
        return False
    workdir = tempfile.mkdtemp(prefix="loopwright-probe-")
    try:
        argv = _wrap(boundary, python, workdir)
        argv += [os.path.realpath(python), "-I", "-S", "-B", "-c", "import os; print(os.getpid())"]
        done = subprocess.run(
            argv, capture_output=True, env=dict(_CLEAN_ENV), timeout=30, cwd=workdir, check=False
        )
        # In its own PID namespace the interpreter is 1 (unshare) or 2 (under bwrap's init).
        return done.returncode == 0 and done.stdout.strip() in (b"1", b"2")
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _allowed_unisolated() -> bool:
    return os.environ.get(ALLOW_UNISOLATED_ENV, "").strip().lower() in ("1", "true", "yes")


_warned: set[str] = set()  # warnings already logged by this process


def sandbox_boundary(
    *, isolate: bool = True, allow_unisolated: bool = False, python: str | None = None
) -> Boundary:
    """The boundary candidates get here: ``bwrap`` when bubblewrap works, else ``unshare``
    when running as root, else ``none`` — which is refused with ``SandboxUnavailableError``
    unless ``isolate=False``, ``allow_unisolated=True`` or ``LOOPWRIGHT_SANDBOX_ALLOW_UNISOLATED=1``
    says to run anyway (then a warning is logged once per process).
    """
    python = python or sys.executable
    if isolate:
        if _works("bwrap", python):
            return "bwrap"
        if _works("unshare", python):
            return "unshare"
        if not (allow_unisolated or _allowed_unisolated()):
            raise SandboxUnavailableError(
                "no sandbox boundary is possible here: candidate code would run with only an "
                "audit hook between it and this process (its environment, files and network). "
                "Install bubblewrap (`apt-get install bubblewrap`; it needs unprivileged user "
                "namespaces) or run as root for `unshare`; or accept the risk with "
                f"{ALLOW_UNISOLATED_ENV}=1 (or the verifier's allow_unisolated=true)",
                field="sandbox",
            )
    if "none" not in _warned:
        _warned.add("none")
        _log.warning(
            "sandbox: candidate code runs WITHOUT namespace isolation (isolation=none): only an "
            "audit hook guards this process's secrets, files and network"
        )
    return "none"


def _clip(text: str, n: int = _MAX_TEXT) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _signal_reason(rc: int, limits: Limits, cpu_s: int) -> str:
    sig = -rc
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    if sig == signal.SIGXCPU:
        return f"the candidate used up its CPU-time limit ({cpu_s} s) and was killed ({name})"
    if sig == signal.SIGKILL:
        return (
            f"the candidate was killed ({name}); likely cause: memory exhaustion "
            f"(limit {limits.memory_mb} MiB) or the CPU-time limit"
        )
    if sig == signal.SIGSEGV:
        return f"the candidate crashed the interpreter ({name}; often unbounded recursion)"
    return f"the candidate died from {name}"


def run_tests(
    code: str,
    tests: Sequence[str],
    *,
    timeout_s: float | None = None,
    test_timeout_s: float = 1.0,
    preamble: str = DEFAULT_PREAMBLE,
    limits: Limits | None = None,
    isolate: bool = True,
    python: str | None = None,
    allow_unisolated: bool = False,
    test_wall_s: float | None = None,
    allow_packages: Sequence[str] = (),
) -> SandboxResult:
    """Run ``code`` and then each of ``tests`` in a sandboxed child interpreter.

    Args:
        code: the candidate program.
        tests: test snippets, usually one ``assert`` each; a multi-line script (a
            ``def check(candidate): ...`` followed by ``check(f)``) is one test.
        timeout_s: wall-clock backstop for the whole run; default: twice the sum of the
            per-test wall-clock backstops plus 10 s (only a candidate that waits without
            computing gets near it).
        test_timeout_s: per-test limit in CPU seconds (LDB used 1 s for visible tests, 10 s
            for hidden ones, on the wall clock): CPU time does not stretch when the machine is
            loaded, so the verdict does not depend on the load.
        test_wall_s: per-test wall-clock backstop, for a test that waits without computing;
            default: ``max(10 × test_timeout_s, test_timeout_s + 10)``.
        allow_packages: top-level names of vetted third-party packages the candidate may
            import (``["numpy"]``), found in this interpreter's environment and exposed
            read-only (see ``package_paths``); nothing else of site-packages is visible.
        preamble: executed before ``code`` for every test (LDB: ``from typing import *``).
        limits: resource limits (``Limits()`` by default).
        isolate: run inside a namespace boundary (``sandbox_boundary``) and drop to
            ``nobody`` when running as root; ``False`` runs with the audit hook alone
            (``isolation="none"``), as an explicit choice.
        python: the interpreter to run (default: this one).
        allow_unisolated: where no boundary is possible, run anyway (``isolation="none"``)
            instead of raising ``SandboxUnavailableError``; the environment variable
            ``LOOPWRIGHT_SANDBOX_ALLOW_UNISOLATED=1`` does the same.

    Never raises for anything the candidate does: hangs, crashes, forks, memory exhaustion
    and blocked operations all come back as a ``SandboxResult`` with failed tests and a
    reason. Raises ``SandboxUnavailableError`` (a ``ConfigError``) when no boundary is possible
    and running without one was not allowed.
    """
    limits = limits or Limits()
    tests = [str(t) for t in tests]
    if test_wall_s is None:
        test_wall_s = max(10.0 * test_timeout_s, test_timeout_s + 10.0)
    if timeout_s is None:
        timeout_s = test_wall_s * max(1, len(tests)) * 2 + 10.0
    # The whole child's CPU: every test and its output re-run at their limit, plus start-up.
    cpu_s = (
        limits.cpu_s
        if limits.cpu_s is not None
        else int(test_timeout_s * max(1, len(tests)) * 2 + 10) + 1
    )
    packages = package_paths(allow_packages, python=python)
    python = python or sys.executable
    boundary = sandbox_boundary(isolate=isolate, allow_unisolated=allow_unisolated, python=python)
    ids = _nobody(python, boundary) if (isolate and os.geteuid() == 0) else None
    job = {
        "code": code,
        "tests": tests,
        "preamble": preamble,
        "test_timeout_s": test_timeout_s,
        "test_wall_s": test_wall_s,
        "preload": [name for name, _ in packages if name.isidentifier()],
        "isolate": isolate,
        "boundary": boundary,
        "netns": boundary != "none",
        "uid": ids[0] if ids else None,
        "gid": ids[1] if ids else None,
        "limits": {
            "memory_mb": limits.memory_mb,
            "cpu_s": cpu_s,
            "file_mb": limits.file_mb,
            "processes": limits.processes,
            "open_files": limits.open_files,
        },
    }
    # Nothing of this process's environment reaches the child, nor its wrapper (under bwrap the
    # wrapper is the sandbox's PID 1, whose environ the candidate can read).
    env = dict(_CLEAN_ENV)
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="loopwright-sandbox-"))
    t0 = time.perf_counter()
    try:
        if ids is not None:
            os.chown(workdir, ids[0], ids[1])
        job["site"] = _stage_packages(workdir, packages)
        wrapper = _wrap(boundary, python, workdir, [path for _, path in packages])
        exe = os.path.realpath(python) if wrapper else python
        try:
            proc = subprocess.Popen(
                [*wrapper, exe, "-I", "-S", "-B", "-c", _HARNESS],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            return _fill(
                tests,
                "error",
                f"could not start the sandbox: {exc}",
                time.perf_counter() - t0,
                boundary,
            )
        timed_out = False
        try:
            stdout, stderr = proc.communicate(json.dumps(job).encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            try:
                stdout, stderr = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - pipes held by an escapee
                stdout, stderr = b"", b""
        finally:
            _kill_group(proc)  # nothing of the candidate outlives the call
        seconds = time.perf_counter() - t0
        output = ""
        with contextlib.suppress(OSError), open(os.path.join(workdir, "output.txt"), "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _MAX_TEXT))
            output = fh.read().decode("utf-8", "replace")
        return _parse(
            tests,
            stdout,
            stderr,
            proc.returncode,
            timed_out,
            timeout_s,
            seconds,
            output,
            limits,
            cpu_s,
            boundary,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _fill(
    tests: Sequence[str], status: SandboxStatus, reason: str, seconds: float, boundary: str
) -> SandboxResult:
    return SandboxResult(
        status=status,
        tests=tuple(TestResult(t, False, actual=reason, error=reason) for t in tests),
        reason=reason,
        seconds=seconds,
        isolation=boundary,
        layers={"boundary": boundary},
    )


def _parse(
    tests: Sequence[str],
    stdout: bytes,
    stderr: bytes,
    rc: int | None,
    timed_out: bool,
    timeout_s: float,
    seconds: float,
    output: str,
    limits: Limits,
    cpu_s: int,
    boundary: str,
) -> SandboxResult:
    got: dict[int, TestResult] = {}
    isolation: dict[str, str] = {"boundary": boundary}
    done = False
    for line in stdout.decode("utf-8", "replace").splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if "isolation" in msg and isinstance(msg["isolation"], dict):
            isolation = {str(k): str(v) for k, v in msg["isolation"].items()}
            isolation["boundary"] = boundary  # the parent's word, not the child's
        elif msg.get("done") is True:
            done = True
        elif isinstance(msg.get("i"), int) and 0 <= msg["i"] < len(tests):
            i = msg["i"]
            got[i] = TestResult(
                tests[i],
                bool(msg.get("passed")),
                actual=None if msg.get("passed") else str(msg.get("actual")),
                error=None if msg.get("error") is None else str(msg.get("error")),
                seconds=float(msg.get("seconds") or 0.0),
            )
    if boundary == "bwrap" and rc is not None and 128 < rc < 128 + 65:
        rc = 128 - rc  # bwrap reports its child's death by signal N as exit status 128 + N
    status: SandboxStatus
    if done and len(got) == len(tests):
        status, reason = "completed", ""
    elif timed_out:
        status = "timeout"
        reason = f"the candidate ran past the sandbox's wall-clock limit of {timeout_s:g} s and was killed"
    else:
        status = "crashed"
        if rc is not None and rc < 0:
            reason = _signal_reason(rc, limits, cpu_s)
        else:
            tail = _clip(stderr.decode("utf-8", "replace").strip() or output.strip(), 500)
            reason = f"the sandbox exited early (exit code {rc})" + (f": {tail}" if tail else "")
    results = tuple(
        got.get(i) or TestResult(t, False, actual=reason, error=f"not finished: {reason}")
        for i, t in enumerate(tests)
    )
    return SandboxResult(status, results, reason, seconds, output, boundary, isolation)


class CommandVerifier:
    """A verifier that runs the candidate program's tests in the sandbox.

    The program is the value of part ``part`` of artifact ``artifact``; the tests are
    ``tests`` when given, else ``state.task[tests_key]`` (a list of snippets, or one script;
    a dotted key such as ``"held_out.tests"`` reads a nested table). The verdict
    passes when every test passes; its score is the passed fraction; every failing test is a
    located finding (artifact, part, dimension ``"test"``) whose evidence carries the test, the
    actual output and LDB's feedback line. No tests at all is a vacuous pass: ``evidence``
    says ``vacuous`` (``Verdict.vacuous``), a warning finding says why, and the contract refuses
    success on it unless ``contract.success.allow_vacuous = true``. Calls are async (the
    sandbox runs in a worker thread), so many runs can verify
    concurrently.
    """

    def __init__(
        self,
        *,
        tests: Sequence[str] | None = None,
        tests_key: str = "visible_tests",
        artifact: str = "program",
        part: str = "code",
        test_timeout_s: float = 1.0,
        timeout_s: float | None = None,
        preamble: str = DEFAULT_PREAMBLE,
        limits: Limits | None = None,
        isolate: bool = True,
        allow_unisolated: bool = False,
        name: str = "",
        test_wall_s: float | None = None,
        allow_packages: Sequence[str] = (),
    ) -> None:
        if not isinstance(allow_unisolated, bool):
            raise ConfigError("must be true or false", field="allow_unisolated")
        self.allow_unisolated = allow_unisolated
        self.test_wall_s = test_wall_s
        # checked now: a package that is not installed is a spec error, not a failing test
        package_paths(allow_packages)
        self.allow_packages = (
            (allow_packages,) if isinstance(allow_packages, str) else tuple(allow_packages)
        )
        self.tests = None if tests is None else tuple(str(t) for t in tests)
        self.tests_key = tests_key
        self.artifact = artifact
        self.part = part
        self.test_timeout_s = test_timeout_s
        self.timeout_s = timeout_s
        self.preamble = preamble
        self.limits = limits or Limits()
        self.isolate = isolate
        self.__name__ = name or f"tests[{tests_key}]"

    def tests_for(self, state: TaskState) -> list[str]:
        if self.tests is not None:
            return list(self.tests)
        raw: Any = state.task
        for key in self.tests_key.split("."):
            raw = raw.get(key) if isinstance(raw, Mapping) else None
        if raw is None:
            raise ValueError(f"the task has no {self.tests_key!r} (a list of test snippets)")
        if isinstance(raw, str):
            return [raw]
        return [str(t) for t in raw]

    def code_for(self, state: TaskState) -> str:
        art = state.artifacts.get(self.artifact)
        part = None if art is None else art.parts.get(self.part)
        if part is None:
            raise ValueError(f"the state has no part {self.artifact}/{self.part}")
        return str(part.value)

    def check(self, state: TaskState) -> Verdict:
        """The verdict on ``state`` (synchronous)."""
        tests = self.tests_for(state)
        if not tests:
            # Vacuously true, and marked so: the contract refuses success on it unless
            # contract.success.allow_vacuous says otherwise; the finding says why.
            where = "the verifier's tests" if self.tests is not None else f"task.{self.tests_key}"
            return Verdict(
                passed=True,
                score=1.0,
                findings=(
                    Finding(
                        f"nothing to check: {where} holds no tests, so this pass is vacuous "
                        "(success is refused on it unless contract.success.allow_vacuous = true)",
                        self.artifact,
                        self.part,
                        "vacuous",
                        severity="warning",
                    ),
                ),
                evidence={"passed": 0, "total": 0, "vacuous": True},
                checked=(part_ref(self.artifact, self.part),),
            )
        result = run_tests(
            self.code_for(state),
            tests,
            timeout_s=self.timeout_s,
            test_timeout_s=self.test_timeout_s,
            preamble=self.preamble,
            limits=self.limits,
            isolate=self.isolate,
            allow_unisolated=self.allow_unisolated,
            test_wall_s=self.test_wall_s,
            allow_packages=self.allow_packages,
        )
        return self.verdict(result)

    def verdict(self, result: SandboxResult) -> Verdict:
        """Turn a sandbox result into a verdict with one located finding per failing test."""
        findings = tuple(
            Finding(
                f"test {i + 1} failed: {t.feedback}"
                + (
                    f" ({result.reason})"
                    if result.reason and t.error and "not finished" in t.error
                    else ""
                ),
                self.artifact,
                self.part,
                "test",
                evidence={
                    "index": i,
                    "test": t.test,
                    "actual": t.actual,
                    "error": t.error,
                    "feedback": t.feedback,
                },
            )
            for i, t in enumerate(result.tests)
            if not t.passed
        )
        total = len(result.tests)
        return Verdict(
            passed=result.passed,
            score=result.n_passed / total if total else 1.0,
            findings=findings,
            evidence={
                "passed": result.n_passed,
                "total": total,
                "status": result.status,
                "reason": result.reason,
                "feedback": [t.feedback for t in result.failed],
                "output": result.output,
                "isolation": result.isolation,
                "layers": dict(result.layers),
                **(
                    {"warning": "candidate code ran without namespace isolation"}
                    if result.isolation == "none"
                    else {}
                ),
                "seconds": round(result.seconds, 4),
            },
            usage=Usage(0.0, 0, result.seconds),
            checked=(part_ref(self.artifact, self.part),),
        )

    async def __call__(self, state: TaskState, proposal: Proposal) -> Verdict:
        return await asyncio.to_thread(self.check, state)


def python_tests_verifier(
    *,
    tests: Sequence[str] | None = None,
    tests_key: str = "visible_tests",
    artifact: str = "program",
    part: str = "code",
    test_timeout_s: float = 1.0,
    timeout_s: float | None = None,
    preamble: str = DEFAULT_PREAMBLE,
    memory_mb: int = 1024,
    file_mb: int = 16,
    isolate: bool = True,
    allow_unisolated: bool = False,
    name: str = "",
    test_wall_s: float | None = None,
    allow_packages: Sequence[str] = (),
) -> CommandVerifier:
    """A ``CommandVerifier`` from plain options (the form a loop spec's ``options`` table has):

    ```toml
    [[verifiers]]
    name = "visible_tests"
    ref = "loopwright.verifiers:python_tests_verifier"
    options = { tests_key = "visible_tests", test_timeout_s = 1.0, allow_packages = ["numpy"] }
    ```

    ``test_timeout_s`` is CPU seconds per test; ``allow_packages`` names vetted third-party
    packages the candidate may import (``run_tests``).
    """
    return CommandVerifier(
        tests=tests,
        tests_key=tests_key,
        artifact=artifact,
        part=part,
        test_timeout_s=test_timeout_s,
        timeout_s=timeout_s,
        preamble=preamble,
        limits=Limits(memory_mb=memory_mb, file_mb=file_mb),
        isolate=isolate,
        allow_unisolated=allow_unisolated,
        name=name,
        test_wall_s=test_wall_s,
        allow_packages=allow_packages,
    )
