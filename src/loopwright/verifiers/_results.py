"""What a sandboxed run is given and returns: ``Limits``, one test's ``TestResult`` and the
run's ``SandboxResult``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import inf
from typing import Any, Literal

from .._errors import ConfigError

SandboxStatus = Literal["completed", "timeout", "crashed", "error"]


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

    def __post_init__(self) -> None:
        # (a string or a negative number failed inside the child, as a crashed sandbox)
        for name in ("memory_mb", "cpu_s", "file_mb", "processes", "open_files"):
            value = getattr(self, name)
            if value is None and name == "cpu_s":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be a whole number, at least 1, got {value!r}", field=name)


def checked_run(
    tests: Sequence[str] | str,
    limits: Limits | None,
    seconds: Mapping[str, float | None],
) -> tuple[str, ...]:
    """The tests of a sandboxed run, checked with its limits and its seconds (each ``None`` or
    a positive, finite number): one string is one script, as a task's ``tests_key`` holding
    one is, not a test per character; anything wrong a ``ConfigError`` naming it."""
    if isinstance(tests, str):
        tests = (tests,)
    elif isinstance(tests, bytes | Mapping) or not isinstance(tests, Iterable):
        raise ConfigError(
            f"must be a list of test snippets, got {type(tests).__name__}", field="tests"
        )
    if limits is not None and not isinstance(limits, Limits):
        raise ConfigError(f"must be a Limits, got {type(limits).__name__}", field="limits")
    for name, value in seconds.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < inf
        ):
            raise ConfigError(f"must be a positive number of seconds, got {value!r}", field=name)
    return tuple(str(t) for t in tests)


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
        self_reported: whether the verdict was computed in the candidate's own process (a
            test the judge cannot decide: not ``assert EXPR`` over the candidate's calls with
            literal arguments, or a value that is not plain data), which the candidate could
            have forged; ``False`` when the judge decided it from the values alone.
        not_judged: whether ``judged_only`` refused the test for its form (failed without
            running it: not of the judged form whoever the candidate is): a failure nobody
            decided. A refusal the candidate caused (the function under test bound where the
            judge cannot read it, a value that is not plain data) is its failure, unmarked.
    """

    test: str
    passed: bool
    actual: str | None = None
    error: str | None = None
    seconds: float = 0.0
    self_reported: bool = False
    not_judged: bool = False

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
            "self_reported": self.self_reported,
            "not_judged": self.not_judged,
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
            ``audit-hook``), ``user`` (``nobody`` or ``unchanged``), ``verdict`` (``judge``:
            every test decided outside the candidate's process; ``self-reported: N of M
            tests`` otherwise).
        not_separated: why the judge's result lines were within the candidate's reach (no
            boundary, a worker that keeps root: ``_run_tests.not_separated``), ``""`` where
            they were not; when set, every test is ``self_reported`` and none ``not_judged``.
    """

    status: SandboxStatus
    tests: tuple[TestResult, ...]
    reason: str = ""
    seconds: float = 0.0
    output: str = ""
    isolation: str = "none"
    layers: dict[str, str] = field(default_factory=dict)
    not_separated: str = ""

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
            "not_separated": self.not_separated,
        }
