"""What separates the candidate from the host (``bwrap``, ``unshare`` or ``none``): the boundary
chosen and checked to work, the wrapper's command line, the ``nobody`` user, and the vetted
packages found and staged."""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Literal

from .._errors import ConfigError
from .._redact_logs import masked_logger

_log = masked_logger("loopwright.sandbox")

Boundary = Literal["bwrap", "unshare", "none"]
"""What separates the candidate from the host: ``bwrap`` (bubblewrap: own PID, mount, network,
IPC and UTS namespaces, a private ``/proc``, only read-only system directories and the work
directory visible), ``unshare`` (own PID, mount, network, IPC and UTS namespaces with a private
``/proc``, but the host's file system, read-only, read as the ``nobody`` user) or ``none``
(the audit hook alone, which code written to defeat it can get past)."""

ALLOW_UNISOLATED_ENV = "LOOPWRIGHT_SANDBOX_ALLOW_UNISOLATED"
"""Set to ``1`` to run candidates even where no namespace isolation is possible."""


class SandboxUnavailableError(ConfigError):
    """No namespace isolation is possible here and running without it was not allowed."""


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
def nobody_ids(python: str, boundary: str) -> tuple[int, int] | None:
    """The ``nobody`` user's ids, when the child can still run the interpreter and import the
    standard library as it.

    A Python installed under a private directory (``/root/.pyenv``, ``/root`` 0700) cannot be
    read by ``nobody`` on the host; but under ``bwrap`` the prefix's parents are the sandbox's
    own (world-readable) directories, and under ``unshare`` the judge, root in its own mount
    namespace, lays a tmpfs over the private directory and binds the installation back into it
    (``worker_paths``; the host unchanged). There only the interpreter and the standard library
    themselves must be readable; the judge checks the path again before it drops, and keeps
    root (saying so) where it is not. With no boundary the host's directories must allow it.
    Otherwise the child keeps its user.
    """
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        return None
    stdlib = os.path.dirname(os.__file__)
    if python != sys.executable:
        return None
    if boundary in ("bwrap", "unshare"):
        try:
            readable = all(
                os.stat(p).st_mode & 0o005 == 0o005
                for p in (os.path.realpath(stdlib), os.path.realpath(sys.base_prefix))
            ) and bool(os.stat(os.path.realpath(python)).st_mode & 0o001)
        except OSError:
            readable = False
    else:
        readable = _world_readable(stdlib)
    return (pw.pw_uid, pw.pw_gid) if readable else None


def worker_paths(python: str, read_only: Sequence[str]) -> list[str]:
    """What the worker must read under ``unshare``, where the host's directories are its own:
    the interpreter's prefixes and the allowed packages. The judge binds back each one that
    lies behind a directory ``nobody`` may not pass (``_harness``'s ``reveal``)."""
    return [*_prefixes(python), *read_only]


# --- the boundary: bubblewrap, else unshare (root), else none -------------------------------
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
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


def stage_packages(workdir: str, packages: Sequence[tuple[str, str]]) -> str | None:
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


@functools.lru_cache(maxsize=4)
def _bwrap_has_pid_1(bwrap: str) -> bool:
    """Whether this bwrap knows ``--as-pid-1`` (0.5.0 and later); an older one runs the judge
    under its own init, where the worker may signal it."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return b"--as-pid-1" in done.stdout + done.stderr


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
    if _bwrap_has_pid_1(bwrap):
        # The judge as its PID namespace's init, as under unshare: a signal from inside it
        # (the worker's pidfd_send_signal: no audit event) without a handler of the judge's
        # is dropped, so the worker can no longer stop or kill the judge that decides its tests.
        argv.append("--as-pid-1")
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
    for k, v in CLEAN_ENV.items():
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


def wrapped_argv(
    boundary: str, python: str, workdir: str, read_only: Sequence[str] = ()
) -> list[str]:
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
        argv = wrapped_argv(boundary, python, workdir)
        argv += [os.path.realpath(python), "-I", "-S", "-B", "-c", "import os; print(os.getpid())"]
        done = subprocess.run(
            argv, capture_output=True, env=dict(CLEAN_ENV), timeout=30, cwd=workdir, check=False
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
