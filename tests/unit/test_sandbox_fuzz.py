"""Fuzzing the sandbox harness: whatever the candidate does, the harness itself survives and
every test of the call gets its own verdict (issue 17, item 2).

Each example is one ``run_tests`` call (about 0.1 s, more with a timeout), so examples are few.
The candidate's misbehaviour sits inside ``f``; tests that do not call ``f`` must therefore pass
whenever the program compiles, whatever an earlier test of the same call did.

No verdict here may depend on the machine's load: only the behaviours that never end (``LOOPS``)
meet the per-test CPU limit, and only they run under a short one.
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
# Per-test CPU limits. The behaviours that never end are stopped by the limit, so theirs is short
# and their calls hold nothing else that costs CPU. Every other behaviour ends by itself and gets a
# limit it cannot reach: too_much_output, the costliest (40 MB built, encoded and 16 MB written:
# mostly page faults and copies, system time that contention stretches), takes 0.05-0.1 s of CPU
# on a loaded 2-core machine, and under a 0.2 s limit it timed out on a busy CI machine.
LOOPS = {"loop", "nested_loop"}
SHORT_S = 0.2
ROOMY_S = 10.0
SYNTAX_ERRORS = ("def f(x):\n    return x +\n", "def f(x)\n    return x\n", "\x00")

CALLS_F = "assert f(1) == 1"
PLAIN = ("assert 1 == 1", "assert len('ab') == 2")


RETURNS_WRONG = {"surrogate_return"}  # f(1) != 1 without raising: harmless at module level


@st.composite
def programs(draw: st.DrawFn) -> tuple[str, bool | None, bool, float]:
    """(program, whether f(1) == 1 holds (None when the program does not compile), whether the
    program itself runs cleanly, the per-test CPU limit). The behaviour sits in f, or runs at
    module level (then every test of the call meets it)."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(SYNTAX_ERRORS)), None, False, ROOMY_S
    name = draw(st.sampled_from(sorted(BEHAVIOURS)))
    body, ok = BEHAVIOURS[name]
    limit = SHORT_S if name in LOOPS else ROOMY_S
    if draw(st.booleans()):
        return f"def f(x):\n    {body}\n", ok, True, limit
    clean = ok or name in RETURNS_WRONG
    return f"def f(x):\n    return x\ndef g(x):\n    {body}\ng(1)\n", clean, clean, limit


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
    program: tuple[str, bool | None, bool, float], tests: list[str]
) -> None:
    code, f_ok, clean, limit = program
    r = run_tests(code, tests, test_timeout_s=limit, allow_unisolated=True)
    assert r.status == "completed", (r.status, r.reason)
    assert [t.test for t in r.tests] == tests
    for t in r.tests:
        if t.passed:
            assert t.actual is None
        else:
            assert t.actual and t.error, t  # a reason of its own, never "not finished"
            assert "Traceback" not in t.actual and "HARNESS" not in t.actual
        if f_ok is None:
            assert not t.passed  # nothing runs when the program does not compile
            assert "SyntaxError" in (t.error or "") or "ValueError" in (t.error or "")
        elif t.test == CALLS_F:
            assert t.passed == f_ok, t
        else:
            assert t.passed == clean, t  # whatever an earlier test of the call did


def one_call(names: list[str], limit: float) -> list[tuple[str, bool, str | None]]:
    """Each behaviour of ``names`` in one program, one test each followed by ``assert 1 == 1``,
    in one call: (behaviour, passed, actual) for every test, checked against BEHAVIOURS."""
    defs = [f"def f{i}(x):\n    {BEHAVIOURS[name][0]}\n" for i, name in enumerate(names)]
    tests = [t for i in range(len(names)) for t in (f"assert f{i}(1) == 1", "assert 1 == 1")]
    r = run_tests("\n".join(defs), tests, test_timeout_s=limit, allow_unisolated=True)
    assert r.status == "completed", (r.status, r.reason)
    labels = [label for name in names for label in (name, f"after {name}")]
    got = [(label, t.passed, t.actual) for label, t in zip(labels, r.tests, strict=True)]
    want = [v for name in names for v in (BEHAVIOURS[name][1], True)]
    assert [passed for _, passed, _ in got] == want, got
    assert len(r.output) < 100_000  # the output's tail, not the 45 MB printed
    return got


def test_each_generated_behaviour_once_in_one_call() -> None:
    """Every behaviour that ends by itself in one program, one test each, in one call: each
    verdict is its own, and none is a timeout (the CPU limit is out of reach: ROOMY_S)."""
    got = one_call(sorted(set(BEHAVIOURS) - LOOPS), ROOMY_S)
    assert [g for g in got if g[2] == "TIMEOUT"] == []


def test_each_loop_times_out_alone_in_one_call() -> None:
    """The behaviours that never end, with the cheapest ones between them, in one call under the
    short limit: each loop times out and the tests after it pass (they cost microseconds)."""
    got = one_call(["loop", "ok", "nested_loop", "close_stdout", "print_after"], SHORT_S)
    assert [name for name, _, actual in got if actual == "TIMEOUT"] == ["loop", "nested_loop"]


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
