"""A held-out check must not be graded by the candidate it judges (stop 54).

Each candidate below is WRONG (``add`` returns its arguments' difference, or nothing) and tries
to make the sandbox report its held-out tests passed anyway, through the public API a loop
configures (``CommandVerifier`` reading ``task.held_out.tests``, as examples/code_repair does).
Every one must come back failed, and no test's text (its expected value) may be readable from
the candidate's process when the verifier is asked to judge outside it (``judged_only``).
"""

from __future__ import annotations

import sys

import pytest

import loopwright as lw
from loopwright.verifiers import CommandVerifier, _boundary, _run_tests

HELD_OUT = ["assert add(2, 3) == 5", "assert add(10, 5) == 15", "assert add(-1, 1) == 0"]

WRONG = "def add(a, b):\n    return a - b\n"

# Each forgery follows the wrong program (replacing its `add` where it defines one): it runs once per test, in the process that
# computes the test, with whatever that process can reach.
FORGERIES = {
    # call the harness's own reporting function, then leave before the test fails
    "emit_then_exit": """
import sys, os
m = sys.modules['__main__']
if hasattr(m, 'emit'):
    for i in range(len(m.tests)):
        m.emit({"i": i, "passed": True, "seconds": 0.0})
    m.emit({"done": True})
os._exit(0)
""",
    # write a pass line for every test to every descriptor open in this process
    "write_every_fd": """
import os, json
lines = "".join(json.dumps({"i": i, "passed": True, "seconds": 0.0}) + "\\n" for i in range(50))
lines += json.dumps({"done": True}) + "\\n"
for fd in range(3, 64):
    try:
        os.write(fd, lines.encode())
    except OSError:
        pass
os._exit(0)
""",
    # read the held-out tests (the expected values) from the process and answer them
    "read_expected_from_main": """
import sys, ast
m = sys.modules['__main__']
ANSWERS = {}
for t in getattr(m, 'job', {}).get('tests', []):
    node = ast.parse(t).body[0].test
    ANSWERS[tuple(ast.literal_eval(a) for a in node.left.args)] = ast.literal_eval(node.comparators[0])
def add(a, b):
    return ANSWERS.get((a, b), a - b)
""",
    # the same through the garbage collector (no name of the harness needed)
    "read_expected_from_gc": """
import gc, ast
ANSWERS = {}
for o in gc.get_objects():
    if isinstance(o, dict) and isinstance(o.get('tests'), list):
        for t in o['tests']:
            try:
                node = ast.parse(t).body[0].test
                ANSWERS[tuple(ast.literal_eval(a) for a in node.left.args)] = ast.literal_eval(node.comparators[0])
            except Exception:
                pass
def add(a, b):
    return ANSWERS.get((a, b), a - b)
""",
    # an answer that equals anything
    "always_equal": """
class Yes:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __bool__(self):
        return True
def add(a, b):
    return Yes()
""",
    # make every failing assert pass: no AssertionError can be raised
    "patch_assertion_error": """
import builtins
class Never(Exception):
    pass
builtins.AssertionError = Never
import sys
sys.modules['__main__'].__dict__['AssertionError'] = Never
""",
    # swallow the failure: the test's exception never reaches the harness
    "patch_describe": """
import sys
m = sys.modules['__main__']
if hasattr(m, 'emit'):
    real = m.emit
    def emit(obj, real=real):
        if 'i' in obj:
            obj = {"i": obj["i"], "passed": True, "seconds": 0.0}
        real(obj)
    m.emit = emit
""",
    # leave from inside the test after writing a pass line on the result descriptor
    "exit_mid_test": """
import sys, os, json
m = sys.modules['__main__']
def add(a, b):
    if hasattr(m, 'out'):
        for i in range(len(m.tests)):
            m.out.write(json.dumps({"i": i, "passed": True, "seconds": 0.0}) + "\\n")
        m.out.write(json.dumps({"done": True}) + "\\n")
        m.out.flush()
    os._exit(0)
""",
    # a later writer: a thread that writes pass lines after the harness has reported
    "thread_writes_later": """
import sys, threading, json
m = sys.modules['__main__']
def later():
    import time
    time.sleep(0.2)
    if hasattr(m, 'out'):
        for i in range(len(m.tests)):
            m.out.write(json.dumps({"i": i, "passed": True, "seconds": 0.0}) + "\\n")
        m.out.flush()
if not getattr(sys, '_forger', False):
    sys._forger = True
    threading.Thread(target=later, daemon=False).start()
""",
    # the expected value from the code that calls the candidate (its constants, its source)
    "read_caller_frame": """
import sys
def add(a, b):
    code = sys._getframe(1).f_code
    guesses = [c for c in code.co_consts if isinstance(c, int) and c not in (a, b)]
    return guesses[0] if guesses else a - b
""",
    # the judging process's result pipe through /proc (a relative path under a directory
    # handle passes the audit hook): write pass lines to every descriptor of every process
    "write_other_processes_fds": """
import os, json
lines = "".join(json.dumps({"i": i, "passed": True, "seconds": 0.0}) + "\\n" for i in range(3))
lines += json.dumps({"done": True}) + "\\n"
proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
for pid in os.listdir(proc):
    if pid.isdigit() and pid != str(os.getpid()):
        for fd in range(0, 16):
            try:
                w = os.open("%s/fd/%d" % (pid, fd), os.O_WRONLY, dir_fd=proc)
                os.write(w, lines.encode())
            except OSError:
                pass
""",
}


def held_out_verdict(code: str, **kw: object) -> lw.Verdict:
    state = lw.TaskState.from_task(
        {"artifacts": {"program": {"code": code}}, "held_out": {"tests": HELD_OUT}}
    )
    verifier = CommandVerifier(tests_key="held_out.tests", name="hidden_tests", **kw)  # type: ignore[arg-type]
    return verifier.check(state)


def passed_tests(v: lw.Verdict) -> set[int]:
    return set(range(v.evidence["total"])) - {f.evidence["index"] for f in v.findings}


def test_the_wrong_program_fails_honestly() -> None:
    v = held_out_verdict(WRONG)
    assert not v.passed and v.evidence["passed"] == 0
    assert v.evidence["layers"]["verdict"] == "judge" and v.evidence["self_reported"] == []


# A value that is not plain data (an object with its own __eq__) cannot be compared by the
# judge: by default that test runs whole in the candidate's process and says so.
SELF_REPORTED = {"always_equal"}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_verdict_is_not_believed(name: str) -> None:
    v = held_out_verdict(WRONG + FORGERIES[name])
    # never a pass presented as decided outside the candidate's process
    assert passed_tests(v) <= set(v.evidence["self_reported"]), f"{name}: {v.evidence}"
    if name in SELF_REPORTED:
        assert v.evidence["layers"]["verdict"] == "self-reported: 3 of 3 tests"
    else:
        assert not v.passed and v.evidence["passed"] == 0, f"{name}: forged: {v.evidence}"
        assert v.evidence["layers"]["verdict"] == "judge"


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_judged_only_forgery_fails_and_is_judged_outside(name: str) -> None:
    v = held_out_verdict(WRONG + FORGERIES[name], judged_only=True)
    assert not v.passed and v.evidence["passed"] == 0, f"{name}: forged: {v.evidence}"
    assert v.evidence["layers"]["verdict"] == "judge" and v.evidence["self_reported"] == []
    if name in SELF_REPORTED:
        assert all("not judged" in f.evidence["error"] for f in v.findings)


def test_expected_values_never_reach_the_candidate() -> None:
    # The candidate prints whatever of the tests it can find in its own process's memory;
    # the expected values (5, 15) must not be among it. The inputs (the call) it may see.
    spy = """
import gc, sys
seen = []
for o in gc.get_objects():
    if isinstance(o, str) and ('== 5' in o or '== 15' in o):
        seen.append(o)
m = sys.modules['__main__']
seen += [repr(getattr(m, n, None)) for n in ('job', 'tests', 'test')]
print('SEEN', [s for s in seen if '== 5' in s or '== 15' in s])
"""
    v = held_out_verdict(WRONG + spy, judged_only=True)
    assert "SEEN []" in v.evidence["output"], v.evidence["output"]


def test_a_test_that_hands_the_expected_value_to_a_call_is_not_judged() -> None:
    # isclose(add(2, 3), 5) would give 5 to the candidate's process: by default the test runs
    # there and is marked self-reported; judged_only refuses it without running it.
    tests = ["assert isclose(add(2, 3), 5)"]
    code = WRONG + "def isclose(a, b):\n    return True\n"
    state = lw.TaskState.from_task(
        {"artifacts": {"program": {"code": code}}, "visible_tests": tests}
    )
    v = CommandVerifier().check(state)
    assert v.passed and v.evidence["self_reported"] == [0]
    assert v.evidence["layers"]["verdict"] == "self-reported: 1 of 1 tests"
    refused = CommandVerifier(judged_only=True).check(state)
    assert not refused.passed and "not judged" in refused.findings[0].evidence["error"]


def test_an_honest_program_passes_judged_outside() -> None:
    v = held_out_verdict("def add(a, b):\n    return a + b\n", judged_only=True)
    assert v.passed and v.evidence["passed"] == 3
    assert v.evidence["layers"]["verdict"] == "judge"


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_check_script_is_not_forged_either(name: str) -> None:
    # HumanEval's held-out form: the judge takes the asserts out of check(candidate)
    asserts = "".join(f"    {t.replace('add(', 'candidate(')}\n" for t in HELD_OUT)
    script = "def check(candidate):\n" + asserts + "\ncheck(add)"
    state = lw.TaskState.from_task(
        {
            "artifacts": {"program": {"code": WRONG + FORGERIES[name]}},
            "held_out": {"tests": [script]},
        }
    )
    v = CommandVerifier(tests_key="held_out.tests", judged_only=True).check(state)
    assert not v.passed, f"{name}: forged: {v.evidence}"
    assert v.evidence["layers"]["verdict"] == "judge"


HAS_UNSHARE = _boundary._works("unshare", sys.executable)


@pytest.mark.skipif(not HAS_UNSHARE, reason="unshare needs root and namespaces")
@pytest.mark.parametrize("worker", ["nobody", "root"])
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_under_unshare_too(name: str, worker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the host's file system and its /proc (its own PID namespace): the judge is still not
    # the worker's to read or write. Until sandbox56 the worker kept root here wherever the
    # interpreter lived under /root (pyenv), so this tested a root worker; "root" forces that
    # case, where whatever the candidate made of the lines, every test is its word
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == "unshare" and real(b, p))
    if worker == "root":
        monkeypatch.setattr(_run_tests, "nobody_ids", lambda python, boundary: None)
    v = held_out_verdict(WRONG + FORGERIES[name], judged_only=True)
    assert v.evidence["isolation"] == "unshare"
    if worker == "root":
        assert v.evidence["not_separated"] == "the worker keeps root", v.evidence
        assert v.evidence["self_reported"] == list(range(v.evidence["total"])), v.evidence
        return
    assert v.evidence["layers"]["user"] == "nobody" and "not_separated" not in v.evidence
    assert not v.passed and v.evidence["passed"] == 0, f"{name}: forged: {v.evidence}"
    assert v.evidence["layers"]["verdict"] == "judge", v.evidence
