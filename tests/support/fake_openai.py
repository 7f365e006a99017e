"""The scripted OpenAI-compatible server now ships as ``loopwright.testing``; tests import it
from here out of habit."""

from typing import Any

import loopwright as lw
from loopwright.testing import FakeOpenAI, Reply, Request, fail, garbage, ok, slow

__all__ = ["FakeOpenAI", "Reply", "Request", "context", "fail", "garbage", "ok", "slow"]


def context(task: dict[str, Any] | None = None) -> lw.Context:
    """A cycle's context to call a chat adapter with directly (outside a run): cycle 1 of run
    ``r1``, one artifact ``doc``, 3 cycles and $1 left."""
    return lw.Context(
        run_id="r1",
        cycle=1,
        goal="g",
        task=task if task is not None else {"goal": "g"},
        artifacts={"doc": {"title": "x"}},
        accepted={},
        findings=(),
        plan=(),
        next_step=None,
        remaining=lw.Remaining(cycles=3, cost_usd=1.0, tokens=None, seconds=None),
    )
