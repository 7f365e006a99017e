"""Model calls made through a user's own client (``loopwright.record_model_call``,
``loopwright.model_call``): a loop whose actor calls a fake client and reports its calls gets
them stored as ``model_call`` events (masked, cut to size), drawn as ``chat`` spans; a bad
argument is refused by name; outside an engine call nothing is kept; the record never charges
the budget (the proposal's ``usage`` does)."""

from __future__ import annotations

import contextlib
import math
import re
import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._modelcalls import MODEL_CALL, PROMPT_CHARS, REPLY_CHARS, collecting
from loopwright.store import open_store
from loopwright.trace import run_spans

SECRET = "sk-proj-Zq81vXw0LmN4bC7dE2fG9hJ3kL5"


def fake_client(messages: list[dict[str, str]]) -> dict[str, Any]:
    """A model SDK's call, offline: the reply text and its usage."""
    if messages[-1]["content"] == "fail":
        raise ConnectionError("the fake server hung up")
    return {"text": "Hello world " + "x" * (REPLY_CHARS + 500), "in": 120, "out": 30}


def title_ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    good = state.artifacts["doc"].values().get("title") == "Hello world"
    return lw.Verdict(passed=good, score=1.0 if good else 0.0)


def _loop(actor: Any) -> lw.Loop:
    return lw.Loop(
        name="own-client",
        actor=actor,
        verifiers=[lw.Check(fn=title_ok)],
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.0, max_backoff_s=0.0),
        contract=lw.Contract(
            success=lw.Success(min_score=0.9), budget=lw.Budget(max_cycles=2, max_cost_usd=5.0)
        ),
    )


def _run(tmp_path: Path, actor: Any) -> tuple[lw.RunResult, list[Any]]:
    db = tmp_path / "own.db"
    task = {"artifacts": {"doc": {"title": "Helo wrld"}}}
    with lw.Runtime(str(db)) as rt:
        result = rt.run_sync(_loop(actor), task, task_key="own-1")
    with open_store(str(db)) as st:
        events = [e for e in st.events(result.run_id) if e.kind == MODEL_CALL]
    return result, events


def test_an_actors_own_client_calls_are_stored_masked_and_bounded(tmp_path: Path) -> None:
    attempts: list[int] = []
    timings: list[tuple[float, float]] = []  # what the timed call measured, as it measured it

    def actor(ctx: lw.Context) -> lw.Proposal:
        attempts.append(1)
        spent = lw.Usage()
        big = "context " * (PROMPT_CHARS // 4)  # twice the prompt limit
        messages = [
            {"role": "system", "content": f"Use the key {SECRET}."},
            {"role": "user", "content": big},
        ]
        if len(attempts) == 1:  # the first attempt's request fails: recorded, then retried
            with lw.model_call(
                model="claude-fake",
                prompt=[*messages[:1], {"role": "user", "content": "fail"}],
                provider="anthropic",
            ):
                fake_client([{"role": "user", "content": "fail"}])
        with lw.model_call(model="claude-fake", prompt=messages, provider="anthropic") as call:
            out = fake_client(messages)
            call.reply(out["text"], input_tokens=out["in"], output_tokens=out["out"], cost_usd=0.25)
        spent += call.usage
        timings.append((call.started_at, call.seconds))
        # the same, reported after the fact
        t0 = call.started_at
        assert (
            lw.record_model_call(
                model="claude-fake",
                prompt="say hi",
                reply="hi",
                input_tokens=5,
                output_tokens=1,
                cost_usd=0.5,
                started_at=t0,
                seconds=0.1,
            )
            is not None
        )
        spent += lw.Usage(cost_usd=0.5, tokens=6)
        return lw.Proposal.edit("doc", {"title": "Hello world"}, usage=spent)

    result, events = _run(tmp_path, actor)
    assert result.status == "accepted", result
    assert [(e.data["attempt"], e.data["outcome"]) for e in events] == [
        (1, "retry"),
        (2, "ok"),
        (2, "ok"),
    ]
    failed, timed, after = (e.data for e in events)
    assert failed["error"] == "ConnectionError: the fake server hung up"
    assert failed["reply"] is None and failed["scope"] == "actor"
    assert timed["model"] == "claude-fake" and timed["provider"] == "anthropic"
    assert (timed["input_tokens"], timed["output_tokens"], timed["cost_usd"]) == (120, 30, 0.25)
    assert timed["error"] is None
    # the stored record holds the block's own timing, as the call object measured it
    assert (timed["started_at"], timed["seconds"]) == timings[-1]
    # masked before it was written, cut to size with the marker
    stored = repr([e.data for e in events])
    assert SECRET not in stored
    assert timed["truncated"] is True
    assert sum(len(m["content"]) for m in timed["prompt"]) < PROMPT_CHARS + 100
    assert len(timed["reply"]) < REPLY_CHARS + 100 and "truncated" in timed["reply"]
    assert after["prompt"] == [{"role": "user", "content": "say hi"}] and after["reply"] == "hi"
    # the budget counts the proposal's usage, once: the records are a breakdown
    assert result.spent.cost_usd == pytest.approx(0.75)
    assert result.spent.tokens == 156
    # and the trace draws them as chat spans under the actor
    with open_store(str(tmp_path / "own.db")) as st:
        _, spans = run_spans(st, result.run_id)
    chats = [s for s in spans if s.name == "chat claude-fake"]
    assert len(chats) == 3
    assert sorted(s.attributes.get("gen_ai.usage.input_tokens", 0) for s in chats) == [0, 5, 120]


def test_a_bad_argument_is_refused_by_name() -> None:
    ok: dict[str, Any] = {"model": "m", "prompt": "hi"}
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"model": 3}, TypeError, "model"),
        ({"model": " "}, lw.ConfigError, "model"),
        ({"model": "m" * 201}, lw.ConfigError, "model"),
        ({"prompt": 5}, TypeError, "prompt"),
        ({"prompt": ["hi"]}, TypeError, "prompt[0]"),
        ({"reply": b"x"}, TypeError, "reply"),
        ({"input_tokens": -1}, lw.ConfigError, "input_tokens"),
        ({"output_tokens": 2**70}, lw.ConfigError, "output_tokens"),
        ({"output_tokens": 1.5}, TypeError, "output_tokens"),
        ({"input_tokens": True}, TypeError, "input_tokens"),
        ({"cost_usd": math.nan}, lw.ConfigError, "cost_usd"),
        ({"cost_usd": -0.1}, lw.ConfigError, "cost_usd"),
        ({"cost_usd": "0.1"}, TypeError, "cost_usd"),
        ({"seconds": math.inf}, lw.ConfigError, "seconds"),
        ({"started_at": math.nan}, lw.ConfigError, "started_at"),
        ({"error": 42}, TypeError, "error"),
        ({"provider": 1}, TypeError, "provider"),
    ]
    made: list[dict[str, Any]] = []
    for bad, kind, name in cases:
        # refused the same inside an engine call and outside one, and nothing is kept
        for inside in (False, True):
            where = collecting(made) if inside else contextlib.nullcontext()
            named = rf"^(record_model_call: )?{re.escape(name)}[ :]"
            with where, pytest.raises(kind, match=named):
                lw.record_model_call(**{**ok, **bad})
    assert made == []
    with (
        pytest.raises(lw.ConfigError, match=r"^cost_usd"),
        lw.model_call(model="m", prompt="hi") as call,
    ):
        call.reply("ok", cost_usd=-1)
    with pytest.raises(TypeError, match="prompt"):
        lw.model_call(model="m", prompt=None)  # type: ignore[arg-type]


def test_a_bad_argument_in_an_actor_escalates_with_its_name(tmp_path: Path) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        lw.record_model_call(model="m", prompt="hi", cost_usd=math.nan)
        return lw.Proposal.edit("doc", {"title": "Hello world"})

    result, events = _run(tmp_path, actor)
    assert result.status == "escalated" and events == []
    assert result.packet is not None
    assert "ConfigError: cost_usd: must be a finite number" in result.packet["cause"]


def test_nothing_is_kept_outside_an_engine_call() -> None:
    assert lw.record_model_call(model="m", prompt="hi", reply="ok") is None
    with lw.model_call(model="m", prompt="hi") as call:
        call.reply("ok", input_tokens=3, output_tokens=2, cost_usd=0.01)
    assert call.record is None
    assert call.usage == lw.Usage(cost_usd=0.01, tokens=5, seconds=call.seconds)


def test_the_block_is_timed_and_its_error_recorded() -> None:
    made: list[dict[str, Any]] = []
    prompt = [{"role": "user", "content": "q"}]
    with collecting(made), pytest.raises(KeyError), lw.model_call(model="m", prompt=prompt) as call:
        raise KeyError("no choices")
    assert len(made) == 1 and made[0] is call.record
    assert made[0]["error"] == "KeyError: 'no choices'" and made[0]["reply"] is None
    assert made[0]["started_at"] == call.started_at and made[0]["seconds"] == call.seconds


def test_an_async_actor_reports_with_async_with(tmp_path: Path) -> None:
    """``async with lw.model_call(...)`` in an async actor (probe47b: a Pydantic AI user's
    habit; there was no ``__aenter__``): the call is stored as with ``with``, its error too."""

    tries: list[int] = []

    async def actor(ctx: lw.Context) -> lw.Proposal:
        tries.append(1)  # the first attempt's request fails: recorded, then retried
        messages = [{"role": "user", "content": "fail" if len(tries) == 1 else "title?"}]
        async with lw.model_call(model="claude-fake", prompt=messages) as call:
            out = fake_client(messages)
            call.reply("Hello world", input_tokens=out["in"], output_tokens=out["out"])
        return lw.Proposal.edit("doc", {"title": "Hello world"}, usage=call.usage)

    result, events = _run(tmp_path, actor)
    assert result.status == "accepted"
    assert [(e.data["attempt"], e.data["outcome"]) for e in events] == [(1, "retry"), (2, "ok")]
    assert events[0].data["error"] == "ConnectionError: the fake server hung up"
    assert events[1].data["reply"] == "Hello world" and events[1].data["input_tokens"] == 120


def test_exported_from_the_package() -> None:
    for name in ("record_model_call", "model_call", "ModelCall"):
        assert name in lw.__all__ and name in dir(lw)


def test_the_example_runs_offline(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(Path(__file__).parents[2] / "examples" / "own_client.py"))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("accepted $0.000249 71 tokens")
    assert "retry claude-sonnet-4-5 ConnectionError" in out[1] and "ok    claude" in out[2]


# Stand-ins shaped as LangChain's and Pydantic AI's messages (their documented attributes):
# neither library is a dependency, and loopwright reads them by their shape.
@dataclass
class HumanMessage:  # langchain_core.messages
    content: str | list[Any]
    type: str = "human"


@dataclass
class AIMessageChunk:
    content: str | list[Any]
    type: str = "AIMessageChunk"


@dataclass
class Part:  # pydantic_ai.messages: SystemPromptPart, UserPromptPart, TextPart, ...
    part_kind: str
    content: Any = None
    tool_name: str | None = None
    args: Any = None


@dataclass
class ModelMessage:  # pydantic_ai.messages.ModelRequest / ModelResponse
    parts: list[Part]
    kind: str


@dataclass
class ImageUrl:
    url: str


@dataclass
class OpenAIMessage:  # an object with role and content (openai's ChatCompletionMessage)
    role: str
    content: str


def test_langchain_and_pydantic_ai_messages_are_read_by_their_shape() -> None:
    """They had to be converted to ``{"role", "content"}`` by hand: each was refused with
    ``prompt[0] must be a message mapping`` (doubts48)."""
    made: list[dict[str, Any]] = []
    langchain = [
        HumanMessage(["Describe ", {"type": "text", "text": "this"}, ImageUrl("u")]),
        AIMessageChunk("a cat"),
    ]
    pydantic_ai = [
        ModelMessage(
            [Part("system-prompt", "Be brief."), Part("user-prompt", ["Weather?", ImageUrl("u")])],
            "request",
        ),
        ModelMessage([Part("tool-call", tool_name="weather", args={"city": "Oslo"})], "response"),
        ModelMessage([Part("tool-return", {"temp": 3}, tool_name="weather")], "request"),
        ModelMessage([Part("text", "3 degrees")], "response"),
    ]
    with collecting(made):
        lw.record_model_call(model="m", prompt=langchain, reply="a cat")
        with lw.model_call(model="m", prompt=pydantic_ai) as call:
            call.reply("3 degrees")
        lw.record_model_call(model="m", prompt=[{"role": "user", "content": "q"},
                                                 OpenAIMessage("assistant", "a")])  # fmt: skip
    assert made[0]["prompt"] == [
        {"role": "user", "content": "Describe this[ImageUrl]"},
        {"role": "assistant", "content": "a cat"},
    ]
    assert made[1]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?[ImageUrl]"},
        {"role": "assistant", "content": 'weather({"city": "Oslo"})'},
        {"role": "tool", "content": '{"temp": 3}'},
        {"role": "assistant", "content": "3 degrees"},
    ]
    assert made[2]["prompt"] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]


def test_what_is_no_message_is_refused_saying_what_to_pass() -> None:
    for bad in (["hi"], [{"role": "user", "content": "q"}, 3], [ImageUrl("u")]):
        with pytest.raises(TypeError) as got:
            lw.record_model_call(model="m", prompt=bad)
        said = str(got.value)
        assert said.startswith("record_model_call: prompt[") and "LangChain message" in said
        assert "Pydantic AI ModelRequest" in said and "role and content" in said
