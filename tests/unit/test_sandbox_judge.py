"""The judge decides a test from the values the candidate's process answers (stop 54): each
result below is what the one-process harness gave before (pass or fail, LDB's actual output,
the error with its line), now with no expected value sent to the candidate's process."""

from __future__ import annotations

import pytest

from loopwright.verifiers import run_tests

CODE = """
def f(x, b=1):
    if isinstance(x, str):
        return x[::-1]
    return x + b
def g(n):
    return 10 ** n
"""

# (test, passed, actual, error), as the one-process harness reported them
CASES = [
    ("assert f(1) == 2", True, None, None),
    ("assert f(2) == 4", False, "3", "AssertionError (test {i} line 1)"),
    (
        "assert f([]) == 1",
        False,
        'can only concatenate list (not "int") to list',
        'TypeError (candidate line 5): can only concatenate list (not "int") to list',
    ),
    ("assert f(1) != 2", False, "2", "AssertionError (test {i} line 1)"),
    ("assert f(1) > 5, 'too small'", False, "2", "AssertionError (test {i} line 1): too small"),
    ("assert not f(-1)", True, None, None),
    ("assert f(1.5) == 2.5", True, None, None),
    ("assert f(3, b=3) == 10", False, "6", "AssertionError (test {i} line 1)"),
    ("assert abs(f(0.1, b=0.1) - 0.2) < 1e-9", True, None, None),
    ("assert f(2) in (4, 5)", False, "3", "AssertionError (test {i} line 1)"),
    ("assert f(2) is None", False, "3", "AssertionError (test {i} line 1)"),
    ("assert sorted(f('bca')) == ['a', 'b', 'c']", True, None, None),
    ("assert f('ab').upper() == 'BA'", True, None, None),
    ("assert len(f('abc')) == 2", False, "3", "AssertionError (test {i} line 1)"),
    ("assert f(\n  1\n) == 3", False, "2", "AssertionError (test {i} line 1)"),
    ("assert g(5000) == 10 ** 5000", True, None, None),
    ("assert g(-1) == 0.1", True, None, None),
    ("assert g(1) == True", False, "10", "AssertionError (test {i} line 1)"),
    ("assert f(0) == True", True, None, None),
    ("assert f(True, b=0) == 1", True, None, None),
    ("assert {f(1): [f(2)]} == {2: [3]}", True, None, None),
    ("assert f(1) ==", False, None, "SyntaxError"),
    # `math` is the judge's (the candidate's, rebound, chose an expected value): where the
    # candidate did not import it, no longer a NameError
    ("assert math.isclose(f(0.1), 1.1)", True, None, None),
    ("assert math.isclose(f(0.1), 1.2)", False, "False", "AssertionError (test {i} line 1)"),
]

# judged outside the candidate's process; the rest self-reported
SELF_REPORTED = {"assert f(1) =="}


@pytest.fixture(scope="module")
def results() -> list[object]:
    return list(run_tests(CODE, [c[0] for c in CASES]).tests)


@pytest.mark.parametrize("i", range(len(CASES)))
def test_same_verdict_as_one_process(results: list[object], i: int) -> None:
    test, passed, actual, error = CASES[i]
    r = results[i]
    assert r.test == test  # type: ignore[attr-defined]
    assert r.passed is passed  # type: ignore[attr-defined]
    if error == "SyntaxError":
        assert r.error.startswith("SyntaxError")  # type: ignore[attr-defined]
        return
    assert r.actual == actual  # type: ignore[attr-defined]
    assert r.error == (None if error is None else error.format(i=i))  # type: ignore[attr-defined]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_judged_unless_it_cannot_be(results: list[object], i: int) -> None:
    assert results[i].self_reported is (CASES[i][0] in SELF_REPORTED)  # type: ignore[attr-defined]


def test_a_value_the_judge_cannot_compare_is_self_reported_or_refused() -> None:
    code = "class P:\n    def __eq__(self, other):\n        return True\ndef f():\n    return P()\n"
    r = run_tests(code, ["assert f() == 1"])
    assert r.passed and r.tests[0].self_reported
    assert r.layers["verdict"] == "self-reported: 1 of 1 tests"
    refused = run_tests(code, ["assert f() == 1"], judged_only=True)
    assert not refused.passed and not refused.tests[0].self_reported
    assert refused.tests[0].error.startswith("not judged")
    assert refused.layers["verdict"] == "judge"


def test_a_worker_that_dies_ends_the_run_as_before() -> None:
    code = "import os\ndef f():\n    os._exit(7)\n"
    r = run_tests(code, ["assert f() == 1", "assert f() == 2"])
    assert r.status == "crashed" and "exit code 7" in r.reason
    assert [t.passed for t in r.tests] == [False, False]


# HumanEval's held-out form: one script of asserts in a check(candidate)
SCRIPT = (
    "\n\nMETADATA = {}\n\n\ndef check(candidate):\n"
    "    assert candidate(2, 3) == 5\n    assert candidate(1, 1) == 2\n\ncheck(add)"
)


def test_a_check_script_is_judged_and_stops_at_its_first_failure() -> None:
    # the second call would loop: the script stopped at the first failing assert, and so does
    # the judge (the worker waits for its word before the next assert's calls)
    code = "def add(a, b):\n    while a == 1:\n        pass\n    return a - b\n"
    (t,) = run_tests(code, [SCRIPT]).tests
    assert not t.passed and not t.self_reported
    assert t.error == "AssertionError (test 0 line 7)" and t.actual == t.error
    (ok,) = run_tests("def add(a, b):\n    return a + b\n", [SCRIPT]).tests
    assert ok.passed and not ok.self_reported


def test_a_check_script_with_a_loop_is_self_reported() -> None:
    loop = "def check(candidate):\n    for x in range(3):\n        assert candidate(x, 0) == x\n\ncheck(add)"
    (t,) = run_tests("def add(a, b):\n    return a + b\n", [loop]).tests
    assert t.passed and t.self_reported


def test_the_process_limit_counts_the_candidate_not_the_judge() -> None:
    # RLIMIT_NPROC counts the user's processes (the judge is one): set before the worker
    # started, a limit of 1 left the judge unable to start it, and every check crashed
    from loopwright.verifiers import Limits

    r = run_tests("def f():\n    return 1\n", ["assert f() == 1"], limits=Limits(processes=1))
    assert r.passed and r.status == "completed", r.to_dict()
