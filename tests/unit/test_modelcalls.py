"""The record a model adapter hands the engine (``loopwright._modelcalls``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from loopwright._calls import call_user
from loopwright._modelcalls import (
    PROMPT_CHARS,
    REPLY_CHARS,
    collecting,
    model_call_record,
    record_model_call,
)

KEY = "sk-live-8f7e6d5c4b3a2918f7e6d5c4"


def _report(text: str = "hi") -> dict[str, Any] | None:
    return record_model_call(
        model="m",
        prompt=[{"role": "user", "content": text}],
        reply="ok",
        started_at=1.0,
        seconds=0.5,
    )


def test_nothing_is_kept_outside_an_engine_call() -> None:
    assert _report() is None


def test_reports_are_collected_inline_in_threads_and_in_tasks() -> None:
    made: list[dict[str, Any]] = []

    async def main() -> None:
        with collecting(made):
            await call_user(_report, "inline", timeout=None)
            await call_user(_report, "thread", timeout=None, threaded=True)
            await call_user(_report, "timed", timeout=30.0)

            async def coro(text: str) -> None:
                _report(text)

            await call_user(coro, "async", timeout=30.0)
        # a thread started outside the collecting call reports nowhere
        t = threading.Thread(target=_report, args=("outside",))
        t.start()
        t.join()

    asyncio.run(main())
    assert [m["prompt"][0]["content"] for m in made] == ["inline", "thread", "timed", "async"]


def test_secrets_are_masked_and_sizes_bounded() -> None:
    rec = model_call_record(
        model="m",
        prompt=[
            {"role": "system", "content": f"use {KEY}"},
            {"role": "user", "content": "a" * PROMPT_CHARS},
            {"role": "user", "content": [{"type": "text", "text": "parts"}]},
        ],
        reply="b" * (REPLY_CHARS + 10) + " " + KEY,
        started_at=5.0,
        seconds=-1.0,
        error=f"401 for key {KEY}",
    )
    assert KEY not in repr(rec)
    assert rec["prompt"][0]["content"] == "use ***"
    # the room left after "use ***" (7 characters) is what the second message keeps
    assert rec["prompt"][1]["content"].endswith("…[truncated: 7 more characters]")
    assert rec["prompt"][2] == {"role": "user", "content": "…[truncated: 5 more characters]"}
    assert rec["reply"].endswith("…[truncated: 14 more characters]")  # 10 + " ***"
    assert rec["truncated"] and rec["prompt_chars"] == len(f"use {KEY}") + PROMPT_CHARS + 5
    assert rec["reply_chars"] == REPLY_CHARS + 11 + len(KEY)
    assert rec["seconds"] == 0.0 and rec["error"] == "401 for key ***"
    assert sum(len(m["content"]) for m in rec["prompt"]) <= PROMPT_CHARS + 80


def test_a_bad_report_never_fails_the_call() -> None:
    made: list[dict[str, Any]] = []
    with collecting(made):
        assert record_model_call(model="m") is None  # missing fields: dropped
        assert record_model_call(model="m", prompt="text", reply=None, started_at=0, seconds=0)
    assert [m["prompt"] for m in made] == [[{"role": "user", "content": "text"}]]
