"""How many of the shared LDB records' held-out scripts the sandbox's judge decides (stop 55).

Each task's held-out ``check(candidate)`` script is run against the recorded final program (the
last attempt, else the seed) once as a held-out check runs it by default and once with
``judged_only=True``: the scripts the judge cannot decide are self-reported in the first and
refused (failed) in the second. Prints the counts and the tasks with a self-reported script.

    .venv/bin/python bench/held_out_forms.py        # ~3 min on 2 busy cores
"""

from __future__ import annotations

import json
from pathlib import Path

from loopwright.importers import read_ldb
from loopwright.verifiers import run_tests

FILES = [
    "tests/data/ldb/humaneval/gpt-3.5-turbo-0613/results.jsonl",
    "tests/data/ldb/humaneval/reflexion/gpt-4o-2024-05-13.jsonl",
]


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    counts = {"scripts": 0, "self_reported": 0, "passed": 0, "passed_judged_only": 0}
    mine: list[str] = []
    for f in FILES:
        for task in read_ldb(root / f):
            attempts = task["recorded"].get("attempts") or []
            final = attempts[-1] if attempts else task["artifacts"]["program"]["code"]
            if isinstance(final, dict):
                final = final.get("code", "")
            tests = task["held_out"]["tests"]
            plain = run_tests(final, tests, test_timeout_s=10.0)
            judged = run_tests(final, tests, test_timeout_s=10.0, judged_only=True)
            reported = sum(t.self_reported for t in plain.tests)
            counts["scripts"] += len(tests)
            counts["self_reported"] += reported
            counts["passed"] += plain.passed
            counts["passed_judged_only"] += judged.passed
            if reported:
                mine.append(task["task_key"])
    print(json.dumps(counts))
    print(json.dumps(sorted(mine)))


if __name__ == "__main__":
    main()
