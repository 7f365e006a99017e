"""The Runtime as a script and as async code use it: errors out of a ``*_sync`` call are not
chained to the probe for a running event loop, and ``async with`` works as ``with`` does.

``_sync`` ran ``asyncio.run`` inside ``except RuntimeError:``, so every exception of the run —
the ``ConfigError`` raised to the caller and the user's own actor error recorded in the packet —
read "RuntimeError: no running event loop … During handling of the above exception, another
exception occurred" first, pointing a user at loopwright instead of at their mistake.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loopwright as lw


def _boom(ctx: lw.Context) -> lw.Proposal:
    raise ValueError("boom from the actor")


def _ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True)


def test_a_config_error_from_run_sync_has_no_event_loop_context(tmp_path: Path) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt, pytest.raises(lw.ConfigError) as caught:
        rt.run_sync("not a loop", {})  # type: ignore[arg-type]
    assert caught.value.__context__ is None, repr(caught.value.__context__)


def test_the_actor_error_recorded_is_the_users_own(tmp_path: Path) -> None:
    loop = lw.Loop(
        name="raises",
        actor=_boom,
        verifiers=[lw.Check(fn=_ok)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        result = rt.run_sync(loop, {"artifacts": {"a": {"p": 1}}}, task_key="k")
    assert result.status == "escalated"
    error: dict[str, Any] = dict(result.packet["error"])
    assert error["type"] == "ValueError"
    assert "boom from the actor" in error["traceback"]
    assert "no running event loop" not in error["traceback"]
    assert not error["traceback"].startswith("RuntimeError")


def test_the_runtime_is_an_async_context_manager_too(tmp_path: Path) -> None:
    """`async with lw.Runtime() as rt:` was a TypeError ("does not support the asynchronous
    context manager protocol"), the first line an asyncio user writes; it closes its store."""
    import asyncio

    loop = lw.Loop(
        name="async",
        actor=lambda ctx: lw.Proposal.edit("a", {"p": 2}),
        verifiers=[lw.Check(fn=_ok)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )

    async def main() -> tuple[lw.Runtime, str]:
        async with lw.Runtime(tmp_path / "s.db") as rt:
            result = await rt.run(loop, {"artifacts": {"a": {"p": 1}}}, task_key="k")
        return rt, result.status

    rt, status = asyncio.run(main())
    assert status == "accepted"
    with pytest.raises(lw.StoreError, match="is closed"):
        rt.store.get_run("k")
    with lw.Runtime(tmp_path / "s.db") as again:
        assert again.store.get_run("k").status == "accepted"


@pytest.mark.parametrize(
    ("setting", "words"),
    [("approvals", "leave it out for the default policy"), ("retry", "leave it out for")],
)
def test_none_for_a_loop_setting_with_a_default_says_to_leave_it_out(
    setting: str, words: str
) -> None:
    """`Loop(..., approvals=None)` (the Python habit for "no setting") said only "must be an
    ApprovalPolicy, got NoneType"; `retry=None` said "must be a RetryPolicy", not even what
    it got."""
    with pytest.raises(lw.ConfigError) as caught:
        lw.Loop(
            name="x",
            actor=lambda ctx: lw.Proposal(),
            verifiers=[lw.Check(fn=_ok)],
            contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
            **{setting: None},
        )
    assert caught.value.field == setting
    assert "got NoneType" in str(caught.value) and words in str(caught.value)
