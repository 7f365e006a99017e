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


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("planted-old-value-1", "planted-new-value-2"),  # the secret rotated
        (None, "planted-old-value-1"),  # the task's text became a secret's value
        ("planted-old-value-1", None),  # ... or stopped being one
    ],
)
def test_a_secret_changed_in_the_environment_is_no_changed_task(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    before: str | None,
    after: str | None,
) -> None:
    """The task is stored masked with the environment's secrets of the day: compared masked
    with today's, an unchanged task read as changed when a secret changed in between."""

    def secret(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("SERVICE_TOKEN", raising=False)
        else:
            monkeypatch.setenv("SERVICE_TOKEN", value)

    def task(note: str) -> dict[str, object]:
        return {"artifacts": {"a": {"x": 0}}, "note": f"{note} planted-old-value-1 end"}

    loop = _loop()
    with lw.Runtime(str(tmp_path / "s.db")) as rt, caplog.at_level(logging.WARNING):
        secret(before)
        first = rt.run_sync(loop, task("call with"), task_key="k")
        secret(after)
        again = rt.run_sync(loop, task("call with"), task_key="k")
        assert again.run_id == first.run_id
        assert not caplog.records, [r.getMessage() for r in caplog.records]
        # a change outside what a secret masks is still said
        rt.run_sync(loop, task("call again with"), task_key="k")
        [said] = caplog.records
        assert "the task given was not read" in said.getMessage()
