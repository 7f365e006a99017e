"""A ``Runtime(on_progress=…)`` callback that raises is said once, on the ``loopwright.runs``
logger, with its traceback (api49): it was swallowed with no word, so ``lambda rec:
print(rec.cycles)`` (RunResult's name; a RunRecord's is ``cycle``) printed nothing, ever. The
run is not harmed, and later failures are not logged again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import loopwright as lw


def _loop() -> lw.Loop:
    """Three cycles that never pass: a commit, and a callback, after each."""
    return lw.Loop(
        name="progress",
        actor=lambda ctx: lw.Proposal.edit("doc", {"n": ctx.cycle}),
        verifiers=[lw.Check(fn=lambda state, proposal: lw.Verdict(passed=False, score=0.1))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


def test_a_failing_progress_callback_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def progress(rec: lw.RunRecord) -> None:
        calls.append(rec.cycle)
        raise AttributeError("'RunRecord' object has no attribute 'cycles'")

    loop = _loop()
    with (
        caplog.at_level(logging.WARNING, logger="loopwright.runs"),
        lw.Runtime(tmp_path / "s.db", on_progress=progress) as rt,
    ):
        result = rt.run_sync(loop, {"artifacts": {"doc": {"n": 0}}})
    assert result.status == "stopped" and result.cycles == 3
    assert len(calls) >= 3  # called after every commit, each time raising
    said = [r for r in caplog.records if r.name == "loopwright.runs"]
    assert len(said) == 1, said
    assert "on_progress raised" in said[0].getMessage()
    assert said[0].exc_info is not None and "cycles" in str(said[0].exc_info[1])


def test_a_store_read_failing_before_the_callback_is_not_said_as_its_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # (review49c) the run read for the callback failed once (the store, not the callback): it
    # was logged as "on_progress raised", using up the one warning, and the callback's own
    # error later was never said
    def progress(rec: lw.RunRecord) -> None:
        raise AttributeError("'RunRecord' object has no attribute 'cycles'")

    loop = _loop()
    with (
        caplog.at_level(logging.WARNING, logger="loopwright.runs"),
        lw.Runtime(tmp_path / "s.db", on_progress=progress) as rt,
    ):
        real = rt.store.get_run
        armed: list[str] = []

        def get_run(run_id: str) -> lw.RunRecord:
            if armed == ["after_checkpoint"]:  # the read for the callback, first commit only
                armed.append("failed")
                raise lw.StoreUnavailableError("connection dropped (injected)")
            return real(run_id)

        def phase(name: str) -> None:
            if name == "after_checkpoint" and not armed:
                armed.append(name)

        rt.store.get_run = get_run  # type: ignore[method-assign]
        rt._on_phase = phase
        result = rt.run_sync(loop, {"artifacts": {"doc": {"n": 0}}})
    assert armed == ["after_checkpoint", "failed"]  # the fault was placed
    assert result.status == "stopped" and result.cycles == 3
    said = [r for r in caplog.records if r.name == "loopwright.runs"]
    assert len(said) == 1, said
    assert said[0].exc_info is not None
    assert isinstance(said[0].exc_info[1], AttributeError)  # before: StoreUnavailableError
