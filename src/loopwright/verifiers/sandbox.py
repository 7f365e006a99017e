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

**Verdicts** (stop 54) — two processes: the judge (``_harness``) never runs candidate code and
alone reports to this process; the worker (``_worker``, a fresh interpreter the judge starts
after the limits and the user drop, not dumpable-readable by it) runs the candidate. A test of
the form ``assert EXPR [, MSG]`` whose candidate calls have literal arguments is *judged*: the
worker is sent only those calls and answers their values as plain data (numbers, strings,
bytes, lists, tuples, dicts, sets, ``None``), and the judge evaluates the rest of the test, its
expected values included, over them. Any other test (a script, a value that is not plain
data) runs whole in the worker and is ``self_reported`` (``TestResult.self_reported``,
``layers["verdict"]``); ``judged_only=True`` fails such a test instead of running it, so no
expected value ever enters the candidate's process.

Limitations, stated plainly: an audit hook is not a security boundary against code written to
defeat it (with ``isolation="none"`` it is all there is); a self-reported verdict can be forged
by a candidate written to; and where the worker keeps root (no ``nobody`` possible) it can
reach the judge. docs/security.md has the threat model.

Per-test semantics follow LDB's executor (``programming/executors/py_executor.py``): each test
is executed after re-executing ``preamble + code`` in one namespace shared by the tests of a
call; a failing ``assert f(x) == y`` reports the *actual output*, the value of ``f(x)`` (or the
error it raised, or ``TIMEOUT``), as in LDB's ``"# Real Execution Output: <value or error>"``.
"""

from __future__ import annotations

import asyncio
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
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import ConfigError
from .._proposal import Proposal, Verdict
from .._state import Finding, TaskState, part_ref
from .._usage import Usage
from ._boundary import (
    _CLEAN_ENV,
    ALLOW_UNISOLATED_ENV,
    Boundary,
    SandboxUnavailableError,
    _nobody,
    _stage_packages,
    _wrap,
    package_paths,
    sandbox_boundary,
)
from ._harness import _HARNESS, STAR_MODULES, preamble_stars
from ._results import Limits, SandboxResult, SandboxStatus, TestResult, checked_run
from ._worker import _WORKER

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
    ids = _nobody(python, boundary) if (isolate and os.geteuid() == 0) else None
    job = {
        "code": code,
        "tests": tests,
        "worker": _WORKER,
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
    # Held from before the child starts: the output is read through it, not by a path the
    # candidate could have renamed or replaced with a link.
    home = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
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
        )
    finally:
        os.close(home)
        shutil.rmtree(workdir, ignore_errors=True)


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
    if "verdict" in isolation:  # the judge's word, with the tests it could not decide
        mine = sum(r.self_reported for r in results)
        if mine:
            isolation["verdict"] = f"self-reported: {mine} of {len(results)} tests"
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
    concurrently. Each test is judged outside the candidate's process where its form allows
    (``run_tests``); the verdict's ``evidence["self_reported"]`` lists the others and
    ``judged_only=True`` fails them instead: set it on a held-out check.
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
        judged_only: bool = False,
    ) -> None:
        if not isinstance(allow_unisolated, bool):
            raise ConfigError("must be true or false", field="allow_unisolated")
        if not isinstance(judged_only, bool):
            raise ConfigError("must be true or false", field="judged_only")
        self.judged_only = judged_only
        self.allow_unisolated = allow_unisolated
        self.test_wall_s = test_wall_s
        # checked now: a package that is not installed is a spec error, not a failing test
        package_paths(allow_packages)
        self.allow_packages = (
            (allow_packages,) if isinstance(allow_packages, str) else tuple(allow_packages)
        )
        seconds = {
            "timeout_s": timeout_s,
            "test_timeout_s": test_timeout_s,
            "test_wall_s": test_wall_s,
        }
        given = checked_run(() if tests is None else tests, limits, seconds)
        self.tests = None if tests is None else given
        for field, text in (("tests_key", tests_key), ("artifact", artifact), ("part", part)):
            if not isinstance(text, str) or not text:
                raise ConfigError(f"must be a non-empty name, got {text!r}", field=field)
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
            judged_only=self.judged_only,
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
                    "self_reported": t.self_reported,
                    "not_judged": t.not_judged,
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
                "self_reported": [i for i, t in enumerate(result.tests) if t.self_reported],
                # tests judged_only refused (failed unrun): a failure resting on them alone is
                # not the held-out checks' (``_verdict.not_judged_count``)
                "not_judged": [i for i, t in enumerate(result.tests) if t.not_judged],
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
    judged_only: bool = False,
) -> CommandVerifier:
    """A ``CommandVerifier`` from plain options (the form a loop spec's ``options`` table has):

    ```toml
    [[verifiers]]
    name = "visible_tests"
    ref = "loopwright.verifiers:python_tests_verifier"
    options = { tests_key = "visible_tests", test_timeout_s = 1.0, allow_packages = ["numpy"] }
    ```

    ``test_timeout_s`` is CPU seconds per test; ``allow_packages`` names vetted third-party
    packages the candidate may import; ``judged_only`` fails every test whose verdict would be
    self-reported by the candidate's process (``run_tests``): set it on a held-out check.
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
        judged_only=judged_only,
    )
