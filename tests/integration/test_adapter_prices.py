"""Which model's price bills a call (invariant 7), over real HTTP on loopback.

A gateway (OpenRouter, LiteLLM, an Azure deployment) may answer a request for one model with
another and say so in the reply's ``model``: the call is billed at the dearer of the asked and
the served model's prices, so a substitution by a dearer model is accounted and a server
claiming a cheaper one never lowers the bill; a dated name of the same model is the same model.
A gateway's ``vendor/model`` spelling is priced as the model (``model_identity`` strips it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from support.fake_openai import FakeOpenAI, context, ok

import loopwright as lw
from loopwright.adapters import ChatActor, PriceOverride, price_call

pytestmark = pytest.mark.usefixtures("no_openai_env")

TASK: dict[str, Any] = {"goal": "Fix the title", "artifacts": {"doc": {"title": "Helo"}}}
FIX = {"edits": [{"artifact": "doc", "part": "title", "value": "Hello"}], "note": "n"}
TOKENS = {"prompt_tokens": 1000, "completion_tokens": 100}


def _table(model: str, provider: str = "openai") -> float:
    usage = genai_prices.Usage(input_tokens=1000, output_tokens=100)
    return float(genai_prices.calc_price(usage, model, provider_id=provider).total_price)


def _call(server: FakeOpenAI, asked: str, served: Any, **kw: Any) -> ChatActor:
    server.script(ok(FIX, model=served, **TOKENS))
    kw.setdefault("provider", "openai")
    actor = ChatActor(asked, base_url=server.base_url, timeout_s=5, **kw)
    actor(context())
    return actor


def _run(
    server: FakeOpenAI, tmp_path: Path, served: Any
) -> tuple[lw.RunResult, list[dict[str, Any]]]:
    """One run whose one call asks for gpt-4o-mini and is answered as ``served``: its result
    and its recorded calls."""
    server.script(ok(FIX, model=served, **TOKENS))
    actor = ChatActor("gpt-4o-mini", base_url=server.base_url, provider="openai", timeout_s=5)
    loop = lw.Loop(
        name="served",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0, findings=()))],
        contract=lw.Contract(success=lw.Success(min_score=0.9), budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK)
        return r, [e.data for e in rt.store.events(r.run_id) if e.kind == "model_call"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_dearer_model_served_is_billed_at_its_price(
    fake_openai: FakeOpenAI, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="loopwright.adapters"):
        actor = _call(fake_openai, "gpt-4o-mini", "gpt-4o", stream=stream)
    got = actor.last_reply
    assert got is not None and got.model == "gpt-4o"
    assert _table("gpt-4o") > 10 * _table("gpt-4o-mini")  # the test means something
    assert got.priced.cost_usd == pytest.approx(_table("gpt-4o"))
    assert got.priced.model == "gpt-4o" and "served 'gpt-4o'" in got.priced.detail
    said = [r.getMessage() for r in caplog.records if "says it served" in r.getMessage()]
    assert len(said) == 1 and "'gpt-4o'" in said[0]


def test_a_cheaper_model_claimed_does_not_lower_the_bill(fake_openai: FakeOpenAI) -> None:
    got = _call(fake_openai, "gpt-4o", "gpt-4o-mini").last_reply
    assert got is not None and got.priced.cost_usd == pytest.approx(_table("gpt-4o"))
    assert got.priced.model == "gpt-4o" and "the asked one" in got.priced.detail


def test_a_dated_name_of_the_same_model_is_the_same_model(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="loopwright.adapters"):
        got = _call(fake_openai, "gpt-4o", "gpt-4o-2024-08-06").last_reply
    assert got is not None and got.priced.cost_usd == pytest.approx(_table("gpt-4o"))
    assert got.priced.detail == "genai-prices: openai/gpt-4o" and got.priced.model == "gpt-4o"
    assert not [r for r in caplog.records if "says it served" in r.getMessage()]


def test_a_deployment_name_is_billed_by_the_model_served(fake_openai: FakeOpenAI) -> None:
    # an Azure deployment is named by its owner; the reply names the model behind it
    got = _call(fake_openai, "prod-chat", "gpt-4o-2024-08-06", provider="azure").last_reply
    assert got is not None and got.priced.source == "genai-prices"
    assert _table("gpt-4o", "azure") > 0
    assert got.priced.cost_usd == pytest.approx(_table("gpt-4o", "azure"))
    assert "not in the table" in got.priced.detail


@pytest.mark.parametrize(
    "served",
    ["my-finetune-v2", "x" * 5000, "", None, 42, {"id": "gpt-4o"}],
    ids=["unknown", "long", "empty", "none", "number", "object"],
)
def test_a_served_name_unknown_or_not_a_name_keeps_the_asked_price(
    fake_openai: FakeOpenAI, served: Any
) -> None:
    got = _call(fake_openai, "gpt-4o-mini", served).last_reply
    assert got is not None and got.priced.cost_usd == pytest.approx(_table("gpt-4o-mini"))
    assert got.priced.model == "gpt-4o-mini"


def test_a_price_override_wins_whatever_is_served(fake_openai: FakeOpenAI) -> None:
    price = PriceOverride(input_per_mtok=1.0, output_per_mtok=2.0)
    got = _call(fake_openai, "gpt-4o-mini", "gpt-4o", price=price).last_reply
    assert got is not None and got.priced.source == "override"
    assert got.priced.cost_usd == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)


def test_a_run_spends_and_records_the_served_price(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    r, calls = _run(fake_openai, tmp_path, "gpt-4o")
    assert r.spent.cost_usd == pytest.approx(_table("gpt-4o"))
    assert [c["response_model"] for c in calls] == ["gpt-4o"]
    assert calls[0]["cost_usd"] == pytest.approx(_table("gpt-4o"))
    assert calls[0]["priced_by"].startswith("genai-prices: openai/gpt-4o (asked 'gpt-4o-mini'")


@pytest.mark.parametrize(
    ("model", "provider", "want"),
    [
        ("openai/gpt-4o-mini", "openai", ("gpt-4o-mini", "openai")),
        ("azure/gpt-4o", "openai", ("gpt-4o", "openai")),
        (
            "anthropic/claude-3-5-sonnet-20241022",
            "anthropic",
            ("claude-3-5-sonnet-20241022", "anthropic"),
        ),
        ("openai/gpt-4o", "openrouter", ("openai/gpt-4o", "openrouter")),
        (
            "anthropic/claude-3.5-sonnet",
            "openrouter",
            ("anthropic/claude-3.5-sonnet", "openrouter"),
        ),
    ],
)
def test_a_gateways_vendor_prefix_is_priced(
    model: str, provider: str, want: tuple[str, str]
) -> None:
    got = price_call(
        model,
        input_tokens=1000,
        output_tokens=100,
        base_url="http://127.0.0.1:1/v1",
        default_endpoint=False,
        provider=provider,
    )
    assert _table(*want) > 0
    assert got.source == "genai-prices" and got.cost_usd == pytest.approx(_table(*want))


def test_a_prefixed_model_through_the_adapter_is_priced(fake_openai: FakeOpenAI) -> None:
    got = _call(fake_openai, "openai/gpt-4o-mini", None).last_reply
    assert got is not None and got.priced.source == "genai-prices"
    assert got.priced.cost_usd == pytest.approx(_table("gpt-4o-mini"))


def test_a_prefix_of_another_vendor_is_still_unpriced() -> None:
    got = price_call(
        "anthropic/claude-3-5-sonnet-20241022",
        input_tokens=1000,
        output_tokens=100,
        base_url="http://127.0.0.1:1/v1",
        default_endpoint=False,
        provider="openai",
    )
    assert got.source == "unpriced" and got.cost_usd == 0.0


@pytest.mark.parametrize("served", ["m" * 100_000, {"id": "gpt-4o"}], ids=["huge", "object"])
def test_a_served_model_that_is_no_name_is_not_stored_as_one(
    fake_openai: FakeOpenAI, tmp_path: Path, served: Any
) -> None:
    r, calls = _run(fake_openai, tmp_path, served)
    assert r.spent.cost_usd == pytest.approx(_table("gpt-4o-mini"))
    (shown,) = [c["response_model"] for c in calls]
    if isinstance(served, str):
        assert shown.startswith("m" * 200) and len(shown) < 300  # cut, the cut marked
    else:
        assert shown == "gpt-4o-mini"  # not the object's repr
