"""Two threads loading one spec file at once (review53c): the dashboard builds a run's loop in
its request threads since secrets53b (``register_run_secrets``, an edit's or a decision's),
beside its resume threads (``loop_of_run``). The spec's ``file.py`` module is put in
``sys.modules`` before its code runs; a second thread found it there half made and read
"has no attribute": the edit went on with the loop's keys unregistered (a key pasted into it
stored in clear), or the resume failed. The second now waits for the first's import."""

from __future__ import annotations

import builtins
import threading
from pathlib import Path
from typing import Any

import pytest

from loopwright import _spec_import
from loopwright._spec import load_spec

SPEC = """
name = "slow"
[actor]
ref = "slow_mod.py:actor"
[[verifiers]]
ref = "slow_mod.py:check"
[contract.budget]
max_cycles = 2
"""

MODULE = """
import builtins
import loopwright as lw

gate = builtins._r53c_gate
gate["started"].set()
gate["go"].wait()

def actor(state):
    return lw.Proposal(changes={})

def check(state, proposal):
    return lw.Verdict(passed=True, score=1.0)
"""


class _Signalling:
    """A lock that says when a second thread waits on it (then lets the first go on)."""

    def __init__(self, inner: Any, go: threading.Event) -> None:
        self.inner, self.go = inner, go

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.inner.acquire()
            return
        self.go.set()  # the second loader is at the lock: the first may finish
        self.inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


def test_a_spec_module_being_imported_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "slow_mod.py").write_text(MODULE)
    (tmp_path / "loop.toml").write_text(SPEC)
    gate = {"started": threading.Event(), "go": threading.Event()}
    monkeypatch.setattr(builtins, "_r53c_gate", gate, raising=False)
    # (in ``_spec_import`` since stop 56: a patch of ``_spec`` would have reached no lock and the
    # two loads would wait on each other)
    real = _spec_import._import_lock
    monkeypatch.setattr(
        _spec_import, "_import_lock", lambda name: _Signalling(real(name), gate["go"])
    )
    first: dict[str, Any] = {}

    def load() -> None:
        try:
            first["loop"] = load_spec(tmp_path / "loop.toml")
        except BaseException as exc:
            first["error"] = exc

    t = threading.Thread(target=load)
    t.start()
    try:
        gate["started"].wait()
        loop = load_spec(tmp_path / "loop.toml")  # while the first thread imports the module
    finally:
        gate["go"].set()
        t.join()
    assert "error" not in first, first
    assert loop.actor is not None and len(loop.checks) == 1
