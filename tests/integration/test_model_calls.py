"""Model calls recorded per call (issue 19 item 2): a real ``Runtime`` drives a ``ChatActor``
(its first request answered 503, then retried) inside an actor that also publishes, and a
``ChatReviewer``, against the loopback ``FakeOpenAI``. The store holds one ``model_call`` event
per request with the model, tokens, cost, start and latency, attempt and outcome, and the
prompt and reply the adapter saw — a secret in the task masked before anything was written;
the dashboard draws the run's waterfall and shows each call, the API serves them.

``make_model_run`` is also what the browser test serves (``tests/e2e/test_waterfall_browser.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

from fastapi.testclient import TestClient
from support.dashboard import dashboard

import loopwright as lw
from loopwright._modelcalls import MODEL_CALL, PROMPT_CHARS
from loopwright.adapters import ACTOR_SYSTEM_PROMPT, ChatActor, ChatReviewer, PriceOverride
from loopwright.store import open_store
from loopwright.testing import FakeOpenAI, fail, ok
from loopwright.web import create_app

SECRET = "sk-proj-Zq81vXw0LmN4bC7dE2fG9hJ3kL5"
TOKEN = "model-calls-token-0123"
LOCAL = "http://127.0.0.1"
FIX = {
    "edits": [{"artifact": "doc", "part": "title", "value": "Hello world"}],
    "note": "fixed the title",
}
PASS = {"score": 0.9, "passed": True, "summary": "reads well", "findings": []}
ACTOR_PRICE = PriceOverride(input_per_mtok=1.0, output_per_mtok=2.0)
REVIEW_PRICE = PriceOverride(input_per_mtok=3.0, output_per_mtok=6.0)
FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02)


@lw.effect("publish", name="publish")
def publish(title: str) -> dict[str, Any]:
    return {"published": title}


def title_ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    good = state.artifacts["doc"].values().get("title") == "Hello world"
    bad = () if good else (lw.Finding("the title is misspelt", "doc", "title", "spelling"),)
    return lw.Verdict(passed=good, score=1.0 if good else 0.0, findings=bad)


def model_loop(base_url: str, name: str = "doc-model", opened: list[Any] | None = None) -> lw.Loop:
    """A chat actor whose proposal also publishes the title, a plain check, a chat reviewer
    (the two adapters appended to ``opened``, for ``close_clients``)."""
    # A credential pasted into the prompt: the model sees it, the store must not.
    system = f"{ACTOR_SYSTEM_PROMPT}\nThe docs API takes the key {SECRET}."
    chat = ChatActor(
        "actor-m", base_url=base_url, price=ACTOR_PRICE, timeout_s=60, system_prompt=system
    )

    def actor(ctx: lw.Context) -> lw.Proposal:
        p = chat(ctx)
        return lw.Proposal(
            edits=p.edits,
            note=p.note,
            effects=(publish.call(title="Hello world"),),
            usage=p.usage,
        )

    reviewer = ChatReviewer(
        "rev-m", base_url=base_url, rubric="Plain English.", price=REVIEW_PRICE, timeout_s=60
    )
    if opened is not None:
        opened += [chat, reviewer]
    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=[lw.Check(fn=title_ok), lw.Check(fn=reviewer, name="review")],
        effects=[publish],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="publish", action="allow", name="docs"),)),
        contract=lw.Contract(success=lw.Success(min_score=0.9), budget=lw.Budget(max_cycles=3)),
        retry=FAST,
    )


def close_clients(adapters: list[Any]) -> None:
    """Close the adapters' HTTP clients now, not whenever they are collected (an unclosed
    socket warned about during a later test would fail it)."""
    for a in adapters:
        if a._client is not None:
            a._client.close()


TASK: dict[str, Any] = {"goal": "Fix the title.", "artifacts": {"doc": {"title": "Helo wrld"}}}


def make_model_run(
    tmp_path: Path, *, loop_name: str = "doc-model", store: str | None = None
) -> tuple[str, str]:
    """A run with a retried model call, a reviewer call and an effect; (store, run id), in
    ``store`` or a SQLite file in ``tmp_path``."""
    db = store or str(tmp_path / "calls.db")
    with FakeOpenAI() as server:
        server.script(
            fail(503, "overloaded"),
            ok(FIX, prompt_tokens=1000, completion_tokens=100),
            model="actor-m",
        )
        server.script(ok(PASS, prompt_tokens=300, completion_tokens=30), model="rev-m")
        opened: list[Any] = []
        with lw.Runtime(db) as rt:
            result = rt.run_sync(
                model_loop(server.base_url, loop_name, opened), TASK, task_key="calls"
            )
        close_clients(opened)
        assert result.status == "accepted", result
        # what the model was shown: the secret went out (it is in the prompt), as asked
        assert any(SECRET in r.text for r in server.requests_for("actor-m"))
    return db, result.run_id


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return make_model_run(tmp_path_factory.mktemp("calls"))


@pytest.fixture(scope="module")
def client(run: tuple[str, str]) -> TestClient:
    return dashboard(run[0], token=TOKEN)


def _calls(db: str, run_id: str) -> list[lw.store.Event]:
    with open_store(db) as st:
        return [e for e in st.events(run_id) if e.kind == MODEL_CALL]


def test_each_request_is_recorded_with_its_figures(run: tuple[str, str]) -> None:
    db, rid = run
    calls = _calls(db, rid)
    assert [(e.data["scope"], e.data["attempt"], e.data["outcome"]) for e in calls] == [
        ("actor", 1, "retry"),
        ("actor", 2, "ok"),
        ("verifier:review", 1, "ok"),
    ]
    failed, good, review = (e.data for e in calls)
    assert failed["http_status"] == 503 and "overloaded" in failed["error"]
    assert failed["input_tokens"] is None and failed["reply"] is None
    assert good["model"] == good["response_model"] == "actor-m"
    assert (good["input_tokens"], good["output_tokens"]) == (1000, 100)
    assert good["cost_usd"] == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)
    assert good["finish_reason"] == "stop" and good["error"] is None
    assert json.loads(good["reply"]) == FIX  # the raw reply, as the server sent it
    assert review["model"] == "rev-m"
    assert review["cost_usd"] == pytest.approx((300 * 3.0 + 30 * 6.0) / 1e6)
    assert json.loads(review["reply"]) == PASS
    # the prompt as sent: a system message with the schema, then the context
    roles = [m["role"] for m in good["prompt"]]
    assert roles == ["system", "user"]
    assert "Helo wrld" in good["prompt"][1]["content"]
    assert review["prompt"][1]["content"].count("Hello world") >= 1
    # real times: the retry started after the failure, the reviewer after the actor
    assert failed["started_at"] < good["started_at"] < review["started_at"]
    assert good["seconds"] > 0
    # the retry's record went in with the retry event, before the cycle's commit
    with open_store(db) as st:
        kinds = [e.kind for e in st.events(rid)]
    assert kinds.index(MODEL_CALL) < kinds.index("retry") < kinds.index("cycle_started")


def test_a_secret_in_the_prompt_is_never_stored(run: tuple[str, str]) -> None:
    db, rid = run
    prompts = [m["content"] for e in _calls(db, rid) for m in e.data["prompt"]]
    assert any("The docs API takes the key ***." in p for p in prompts)
    assert not any(SECRET in p for p in prompts)
    # nowhere in the database's files (WAL included), in any table
    for f in Path(db).parent.glob(Path(db).name + "*"):
        assert SECRET.encode() not in f.read_bytes(), f


def test_the_run_page_draws_the_waterfall(client: TestClient, run: tuple[str, str]) -> None:
    db, rid = run
    r = client.get(f"/runs/{rid}")
    assert r.status_code == 200
    assert "script-src 'self'" in r.headers["content-security-policy"]
    html = r.text
    svg = html[html.index('<svg class="waterfall"') : html.index("</svg>", html.index("waterfall"))]
    kinds = re.findall(r'data-kind="(\w+)"', svg)
    assert kinds[0] == "run" and kinds.count("cycle") == 1
    assert kinds.count("model") == 3 and "effect" in kinds and "actor" in kinds
    assert svg.count("wf-error") == 1  # the 503
    for e in _calls(db, rid):
        assert f'href="/runs/{rid}/calls/{e.id}"' in svg
    assert "effect publish · done" in svg
    assert "chat actor-m · attempt 2" in svg
    assert "1,100 tok" in svg and "$0.0012" in svg
    assert SECRET not in html


def test_the_call_page_shows_prompt_and_reply_masked(
    client: TestClient, run: tuple[str, str]
) -> None:
    db, rid = run
    failed, good, _ = _calls(db, rid)
    page = client.get(f"/runs/{rid}/calls/{good.id}")
    assert page.status_code == 200
    text = page.text
    assert "The docs API takes the key ***." in text and SECRET not in text
    assert "Helo wrld" in text
    assert "fixed the title" in text  # the reply
    assert "1000 in · 100 out" in text
    assert "$0.001200" in text
    bad = client.get(f"/runs/{rid}/calls/{failed.id}").text
    assert "HTTP 503" in bad and "No reply arrived" in bad


def test_the_api_serves_calls_and_spans(client: TestClient, run: tuple[str, str]) -> None:
    db, rid = run
    calls = client.get(f"/api/runs/{rid}/calls").json()
    assert [c["outcome"] for c in calls] == ["retry", "ok", "ok"]
    assert all("prompt" not in c and "reply" not in c for c in calls)
    assert len(client.get(f"/api/runs/{rid}/calls?cycle=1").json()) == 3
    assert client.get(f"/api/runs/{rid}/calls?cycle=2").json() == []
    one = client.get(f"/api/runs/{rid}/calls/{calls[1]['id']}").json()
    assert one["input_tokens"] == 1000 and json.loads(one["reply"]) == FIX
    assert SECRET not in json.dumps(one) and "***" in json.dumps(one["prompt"])
    spans = client.get(f"/api/runs/{rid}/spans").json()
    model = [s for s in spans if s["kind"] == "model"]
    assert [s["call_id"] for s in model] == [c["id"] for c in calls]
    assert model[1]["input_tokens"] == 1000 and model[1]["model"] == "actor-m"
    # mistakes: one clear JSON error each
    first_event = next(e for e in open_store(db).events(rid) if e.kind != MODEL_CALL)
    for url in (
        f"/api/runs/{rid}/calls/{first_event.id}",
        f"/api/runs/{rid}/calls/999999",
        "/api/runs/nosuchrun/calls",
        "/api/runs/nosuchrun/spans",
    ):
        r = client.get(url)
        assert r.status_code == 404 and "detail" in r.json(), url
    assert client.get(f"/api/runs/{rid}/calls/abc").status_code == 422


def test_a_huge_prompt_is_cut_with_a_marker(tmp_path: Path) -> None:
    """Invariant 8: what a call stores is bounded, whatever the artifacts weigh."""
    big = "x" * (PROMPT_CHARS * 3)
    task = {"goal": "Fix the title.", "artifacts": {"doc": {"title": "Helo wrld", "body": big}}}
    db = str(tmp_path / "big.db")
    with FakeOpenAI() as server:
        server.script(ok(FIX), model="actor-m")
        server.script(ok(PASS), model="rev-m")
        opened: list[Any] = []
        with lw.Runtime(db) as rt:
            res = rt.run_sync(model_loop(server.base_url, opened=opened), task)
        close_clients(opened)
    assert res.status == "accepted"
    calls = _calls(db, res.run_id)
    assert len(calls) == 2
    for e in calls:
        d = e.data
        kept = sum(len(m["content"]) for m in d["prompt"])
        assert d["truncated"] and d["prompt_chars"] > PROMPT_CHARS * 3
        assert kept < PROMPT_CHARS + 200  # the limit plus the markers
        assert "…[truncated: " in d["prompt"][-1]["content"]
        assert len(json.dumps(d)) < PROMPT_CHARS + 6000


def test_async_streamed_calls_record_partial_replies_and_repair_turns(tmp_path: Path) -> None:
    """``AsyncChatActor`` streaming: a stream that broke off is recorded with what arrived, a
    schema-invalid reply with its tokens, and the repair turn that follows as such."""
    from loopwright.adapters import AsyncChatActor

    bad = {"edits": [{"artifact": "doc", "value": "Hello world"}], "note": "forgot the part"}
    db = str(tmp_path / "async.db")
    with FakeOpenAI() as server:
        server.script(
            ok(FIX, chunk_chars=4, cut_after=3),
            ok(bad, prompt_tokens=200, completion_tokens=11),
            ok(FIX, prompt_tokens=250, completion_tokens=20),
            model="actor-m",
        )
        actor = AsyncChatActor("actor-m", base_url=server.base_url, stream=True, price=ACTOR_PRICE)
        loop = lw.Loop(
            name="async-doc",
            actor=actor,
            verifiers=[lw.Check(fn=title_ok)],
            contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
            retry=FAST,
        )
        with lw.Runtime(db) as rt:
            res = rt.run_sync(loop, TASK)
    assert res.status == "accepted"
    broken, invalid, repaired = (e.data for e in _calls(db, res.run_id))
    assert [d["outcome"] for d in (broken, invalid, repaired)] == ["retry", "retry", "ok"]
    assert [d["attempt"] for d in (broken, invalid, repaired)] == [1, 2, 3]
    assert all(d["streamed"] for d in (broken, invalid, repaired))
    assert broken["reply"] == json.dumps(FIX)[:12] and "broke off" in broken["error"]
    assert json.loads(invalid["reply"]) == bad and "MalformedReplyError" in invalid["error"]
    assert (invalid["input_tokens"], invalid["output_tokens"]) == (200, 11)
    assert invalid["cost_usd"] == pytest.approx((200 * 1.0 + 11 * 2.0) / 1e6)
    assert not invalid["repair"] and repaired["repair"]
    assert repaired["prompt"][-2:][0]["role"] == "assistant"  # the bad reply shown back
    assert (
        repaired["first_token_s"] is not None and repaired["first_token_s"] <= repaired["seconds"]
    )


@pytest.mark.postgres
def test_model_calls_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    store, rid = make_model_run(tmp_path, store=pg_url)
    calls = _calls(store, rid)
    assert [(e.data["scope"], e.data["outcome"]) for e in calls] == [
        ("actor", "retry"),
        ("actor", "ok"),
        ("verifier:review", "ok"),
    ]
    assert json.loads(calls[1].data["reply"]) == FIX
    assert SECRET not in json.dumps([e.data for e in calls])
    app = create_app(store, token=TOKEN)
    try:
        got = TestClient(app, base_url=LOCAL).get(f"/api/runs/{rid}/calls/{calls[1].id}")
        assert got.json()["output_tokens"] == 100
    finally:
        app.state.store.close()
