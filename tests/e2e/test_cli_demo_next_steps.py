"""`loopwright demo`'s next steps are typed as they work here (helper newuser52): `make demo`
runs `.venv/bin/loopwright demo` without activating the venv, and each "Try next" command,
typed as printed, answered "loopwright: command not found"."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from .test_bad_inputs import lw


def test_the_demos_next_steps_name_the_program_when_path_does_not_find_it(
    tmp_path: Path,
) -> None:
    exe = Path(sys.executable).with_name("loopwright")  # as `make demo` starts it: by path
    shown = lw("demo", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert shown.returncode in (0, 4), shown.stderr
    steps = shown.stdout.split("Try next", 1)[1].splitlines()[1:]
    assert steps and all(s.strip().startswith(f"{exe} ") for s in steps if s.strip()), steps
    # The default store needs no --store (polish52: the demo named its resolved URL, the
    # default store's path, where every other command's hint names only a --store given).
    assert not any("--store" in s for s in steps), steps
    words = steps[0].split()  # `runs`, then what it shows
    ran = lw(words[1], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert ran.returncode == 0 and "run(s)" in ran.stdout, ran.stderr


def _program(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "loopwright"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_the_word_is_the_programs_path_unless_path_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwright.cli._demo import command_word

    exe = _program(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(exe), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_word() == os.path.join("bin", "loopwright")  # under the working folder
    monkeypatch.chdir(tmp_path / "bin")
    monkeypatch.setattr(sys, "argv", [str(exe), "demo"])
    assert command_word() == "./loopwright"  # (the bare word is looked up on PATH)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}/usr/bin")
    assert command_word() == "loopwright"
    # ``python -m loopwright``: its __main__.py, not a program named loopwright
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "__main__.py"), "demo"])
    assert command_word() == "loopwright"
