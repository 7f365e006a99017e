"""``run_tests``: candidate code and its tests run in a limited child process, and what that
process reports read back into a ``SandboxResult`` (its limits, its kill, the tail of what the
candidate printed, the parse of the judge's result lines). The limits, the boundary and the
verdicts are described in ``sandbox``'s docstring; the verifiers over this (``CommandVerifier``,
``python_tests_verifier``) are there too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace

from .._errors import ConfigError
from ._boundary import (
    CLEAN_ENV,
    nobody_ids,
    package_paths,
    sandbox_boundary,
    stage_packages,
    worker_paths,
    wrapped_argv,
)
from ._harness import HARNESS, STAR_MODULES, preamble_stars
from ._results import Limits, SandboxResult, SandboxStatus, TestResult, checked_run
from ._worker import WORKER

__all__ = ["DEFAULT_PREAMBLE", "judge_apart", "not_separated", "run_tests"]

DEFAULT_PREAMBLE = "from typing import *"
"""Executed before the candidate code, as LDB's executor does."""

_MAX_TEXT = 2000  # characters kept of any output or message


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
    judged_only: bool = False,
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
        judged_only: fail, without running it, every test the judge cannot decide outside
            the candidate's process (its verdict would be ``self_reported``), so no expected
            value reaches the candidate: for held-out checks.

    Never raises for anything the candidate does: hangs, crashes, forks, memory exhaustion
    and blocked operations all come back as a ``SandboxResult`` with failed tests and a
    reason. Raises ``SandboxUnavailableError`` (a ``ConfigError``) when no boundary is possible
    and running without one was not allowed.
    """
    given_s = {"timeout_s": timeout_s, "test_timeout_s": test_timeout_s, "test_wall_s": test_wall_s}
    tests = list(checked_run(tests, limits, given_s))
    if not isinstance(judged_only, bool):
        raise ConfigError("must be true or false", field="judged_only")
    if not isinstance(code, str):
        raise ConfigError(f"must be the program's text, got {type(code).__name__}", field="code")
    limits = limits or Limits()
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
    ids = nobody_ids(python, boundary) if (isolate and os.geteuid() == 0) else None
    apart = not_separated(boundary, keeps_root=os.geteuid() == 0 and ids is None)
    job = {
        "code": code,
        "tests": tests,
        "worker": WORKER,
        "judged_only": judged_only,
        "preamble": preamble,
        "star_modules": list(STAR_MODULES),
        # (read here when the sandbox runs this interpreter: the judge need not import them)
        "stars": (
            preamble_stars(preamble)
            if isinstance(preamble, str) and python == sys.executable
            else {}
        ),
        "test_timeout_s": test_timeout_s,
        "test_wall_s": test_wall_s,
        "preload": [name for name, _ in packages if name.isidentifier()],
        "isolate": isolate,
        "boundary": boundary,
        "netns": boundary != "none",
        # under unshare, what the judge binds back where nobody can reach it (``worker_paths``)
        "reach": worker_paths(python, [path for _, path in packages]),
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
    env = dict(CLEAN_ENV)
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="loopwright-sandbox-"))
    # Held from before the child starts: the output is read through it, not by a path the
    # candidate could have renamed or replaced with a link.
    home = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    t0 = time.perf_counter()
    try:
        if ids is not None:
            os.chown(workdir, ids[0], ids[1])
        job["site"] = stage_packages(workdir, packages)
        wrapper = wrapped_argv(boundary, python, workdir, [path for _, path in packages])
        exe = os.path.realpath(python) if wrapper else python
        try:
            proc = subprocess.Popen(
                [*wrapper, exe, "-I", "-S", "-B", "-c", HARNESS],
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
        output = _output_tail(home)
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
            apart,
            ids is not None,
        )
    finally:
        os.close(home)
        shutil.rmtree(workdir, ignore_errors=True)


def not_separated(boundary: str, *, keeps_root: bool) -> str:
    """Why the judge's result lines are within the candidate's reach, in words, or ``""``
    where they are not: the parent's word, from what it set up (a line the child writes could
    be the candidate's; only the judge's first, written before any candidate code runs, is
    read, for the user it kept). The worker keeps root (``isolation="none"`` run as root, an
    interpreter ``nobody`` cannot read even through the boundary's bind-backs): it can open the judge's descriptors, its result pipe
    among them, whatever the judge's dumpable flag says. No boundary (``isolation="none"``):
    no PID namespace hides the judge, nor this process (the same user, holding the other end
    of that pipe), from the worker; the audit hook alone stands between, and it is no boundary
    against code written to pass it. Then every test's verdict, judged or not, is the
    candidate's to forge: ``_parse`` marks them all self-reported (stop 56)."""
    why = [
        *(["no boundary (isolation none)"] if boundary == "none" else []),
        *(["the worker keeps root"] if keeps_root else []),
    ]
    return ", ".join(why)


def judge_apart(*, isolate: bool = True, allow_unisolated: bool = False) -> str:
    """``not_separated`` for a run of this interpreter with these options, before any runs
    (``loopwright check``): ``""`` where the judge would be out of the candidate's reach, or
    where no run would start (no boundary, and running without one not allowed)."""
    try:
        boundary = sandbox_boundary(isolate=isolate, allow_unisolated=allow_unisolated)
    except ConfigError:
        return ""
    root = os.geteuid() == 0
    keeps_root = root and not (isolate and nobody_ids(sys.executable, boundary))
    return not_separated(boundary, keeps_root=keeps_root)


def _output_tail(home: int) -> str:
    """The end of what the candidate printed: ``output.txt`` in the work directory ``home``,
    read only if it is still a plain file. The candidate could have put a link there (to a host
    file, or ``/proc/self/environ``: this process's environment and its API keys), which this
    process, outside the sandbox, would follow into the verdict; or a FIFO, whose opening would
    wait for ever."""
    try:
        fd = os.open("output.txt", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=home)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return ""
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _MAX_TEXT))
            return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


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
    apart: str = "",
    drop: bool = False,
) -> SandboxResult:
    got: dict[int, TestResult] = {}
    isolation: dict[str, str] = {"boundary": boundary}
    judge_said = False
    done = False
    for line in stdout.decode("utf-8", "replace").splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if "isolation" in msg and isinstance(msg["isolation"], dict):
            if judge_said:
                continue  # the first is the judge's, written before any candidate code ran
            judge_said = True
            isolation = {str(k): str(v) for k, v in msg["isolation"].items()}
            isolation["boundary"] = boundary  # the parent's word, not the child's
            if drop and isolation.get("user") != "nobody" and not apart:
                # asked to drop, the judge found the interpreter out of nobody's reach and
                # kept root (``_harness``): the worker is root, its lines may be anyone's
                apart = not_separated(boundary, keeps_root=True)
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
                self_reported=msg.get("self_reported") is True,
                not_judged=msg.get("not_judged") is True,
            )
    if boundary in ("bwrap", "unshare") and rc is not None and 128 < rc < 128 + 65:
        # bwrap reports its child's death by signal N as exit status 128 + N; the judge, its
        # namespace's init (which cannot kill itself by signal), reports the worker's so
        rc = 128 - rc
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
    if apart:
        # the judge's lines could be the candidate's (``not_separated``): every verdict is its
        # word, and no refusal's mark (``not_judged`` takes a failure out of the count) holds
        results = tuple(replace(r, self_reported=True, not_judged=False) for r in results)
        n = len(results)
        isolation["verdict"] = f"self-reported: {n} of {n} tests (judge not separated: {apart})"
    elif "verdict" in isolation:  # the judge's word, with the tests it could not decide
        mine = sum(r.self_reported for r in results)
        if mine:
            isolation["verdict"] = f"self-reported: {mine} of {len(results)} tests"
    return SandboxResult(
        status, results, reason, seconds, output, boundary, isolation, not_separated=apart
    )
