"""Fuzzing the sandbox harness: whatever the candidate does, the harness itself survives and
every test of the call gets its own verdict (issue 17, item 2).

Each example is one ``run_tests`` call (about 0.1 s, more with a timeout), so examples are few.
The candidate's misbehaviour sits inside ``f``; tests that do not call ``f`` must therefore pass
whenever the program compiles, whatever an earlier test of the same call did.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwright.verifiers import run_tests

# The body of f(x): how the candidate misbehaves when called, and whether f(1) == 1 then holds.
BEHAVIOURS: dict[str, tuple[str, bool]] = {
    "ok": ("return x", True),
    "loop": ("while True:\n        pass", False),  # CPU limit
    "nested_loop": ("while True:\n        for _ in range(3):\n            pass", False),
    "recursion": ("def g(n):\n        return g(n + 1)\n    return g(x)", False),  # RecursionError
    "bare_raise": ("raise ValueError()", False),  # an exception without a message
    "bare_class": ("raise KeyError", False),
    "empty_custom": ("class E(Exception):\n        pass\n    raise E('')", False),
    "assert_false": ("assert False", False),
    "huge_output": ("print('x' * 5_000_000)\n    return x", True),
    # past the 16 MB file limit: the output is cut, the test still has its verdict
    "too_much_output": ("import sys\n    sys.stdout.write('y' * 40_000_000)\n    return x", True),
    "non_utf8_bytes": ("import os\n    os.write(1, b'\\xff\\xfe\\x80 bad')\n    return x", True),
    "non_utf8_buffer": (
        "import sys\n    sys.stdout.buffer.write(b'\\xc3\\x28')\n    return x",
        True,
    ),
    "surrogate_print": ("print('\\udcff')\n    return x", False),  # UnicodeEncodeError
    "surrogate_return": ("return '\\udcff'", False),
    # an exception whose __str__ raises: once killed the harness (every later test "not finished")
    "bad_str": (
        "class E(Exception):\n        def __str__(self):\n            raise RuntimeError('no')\n"
        "    raise E()",
        False,
    ),
    "huge_message": ("raise ValueError('m' * 10_000_000)", False),
    "exit": ("raise SystemExit", False),
    "base_exception": ("raise BaseException", False),
    "memory": ("y = 'x' * 2**31\n    return x", False),  # MemoryError under RLIMIT_AS
    # stdout closed or replaced: the next tests of the call print (and pass) as before
    "close_stdout": ("import sys\n    sys.stdout.close()\n    return x", True),
    "replace_stdout": ("import io, sys\n    sys.stdout = io.StringIO()\n    return x", True),
    "close_fds": ("import os\n    os.close(1)\n    os.close(2)\n    return x", True),
    "print_after": ("print('still here')\n    return x", True),
}
SYNTAX_ERRORS = ("def f(x):\n    return x +\n", "def f(x)\n    return x\n", "\x00")

CALLS_F = "assert f(1) == 1"
PLAIN = ("assert 1 == 1", "assert len('ab') == 2")


RETURNS_WRONG = {"surrogate_return"}  # f(1) != 1 without raising: harmless at module level


@st.composite
def programs(draw: st.DrawFn) -> tuple[str, bool | None, bool]:
    """(program, whether f(1) == 1 holds (None when the program does not compile), whether the
    program itself runs cleanly). The behaviour sits in f, or runs at module level (then every
    test of the call meets it)."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(SYNTAX_ERRORS)), None, False
    name = draw(st.sampled_from(sorted(BEHAVIOURS)))
    body, ok = BEHAVIOURS[name]
    if draw(st.booleans()):
        return f"def f(x):\n    {body}\n", ok, True
    clean = ok or name in RETURNS_WRONG
    return f"def f(x):\n    return x\ndef g(x):\n    {body}\ng(1)\n", clean, clean


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same examples every run: a failure here is reproducible
)
@given(
    program=programs(),
    tests=st.lists(st.sampled_from([CALLS_F, *PLAIN]), min_size=1, max_size=4),
)
def test_harness_survives_and_every_test_has_its_own_verdict(
    program: tuple[str, bool | None, bool], tests: list[str]
) -> None:
    code, f_ok, clean = program
    r = run_tests(code, tests, test_timeout_s=0.2, allow_unisolated=True)
    assert r.status == "completed", (r.status, r.reason)
    assert [t.test for t in r.tests] == tests
    for t in r.tests:
        if t.passed:
            assert t.actual is None
        else:
            assert t.actual and t.error, t  # a reason of its own, never "not finished"
            assert "Traceback" not in t.actual and "_HARNESS" not in t.actual
        if f_ok is None:
            assert not t.passed  # nothing runs when the program does not compile
            assert "SyntaxError" in (t.error or "") or "ValueError" in (t.error or "")
        elif t.test == CALLS_F:
            assert t.passed == f_ok, t
        else:
            assert t.passed == clean, t  # whatever an earlier test of the call did


def test_each_generated_behaviour_once_in_one_call() -> None:
    """Every behaviour in one program, one test each, in one call: each verdict is its own."""
    defs = []
    tests = []
    for i, (_, (body, _ok)) in enumerate(sorted(BEHAVIOURS.items())):
        defs.append(f"def f{i}(x):\n    {body}\n")
        tests.append(f"assert f{i}(1) == 1")
        tests.append("assert 1 == 1")
    r = run_tests("\n".join(defs), tests, test_timeout_s=0.2, allow_unisolated=True)
    assert r.status == "completed", (r.status, r.reason)
    got = [t.passed for t in r.tests]
    want = [v for _, (_, ok) in sorted(BEHAVIOURS.items()) for v in (ok, True)]
    assert got == want, [(t.test, t.passed, t.actual) for t in r.tests]
    timeouts = [t for t in r.tests if t.actual == "TIMEOUT"]
    assert len(timeouts) == 2  # loop, nested_loop
    assert len(r.output) < 100_000  # the output's tail, not the 45 MB printed


def test_output_of_earlier_tests_does_not_use_up_later_tests_file_limit() -> None:
    """Found by the fuzzing: output.txt is shared by a call's tests, so 5 MB printed per test
    once failed the fourth test with "File too large" (16 MB limit). Earlier output is cut to
    its tail before each test; the tail the call reports is still the last thing printed."""
    code = "def f(x):\n    print('x' * 5_000_000)\n    print('end', x)\n    return x\n"
    tests = [f"assert f({i}) == {i}" for i in range(5)]
    r = run_tests(code, tests, test_timeout_s=2.0, allow_unisolated=True)
    assert r.status == "completed", (r.status, r.reason)
    assert [t.passed for t in r.tests] == [True] * 5, [t.actual for t in r.tests]
    assert r.output.endswith("end 4\n")
