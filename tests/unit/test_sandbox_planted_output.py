"""The parent reads one file the candidate could touch, its output: a candidate that plants a
link or a FIFO there must not make the parent (outside the sandbox, with the parent's rights)
read a host file into the verdict, where a visible check's findings take it to the actor
(trust53)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loopwright.verifiers import _boundary, run_tests

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
