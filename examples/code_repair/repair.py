"""The code-repair workload: a recorded debugging run replayed under a loopwright contract.

The loop spec (``loop.toml``) names these objects:

* ``actor`` — replays the recorded attempts of an LDB run (``implementations[1:]``) in order;
  cycle 1 proposes no change, so the seed (``implementations[0]``) is judged first, as LDB did.
* ``visible_tests`` — the visible tests (LDB's ``generated_test``) in the sandbox, 1 s per test
  as in LDB's executor (of CPU time here, of wall-clock time in LDB: verdicts do not depend on
  the machine's load); its findings (the failing asserts with their actual outputs) go back to
  the actor.
* ``hidden_tests`` — the benchmark's hidden ``check(candidate)`` tests, 10 s (CPU) as in LDB's
  final evaluation; held out: recorded beside the visible verdict, never shown to the actor.
* ``init`` — builds the initial state from a task produced by ``loopwright import ldb`` (or
  ``loopwright.importers.read_ldb``). A raw LDB record is refused, naming the import: the
  checks read the task as given (a run's task is never what ``init`` makes of it), and a raw
  record holds no ``visible_tests``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import loopwright as lw
from loopwright.actors import ReplayActor
from loopwright.verifiers import CommandVerifier

actor = ReplayActor(attempts_key="recorded.attempts", artifact="program", part="code")

visible_tests = CommandVerifier(tests_key="visible_tests", test_timeout_s=1.0, name="visible_tests")

# judged_only stays off: 14 of the 328 held-out scripts of the shared LDB files are not of the
# judged form (README.md, "Held-out tests"); on, they would fail every candidate. Their passes
# are marked self-reported and left out of false_success_rate.
hidden_tests = CommandVerifier(
    tests_key="held_out.tests", test_timeout_s=10.0, name="hidden_tests", judged_only=False
)


def init(task: Mapping[str, Any]) -> lw.TaskState:
    """The initial state: the program artifact holds the seed; the task keeps everything else."""
    if "implementations" in task and "artifacts" not in task:  # a raw LDB record
        raise lw.ConfigError(
            "this is a raw LDB record, not a task: turn the file into tasks first, "
            "`loopwright import ldb FILE --out .loopwright/ldb-tasks.jsonl`",
            field="task",
        )
    return lw.TaskState.from_task(task, task_key=str(task.get("task_key", "")))
