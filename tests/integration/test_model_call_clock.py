"""A model request that failed is recorded with its length on the monotonic clock, as a reply's
is: the wall clock stepping while it waited (NTP, a suspended laptop, a VM migrated) must not
make the request hours long in the store, the waterfall and the exported ``chat`` span.

The adapter module's clock is replaced by one whose wall time jumps an hour at every reading
and whose monotonic time moves 2.5 s: the failed request lasted exactly 2.5 s.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("openai")

import loopwright as lw
from loopwright._modelcalls import MODEL_CALL
from loopwright.adapters import AsyncChatActor, ChatActor, _chat_model
from loopwright.store import open_store
from loopwright.testing import FakeOpenAI, fail, ok

FIX = {"edits": [{"artifact": "doc", "part": "title", "value": "Hello world"}], "note": "fixed"}
TASK: dict[str, Any] = {"goal": "Fix the title.", "artifacts": {"doc": {"title": "Helo wrld"}}}
FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02)


def title_ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    good = state.artifacts["doc"].values().get("title") == "Hello world"
    return lw.Verdict(passed=good, score=1.0 if good else 0.0)


def stepping_clock() -> SimpleNamespace:
    """``time`` as the adapter sees it: the wall clock an hour later at every reading, the
    monotonic clock 2.5 s later."""
    wall = itertools.count(1_800_000_000.0, 3600.0)
    mono = itertools.count(100.0, 2.5)
    return SimpleNamespace(time=lambda: next(wall), perf_counter=lambda: next(mono))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_failed_request_lasts_what_the_monotonic_clock_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    db = str(tmp_path / "clock.db")
    with FakeOpenAI() as server:
        server.script(fail(503, "overloaded"), ok(FIX), model="actor-m")
        make = ChatActor if kind == "sync" else AsyncChatActor
        actor = make("actor-m", base_url=server.base_url, timeout_s=60)
        loop = lw.Loop(
            name="clock",
            actor=actor,
            verifiers=[lw.Check(fn=title_ok)],
            contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
            retry=FAST,
        )
        monkeypatch.setattr(_chat_model, "time", stepping_clock())
        with lw.Runtime(db) as rt:
            res = rt.run_sync(loop, TASK)
        monkeypatch.undo()
    assert res.status == "accepted", res
    with open_store(db) as st:
        calls = [e.data for e in st.events(res.run_id) if e.kind == MODEL_CALL]
    failed = calls[0]
    assert (failed["outcome"], failed["http_status"]) == ("retry", 503)
    # before: the wall clock's difference, 3600 s for a request that took 2.5
    assert failed["seconds"] == pytest.approx(2.5)
