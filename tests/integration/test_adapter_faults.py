"""Issue 16 item 8: the OpenAI-compatible adapter under server faults, against the loopback fake
server (tests/support/fake_openai.py): 2xx bodies that are empty or not JSON are transient,
``Retry-After`` is capped, model identities compare case- and prefix-insensitively, and every
error message is redacted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.deadline_clock import HANG_S
from support.fake_openai import FakeOpenAI, Reply, fail, garbage, ok

import loopwright as lw
from loopwright.adapters import (
    AsyncChatActor,
    ChatActor,
    ChatReviewer,
    MalformedReplyError,
    PriceOverride,
)
from loopwright.adapters._image_reply import tokens_of as _image_tokens

TASK: dict[str, Any] = {"goal": "Fix the title", "artifacts": {"doc": {"title": "Helo"}}}
FIX = {"edits": [{"artifact": "doc", "part": "title", "value": "Hello"}], "note": "fixed"}
FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.05, jitter=False)
MSG = [{"role": "user", "content": "hi"}]


def title(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    ok_ = state.artifacts["doc"].values()["title"] == "Hello"
    bad = () if ok_ else (lw.Finding("title is misspelt", "doc", "title", "spelling"),)
    return lw.Verdict(passed=ok_, score=1.0 if ok_ else 0.0, findings=bad)


@pytest.fixture(autouse=True)
def _no_real_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


_MADE: list[ChatActor] = []


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as s:
        yield s
        # close the HTTP clients the tests made (no unclosed sockets left to the collector)
        while _MADE:
            client = _MADE.pop()._client
            if client is not None:
                client.close()


def _actor(server: FakeOpenAI, **kw: Any) -> ChatActor:
    kw.setdefault("timeout_s", 5)
    kw.setdefault("price", PriceOverride(input_per_mtok=1.0, output_per_mtok=2.0))
    actor = ChatActor("actor-m", base_url=server.base_url, **kw)
    _MADE.append(actor)
    return actor


def _run(tmp_path: Path, actor: ChatActor) -> tuple[lw.RunResult, list[Any]]:
    loop = lw.Loop(
        name="faults",
        actor=actor,
        verifiers=[lw.Check(fn=title)],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        retry=FAST,
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK)
        return r, rt.store.events(r.run_id)


NOT_JSON = {
    "empty": b"",
    "text": b"not json at all",
    "html": b"<html>proxy error</html>",
    # UnicodeDecodeError, RecursionError and ValueError (Python's 4,300-digit limit) from the
    # SDK's parse were classified permanent: the run escalated at once
    "not utf-8": b'{"choices": [{"message": {"content": "\xff\xfe"}}]}',
    "nested past the stack": b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "a 5000-digit number": b'{"choices": [], "usage": {"prompt_tokens": ' + b"9" * 5000 + b"}}",
}


@pytest.mark.parametrize("body", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_2xx_without_a_json_body_is_transient_and_retried(
    tmp_path: Path, server: FakeOpenAI, body: bytes
) -> None:
    bad = Reply(raw_body=body, headers={"Content-Type": "application/json"})
    server.script(bad, bad, ok(FIX))
    with pytest.raises(MalformedReplyError) as caught:
        _actor(server)._complete(MSG, "run")
    assert lw.classify(caught.value) == "transient"
    r, events = _run(tmp_path, _actor(server))
    assert r.accepted and len(server.requests) == 3
    (retry,) = [e.data for e in events if e.kind == "retry"]
    assert retry["class"] == "transient" and "MalformedReplyError" in retry["error"]


def test_retry_after_is_capped_by_the_configured_maximum(server: FakeOpenAI) -> None:
    server.script(fail(429, "slow down", retry_after=3600), fail(429, retry_after=3600))
    policy = lw.RetryPolicy(attempts=2, backoff_s=0.01, jitter=False)
    with pytest.raises(Exception) as default:
        _actor(server)._complete(MSG, "run")
    assert policy.delay_s(1, default.value) == 120.0  # the default maximum, not an hour
    with pytest.raises(Exception) as tight:
        _actor(server, max_retry_after_s=0.05)._complete(MSG, "run")
    assert policy.delay_s(1, tight.value) == pytest.approx(0.05)
    assert lw.classify(tight.value) == "transient"


def test_retry_after_is_capped_by_the_time_left(server: FakeOpenAI) -> None:
    server.script(fail(503, retry_after=3600))
    with pytest.raises(Exception) as caught:
        _actor(server)._complete(MSG, "run", budget_s=7.5)
    assert lw.RetryPolicy(jitter=False).delay_s(1, caught.value) == pytest.approx(7.5)


def test_a_run_waits_the_capped_time_not_the_servers(tmp_path: Path, server: FakeOpenAI) -> None:
    server.script(fail(429, "slow down", retry_after=3600), ok(FIX))
    r, events = _run(tmp_path, _actor(server, max_retry_after_s=0.05))
    assert r.accepted
    (retry,) = [e.data for e in events if e.kind == "retry"]
    assert retry["delay_s"] == pytest.approx(0.05)


@pytest.mark.parametrize("header", ["1_000", "1e3", "+1000", "infinity", "\u0661\u0660\u0660"])
def test_a_retry_after_that_is_no_delay_seconds_is_as_if_not_sent(
    server: FakeOpenAI, header: str
) -> None:
    """RFC 9110's delay-seconds is ``1*DIGIT``: ``Retry-After: 1_000`` was read as 1000 s
    (Python's ``float`` takes underscores, exponents, signs, other scripts' digits), a wait
    the server never asked for. Each is ignored: the backoff alone decides."""
    server.script(fail(429, "slow down", retry_after=header))
    with pytest.raises(Exception) as caught:
        _actor(server)._complete(MSG, "run")
    assert lw.classify(caught.value) == "transient"
    assert lw.RetryPolicy(backoff_s=0.5, jitter=False).delay_s(1, caught.value) == 0.5


def test_max_retry_after_is_validated(server: FakeOpenAI) -> None:
    for bad in (-1, float("nan"), float("inf"), "ten", True):
        with pytest.raises(lw.ConfigError, match="max_retry_after_s"):
            _actor(server, max_retry_after_s=bad)


@pytest.mark.parametrize(
    ("actor", "reviewer"),
    [
        ("Qwen2.5:7B", "qwen2.5:7b"),
        ("openai/gpt-4o", "gpt-4o"),
        ("GPT-4o", "openrouter/openai/gpt-4o"),
        ("ollama/llama3", "LLAMA3:latest"),
    ],
)
def test_model_identity_ignores_case_and_provider_prefixes(
    server: FakeOpenAI, actor: str, reviewer: str
) -> None:
    a = ChatActor(actor, base_url=server.base_url)
    r = ChatReviewer(reviewer, base_url=server.base_url, rubric="r")
    assert a.model_identity() == r.model_identity()
    with pytest.raises(lw.ConfigError, match="self"):
        lw.Loop(
            name="self",
            actor=a,
            verifiers=[lw.Check(fn=r, name="review")],
            contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
        )


def test_different_models_stay_different(server: FakeOpenAI) -> None:
    a = ChatActor("meta-llama/Llama-3-8B", base_url=server.base_url)
    r = ChatReviewer("Llama-3-8B", base_url=server.base_url, rubric="r")
    assert a.model_identity() != r.model_identity()  # an organisation is not a provider


def test_malformed_replies_that_use_up_the_retries_are_still_charged(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    server.script(ok({"edits": "all"}), ok({"edits": "all"}), ok({"edits": "all"}))
    r, _ = _run(tmp_path, _actor(server))
    assert r.status == "escalated" and len(server.requests) == 3
    assert r.spent.tokens == 3 * 150


def test_a_base_url_that_is_not_http_is_refused_when_the_adapter_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK takes ``localhost:8000/v1`` and fails each request as a retried "Connection
    error" naming an URL that works; the adapters refuse it in one line instead."""
    from loopwright.adapters import ImageModel

    for bad in ("127.0.0.1:8765/v1", "ftp://x/v1", "http://", "localhost"):
        with pytest.raises(lw.ConfigError, match="not an http"):
            ChatActor("m", base_url=bad, api_key="k")
        with pytest.raises(lw.ConfigError, match="not an http"):
            ImageModel("m", base_url=bad, api_key="k")
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:9/v1")
    with pytest.raises(lw.ConfigError, match="OPENAI_BASE_URL"):
        ChatActor("m", api_key="k")


def _body(content: Any, usage: Any = None, *, raw_usage: str | None = None) -> Reply:
    """A 200 whose chat completion carries ``usage`` as given (``raw_usage``: spliced in as
    text, for JSON's ``NaN``)."""
    body: dict[str, Any] = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "actor-m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps(content)},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    text = json.dumps(body)
    if raw_usage is not None:
        text = text[:-1] + f', "usage": {raw_usage}}}'
    return Reply(raw_body=text.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    ("usage", "raw_usage"),
    [
        ({"prompt_tokens": 2**63, "completion_tokens": 1}, None),
        ({"prompt_tokens": 1e300, "completion_tokens": 1e300}, None),
        ({"prompt_tokens": 10**30, "completion_tokens": 5}, None),
        ("lots", None),
        ({"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": "x"}, None),
        (None, '{"prompt_tokens": NaN, "completion_tokens": Infinity}'),
        ({"prompt_tokens": "1e3", "completion_tokens": "-100"}, None),
    ],
)
def test_unusable_usage_from_the_server_counts_as_none_and_is_warned_of(
    tmp_path: Path,
    server: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
    usage: Any,
    raw_usage: str | None,
) -> None:
    """A server's usage is untrusted: 2**63 tokens failed the run's commit (OverflowError,
    the run left ``running``), a string or NaN escalated the run naming a Python exception;
    each unusable count is 0 now, with the one-time usage warning."""
    server.script(_body(FIX, usage, raw_usage=raw_usage))
    with caplog.at_level("WARNING", logger="loopwright.adapters"):
        r, _ = _run(tmp_path, _actor(server))
    assert r.status == "accepted", r.packet
    assert r.spent.tokens < 2**40
    assert any("usage" in m for m in caplog.messages), caplog.messages


def test_a_whole_number_sent_as_a_string_is_counted_and_priced(
    tmp_path: Path, server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """``"prompt_tokens": "1000"`` without a ``total_tokens`` was counted 0 (the SDK reads the
    strings as numbers only in a usage it can read whole, ``total_tokens`` included): the call
    cost nothing and its tokens left the budget, where docs/models.md says it is read as 1000.
    The image adapter's usage reads it the same way."""
    usage = {"prompt_tokens": "1000", "completion_tokens": "100"}
    server.script(_body(FIX, usage))
    with caplog.at_level("WARNING", logger="loopwright.adapters"):
        r, _ = _run(tmp_path, _actor(server))
    assert r.accepted, r.packet
    assert r.spent.tokens == 1100
    assert r.spent.cost_usd == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)
    assert not any("usage" in m for m in caplog.messages), caplog.messages
    assert _image_tokens({"usage": {"input_tokens": "10", "output_tokens": "5"}}) == (10, 5, 15)


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [({}, 0), ({"total_tokens": 5000}, 5000), ({"prompt_tokens": None}, 0)],
)
def test_usage_that_cannot_be_priced_is_warned_of(
    server: FakeOpenAI, caplog: pytest.LogCaptureFixture, usage: Any, tokens: int
) -> None:
    """``usage: {}`` and a bare ``total_tokens`` cost 0 silently before."""
    server.script(_body(FIX, usage))
    with caplog.at_level("WARNING", logger="loopwright.adapters"):
        reply = _actor(server)._complete(MSG, "run")
    assert reply.usage.tokens == tokens and reply.usage.cost_usd == 0.0
    assert any("usage" in m or "total_tokens" in m for m in caplog.messages), caplog.messages


def test_a_huge_error_body_is_stored_cut(tmp_path: Path, server: FakeOpenAI) -> None:
    """Three 500s with a 10 MB error message made a 130 MiB store (the message in the packet,
    the journal, the checkpoint, events) and seconds of regex per copy; it is cut now."""
    big = "x" * 2_000_000
    server.script(fail(500, big), fail(500, big), fail(500, big))
    loop = lw.Loop(
        name="faults",
        actor=_actor(server),
        verifiers=[lw.Check(fn=title)],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        retry=FAST,
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK)
        events = rt.store.events(r.run_id)
        journal = rt.store.journal(r.run_id)
    assert r.status == "escalated"
    assert len(json.dumps(r.packet, default=str)) < 60_000
    assert all(len(json.dumps(e.data, default=str)) < 60_000 for e in events)
    assert all(len(json.dumps(j.data, default=str)) < 60_000 for j in journal)
    assert "more characters" in json.dumps(r.packet, default=str)


def test_a_reviewers_huge_texts_are_cut(server: FakeOpenAI) -> None:
    state = lw.TaskState.from_task(TASK)
    reviewer = ChatReviewer("judge", base_url=server.base_url, rubric="r")
    v = reviewer.verdict(
        {
            "score": 0.1,
            "passed": False,
            "summary": "y" * 2_000_000,
            "findings": [
                {"artifact": "doc", "part": "title", "message": "z" * 2_000_000},
                {"artifact": "g" * 100_000, "dimension": "d" * 100_000, "message": "m"},
            ],
        },
        state,
    )
    assert all(len(f.message) < 5_000 for f in v.findings)
    assert len(v.evidence["summary"]) < 5_000
    assert len(v.findings[1].dimension) < 300
    assert len(v.findings[1].evidence["located_as"]) < 300


# --- spend that must not go missing (invariant 7) -------------------------------------------

CALL = 150  # tokens of each scripted reply (120 prompt + 30 completion)


def _judged(server: FakeOpenAI, actor: ChatActor) -> lw.Loop:
    judge = ChatReviewer(
        "judge-m",
        base_url=server.base_url,
        rubric="r",
        timeout_s=HANG_S,
        price=PriceOverride(input_per_mtok=1.0, output_per_mtok=2.0),
    )
    return lw.Loop(
        name="judged",
        actor=actor,
        verifiers=[lw.Check(fn=title), lw.Check(fn=judge, name="review")],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=2)),
        retry=FAST,
    )


def test_a_reply_that_fits_the_schema_but_makes_no_proposal_is_charged(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """``doc/a`` as an artifact fits the schema and is refused by Edit: that reply's tokens (and
    any carried before it) were dropped; now it is a repair turn and both replies are paid."""
    bad = {"edits": [{"artifact": "doc/a", "part": "title", "value": "x"}]}
    server.script(ok(bad), ok(FIX))
    r, _ = _run(tmp_path, _actor(server))
    assert r.status == "accepted", r.packet
    assert r.spent.tokens == 2 * CALL
    assert "Your last reply could not be used" in server.requests[1].text


def test_a_reviewer_refusal_is_charged(tmp_path: Path, server: FakeOpenAI) -> None:
    server.script(ok(FIX), model="actor-m")
    server.script(Reply(refusal="I will not review this"), model="judge-m")
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_judged(server, _actor(server)), TASK)
    assert r.status == "escalated" and "refused" in str(r.packet)
    assert r.spent.tokens == 2 * CALL  # the actor's reply and the refused review


def test_a_reviewer_score_of_nan_is_a_malformed_reply_and_charged(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """``score: NaN`` passed the schema (every comparison with NaN is false), then Verdict
    refused it: a permanent error, the run escalated and the call's cost lost."""
    nan = '{"score": NaN, "passed": true, "summary": "s", "findings": []}'
    server.script(ok(FIX), model="actor-m")
    server.script(
        ok(nan),
        ok({"score": 1.0, "passed": True, "summary": "ok", "findings": []}),
        model="judge-m",
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_judged(server, _actor(server)), TASK)
    assert r.status == "accepted", r.packet
    assert r.spent.tokens == 3 * CALL


def test_a_malformed_replys_spend_survives_a_crash_in_the_backoff(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """The malformed reply's spend lived only in the adapter's memory until the next good reply:
    a process killed during the backoff lost it. The engine journals it with the attempt now."""
    from support.crash import Crash, phase_hook

    server.script(ok({"edits": "all"}), ok(FIX))
    db = str(tmp_path / "s.db")
    loop = lw.Loop(
        name="faults",
        actor=_actor(server),
        verifiers=[lw.Check(fn=title)],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        retry=FAST,
    )
    with lw.Runtime(db) as rt:
        rt._on_phase = phase_hook(("backoff:actor", 1))
        with pytest.raises(Crash):
            rt.run_sync(loop, TASK)
    fresh = lw.Loop(  # a new process: a new adapter, nothing carried in memory
        name="faults",
        actor=_actor(server),
        verifiers=[lw.Check(fn=title)],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        retry=FAST,
    )
    with lw.Runtime(db) as rt:
        [rec] = rt.store.list_runs()
        r = rt.resume_sync(rec.run_id, fresh)
    assert r.status == "accepted", r.packet
    assert r.spent.tokens == 2 * CALL and len(server.requests) == 2


def test_outside_an_engine_a_malformed_replys_spend_is_carried(server: FakeOpenAI) -> None:
    server.script(ok({"edits": "all"}), ok(FIX))
    actor = _actor(server)
    with pytest.raises(MalformedReplyError) as caught:
        actor._complete(MSG, "run")
    assert caught.value.usage is not None and caught.value.usage.tokens == CALL
    assert actor._complete(MSG, "run").usage.tokens == 2 * CALL


def test_a_reply_nested_too_deep_is_malformed_not_a_crash(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """Content nested 100,000 deep raised RecursionError from the JSON parser: the run
    escalated naming it. It is a malformed reply now (a repair turn), as is one past 200."""
    deep = '{"edits": [{"artifact": "doc", "part": "title", "value": %s}]}'
    server.script(
        ok(deep % ("[" * 100_000 + "]" * 100_000)), ok(deep % ("[" * 300 + "]" * 300)), ok(FIX)
    )
    r, events = _run(tmp_path, _actor(server))
    assert r.status == "accepted", r.packet
    errors = [e.data["error"] for e in events if e.kind == "retry"]
    assert len(errors) == 2 and all("nested deeper than 200" in e for e in errors), errors


def _completion(choices: Any) -> Reply:
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "actor-m",
            "choices": choices, "usage": {"prompt_tokens": 120, "completion_tokens": 30}}  # fmt: skip
    return Reply(raw_body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


NOT_A_COMPLETION = {
    "choices an object": {"0": {"message": {"content": json.dumps(FIX)}}},
    "choices a number": 5,
    "message a string": [{"index": 0, "message": json.dumps(FIX), "finish_reason": "stop"}],
    "tool_calls a number": [
        {"index": 0, "message": {"role": "assistant", "tool_calls": 5}, "finish_reason": "stop"}
    ],
}


@pytest.mark.parametrize("choices", NOT_A_COMPLETION.values(), ids=NOT_A_COMPLETION.keys())
@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_2xx_not_shaped_as_a_completion_is_malformed_not_a_crash(
    server: FakeOpenAI, choices: Any, run: str
) -> None:
    """A 2xx whose ``choices`` is an object or a number, whose ``message`` is a string or whose
    ``tool_calls`` is a number raised KeyError, TypeError or AttributeError from reading it:
    classified permanent, the run escalated at once and the call's tokens went uncharged. It
    is a malformed reply, like a 2xx without choices: transient, its spend carried."""
    server.script(_completion(choices))
    actor = _actor(server)
    with pytest.raises(MalformedReplyError) as caught:
        if run == "sync":
            actor._complete(MSG, "run")
        else:
            asyncio.run(actor._acomplete(MSG, "run"))
    assert lw.classify(caught.value) == "transient"
    assert caught.value.usage is not None and caught.value.usage.tokens == CALL


def test_a_run_samples_again_after_a_reply_not_shaped_as_a_completion(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    server.script(_completion(NOT_A_COMPLETION["message a string"]), ok(FIX))
    r, _ = _run(tmp_path, _actor(server))
    assert r.status == "accepted", r.packet
    assert len(server.requests) == 2 and r.spent.tokens == 2 * CALL


def test_the_time_budget_message_says_what_the_call_was_given(tmp_path: Path) -> None:
    """It read "(4.99979 s left)": the seconds the call was given, not the time left."""
    import asyncio

    async def hangs(ctx: lw.Context) -> lw.Proposal:
        await asyncio.Event().wait()  # never set: only the budget ends it
        raise AssertionError

    loop = lw.Loop(
        name="slow",
        actor=hangs,
        verifiers=[lw.Check(fn=title)],
        contract=lw.Contract(
            # (2 s: the message differs when the budget runs out before the actor is called,
            # which a loaded machine could make of 0.2 s; flaky50)
            success=lw.Success(min_score=1.0),
            budget=lw.Budget(max_cycles=2, max_seconds=2.0),
        ),
        retry=FAST,
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK)
    assert r.stop_reason == "budget_time"
    assert "s left)" not in str(r.packet) and "the budget had left" in str(r.packet)


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        # it read "api_key: *** API key for OpenAI: set OPENAI_API_KEY or pass api_key= ***
        # base_url= ...": the redaction net took the words after "api_key:" for the key
        ('model = "gpt-4o-mini"', "OpenAI's endpoint needs an API key (api_key): set"),
        # these raised the URL parser's ValueError, naming no field
        ('model = "m", base_url = "http://127.0.0.1:99999/v1"', "base_url: 'http://127.0"),
        ('model = "m", base_url = "http://[::1:8000/v1"', "base_url: 'http://[::1:8000/v1' is"),
    ],
)
def test_an_adapter_config_mistake_reads_plainly_on_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, shown: str
) -> None:
    from loopwright.cli import main

    (tmp_path / "tasks.jsonl").write_text(json.dumps(TASK) + "\n")
    spec = tmp_path / "loop.toml"
    spec.write_text(
        'name = "cfg"\ntasks = "tasks.jsonl"\n[actor]\nref = "loopwright.adapters:ChatActor"\n'
        f"options = {{ {options} }}\n[contract.success]\nmin_score = 1.0\n"
        "[contract.budget]\nmax_cycles = 1\n"
    )
    assert main(["check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert shown in " ".join(err.split()), err
    assert "***" not in err and "Traceback" not in err


def test_a_sub_cent_cost_budget_reads_as_itself_in_the_packet(tmp_path: Path) -> None:
    """A local model priced per token gets budgets like $0.0025: it read "the cost budget
    ($0.00) would be crossed" (and $0.005 as $0.01)."""

    def costly(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "title", "Helo!"),), usage=lw.Usage(0.003))

    for budget, shown in ((0.0025, "$0.0025"), (0.005, "$0.005"), (0.25, "$0.25")):
        loop = lw.Loop(
            name="cents",
            actor=costly,
            verifiers=[lw.Check(fn=title)],
            contract=lw.Contract(
                success=lw.Success(min_score=1.0),
                budget=lw.Budget(max_cycles=200, max_cost_usd=budget),
            ),
        )
        with lw.Runtime(str(tmp_path / f"{budget}.db")) as rt:
            r = rt.run_sync(loop, TASK)
        assert r.stop_reason == "budget_cost"
        assert f"cost budget ({shown})" in r.packet["summary"], r.packet["summary"]


def test_a_budget_a_call_crossed_is_not_said_to_be_one_that_would_be(tmp_path: Path) -> None:
    """The packet's summary said "the cost budget ($0.0020) would be crossed" before a cause
    saying a call had crossed it: the words now say where it stopped, the cause how."""

    def costly(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "title", "Helo!"),), usage=lw.Usage(0.003))

    loop = lw.Loop(
        name="crossed",
        actor=costly,
        verifiers=[lw.Check(fn=title)],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=5, max_cost_usd=0.002)
        ),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK)
    assert r.stop_reason == "budget_cost" and r.packet is not None
    summary = r.packet["summary"]
    assert summary.startswith("stopped: spent $0.003 of the cost budget ($0.002)"), summary
    assert "would be crossed" not in summary and "crossed" in summary, summary


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_base_url_with_a_query_sends_it_with_every_request(server: FakeOpenAI, run: str) -> None:
    """The SDK joined each path to the ``base_url`` after its query: ``/v1?api-key=K`` asked
    for ``/v1/?api-key=Kchat/completions``, a 404 on every call (whose message echoed the
    key). The query goes with each request now, and a credential-like value in it is a
    secret: an error that echoes it alone is masked."""
    query = "api-version=2024-06-01&api-key=QSECRET42"
    server.script(ok(FIX), fail(400, "unknown key QSECRET42"), model="actor-m")
    actor = ChatActor("actor-m", base_url=f"{server.base_url}?{query}", timeout_s=HANG_S)
    _MADE.append(actor)

    def call() -> Any:
        if run == "sync":
            return actor._request(MSG)
        return asyncio.run(actor._arequest(MSG))

    body, *_ = call()
    assert json.loads(body["choices"][0]["message"]["content"]) == FIX
    assert server.requests[0].path == f"/v1/chat/completions?{query}"
    with pytest.raises(Exception) as caught:
        call()
    assert "unknown key ***" in str(caught.value) and "QSECRET42" not in str(caught.value)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_reply_holding_a_lone_surrogate_is_repaired_not_escalated(
    tmp_path: Path, server: FakeOpenAI, stream: bool
) -> None:
    """A reply's text holding a lone surrogate (JSON's ``\\ud800`` escape in the body) was kept
    as is for the repair turn: that request could not be encoded (UnicodeEncodeError), which
    the engine took as the actor's permanent error, escalating after one call. It is shown
    back escaped now, and the run goes on."""
    server.script(garbage("Here you go \ud800"), ok(FIX), model="actor-m")
    r, events = _run(tmp_path, _actor(server, stream=stream))
    assert r.accepted, r.packet
    assert len(server.requests) == 2
    repair = server.requests[1].body["messages"]
    assert repair[-2] == {"role": "assistant", "content": "Here you go \\ud800"}
    assert [e.data["attempt"] for e in events if e.kind == "retry"] == [1]


def test_a_reviewer_finding_holding_a_lone_surrogate_does_not_break_the_actors_next_request(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """A reviewer's finding whose message held an escaped lone surrogate was kept: it went into
    the actor's next prompt, whose request could not be encoded, and the run escalated as the
    actor's error. Such a reply is a malformed one now (a surrogate is not text), sampled
    again, its spend charged."""
    bad = (
        '{"score": 0.1, "passed": false, "summary": "no", "findings": [{"artifact": "doc", '
        '"part": "title", "dimension": "d", "message": "fix \\ud800 it", "severity": "error"}]}'
    )
    worse = {"score": 0.2, "passed": False, "summary": "try again", "findings": []}
    good = {"score": 1.0, "passed": True, "summary": "fine", "findings": []}
    server.script(ok(FIX), ok(FIX), model="actor-m")
    server.script(
        Reply(content=bad, prompt_tokens=7, completion_tokens=3), ok(worse), ok(good),
        model="rev-m",
    )  # fmt: skip
    review = ChatReviewer("rev-m", base_url=server.base_url, rubric="r", timeout_s=5, price="1,2")
    loop = lw.Loop(
        name="faults",
        actor=_actor(server),
        verifiers=[lw.Check(fn=title), lw.Check(fn=review, name="review")],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        retry=FAST,
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK)
        events = rt.store.events(r.run_id)
    assert r.accepted, r.packet
    assert len(server.requests_for("actor-m")) == 2  # the second prompt was sent
    assert "try again" in server.requests_for("actor-m")[1].text  # the resampled review's
    calls = [e.data for e in events if e.kind == "model_call" and e.data["model"] == "rev-m"]
    assert "lone surrogate (\\ud800)" in calls[0]["error"]
    assert calls[0]["input_tokens"] == 7  # the refused reply's spend is kept


@pytest.mark.parametrize("kind", [ChatActor, AsyncChatActor], ids=["sync", "async"])
def test_a_streamed_request_answered_with_one_json_body_is_read_and_charged(
    tmp_path: Path, server: FakeOpenAI, kind: type[ChatActor]
) -> None:
    """A server that ignores ``stream: true`` and answers one JSON completion (some proxies
    and servers do) was read as a stream of no events: "the response has no choices", sampled
    again until the retries were spent, each answer the server billed charged nothing. Its
    completion is read as it is now."""
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    server.script(_body(FIX, usage), model="actor-m")
    actor = kind("actor-m", base_url=server.base_url, stream=True, timeout_s=5, price="1,2")
    _MADE.append(actor)
    r, _ = _run(tmp_path, actor)
    assert r.accepted, r.packet
    assert len(server.requests) == 1 and server.requests[0].body["stream"] is True
    assert r.spent.tokens == 1100
    assert r.spent.cost_usd == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)
    assert actor.last_reply is not None and actor.last_reply.input_tokens == 1000


@pytest.mark.parametrize("kind", [ChatActor, AsyncChatActor], ids=["sync", "async"])
def test_a_plain_request_answered_with_server_sent_events_is_read_and_charged(
    tmp_path: Path, server: FakeOpenAI, kind: type[ChatActor]
) -> None:
    """A server or proxy that always streams answered a plain request with events: the SDK
    read them as text, "not a chat completion: str", sampled again until the retries were
    spent, each answer the server billed charged nothing. The events are assembled now (a
    chunk of an odd shape among them skipped, not a crash)."""
    text = json.dumps(FIX)

    def chunk(delta: Any, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        return "data: " + json.dumps({"model": "actor-m", "choices": [choice], **extra}) + "\n\n"

    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    events = (
        chunk({"role": "assistant", "content": text[:10]})
        + chunk("not a delta")
        + chunk({"content": text[10:], "tool_calls": "x"})
        + "data: " + json.dumps({"model": "actor-m", "choices": [], "usage": usage}) + "\n\n"
        + "data: [DONE]\n\n"
    )  # fmt: skip
    server.script(
        Reply(raw_body=events.encode(), headers={"Content-Type": "text/event-stream"}),
        model="actor-m",
    )
    actor = kind("actor-m", base_url=server.base_url, timeout_s=5, price="1,2")
    _MADE.append(actor)
    r, _ = _run(tmp_path, actor)
    assert r.accepted, r.packet
    assert len(server.requests) == 1 and "stream" not in server.requests[0].body
    assert r.spent.tokens == 1100
    assert r.spent.cost_usd == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)
