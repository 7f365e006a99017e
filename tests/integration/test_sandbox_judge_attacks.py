"""The judge (stop 54) attacked from the worker, the process that runs the candidate: what the
candidate can write on the answer pipe, values the judge must rebuild or print, names the test
means as the standard library's, and signals to the judge. None may turn into a pass the
judge presents as its own, and none may crash or hang the judge."""

from __future__ import annotations

import sys

import pytest

from loopwright.verifiers import Limits, _boundary, _run_tests, run_tests

# Finds the worker's pipes (the answer pipe among them) and writes on each it can.
SAY = """
import os, stat
def say(data):
    for fd in range(3, 40):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, data)
        except OSError:
            pass
"""

# What the candidate writes on the answer pipe while the judge waits for f()'s value.
GARBLE = {
    "not_json": "b'garbage\\n'",
    "out_of_turn": "json.dumps({'i': 7, 'g': 0, 'values': []}).encode() + b'\\n'",
    "wrong_assert": (
        "json.dumps({'i': 0, 'g': 5, 'values': [{'value': ['i', '0x1'], 'text': '1'}]})"
        ".encode() + b'\\n'"
    ),
    "too_few_values": "json.dumps({'i': 0, 'g': 0, 'values': []}).encode() + b'\\n'",
    "deeply_nested": 'b\'{"i": 0, "g": 0, "values": [{"value": \' + b\'["l", [\' * 5000 + b\'\\n\'',
    "not_plain": (
        "json.dumps({'i': 0, 'g': 0, 'values': [{'value': ['i', 'zz'], 'text': '1'}]})"
        ".encode() + b'\\n'"
    ),
}

# f() is right (1) for every test: only the garbled answer can fail them.
TESTS = ["assert f() == 1", "assert f() == 1", "def check(c):\n    assert c() == 1\n\ncheck(f)"]


@pytest.mark.parametrize("name", sorted(GARBLE))
def test_a_garbled_answer_stops_the_worker_and_fails_the_rest(name: str) -> None:
    # Once a line that is not the answer due was read, no later line can be trusted to be the
    # answer to the question asked: the worker is stopped, this test and the later ones fail
    # saying so (they had read each other's answers, all "could not be read").
    code = SAY + f"import json\ndef f():\n    say({GARBLE[name]})\n    return 1\n"
    r = run_tests(code, TESTS)
    assert r.status == "completed", r.to_dict()
    first, *rest = r.tests
    assert not first.passed and not first.self_reported
    assert first.error.startswith("the worker's answer could not be read ("), first.error
    assert first.error.endswith("): the worker was stopped")
    for t in rest:
        assert not t.passed and not t.self_reported
        assert t.error.startswith("not run: the worker was stopped at test 0 ("), t.error


def test_an_answer_that_never_ends_does_not_exhaust_the_judge() -> None:
    # a line with no end: read whole, it would fill the judge's memory (its limit is the
    # worker's) and crash it; past memory_mb / 8 bytes it is not an answer
    code = SAY + "def f():\n    for _ in range(48):\n        say(b'x' * (1 << 20))\n    return 1\n"
    r = run_tests(code, ["assert f() == 1"], limits=Limits(memory_mb=256), test_timeout_s=20)
    assert r.status == "completed", r.to_dict()
    assert r.tests[0].error == (
        "the worker's answer could not be read (an answer longer than 33554432 bytes): "
        "the worker was stopped"
    )


def test_a_value_the_judge_cannot_print_does_not_crash_it() -> None:
    # an int past str()'s digit limit (4300): the judge shows the failing side of a compare;
    # str() raised there and the judge died with a traceback, every test failing
    code = "def f():\n    return 10 ** 5000\n"
    r = run_tests(code, ["assert f() + 0 == 5", "assert f() == 10 ** 5000"])
    assert r.status == "completed", r.to_dict()
    failing, passing = r.tests
    assert not failing.passed and not failing.self_reported
    assert failing.actual == "(a value of type int that cannot be shown)"
    assert failing.error == "AssertionError (test 0 line 1)"
    assert passing.passed and not passing.self_reported


def test_math_in_a_judged_test_is_the_judges() -> None:
    # `math.sqrt(2)` has literal arguments: the worker evaluated it, and the candidate, which
    # rebinds math.sqrt, chose the expected value
    forger = "import math\nmath.sqrt = lambda x: 0\ndef f(x):\n    return 0\n"
    (t,) = run_tests(forger, ["assert f(2) == math.sqrt(2)"], judged_only=True).tests
    assert not t.passed and not t.self_reported and t.actual == "0"
    honest = "def f(x):\n    return x ** 0.5\n"
    tests = ["assert f(2) == math.sqrt(2)", "assert math.isclose(f(2), 1.4142135623)"]
    tests.append("assert math.isclose(f(2), 1.4142135623, rel_tol=1e-12)")
    r = run_tests(honest, tests, judged_only=True)
    assert [(t.passed, t.self_reported) for t in r.tests] == [
        (True, False),
        (True, False),
        (False, False),
    ]


def test_a_function_of_the_candidates_named_math_is_its_own() -> None:
    code = "def math(x):\n    return x * x\n"
    r = run_tests(code, ["assert math(3) == 9", "assert math(math(2)) == 16"], judged_only=True)
    assert [t.passed for t in r.tests] == [True, False], r.to_dict()
    assert r.tests[1].error.startswith("not judged")  # (a call given another's value)
    # a name the judge's math lacks is not decided with it: the candidate's, self-reported
    own = "class math:\n    @staticmethod\n    def twice(x):\n        return 2 * x\n"
    (t,) = run_tests(own, ["assert math.twice(2) == 4"]).tests
    assert t.passed and t.self_reported


def test_a_float_comparison_is_judged() -> None:
    code = "def f():\n    return (0.1 + 0.2, [1.5, 2.5])\n"
    tests = [
        "assert abs(f()[0] - 0.3) < 1e-9",
        "assert f() == (0.30000000000000004, [1.5, 2.5])",
        "assert math.isclose(f()[0], 0.3)",
        "assert math.isclose(f()[1][0], 1.5, abs_tol=1e-9)",
    ]
    r = run_tests(code, tests, judged_only=True)
    assert [(t.passed, t.self_reported) for t in r.tests] == [(True, False)] * 4, r.to_dict()


@pytest.mark.parametrize("base", ["int", "float", "str", "tuple", "list", "dict", "frozenset"])
def test_a_subclass_of_a_plain_type_is_not_plain_data(base: str) -> None:
    # a subclass's __eq__ is the candidate's: the judge never compares it as the plain value
    code = (
        f"class Fake({base}):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = None\ndef f():\n    return Fake()\n"
    )
    (t,) = run_tests(code, ["assert f() == 12345"], judged_only=True).tests
    assert not t.passed and t.error.startswith("not judged: a value the test compares")


def test_data_nested_past_the_judges_depth_is_not_judged() -> None:
    code = "def f():\n    v = []\n    for _ in range(10000):\n        v = [v]\n    return v\n"
    (t,) = run_tests(code, ["assert f() == []"], judged_only=True).tests
    assert not t.passed and t.error.startswith("not judged: a value the test compares")


@pytest.mark.parametrize(
    "how",
    [
        "os.kill(os.getppid(), signal.SIGKILL)",
        # pidfd_send_signal raises no audit event: only the kernel stands between
        "signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)",
    ],
)
def test_signalling_the_judge_can_only_fail_the_run(how: str) -> None:
    code = f"import os, signal\ndef f():\n    try:\n        {how}\n    except OSError:\n        pass\n    return 0\n"
    r = run_tests(code, ["assert f() == 1", "assert f() == 1"])
    assert not r.passed and not any(t.passed for t in r.tests), r.to_dict()


HAS_UNSHARE = _boundary._works("unshare", sys.executable)


@pytest.mark.skipif(not HAS_UNSHARE, reason="unshare needs root and namespaces")
@pytest.mark.parametrize("worker", ["nobody", "root"])
@pytest.mark.parametrize("attack", ["garble", "signal", "proc_mem"])
def test_under_unshare_too(attack: str, worker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the judge starts as root there and drops to nobody, the worker's user: its /proc entries
    # (memory, descriptors) are still not the worker's, and what reaches it only fails the run.
    # Until sandbox56 the worker kept root wherever the interpreter lived under /root (pyenv),
    # and this passed on a root worker: "root" forces that case (``nobody_ids`` finds no way),
    # where every test is self-reported (stop 56, ``not_separated``)
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == "unshare" and real(b, p))
    if worker == "root":
        monkeypatch.setattr(_run_tests, "nobody_ids", lambda python, boundary: None)
    body = {
        "garble": "say(b'garbage\\n')",
        "signal": "signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)",
        # the judge's memory through a descriptor of /proc, past the hook's path check: 2 if
        # it opened (a root worker may), 0 if refused
        "proc_mem": "os.open('%d/mem' % os.getppid(), os.O_RDWR, dir_fd=os.open('/proc', 0))",
    }[attack]
    code = SAY + f"import signal\ndef f():\n    try:\n        {body}\n    except OSError:\n"
    code += f"        return 0\n    return {2 if attack == 'proc_mem' else 0}\n"
    r = run_tests(code, ["assert f() == 1", "assert f() == 0"])
    assert r.isolation == "unshare"
    assert not r.tests[0].passed, r.to_dict()
    if worker == "root":
        assert r.not_separated == "the worker keeps root", r.to_dict()
        assert all(t.self_reported and not t.not_judged for t in r.tests), r.to_dict()
        return
    assert r.not_separated == "" and r.layers["user"] == "nobody", r.to_dict()
    if attack == "garble":
        assert not r.tests[1].passed
    else:
        # refused: /proc/PID/mem is root's (EACCES); the judge is its PID namespace's init,
        # which a signal from inside it does not kill. The test fails on its value, the next
        # passes, judged
        assert r.status == "completed" and r.tests[0].actual == "0", r.to_dict()
        assert r.tests[1].passed and not r.tests[1].self_reported, r.to_dict()


@pytest.mark.parametrize(
    ("preamble", "forger", "test"),
    [
        # a reference name of the preamble's, rebound by the candidate
        ("from math import sqrt", "sqrt = lambda x: 0\n", "assert f(2) == sqrt(2)"),
        # one the candidate imports itself, then rebinds
        (
            "",
            "from fractions import Fraction\nFraction = lambda a, b: 0\n",
            "assert f(1, 3) == Fraction(1, 3)",
        ),
        # one it binds where no parser sees it
        ("", "globals()['g'] = lambda: 0\n", "assert f(2) == g()"),
        ("", "import builtins\nbuiltins.hash = lambda x: 0\n", "assert hash('a') == 0"),
        # a script's reference call, and a constant's method the worker never had
        ("", "ref = lambda x: 0\n", "def check(c):\n    assert c(2) == ref(2)\n\ncheck(f)"),
        # a name the preamble's star import binds, which no parser sees: the candidate
        # rebinds it and the test calls only it (stop 55: judged as the candidate's, a pass)
        ("from math import *", "sqrt = lambda x: 0\n", "assert sqrt(2) == 0"),
        ("from math import *", "def sqrt(x):\n    return 0\n", "assert sqrt(2) == 0"),
        (
            "import os\nfrom typing import *",
            "cast = lambda t, v: 0\n",
            "assert cast('int', 1) == 0",
        ),
        # a star import of a module whose names the judge does not read: any call may be one
        ("from os.path import *", "join = lambda *a: 0\n", "assert join('a', 'b') == 0"),
    ],
)
def test_only_the_function_under_test_is_the_candidates(
    preamble: str, forger: str, test: str
) -> None:
    # the worker evaluated every call with literal arguments as the candidate's: a reference
    # call's value, the expected one, was the candidate's to choose, and the forger passed,
    # judged. Now such a test is not judged (judged_only fails it; else it is self-reported).
    code = forger + "def f(*a):\n    return 0\n"
    (t,) = run_tests(code, [test], preamble=preamble, judged_only=True).tests
    assert not t.passed and t.error.startswith("not judged"), t.to_dict()
    (t,) = run_tests(code, [test], preamble=preamble).tests
    assert t.self_reported, t.to_dict()


def test_the_judge_reads_a_star_imports_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    # (as for a sandbox running another interpreter, whose names the host does not read)
    # (run_tests reads them in its own module, ``_run_tests``, since stop 56)
    from loopwright.verifiers import _run_tests

    monkeypatch.setattr(_run_tests, "preamble_stars", lambda preamble: {})
    code = "sqrt = lambda x: 0\ndef f(x):\n    return x + 1\n"
    tests = ["assert sqrt(2) == 0", "assert f(1) == 2"]
    r = run_tests(code, tests, preamble="from math import *", judged_only=True)
    assert [(t.passed, t.self_reported) for t in r.tests] == [(False, False), (True, False)]
    assert r.tests[0].error.startswith("not judged"), r.to_dict()


def test_the_function_under_test_is_judged_beside_a_known_star_import() -> None:
    # math's names are known: f is not one of them, and stays the candidate's, judged; beside
    # an unknown module's star import, nothing is (it may have bound f)
    code = "def f(x):\n    return x + 1\n"
    for preamble in ("from math import *", "from typing import *\nfrom heapq import *"):
        (t,) = run_tests(code, ["assert f(1) == 2"], preamble=preamble, judged_only=True).tests
        assert t.passed and not t.self_reported, (preamble, t.to_dict())
    (t,) = run_tests(code, ["assert f(1) == 2"], preamble="from os.path import *").tests
    assert t.passed and t.self_reported, t.to_dict()


def test_an_argument_of_literal_arithmetic_is_judged() -> None:
    # HumanEval's `candidate(3 * 19)`, `candidate('abcde' + 'cade')`, `candidate([1, 0**0])`:
    # the arguments were not literals, and 12 of the 328 LDB held-out scripts self-reported
    code = "def f(x):\n    return x\n"
    tests = [
        "assert f(3 * 19) == 57",
        "def check(c):\n    assert c('ab' + 'c') == 'abc'\n    assert c([1, 0**0, -2]) == [1, 1, -2]\n\ncheck(f)",
        "assert f(3 * 19) == 56",
        "assert f(1 << 2) == 4",  # (not arithmetic the judge lets through: not judged)
    ]
    r = run_tests(code, tests, judged_only=True)
    assert [(t.passed, t.self_reported) for t in r.tests] == [
        (True, False),
        (True, False),
        (False, False),
        (False, False),
    ], r.to_dict()
    assert r.tests[2].actual == "57" and r.tests[3].error.startswith("not judged"), r.to_dict()


def test_the_function_under_test_is_still_judged() -> None:
    code = "from fractions import Fraction\ndef f(a, b):\n    return [a, b]\n"
    tests = [
        "assert f(1, 3) == [1, 3]",
        "assert f(1, 2) != f(2, 1)",
        "x = [1, 3]\ndef check(c):\n    assert c(1, 3) == x\n    assert x.count(3) == 1\n\ncheck(f)",
        "assert f(1, 2) == [2, 1]",
    ]
    r = run_tests(code, tests, preamble="from math import sqrt", judged_only=True)
    assert [(t.passed, t.self_reported) for t in r.tests] == [
        (True, False),
        (True, False),
        (True, False),
        (False, False),
    ], r.to_dict()
    # a candidate that does not parse runs nothing: judged failed as before
    (t,) = run_tests("def f(:\n", ["assert f(1) == 1"], judged_only=True).tests
    assert not t.passed and not t.self_reported and t.error.startswith("SyntaxError"), t.to_dict()


@pytest.mark.parametrize("sig", ["SIGALRM", "SIGPROF"])
def test_the_judges_timer_signals_from_the_worker_change_nothing(sig: str) -> None:
    # the judge's handler raised TimeoutError wherever it was (waiting for this very answer):
    # it died with a traceback and the run failed, an honest candidate with it. Under unshare
    # the worker may not signal the judge at all (refused: another user's).
    send = f"signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.{sig})"
    code = f"import os, signal\ndef f():\n    try:\n        {send}\n    except OSError:\n"
    code += "        pass\n    return 1\n"
    tests = ["assert f() == 1", "assert f() + 1 == 2", "assert f() == 2"]
    r = run_tests(code, tests, judged_only=True)
    assert r.status == "completed", r.to_dict()
    assert [(t.passed, t.self_reported) for t in r.tests] == [
        (True, False),
        (True, False),
        (False, False),
    ], r.to_dict()


def test_a_worker_whose_timers_are_disarmed_meets_the_judges_deadline() -> None:
    # the candidate disarms the worker's timers and waits: the judge waited with it until the
    # whole run's timeout (status "timeout", every test lost). The judge's own deadline on
    # the answer (2 x 0.5 s + 10 s here, far inside timeout_s) fails this test and stops it.
    code = "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
    code += "signal.signal(signal.SIGPROF, signal.SIG_IGN)\n"
    code += "def f():\n    time.sleep(1000)\n"
    r = run_tests(
        code,
        ["assert f() == 1", "assert 1 == 1"],
        test_timeout_s=0.2,
        test_wall_s=0.5,
        timeout_s=120,
    )
    assert r.status == "completed", r.to_dict()
    first, second = r.tests
    assert not first.passed and first.actual == "TIMEOUT", r.to_dict()
    assert first.error == (
        "the worker gave no answer within 11s (its timers disarmed?): the worker was stopped"
    )
    assert not second.passed and second.error.startswith(
        "not run: the worker was stopped at test 0"
    )


HAS_BWRAP = _boundary._works("bwrap", sys.executable)
BOUNDARIES = [
    pytest.param("bwrap", marks=pytest.mark.skipif(not HAS_BWRAP, reason="no working bwrap")),
    pytest.param("unshare", marks=pytest.mark.skipif(not HAS_UNSHARE, reason="no unshare")),
]


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP", "SIGTERM", "SIGINT"])
def test_the_worker_cannot_stop_or_kill_the_judge(
    boundary: str, sig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # under bwrap the judge ran under bwrap's init, the worker's user: pidfd_send_signal
    # killed it (the run crashed) or stopped it (the run timed out). Now it is the namespace's
    # init there too (--as-pid-1), and keeps no handler for SIGINT.
    if boundary == "bwrap" and not _boundary._bwrap_has_pid_1("bwrap"):
        pytest.skip("this bwrap has no --as-pid-1")
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == boundary and real(b, p))
    send = f"signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.{sig})"
    code = f"import os, signal\ndef f():\n    try:\n        {send}\n    except OSError:\n"
    code += "        pass\n    return 0\n"
    r = run_tests(code, ["assert f() == 1", "assert f() == 0"], timeout_s=60)
    assert r.isolation == boundary
    assert r.status == "completed" and r.tests[0].actual == "0", r.to_dict()
    # judged, by a judge separated from a nobody worker (until sandbox56 the worker kept root
    # under unshare here, and this read ``self_reported == bool(not_separated)``: true of a
    # root worker too; the root case is test_under_unshare_too[root])
    assert r.not_separated == "" and r.layers["user"] == "nobody", r.to_dict()
    assert r.tests[1].passed and not r.tests[1].self_reported, r.to_dict()


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_worker_killed_by_a_limit_is_reported_so(
    boundary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the judge re-raised the worker's signal on itself: as its namespace's init it survived,
    # and exited -9 & 255 (247), "exited early (exit code 247)" under unshare
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == boundary and real(b, p))
    code = "import signal\nsignal.setitimer(signal.ITIMER_PROF, 0)\n"
    code += (
        "signal.signal(signal.SIGPROF, signal.SIG_IGN)\ndef f():\n    while True:\n        pass\n"
    )
    r = run_tests(code, ["assert f() == 1"], limits=Limits(cpu_s=1), timeout_s=60)
    assert r.isolation == boundary
    assert r.status == "crashed", r.to_dict()
    # (SIGXCPU or SIGKILL, as the kernel sends at a limit whose soft and hard values agree)
    assert "CPU-time limit" in r.tests[0].actual, r.to_dict()


def test_a_value_costly_to_rebuild_meets_the_judges_deadline() -> None:
    # a set of ints whose hashes all collide, written on the answer pipe as f()'s value: cheap
    # to write, quadratic for the judge to rebuild, which it did with no deadline (the run
    # went to timeout_s, "timeout")
    forged = "json.dumps({'i': 0, 'g': 0, 'values': [{'value': ['S', [['i', hex(k * M)] for k in range(200000)]], 'text': ''}]}).encode() + b'\\n'"
    code = SAY + f"import json\nM = 2 ** 61 - 1\ndef f():\n    say({forged})\n    return 1\n"
    r = run_tests(code, ["assert f() == 1"], test_timeout_s=0.5, test_wall_s=1, timeout_s=150)
    assert r.status == "completed", r.to_dict()
    assert r.tests[0].error == (
        "the worker's answer could not be read (not an answer: a value the judge could not "
        "rebuild in time): the worker was stopped"
    ), r.to_dict()
