"""Issue 20 item 3: model calls for many runs at once, against the loopback fake server.

Many runs in one process share each endpoint's limits (``max_concurrency``,
``tokens_per_minute``), whether their adapters are sync (``ChatActor``, in threads) or async
(``AsyncChatActor``, on the engine's event loop); replies can be streamed (the text as it came
and the first token's latency kept); and a malformed reply is retried as a repair turn that
shows the model what was wrong. Nothing here times anything: the server is paused to see how
many requests a client lets through at once, and the token bucket runs on a fake clock.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from support.fake_openai import FakeOpenAI, Reply, Request, ok

import loopwright as lw
from loopwright.adapters import (
    AsyncChatActor,
    AsyncChatReviewer,
    ChatActor,
    MalformedReplyError,
    PriceOverride,
    limits_in_use,
)
from loopwright.adapters._limits import Gate, Limits

PRICE = PriceOverride(input_per_mtok=1.0, output_per_mtok=2.0)
FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.05, jitter=False)
PASS = {"score": 1.0, "passed": True, "summary": "fine", "findings": []}


pytestmark = pytest.mark.usefixtures("no_openai_env")


@pytest.fixture
def server(fake_openai: FakeOpenAI) -> FakeOpenAI:
    return fake_openai


def title(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    got = state.artifacts["doc"].values()["title"]
    want = state.task["want"]
    bad = () if got == want else (lw.Finding("title is wrong", "doc", "title", "spelling"),)
    return lw.Verdict(passed=not bad, score=0.0 if bad else 1.0, findings=bad)


def _task(i: int) -> dict[str, Any]:
    return {
        "goal": f"Set the title to Title {i}",
        "want": f"Title {i}",
        "artifacts": {"doc": {"title": "draft"}},
    }


def _fixer(req: Request) -> Reply:
    """A rule-based model: sets the title the goal asks for; its prompt tokens vary by run."""
    want = req.text.split("Set the title to ", 1)[1].split("\n", 1)[0].strip()
    fix = {"edits": [{"artifact": "doc", "part": "title", "value": want}], "note": "set"}
    n = int(want.rsplit(" ", 1)[1])
    return ok(fix, prompt_tokens=100 + n, completion_tokens=20 + n % 7)


def _loop(actor: Any, *checks: lw.Check) -> lw.Loop:
    return lw.Loop(
        name="many",
        actor=actor,
        verifiers=[lw.Check(fn=title), *checks],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        retry=FAST,
    )


def _many_paused(
    tmp_path: Path, server: FakeOpenAI, loop: lw.Loop, runs: int, limit: int
) -> list[lw.RunResult]:
    """Start ``runs`` runs with the server paused; once ``limit`` requests are held there,
    let them all go; the runs' results."""
    results: list[lw.RunResult] = []
    failed: list[BaseException] = []

    def drive() -> None:
        try:
            with lw.Runtime(str(tmp_path / "s.db")) as rt:
                tasks = [_task(i) for i in range(runs)]
                results.extend(asyncio.run(rt.run_many(loop, tasks, concurrency=runs)))
        except BaseException as exc:  # reported by the test thread
            failed.append(exc)

    server.pause()
    worker = threading.Thread(target=drive, daemon=True)
    worker.start()
    try:
        assert server.wait_in_flight(limit), f"never {limit} requests in flight"
    finally:
        server.resume()
        worker.join(240)
    assert not worker.is_alive() and not failed, failed
    return results


def test_fifty_async_runs_never_send_more_than_four_requests_at_once(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    server.script(_fixer, model="writer")
    actor = AsyncChatActor("writer", base_url=server.base_url, price=PRICE, max_concurrency=4)
    results = _many_paused(tmp_path, server, _loop(actor), runs=50, limit=4)
    assert len(results) == 50 and all(r.accepted for r in results)
    assert server.max_in_flight == 4  # reached, never passed
    assert len(server.requests) == 50
    assert sum(r.spent.tokens for r in results) == server.served_tokens
    want_cost = (server.served_prompt_tokens * 1.0 + server.served_completion_tokens * 2.0) / 1e6
    assert sum(r.spent.cost_usd for r in results) == pytest.approx(want_cost)
    for r in results:  # each run paid for its own call, not another's
        n = int(r.state.task["want"].rsplit(" ", 1)[1])
        assert r.spent.tokens == 120 + n + n % 7


def test_sync_adapters_in_threads_share_the_same_limit(tmp_path: Path, server: FakeOpenAI) -> None:
    server.script(_fixer, model="writer-sync")
    # Two adapters, built separately, for one endpoint and model: one limit for both.
    ChatActor("writer-sync", base_url=server.base_url, max_concurrency=2)
    actor = ChatActor("writer-sync", base_url=server.base_url, price=PRICE)
    assert limits_in_use(actor.base_url, "writer-sync") == Limits(2, None)
    results = _many_paused(tmp_path, server, _loop(actor), runs=12, limit=2)
    assert all(r.accepted for r in results)
    assert server.max_in_flight == 2
    assert sum(r.spent.tokens for r in results) == server.served_tokens


def test_an_async_reviewer_with_a_streamed_reply(tmp_path: Path, server: FakeOpenAI) -> None:
    server.script(_fixer, model="writer-s")
    server.script(ok(PASS, prompt_tokens=300, completion_tokens=40, chunk_chars=5), model="judge")
    actor = AsyncChatActor("writer-s", base_url=server.base_url, price=PRICE, stream=True)
    review = AsyncChatReviewer(
        "judge", base_url=server.base_url, rubric="Right title.", price=PRICE, stream=True
    )
    loop = _loop(actor, lw.Check(fn=review, name="review"))
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, _task(3))
    assert r.accepted
    assert r.spent.tokens == server.served_tokens == (103 + 23) + 340
    assert all(req.body["stream"] is True for req in server.requests)
    assert all(req.body["stream_options"] == {"include_usage": True} for req in server.requests)
    reply = review.last_reply
    assert reply is not None and reply.streamed and reply.data == PASS
    assert reply.text == json.dumps(PASS)  # assembled from pieces of 5 characters
    assert reply.first_token_s is not None and 0 <= reply.first_token_s <= reply.seconds
    assert reply.input_tokens == 300 and reply.output_tokens == 40


@pytest.mark.parametrize("response_format", ["json_schema", "tool"])
def test_sync_streaming_records_the_reply_and_first_token(
    server: FakeOpenAI, response_format: Any
) -> None:
    fix = {"edits": [{"artifact": "doc", "part": "title", "value": "x" * 50}], "note": "n"}
    server.script(ok(fix, prompt_tokens=70, completion_tokens=9, chunk_chars=3))
    actor = ChatActor(
        "m", base_url=server.base_url, stream=True, price=PRICE, response_format=response_format
    )
    reply = actor._complete([{"role": "user", "content": "hi"}], "run")
    assert reply.data == fix and reply.text == json.dumps(fix) and reply.streamed
    assert reply.first_token_s is not None and reply.usage.tokens == 79
    assert server.served_tokens == 79


def test_a_stream_that_breaks_off_keeps_what_arrived_and_is_retried(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    fix = {"edits": [{"artifact": "doc", "part": "title", "value": "Title 1"}], "note": "n"}
    server.script(ok(fix, chunk_chars=4, cut_after=3), ok(fix, cut_after=1), ok(fix))
    actor = ChatActor("m", base_url=server.base_url, stream=True)
    with pytest.raises(MalformedReplyError, match="stream broke off after 12 characters"):
        actor._complete([{"role": "user", "content": "hi"}], "run")
    assert actor.last_reply is not None and actor.last_reply.text == json.dumps(fix)[:12]
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_loop(actor), _task(1))
    # the broken stream sent no usage; the one that finished did
    assert r.accepted and server.served_tokens == r.spent.tokens == 150
    # a broken stream is not the model's mistake: the retry asks again, with no repair turn
    assert server.requests[2].messages == server.requests[1].messages


def test_a_schema_invalid_reply_is_repaired_by_the_next_turn(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    bad = {"edits": [{"artifact": "doc", "value": "Title 1"}], "note": "forgot the part"}
    server.script(ok(bad, prompt_tokens=200, completion_tokens=11), _fixer)
    actor = AsyncChatActor("m", base_url=server.base_url, price=PRICE)
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_loop(actor), _task(1))
        events = rt.store.events(r.run_id)
    assert r.accepted and r.cycles == 1
    first, second = server.requests
    # the repair turn: the same request, then the bad reply and what was wrong with it
    assert second.messages[:2] == first.messages
    assert second.messages[2] == {"role": "assistant", "content": json.dumps(bad)}
    assert second.messages[3]["role"] == "user"
    assert "$.edits[0]: missing required key 'part'" in second.messages[3]["content"]
    assert actor.last_reply is not None and actor.last_reply.repair
    # both attempts charged: the malformed reply's tokens with the repaired one
    assert r.spent.tokens == server.served_tokens == 211 + (101 + 21)
    assert [e.data["attempt"] for e in events if e.kind == "retry"] == [1]


def test_a_new_question_is_not_a_repair_turn(server: FakeOpenAI) -> None:
    server.script(ok({"edits": "none"}), ok({"edits": []}), ok({"edits": []}))
    actor = ChatActor("m", base_url=server.base_url)
    with pytest.raises(MalformedReplyError):
        actor._complete([{"role": "user", "content": "one"}], "run")
    actor._complete([{"role": "user", "content": "two"}], "run")  # other messages: asked as is
    actor._complete([{"role": "user", "content": "one"}], "run")  # repaired already: forgotten
    assert [len(r.messages) for r in server.requests] == [1, 1, 1]


def test_the_token_bucket_waits_off_what_replies_overdrew() -> None:
    now = [0.0]
    gate = Gate(clock=lambda: now[0])
    gate.tighten(Limits(tokens_per_minute=600))  # 10 tokens a second
    assert gate.wait_s() == 0
    gate.charge(1000)  # the bucket held 600: 400 overdrawn
    assert gate.wait_s() == pytest.approx(40.1)
    now[0] = 40.0
    assert gate.wait_s() == pytest.approx(0.1)
    now[0] = 41.0
    assert gate.wait_s() == 0
    now[0] = 10_000.0
    gate.charge(599)  # refilled to 600 at most, not beyond
    assert gate.wait_s() == 0
    gate.charge(1)
    assert gate.wait_s() > 0
    gate.tighten(Limits(tokens_per_minute=6000))  # looser: the tighter limit holds
    assert gate.tokens_per_minute == 600


def test_a_reply_claiming_huge_usage_holds_the_endpoint_a_minute_at_most() -> None:
    """A server's usage of 2**40 tokens (a count the adapter accepts) overdrew the bucket so far
    that every later request to the endpoint, from every run in the process, waited years."""
    now = [0.0]
    gate = Gate(clock=lambda: now[0])
    gate.tighten(Limits(tokens_per_minute=600))
    gate.charge(2**40)
    assert 0 < gate.wait_s() <= 60.1
    now[0] = 61.0
    assert gate.wait_s() == 0


def test_a_cancelled_waiter_gives_its_slot_on() -> None:
    gate = Gate()
    gate.tighten(Limits(max_concurrency=1))

    async def main() -> int:
        await gate.acquire_async()
        waiting = asyncio.ensure_future(gate.acquire_async())
        behind = asyncio.ensure_future(gate.acquire_async())
        await asyncio.sleep(0)
        waiting.cancel()
        gate.release()
        await behind  # the cancelled waiter did not keep the slot
        held = gate.active
        gate.release()
        return held

    assert asyncio.run(main()) == 1
    assert gate.active == 0 and gate.peak == 1


def test_limits_are_validated(server: FakeOpenAI) -> None:
    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(lw.ConfigError, match="max_concurrency"):
            ChatActor("m", base_url=server.base_url, max_concurrency=bad)
        with pytest.raises(lw.ConfigError, match="tokens_per_minute"):
            ChatActor("m", base_url=server.base_url, tokens_per_minute=bad)
    with pytest.raises(lw.ConfigError, match="stream"):
        ChatActor("m", base_url=server.base_url, stream="yes")  # type: ignore[arg-type]


def _spec(tmp_path: Path, server: FakeOpenAI, model: str, limits: str) -> Path:
    (tmp_path / "plain.py").write_text(
        "import loopwright as lw\n"
        "def act(ctx):\n    return lw.Proposal()\n"
        "def check(state, proposal):\n    return lw.Verdict(passed=True, score=1.0)\n"
    )
    actor = (
        'ref = "plain.py:act"'
        if model == "-"
        else f'ref = "loopwright.adapters:AsyncChatActor"\n'
        f'options = {{ model = "{model}", base_url = "{server.base_url}" }}'
    )
    spec = tmp_path / "loop.toml"
    spec.write_text(
        f'name = "limited"\n[actor]\n{actor}\n'
        '[[verifiers]]\nname = "ok"\nref = "plain.py:check"\n'
        "[contract.budget]\nmax_cycles = 2\n"
        f"[model.limits]\n{limits}\n"
    )
    return spec


def test_the_specs_model_limits_hold_for_its_adapters(tmp_path: Path, server: FakeOpenAI) -> None:
    from loopwright._spec import load_spec

    loop = load_spec(
        _spec(tmp_path, server, "spec-m", "max_concurrency = 3\ntokens_per_minute = 9000")
    )
    assert isinstance(loop.actor, AsyncChatActor)
    assert limits_in_use(loop.actor.base_url, "spec-m") == Limits(3, 9000)
    with pytest.raises(lw.SpecError, match=r"model\.limits\.max_concurrency") as bad:
        load_spec(_spec(tmp_path, server, "spec-m2", "max_concurrency = 0"))
    assert "whole number" in str(bad.value)
    with pytest.raises(lw.SpecError, match=r"model\.limits\.burst"):
        load_spec(_spec(tmp_path, server, "spec-m3", "burst = 2"))
    with pytest.raises(lw.SpecError, match="model adapters"):
        load_spec(_spec(tmp_path, server, "-", "max_concurrency = 2"))
