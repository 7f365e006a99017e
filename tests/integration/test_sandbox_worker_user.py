"""The worker drops to ``nobody`` where the interpreter lives behind a directory ``nobody``
may not pass (stop 56, sandbox56). With the interpreter under ``/root/.pyenv`` (``/root`` is
0700: pyenv's and many Docker images' layout), ``nobody_ids`` found the standard library
unreadable as ``nobody`` under ``unshare`` and the worker kept root: it could reach the judge's
result lines, so every verdict was self-reported (``not_separated``), and the tests that claimed
to test the drop under ``unshare`` tested a root worker. Now the judge, root in its own mount
namespace, lays a tmpfs over that directory and binds the interpreter's installation back
into it read-only (the host unchanged); ``bwrap`` builds the parents itself. Where that fails the
judge keeps root and says so before any candidate code runs, and the run is not separated."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Sequence

import pytest

from loopwright.verifiers import _boundary, _run_tests, run_tests

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the drop to nobody is root's")

NOBODY = pwd.getpwnam("nobody").pw_uid
HAS_BWRAP = _boundary._works("bwrap", sys.executable)
HAS_UNSHARE = _boundary._works("unshare", sys.executable)
BOUNDARIES = [
    pytest.param("bwrap", marks=pytest.mark.skipif(not HAS_BWRAP, reason="no working bwrap")),
    pytest.param("unshare", marks=pytest.mark.skipif(not HAS_UNSHARE, reason="no unshare")),
]
# the worker's ids, and the interpreter and its standard library read as them (a C extension
# of lib-dynload, a pure module's source)
WHO = """
import os, decimal, json
def ids():
    return [os.getuid(), os.geteuid()]
def reads():
    with open(os.__file__, "rb") as fh:
        return len(fh.read(10)) == 10 and os.access(os.path.realpath(__import__("sys").executable), os.X_OK)
"""
TESTS = [f"assert ids() == [{NOBODY}, {NOBODY}]", "assert reads() == True"]


def _only(boundary: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == boundary and real(b, p))


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_the_worker_runs_as_nobody(boundary: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _only(boundary, monkeypatch)
    r = run_tests(WHO, TESTS)
    assert r.isolation == boundary
    assert r.passed and r.layers["user"] == "nobody", r.to_dict()
    assert r.not_separated == "" and r.layers["verdict"] == "judge", r.to_dict()
    assert not any(t.self_reported for t in r.tests)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_the_check_sees_a_separated_judge(boundary: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # ``loopwright check`` (``judge_apart``) says so before any run (under unshare it said
    # "the worker keeps root"), and the other way where the drop is impossible
    _only(boundary, monkeypatch)
    _boundary.nobody_ids.cache_clear()
    assert _run_tests.judge_apart() == ""
    monkeypatch.setattr(_run_tests, "nobody_ids", lambda python, boundary: None)
    assert _run_tests.judge_apart() == "the worker keeps root"


@pytest.mark.skipif(not HAS_UNSHARE, reason="no unshare")
def test_the_host_keeps_its_private_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    # the tmpfs is the judge's mount namespace's: /root's other entries are out of the
    # candidate's sight, and the host's /root is as it was
    _only("unshare", monkeypatch)
    before = os.stat("/root").st_mode
    seen = "import os\ndef f():\n    return sorted(os.listdir('/root'))\n"
    r = run_tests(seen, [f"assert f() == {sorted(_reach_roots())!r}"])
    assert r.passed, r.to_dict()
    assert os.stat("/root").st_mode == before


def _reach_roots() -> list[str]:
    # what of /root the worker sees: the first part below /root of each path bound back
    out: set[str] = set()
    for p in _boundary.worker_paths(sys.executable, ()):
        if p.startswith("/root/"):
            out.add(p.split("/")[2])
    return list(out)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_an_interpreter_left_unreachable_keeps_root_and_self_reports(
    boundary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the parent predicted the drop, but nothing was bound back (the judge's mounts failed,
    # say): the judge finds the standard library unreadable as nobody, keeps root, and says so
    # in its first line, before any candidate code; the parent marks the run not separated
    _only(boundary, monkeypatch)
    monkeypatch.setattr(_run_tests, "worker_paths", lambda python, read_only: [])
    if boundary == "bwrap":
        # bwrap binds the prefix itself; only an unreadable one is left out of reach
        monkeypatch.setattr(_boundary, "_prefixes", lambda python: [])
        monkeypatch.setattr(_run_tests, "wrapped_argv", _broken_bwrap)
    r = run_tests(WHO, TESTS)
    assert r.isolation == boundary
    assert r.layers["user"].startswith("unchanged"), r.to_dict()
    assert r.not_separated == "the worker keeps root", r.to_dict()
    assert all(t.self_reported for t in r.tests)


def _broken_bwrap(
    boundary: str, python: str, workdir: str, read_only: Sequence[str] = ()
) -> list[str]:
    # the prefix bound where it is, under a /root of mode 0700 inside the sandbox
    argv = _boundary.wrapped_argv(boundary, python, workdir, read_only)
    i = argv.index("--chdir")
    prefix = os.path.realpath(sys.base_prefix)
    extra = ["--perms", "0700", "--dir", "/root", "--ro-bind", prefix, prefix]
    return argv[:i] + extra + argv[i:]


@pytest.mark.skipif(not HAS_UNSHARE, reason="no unshare")
def test_a_file_bound_back_inside_a_bound_back_prefix_does_not_crash_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an allowed single-module package (``decorator.py``) in the site-packages of an interpreter
    # under /root/.pyenv: the judge bound the prefix back read-only, then opened the module's
    # path to write (its mount point) inside that read-only bind: EROFS, private_fs abandoned
    # half-way and every run crashed ("Read-only file system: 'output.txt'"; review56b)
    _only("unshare", monkeypatch)
    prefixes = _boundary.worker_paths(sys.executable, ())
    module = os.path.realpath(os.__file__)  # a file inside the prefix, as such a package is
    if not any(module.startswith(p.rstrip("/") + "/") for p in prefixes):
        pytest.skip("the standard library is not under a prefix the judge binds back")
    real = _run_tests.worker_paths
    monkeypatch.setattr(_run_tests, "worker_paths", lambda py, ro: [*real(py, ro), module])
    r = run_tests(WHO, TESTS)
    assert r.status == "completed" and r.passed, r.to_dict()
    assert r.layers["user"] == "nobody", r.to_dict()
