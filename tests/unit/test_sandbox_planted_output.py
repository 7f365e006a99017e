"""The parent reads one file the candidate could touch, its output: a candidate that plants a
link or a FIFO there must not make the parent (outside the sandbox, with the parent's rights)
read a host file into the verdict, where a visible check's findings take it to the actor
(trust53)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from loopwright.verifiers import _boundary, _run_tests, run_tests

HAS_BWRAP = _boundary._works("bwrap", sys.executable)
UP = 40  # deeper than any temporary directory's path

# The audit hook resolves a link's target when the link is made: ``x`` then leads deep into
# the work directory, so the target stays inside. Then ``x`` is made to lead to ``.`` and the
# same text climbs to ``/``, to the host file.
LINK = f"""
import os
os.makedirs("/".join(["d"] * {UP}))
os.symlink("/".join(["d"] * {UP}), "x")
os.remove("output.txt")
os.symlink("x/" + "../" * {UP} + {{target!r}}.lstrip("/"), "output.txt")
os.remove("x")
os.symlink(".", "x")
os._exit(3)
"""


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap does not work here")
def test_a_link_planted_as_the_output_reads_no_host_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-trust53\n")
    r = run_tests(LINK.format(target=str(secret)), ["assert True"])
    assert r.isolation == "bwrap" and r.status == "crashed"
    assert "HOST-SECRET" not in r.reason + r.output
    assert "exit code 3" in r.reason


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap does not work here")
def test_the_parents_environment_is_not_read_through_a_planted_link() -> None:
    # what the parent was started with (an API key, in real use); the child has PATH and LANG
    started = Path("/proc/self/environ").read_bytes().decode("utf-8", "replace").split("\0")
    theirs = [e for e in started if "=" in e and e.split("=")[0] not in {"PATH", "LANG", "PWD"}]
    if not theirs:
        pytest.skip("the test process was started with no environment of its own")
    r = run_tests(LINK.format(target="/proc/self/environ"), ["assert True"])
    assert not [e for e in theirs if e in r.reason + r.output]


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap does not work here")
def test_a_fifo_planted_as_the_output_does_not_hang_the_parent() -> None:
    code = 'import os\nos.remove("output.txt")\nos.mkfifo("output.txt")\nos._exit(3)\n'
    r = run_tests(code, ["assert True"])
    assert r.status == "crashed" and "exit code 3" in r.reason and r.output == ""


HAS_UNSHARE = _boundary._works("unshare", sys.executable)
SHARED = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


@pytest.mark.skipif(not HAS_UNSHARE, reason="unshare needs root and namespaces")
def test_under_unshare_no_run_leaves_a_file_for_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``unshare`` the host's file system is visible, and ``nobody`` may write where
    anyone may: a held-out run's candidate (which holds the hidden tests) could leave them in
    ``/tmp`` for the next visible run's candidate to print into a finding the actor reads. Past
    the audit hook (a ``dir_fd``, which it does not judge), such a write lands in a directory
    of the run's own."""
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == "unshare" and real(b, p))
    name = f"trust53-{uuid.uuid4().hex}"
    write = f"""
import os
for d in {SHARED!r}:
    try:
        fd = os.open(d, os.O_RDONLY)
        w = os.open({name!r}, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(w, b"HIDDEN-TESTS")
        print(d, "written")
    except OSError as exc:
        print(d, type(exc).__name__)
"""
    read = f"""
def found():
    out = []
    for d in {SHARED!r}:
        try:
            out.append(open(d + "/" + {name!r}).read())
        except OSError:
            pass
    return out
"""
    try:
        first = run_tests(write, ["assert True"])
        assert first.isolation == "unshare" and first.passed
        assert "/tmp written" in first.output  # the write itself is not refused...
        second = run_tests(read, ["assert found() == []"])
        assert second.passed, second.tests[0].actual  # ...but the next run does not see it
        assert not [d for d in SHARED if os.path.exists(os.path.join(d, name))]
    finally:
        for d in SHARED:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(d, name))


@pytest.mark.skipif(not HAS_UNSHARE, reason="unshare needs root and namespaces")
def test_under_unshare_the_tests_still_run_in_the_work_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == "unshare" and real(b, p))
    code = 'def f():\n    open("made.txt", "w").write("x")\n    return open("made.txt").read()\n'
    r = run_tests(code + 'print("said")\n', ["assert f() == 'x'", "assert 1 == 2"])
    assert r.isolation == "unshare"
    assert [t.passed for t in r.tests] == [True, False]
    assert "said" in r.output


def _host_dir() -> str:
    """A host directory every user may reach, outside those the child gets a private tmpfs
    on: the home directory, unless (``/root``, 0700) the child sees a tmpfs there too."""
    for d in (os.path.expanduser("~"), "/srv", "/opt", "/var/lib"):
        d = os.path.realpath(d)
        if any(d == s or d.startswith(s + "/") for s in SHARED):
            continue
        up = [d, *(p for p in Path(d).parents)]
        if all(os.stat(p).st_mode & 0o001 for p in up):
            return d
    pytest.skip("no host directory every user may reach")


@pytest.mark.skipif(not HAS_UNSHARE, reason="unshare needs root and namespaces")
@pytest.mark.parametrize("worker", ["nobody", "root"])
def test_under_unshare_the_host_file_system_is_read_only(
    worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the child keeps root (an interpreter ``nobody`` cannot reach), a ``dir_fd`` write
    past the audit hook reached any host directory: the store's folder, the package itself.
    Every host mount is read-only in the child's mount namespace, for a ``nobody`` worker too
    (until sandbox56 the worker kept root here under pyenv's /root, and the host directory was
    made in /root, which a nobody worker cannot reach: "root" forces that case now)."""
    real = _boundary._works
    monkeypatch.setattr(_boundary, "_works", lambda b, p: b == "unshare" and real(b, p))
    if worker == "root":
        monkeypatch.setattr(_run_tests, "nobody_ids", lambda python, boundary: None)
    host = tempfile.mkdtemp(prefix=".trust53-", dir=_host_dir())
    os.chmod(host, 0o777)  # writable by nobody too
    code = f"""
import os
def put():
    fd = os.open({host!r}, os.O_RDONLY)
    try:
        os.close(os.open("planted", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        return "written"
    except OSError as exc:
        return os.strerror(exc.errno)
"""
    try:
        r = run_tests(code, ["assert put() == 'written'"])
        assert r.isolation == "unshare"
        assert not os.path.exists(os.path.join(host, "planted"))
        assert r.tests[0].actual == "Read-only file system"
        assert r.layers["filesystem"] == "read-only, private /tmp"
        assert r.layers["user"] == ("nobody" if worker == "nobody" else "unchanged"), r.layers
    finally:
        shutil.rmtree(host, ignore_errors=True)
