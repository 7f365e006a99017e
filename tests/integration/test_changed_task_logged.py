"""``Runtime.run`` given a changed task under the key of a run that exists returns that run as
it stands (a key names one task); a Python caller was told nothing, where the CLI says so
(newuser46). A warning on the ``loopwright.runs`` logger now says it, once per such call."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

import loopwright as lw


def _loop() -> lw.Loop:
    return lw.Loop(
        name="keyed",
        actor=lambda ctx: lw.Proposal.edit("a", {"x": 1}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="ok")],
        contract=lw.Contract.from_dict({"budget": {"max_cycles": 2}}),
    )


def test_a_changed_task_under_an_existing_key_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loop = _loop()
    with lw.Runtime(str(tmp_path / "s.db")) as rt, caplog.at_level(logging.WARNING):
        first = rt.run_sync(loop, {"artifacts": {"a": {"x": 0}}}, task_key="k")
        assert not caplog.records  # a new run: nothing to say
        again = rt.run_sync(loop, {"artifacts": {"a": {"x": 0}}}, task_key="k")
        assert not caplog.records  # the same task again: the run as it stands, silently
        changed = rt.run_sync(loop, {"artifacts": {"a": {"x": 5}}}, task_key="k")
        assert first.run_id == again.run_id == changed.run_id
        [said] = caplog.records
        assert said.name == "loopwright.runs" and said.levelno == logging.WARNING
        assert "task key 'k' is run" in said.getMessage()
        assert "the task given was not read" in said.getMessage()
        caplog.clear()
        done = asyncio.run(
            rt.run_many(loop, [{"artifacts": {"a": {"x": 7}}}], key_of=lambda t, i: "k")
        )
        assert done[0].run_id == first.run_id and len(caplog.records) == 1
