"""A run created from Python with ``lw.load_spec`` records its spec's path and version, as
``loopwright run`` does: ``loopwright resume`` drives it (docs/cli.md), where a run of a loop
built with ``lw.Loop`` is refused, naming ``Runtime.resume``."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main

CODE = """
import loopwright as lw

def propose(ctx):
    return lw.Proposal.edit("doc", {"x": 1})

def check(state, proposal):
    return lw.Verdict(passed=state.values()["doc"]["x"] == 1)
"""
SPEC = """
name = "from-python"
[actor]
ref = "code.py:propose"
[[verifiers]]
ref = "code.py:check"
[contract.budget]
max_cycles = 2
"""
TASK = {"artifacts": {"doc": {"x": 0}}}


def test_the_cli_resumes_a_run_created_from_a_loaded_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "code.py").write_text(CODE)
    (tmp_path / "loop.toml").write_text(SPEC)
    store = str(tmp_path / "s.db")
    loop = lw.load_spec(tmp_path / "loop.toml")
    with lw.Runtime(store) as rt:
        rt.create(loop, TASK, task_key="spec")
        rt.create(
            lw.Loop(name="py", actor=loop.actor, verifiers=loop.verifiers, contract=loop.contract),
            TASK,
            task_key="py",
        )
        rec = rt.store.get_run("spec")
        assert (rec.spec_ref, rec.loop_version) == (str(tmp_path / "loop.toml"), loop.version)
    assert main(["resume", "spec", "--store", store]) == 0
    with lw.Runtime(store) as rt:
        assert rt.store.get_run("spec").status == "accepted"
    capsys.readouterr()
    assert main(["resume", "py", "--store", store]) == 2
    assert "Runtime.resume" in " ".join(capsys.readouterr().err.split())
