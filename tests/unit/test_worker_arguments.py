"""``Worker`` is public (``lw.Worker``, ``lw.WorkerStats``; docs/scale.md documents it) and its
arguments are checked: a wrong one is a ``ConfigError`` naming it, not a ``TypeError`` from a
comparison (``concurrency="8"``) or an asyncio ``ValueError`` once the worker went idle
(``poll_s=nan``). Outside probe pyapi47."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"t": "ok"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.artifacts["doc"].values()["t"] == "ok")

    return lw.Loop(
        name="w",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )


def test_the_worker_is_public_and_drives_runs_made_in_python(tmp_path: Path) -> None:
    assert "Worker" in lw.__all__ and "WorkerStats" in lw.__all__
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        rt.create(_loop(), {"artifacts": {"doc": {"t": "x"}}}, task_key="k")
        ended: list[lw.RunResult] = []
        stats = asyncio.run(
            lw.Worker(rt, loops={"w": _loop()}, on_result=ended.append).run(once=True)
        )
    assert isinstance(stats, lw.WorkerStats)
    assert stats.claimed == 1 and [r.status for r in ended] == ["accepted"]


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("concurrency", {"concurrency": "8"}),
        ("concurrency", {"concurrency": 0}),
        ("concurrency", {"concurrency": True}),
        ("poll_s", {"poll_s": float("nan")}),
        ("poll_s", {"poll_s": "1"}),
        ("poll_s", {"poll_s": 0}),
        ("loops", {"loops": {"w": "loop.toml"}}),
        ("loops", {"loops": [("w", None)]}),
        ("on_result", {"on_result": "print"}),
        ("on_skip", {"on_skip": 5}),
    ],
)
def test_a_wrong_worker_argument_is_a_config_error(
    tmp_path: Path, field: str, kw: dict[str, Any]
) -> None:
    with lw.Runtime(str(tmp_path / "s.db")) as rt, pytest.raises(lw.ConfigError) as err:
        lw.Worker(rt, **kw)
    assert err.value.field == field


def test_a_worker_needs_a_runtime(tmp_path: Path) -> None:
    with pytest.raises(lw.ConfigError) as err:
        lw.Worker(str(tmp_path / "s.db"))  # type: ignore[arg-type]
    assert err.value.field == "runtime"


@pytest.mark.parametrize("max_runs", [0, "3", 2.5])
def test_a_wrong_max_runs_is_a_config_error(tmp_path: Path, max_runs: Any) -> None:
    with lw.Runtime(str(tmp_path / "s.db")) as rt, pytest.raises(lw.ConfigError) as err:
        asyncio.run(lw.Worker(rt).run(once=True, max_runs=max_runs))
    assert err.value.field == "max_runs"
