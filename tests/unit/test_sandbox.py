"""The sandboxed command verifier: per-test results, and escape attempts that all end as failed
verdicts with clear reasons (never a hung or crashed test run)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.verifiers import (
    CommandVerifier,
    Limits,
    _boundary,  # where sandbox_boundary reads _works
    run_tests,
    sandbox,
)
from loopwright.verifiers.sandbox import SandboxUnavailableError


def verdict(code: str, tests: list[str], **kw: object) -> lw.Verdict:
    state = lw.TaskState.from_task(
        {"artifacts": {"program": {"code": code}}, "visible_tests": tests}
    )
    return CommandVerifier(**kw).check(state)  # type: ignore[arg-type]


def only_finding(v: lw.Verdict) -> lw.Finding:
    assert not v.passed
    assert len(v.findings) == 1
    f = v.findings[0]
    assert (f.artifact, f.part, f.dimension) == ("program", "code", "test")
    return f


def test_per_test_results_with_actual_output() -> None:
    code = "def inc(x):\n    return x + 1\n"
    v = verdict(code, ["assert inc(1) == 2", "assert inc(2) == 4", "assert inc([]) == 1"])
    assert not v.passed
    assert v.score == pytest.approx(1 / 3)
    assert [f.evidence["index"] for f in v.findings] == [1, 2]
    assert v.findings[0].evidence["feedback"] == "assert inc(2) == 4 # Real Execution Output: 3"
    assert "can only concatenate list" in v.findings[1].evidence["actual"]
    assert v.evidence["passed"] == 1 and v.evidence["total"] == 3


def test_all_pass_and_vacuous() -> None:
    assert verdict("def f():\n    return 1\n", ["assert f() == 1"]).passed
    empty = verdict("def f():\n    return 1\n", [])
    assert empty.passed and empty.evidence["vacuous"] is True and empty.vacuous
    (note,) = empty.findings  # says why, without blocking the part
    assert note.dimension == "vacuous" and note.severity == "warning"
    assert "allow_vacuous" in note.message


def test_syntax_error_fails_every_test() -> None:
    v = verdict("def f(:\n    return 1\n", ["assert f() == 1", "assert f() == 2"])
    assert not v.passed and len(v.findings) == 2
    assert "SyntaxError" in v.findings[0].evidence["error"]


def test_held_out_script_reports_failing_line() -> None:
    script = "def check(candidate):\n    assert candidate(1) == 1\n    assert candidate(2) == 3\n\ncheck(f)\n"
    f = only_finding(verdict("def f(x):\n    return x\n", [script]))
    assert "AssertionError" in f.evidence["error"] and "line 3" in f.evidence["error"]


def test_infinite_loop_times_out_per_test() -> None:
    v = verdict("def f():\n    while True:\n        pass\n", ["assert f() == 1", "assert 1 == 1"])
    assert not v.passed and v.score == 0.5  # the other test still ran
    assert v.findings[0].evidence["actual"] == "TIMEOUT"


def test_loop_that_disarms_the_test_timer_is_killed_at_the_wall_clock() -> None:
    code = (
        "import signal\n"
        "def f():\n"
        "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "    signal.signal(signal.SIGPROF, signal.SIG_IGN)\n"
        "    while True:\n"
        "        pass\n"
    )
    r = run_tests(code, ["assert f() == 1"], timeout_s=3, test_timeout_s=0.5)
    assert r.status == "timeout" and not r.passed
    assert "wall-clock limit of 3 s" in r.reason
    assert "not finished" in (r.tests[0].error or "")


def test_fork_bomb_is_refused() -> None:
    code = "import os\ndef f():\n    while True:\n        os.fork()\n"
    f = only_finding(verdict(code, ["assert f() == 1"]))
    assert "process creation" in f.evidence["actual"]


def test_subprocess_is_refused() -> None:
    code = "import subprocess\ndef f():\n    return subprocess.run(['true']).returncode\n"
    f = only_finding(verdict(code, ["assert f() == 0"]))
    assert "process creation" in f.evidence["actual"]


def test_huge_allocation_is_a_memory_error() -> None:
    code = "def f():\n    return len(bytearray(64 * 1024 ** 3))\n"
    f = only_finding(verdict(code, ["assert f() == 1"], limits=Limits(memory_mb=512)))
    assert f.evidence["actual"] == "MemoryError"


def test_writing_outside_the_temp_dir_is_refused(tmp_path: Path) -> None:
    target = tmp_path / f"escape-{uuid.uuid4().hex}.txt"
    code = f"def f():\n    open({str(target)!r}, 'w').write('x')\n    return 1\n"
    f = only_finding(verdict(code, ["assert f() == 1"]))
    assert "writing outside the sandbox directory" in f.evidence["actual"]
    assert not target.exists()
    # ...while writing inside its own directory works
    inside = "def g():\n    open('scratch.txt', 'w').write('ok')\n    return open('scratch.txt').read()\n"
    assert verdict(inside, ["assert g() == 'ok'"]).passed


def test_environment_secret_is_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LW_TEST_SECRET", "hunter2")
    code = "import os\ndef f():\n    return os.environ.get('LW_TEST_SECRET', 'absent')\n"
    f = only_finding(verdict(code, ["assert f() == 'hunter2'"]))
    assert f.evidence["actual"] == "absent"
    # nor through the parent's /proc entry
    proc = "import os\ndef g():\n    return open('/proc/%d/environ' % os.getppid(), 'rb').read()\n"
    f = only_finding(verdict(proc, ["assert b'hunter2' in g()"]))
    assert "/proc" in f.evidence["error"]


def test_opening_a_socket_is_refused() -> None:
    code = (
        "import socket\ndef f():\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
        "    s.settimeout(1)\n    s.connect(('1.1.1.1', 80))\n    return 1\n"
    )
    f = only_finding(verdict(code, ["assert f() == 1"]))
    assert "network access is not allowed" in f.evidence["actual"]


def test_network_namespace_under_a_boundary() -> None:
    r = run_tests("x = 1", ["assert x == 1"], allow_unisolated=True)
    assert r.passed
    assert r.layers["boundary"] == r.isolation
    if r.isolation in ("bwrap", "unshare"):
        assert r.layers["network"] == "namespace"


def test_hard_exit_is_a_crash_with_a_reason() -> None:
    r = run_tests("import os\nos._exit(7)\n", ["assert True"])
    assert r.status == "crashed" and "exit code 7" in r.reason and not r.passed


def test_killed_by_signal_is_a_crash_with_a_reason() -> None:
    code = "import signal\ndef f():\n    signal.raise_signal(signal.SIGSEGV)\n"
    r = run_tests(code, ["assert f() == 1"])
    assert r.status == "crashed" and not r.passed
    assert "SIGSEGV" in r.reason


def test_verifier_is_async_and_usable_in_a_loop(tmp_path: Path) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("program", {"code": "def f():\n    return 1\n"})

    loop = lw.Loop(
        name="sbx",
        actor=actor,
        verifiers=[lw.Check(fn=CommandVerifier(tests_key="visible_tests"), name="tests")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    task = {
        "artifacts": {"program": {"code": "def f():\n    return 0\n"}},
        "visible_tests": ["assert f() == 1"],
    }
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = asyncio.run(rt.run(loop, task, task_key="t"))
        [rec] = [rec for _s, _c, rec in rt.store.iter_records(r.run_id) if rec]
    assert (r.status, r.cycles) == ("accepted", 1)
    # accepted because the task's test ran and passed, not for want of a test
    ev = rec["visible"]["tests"]["evidence"]
    assert (ev["status"], ev["passed"], ev["total"]) == ("completed", 1, 1)


def test_audit_hook_fallback_without_namespace(tmp_path: Path) -> None:
    """``isolate=False`` is what a non-root user gets: the audit hook alone still refuses."""
    sock = "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n"
    r = run_tests(sock, ["assert True"], isolate=False)
    assert r.isolation == "none"
    assert r.layers == {
        "boundary": "none",
        "network": "audit-hook",
        "user": "unchanged",
        # no boundary: the judge's lines are in the worker's reach (a root one's the more), so
        # every test is self-reported and the layer says why (stop 56)
        "verdict": "self-reported: 1 of 1 tests (judge not separated: no boundary (isolation "
        + ("none))" if os.geteuid() != 0 else "none), the worker keeps root)"),
    }
    assert "network access is not allowed" in (r.tests[0].actual or "")
    target = tmp_path / "out.txt"
    w = run_tests(f"open({str(target)!r}, 'w')\n", ["assert True"], isolate=False)
    assert "writing outside the sandbox directory" in (w.tests[0].actual or "")
    assert not target.exists()


# --- the boundary (issue 16) -----------------------------------------------------------------
PLANTED = "sk-test-planted-4f1d9c2e7b"
HAS_BWRAP = _boundary._works("bwrap", sys.executable)
HAS_UNSHARE = _boundary._works("unshare", sys.executable)


def _probes(parent_pid: int) -> str:
    """Candidate code that tries every known way to the parent's ``environ`` and returns what
    it read (or the errors), for the real parent's pid and for whatever ``getppid`` says."""
    return f"""
import os
def leak():
    got = []
    for pid in sorted({{os.getppid(), {parent_pid}}}):
        paths = [
            "/proc/%d/environ" % pid,
            "/proc/self/root/proc/%d/environ" % pid,
            "/proc/self/cwd/../../proc/%d/environ" % pid,
            "/proc/self/root/proc/%d/task/%d/environ" % (pid, pid),
        ]
        for path in paths:
            try:
                with open(path, "rb") as fh:
                    got.append(fh.read().decode("latin-1"))
            except BaseException as exc:
                got.append(type(exc).__name__)
        try:
            proc = os.open("/proc", os.O_RDONLY)
            fd = os.open("%d/environ" % pid, os.O_RDONLY, dir_fd=proc)
            got.append(os.read(fd, 1 << 20).decode("latin-1"))
        except BaseException as exc:
            got.append(type(exc).__name__)
    return " | ".join(got)
"""


@pytest.mark.parametrize(
    "boundary",
    [
        pytest.param(
            "bwrap", marks=pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap does not work here")
        ),
        pytest.param(
            "unshare",
            marks=pytest.mark.skipif(not HAS_UNSHARE, reason="unshare needs root and namespaces"),
        ),
    ],
)
def test_parent_environ_is_out_of_reach(boundary: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16.1: /proc/self/root, /proc/self/cwd/.., task/ and dir_fd ways to the parent's
    environ all fail inside a namespace boundary (the parent is not in the child's /proc)."""
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == boundary and real(b, p))
    r = run_tests(_probes(os.getpid()), ["assert leak() == ''"])
    assert r.isolation == boundary
    assert not r.passed and r.status == "completed"
    assert PLANTED not in json.dumps(r.to_dict())
    assert PLANTED not in (r.tests[0].actual or "") and PLANTED not in r.output
    # past the audit hook (dir_fd), the parent is simply not there: the namespace holds
    assert (r.tests[0].actual or "").endswith("FileNotFoundError")


def test_no_boundary_is_refused_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_boundary, "_works", lambda b, p: False)
    monkeypatch.delenv(sandbox.ALLOW_UNISOLATED_ENV, raising=False)
    with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
        run_tests("x = 1", ["assert x == 1"])
    # the verifier refuses too (the engine escalates the run with that message)
    with pytest.raises(SandboxUnavailableError):
        verdict("x = 1", ["assert x == 1"])
    # opted in: it runs, and says loudly that it ran without a boundary
    v = verdict("x = 1", ["assert x == 1"], allow_unisolated=True)
    assert v.passed and v.evidence["isolation"] == "none"
    assert "without namespace isolation" in v.evidence["warning"]
    monkeypatch.setenv(sandbox.ALLOW_UNISOLATED_ENV, "1")
    assert run_tests("x = 1", ["assert x == 1"]).isolation == "none"


def test_verdict_names_the_boundary() -> None:
    v = verdict("x = 1", ["assert x == 1"], allow_unisolated=True)
    assert v.evidence["isolation"] in ("bwrap", "unshare", "none")
    assert ("warning" in v.evidence) == (v.evidence["isolation"] == "none")


def test_audit_hook_follows_proc_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a boundary the hook still refuses /proc/self/root and /proc/self/cwd ways."""
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    code = "import os\ndef f(path):\n    return open(path % os.getppid(), 'rb').read()\n"
    tests = [
        "assert f('/proc/self/root/proc/%d/environ') == b''",
        "assert f('/proc/self/cwd/../../proc/%d/environ') == b''",
        "assert f('/proc/self/root/proc/%d/task/%d/environ'.replace('/task/%d', '')) == b''",
    ]
    r = run_tests(code, tests, isolate=False)
    assert PLANTED not in json.dumps(r.to_dict())
    assert all("/proc entries is not allowed" in (t.actual or "") for t in r.tests)


def test_timeout_on_an_instruction_without_a_line_number() -> None:
    """Issue 17.2: the per-test timer firing on an instruction with no line number (as some of
    a nested loop's are on Python 3.11) made the child's describe() crash (``%d`` of None):
    0/2 and "crashed". Every instruction of this nested loop is stripped of its line."""
    code = (
        "def f(x):\n"
        "    while True:\n"
        "        for i in range(10):\n"
        "            pass\n"
        "n = len(f.__code__.co_code) // 2\n"
        "f.__code__ = f.__code__.replace(co_linetable=bytes([0x80 | (15 << 3) | 7]) * (n // 8 + 1))\n"
    )
    r = run_tests(
        code, ["assert f(1) == 1", "assert 1 == 1"], test_timeout_s=0.2, allow_unisolated=True
    )
    assert r.status == "completed" and r.n_passed == 1
    assert r.tests[0].actual == "TIMEOUT"
    assert "line ?" in (r.tests[0].error or "")


def test_check_says_where_candidate_code_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``loopwright check`` names the boundary, and warns loudly where there is none."""
    from loopwright.cli._check import review

    loop = lw.Loop(
        name="sbx",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[lw.Check(fn=CommandVerifier(), name="tests")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )

    def answer() -> dict[str, str]:
        (found,) = [a for a in review(loop) if a["question"] == "Where does candidate code run?"]
        return found

    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == "bwrap")
    assert answer()["status"] == "ok" and "bwrap" in answer()["answer"]
    monkeypatch.setattr(_boundary, "_works", lambda b, p: False)
    monkeypatch.delenv(sandbox.ALLOW_UNISOLATED_ENV, raising=False)
    refused = answer()
    assert refused["status"] == "warn" and "no sandbox boundary" in refused["answer"]
    monkeypatch.setenv(sandbox.ALLOW_UNISOLATED_ENV, "1")
    allowed = answer()
    assert allowed["status"] == "warn" and "WITHOUT namespace isolation" in allowed["answer"]


# --- limits in CPU time (issue 17.4) -------------------------------------------------------


def test_per_test_limit_is_cpu_time() -> None:
    """A loop that never ends is stopped by the CPU-time limit, however long the wall-clock
    backstop; a test that waits without computing is stopped by the backstop instead."""
    spin = "def f():\n    while True:\n        pass\n"
    r = run_tests(spin, ["assert f() == 1", "assert 1 == 1"], test_timeout_s=0.2, test_wall_s=600)
    assert r.status == "completed" and r.n_passed == 1
    assert r.tests[0].actual == "TIMEOUT" and "CPU-time limit" in (r.tests[0].error or "")
    wait = "import time\ndef f():\n    time.sleep(3600)\n"
    r = run_tests(wait, ["assert f() == 1", "assert 1 == 1"], test_timeout_s=0.2, test_wall_s=1)
    assert r.status == "completed" and r.n_passed == 1
    assert r.tests[0].actual == "TIMEOUT" and "wall-clock backstop" in (r.tests[0].error or "")


def test_a_caught_timeout_fires_again() -> None:
    """The timer repeats: a candidate that swallows the first TimeoutError and loops on is
    stopped by the next one, not left to the wall-clock backstop."""
    code = (
        "def f():\n    try:\n        while True:\n            pass\n"
        "    except BaseException:\n        pass\n    while True:\n        pass\n"
    )
    r = run_tests(code, ["assert f() == 1", "assert 1 == 1"], test_timeout_s=0.2, test_wall_s=600)
    assert r.status == "completed" and r.n_passed == 1 and r.tests[0].actual == "TIMEOUT"


def test_same_verdict_beside_a_cpu_bound_job() -> None:
    """CPU time does not stretch under load: a program well inside its CPU limit passes with a
    busy process beside it, as it does alone (no assertion on how long anything took)."""
    code = "def f(n):\n    return sum(i * i for i in range(n))\n"
    tests = [f"assert f(200000) == {sum(i * i for i in range(200000))}", "assert f(3) == 5"]
    alone = run_tests(code, tests, test_timeout_s=5)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = run_tests(code, tests, test_timeout_s=5)
    finally:
        hog.kill()
        hog.wait()
    assert alone.passed and loaded.passed
    assert [t.passed for t in alone.tests] == [t.passed for t in loaded.tests]


# --- vetted third-party packages (issue 17.3) -----------------------------------------------

PKG = "sortedcontainers"  # pure Python, installed with hypothesis (a dev dependency)
USE_PKG = f"import {PKG}\ndef f(x):\n    return list({PKG}.SortedList(x))\n"


def test_an_allowed_package_is_importable_and_only_it() -> None:
    pytest.importorskip(PKG)
    pytest.importorskip("attr")
    assert not run_tests(USE_PKG, ["assert f([2, 1]) == [1, 2]"]).passed
    ok = run_tests(USE_PKG, ["assert f([2, 1]) == [1, 2]"], allow_packages=[PKG])
    assert ok.passed, ok.to_dict()
    other = run_tests("import attr\nx = 1", ["assert x == 1"], allow_packages=[PKG])
    assert not other.passed and "No module named 'attr'" in (other.tests[0].actual or "")
    assert verdict(USE_PKG, ["assert f([2, 1]) == [1, 2]"], allow_packages=[PKG]).passed


def test_numpy_when_listed_not_otherwise() -> None:
    pytest.importorskip("numpy", reason="numpy is not installed here (not a dependency)")
    code = "import numpy as np\ndef f(n):\n    return int(np.arange(n).sum())\n"
    assert run_tests(code, ["assert f(4) == 6"], allow_packages=["numpy"]).passed
    no = run_tests(code, ["assert f(4) == 6"])
    assert "No module named 'numpy'" in (no.tests[0].actual or "")
    # numpy's own libraries are loaded before the hook; the candidate's ctypes calls are not
    cdll = "import numpy, ctypes\ndef f():\n    return ctypes.CDLL(None).getpid()\n"
    r = run_tests(cdll, ["assert f() > 0"], allow_packages=["numpy"])
    assert not r.passed and "ctypes is not allowed" in (r.tests[0].actual or "")


def test_with_a_package_allowed_the_sandbox_still_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = pytest.importorskip(PKG)
    monkeypatch.setenv("LW_TEST_SECRET", "hunter2")
    pkg_dir = os.path.dirname(os.path.realpath(str(mod.__file__)))
    planted = os.path.join(pkg_dir, f"planted_{uuid.uuid4().hex}.py")
    target = tmp_path / f"escape-{uuid.uuid4().hex}.txt"
    code = (
        f"import os, socket, {PKG}\n"
        "def secret():\n    return os.environ.get('LW_TEST_SECRET', 'absent')\n"
        "def net():\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\n    return 1\n"
        f"def out():\n    open({str(target)!r}, 'w').write('x')\n    return 1\n"
        f"def pkg():\n    open({planted!r}, 'w').write('x')\n    return 1\n"
    )
    tests = [
        "assert secret() == 'hunter2'",
        "assert net() == 1",
        "assert out() == 1",
        "assert pkg() == 1",
    ]
    r = run_tests(code, tests, allow_packages=[PKG])
    assert r.status == "completed" and r.n_passed == 0
    assert r.tests[0].actual == "absent"
    assert "network access is not allowed" in (r.tests[1].actual or "")
    assert "writing outside the sandbox directory" in (r.tests[2].actual or "")
    assert "writing outside the sandbox directory" in (r.tests[3].actual or "")
    assert not target.exists() and not os.path.exists(planted)


def test_allow_packages_mistakes_are_config_errors() -> None:
    with pytest.raises(lw.ConfigError, match="not installed"):
        CommandVerifier(allow_packages=["no_such_package_xyz"])
    with pytest.raises(lw.ConfigError, match="standard library"):
        CommandVerifier(allow_packages=["json"])
    with pytest.raises(lw.ConfigError, match="top-level module name"):
        CommandVerifier(allow_packages=["numpy.linalg"])
