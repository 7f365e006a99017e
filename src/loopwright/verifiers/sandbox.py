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
  host's file system in view, read-only, read as ``nobody`` (an interpreter behind a directory
  ``nobody`` may not pass, ``/root/.pyenv``, is bound back into a tmpfs laid over it in the
  child's mount namespace: stop 56). Where neither is
  possible (``none``), ``run_tests`` refuses with ``SandboxUnavailableError`` unless told to
  run anyway (``allow_unisolated=True`` or ``LOOPWRIGHT_SANDBOX_ALLOW_UNISOLATED=1``; and
  ``isolate=False`` asks for ``none`` outright); a warning is logged and the verdict's evidence
  carries one;
* **environment** — the child and its wrapper get ``PATH`` and ``LANG`` only; the job comes on
  stdin; no file descriptor is inherited;
* **user** — when running as root the child drops to ``nobody`` before candidate code runs,
  where the interpreter and its standard library are readable by everyone (the directories
  above them need not be: the boundary rebuilds them); where not, the judge keeps root, says so
  in its first line, and the run is not separated (below);
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
by a candidate written to; and where the worker keeps root (no ``nobody`` possible) or no
boundary separates it from the judge (``isolation="none"``), it can reach the judge's result
lines: then every test is marked self-reported, none ``not_judged``, and the result's
``not_separated`` says why (stop 56). docs/security.md has the threat model.

Per-test semantics follow LDB's executor (``programming/executors/py_executor.py``): each test
is executed after re-executing ``preamble + code`` in one namespace shared by the tests of a
call; a failing ``assert f(x) == y`` reports the *actual output*, the value of ``f(x)`` (or the
error it raised, or ``TIMEOUT``), as in LDB's ``"# Real Execution Output: <value or error>"``.

This module holds the verifiers over the sandbox (``CommandVerifier``,
``python_tests_verifier``) and names its public parts; ``run_tests`` and the limited child
process it starts are ``_run_tests``'s (stop 56).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import ConfigError
from .._proposal import Proposal, Verdict
from .._state import Finding, TaskState, part_ref
from .._usage import Usage
from ._boundary import (
    ALLOW_UNISOLATED_ENV,
    Boundary,
    SandboxUnavailableError,
    package_paths,
    sandbox_boundary,
)
from ._results import Limits, SandboxResult, TestResult, checked_run
from ._run_tests import DEFAULT_PREAMBLE, judge_apart, run_tests

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

    def not_separated(self) -> str:
        """Why this verifier's judge would be within the candidate's reach here (no boundary,
        a worker that keeps root: every test self-reported, ``SandboxResult.not_separated``),
        or ``""``."""
        return judge_apart(isolate=self.isolate, allow_unisolated=self.allow_unisolated)

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
                # tests judged_only refused for their form (failed unrun; never for what the
                # candidate did): a failure resting on them alone is not the held-out
                # checks' (``_verdict.not_judged_count``)
                "not_judged": [i for i, t in enumerate(result.tests) if t.not_judged],
                **(
                    {"warning": "candidate code ran without namespace isolation"}
                    if result.isolation == "none"
                    else {}
                ),
                # why the judge's lines were within the candidate's reach: then every test is
                # in ``self_reported`` and none in ``not_judged`` (``_run_tests.not_separated``)
                **({"not_separated": result.not_separated} if result.not_separated else {}),
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
