"""An actor that calls a model through its own client and records each call in the trace:
python examples/own_client.py (offline: the client is a stand-in for an SDK's)

The calls show in `loopwright trace RUN`, the dashboard's waterfall and the OTel `chat` spans;
the budget counts the proposal's usage (`call.usage`), never the records themselves.
"""

from __future__ import annotations

import tempfile
from typing import Any

import loopwright as lw


class FakeMessages:
    """Shaped like ``anthropic.Anthropic().messages``: ``create`` returns content and usage."""

    def __init__(self) -> None:
        self.calls = 0

    def create(self, *, model: str, messages: list[dict[str, str]], max_tokens: int) -> Any:
        self.calls += 1
        if self.calls == 1:  # the first request fails: recorded with its error, then retried
            raise ConnectionError("connection reset by peer")
        text = "Hello world"
        usage = {"input_tokens": 40 + len(messages[-1]["content"]), "output_tokens": 3}
        return {"content": [{"type": "text", "text": text}], "usage": usage}


client = FakeMessages()
MODEL = "claude-sonnet-4-5"
PRICE_IN, PRICE_OUT = 3.0 / 1e6, 15.0 / 1e6  # USD a token


def actor(ctx: lw.Context) -> lw.Proposal:
    messages = [{"role": "user", "content": f"Correct the title: {ctx.artifacts['doc']['title']}"}]
    with lw.model_call(model=MODEL, prompt=messages, provider="anthropic") as call:
        out = client.create(model=MODEL, messages=messages, max_tokens=256)
        used = out["usage"]
        call.reply(
            out["content"][0]["text"],
            input_tokens=used["input_tokens"],
            output_tokens=used["output_tokens"],
            cost_usd=used["input_tokens"] * PRICE_IN + used["output_tokens"] * PRICE_OUT,
        )
    return lw.Proposal.edit("doc", {"title": out["content"][0]["text"]}, usage=call.usage)


def title_ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    good = state.artifacts["doc"].values()["title"] == "Hello world"
    return lw.Verdict(passed=good, score=1.0 if good else 0.0)


loop = lw.Loop(
    name="own-client",
    actor=actor,
    verifiers=[lw.Check(fn=title_ok)],
    retry=lw.RetryPolicy(attempts=3, backoff_s=0.01),
    contract=lw.Contract(
        success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3, max_cost_usd=1.0)
    ),
)
with tempfile.TemporaryDirectory() as tmp, lw.Runtime(f"{tmp}/runs.db") as rt:
    result = rt.run_sync(loop, {"artifacts": {"doc": {"title": "Helo wrld"}}}, task_key="T-1")
    calls = [e.data for e in rt.store.events(result.run_id) if e.kind == "model_call"]
    print(result.status, f"${result.spent.cost_usd:.6f}", result.spent.tokens, "tokens")
    for c in calls:
        print(f"  attempt {c['attempt']} {c['outcome']:5} {c['model']} {c['error'] or c['reply']}")
