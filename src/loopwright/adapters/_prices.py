"""What a model call cost: a user's price override, else the ``genai-prices`` table, else 0.

Order of precedence, first that applies wins:

1. ``PriceOverride`` given by the user (local models, negotiated prices, a proxy): dollars per
   million input, cached-input and output tokens.
2. ``genai-prices`` (a maintained, offline price snapshot shipped in the package; loopwright
   never asks it to fetch updates): looked up by the ``provider`` id when one is given, by
   ``provider="openai"`` when the client talks to OpenAI's default endpoint, otherwise by the
   endpoint's URL (``provider_api_url``) — so a model served from ``localhost`` is *not* priced
   as the hosted model of the same name.
3. Nothing matched: the cost is 0 (tokens are still counted and still count against
   ``max_tokens``), and the adapter logs one warning per model and endpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import ConfigError

__all__ = ["PriceOverride", "Priced", "price_call"]

PriceSource = Literal["override", "genai-prices", "unpriced"]


def _rate(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"must be a number, got {value!r}", field=field) from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"must be a finite number ≥ 0, got {value!r}", field=field)
    return float(value)


@dataclass(frozen=True, slots=True)
class PriceOverride:
    """Prices in US dollars per million tokens.

    Attributes:
        input_per_mtok: per million prompt tokens.
        output_per_mtok: per million completion tokens.
        cached_input_per_mtok: per million prompt tokens served from the provider's cache
            (``usage.prompt_tokens_details.cached_tokens``); ``None`` charges them as input.
    """

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_per_mtok", _rate(self.input_per_mtok, "price.input"))
        object.__setattr__(self, "output_per_mtok", _rate(self.output_per_mtok, "price.output"))
        if self.cached_input_per_mtok is not None:
            object.__setattr__(
                self,
                "cached_input_per_mtok",
                _rate(self.cached_input_per_mtok, "price.cached_input"),
            )

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """Dollars for one call; ``input_tokens`` includes ``cached_tokens``, as OpenAI counts."""
        cached = min(max(cached_tokens, 0), input_tokens)
        cached_rate = (
            self.input_per_mtok
            if self.cached_input_per_mtok is None
            else self.cached_input_per_mtok
        )
        return (
            (input_tokens - cached) * self.input_per_mtok
            + cached * cached_rate
            + output_tokens * self.output_per_mtok
        ) / 1_000_000

    @classmethod
    def coerce(cls, value: Any, *, field: str = "price") -> PriceOverride | None:
        """A price from what a spec or an environment variable holds: a ``PriceOverride``, a
        table ``{input_per_mtok, output_per_mtok[, cached_input_per_mtok]}``, a pair
        ``[input, output]`` or a string ``"input,output"``; ``None`` or ``""`` for none."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, str):
            if not value.strip():
                return None
            value = [v.strip() for v in value.split(",")]
        if isinstance(value, Mapping):
            allowed = {"input_per_mtok", "output_per_mtok", "cached_input_per_mtok"}
            unknown = sorted(set(value) - allowed)
            if unknown or not {"input_per_mtok", "output_per_mtok"} <= set(value):
                raise ConfigError(
                    f"needs input_per_mtok and output_per_mtok (and optionally "
                    f"cached_input_per_mtok), got keys {sorted(value)}",
                    field=field,
                )
            return cls(**{k: _rate(v, f"{field}.{k}") for k, v in value.items()})
        if isinstance(value, Sequence) and len(value) in (2, 3):
            rates = [_rate(v, field) for v in value]
            return cls(*rates)
        raise ConfigError(
            f"must be PriceOverride, a table, [input, output] or 'input,output', got {value!r}",
            field=field,
        )


@dataclass(frozen=True, slots=True)
class Priced:
    """The cost of one call and where its price came from.

    Attributes:
        cost_usd: dollars.
        source: ``override``, ``genai-prices`` or ``unpriced`` (cost 0).
        detail: the price used (``genai-prices: openai/gpt-4o-mini``), or why there was none.
    """

    cost_usd: float
    source: PriceSource
    detail: str


def price_call(
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    base_url: str,
    default_endpoint: bool,
    provider: str | None = None,
    override: PriceOverride | None = None,
) -> Priced:
    """Price one call (see the module's docstring for the order of precedence)."""
    if override is not None:
        return Priced(
            override.cost(input_tokens, output_tokens, cached_tokens),
            "override",
            f"override: {override.input_per_mtok:g}/{override.output_per_mtok:g} $ per MTok",
        )
    try:
        import genai_prices
    except ImportError:
        return Priced(
            0.0, "unpriced", "genai-prices is not installed (pip install 'loopwright[openai]')"
        )
    usage = genai_prices.Usage(
        input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached_tokens
    )
    try:
        if provider is not None:
            calc = genai_prices.calc_price(usage, model, provider_id=provider)
        elif default_endpoint:
            calc = genai_prices.calc_price(usage, model, provider_id="openai")
        else:
            calc = genai_prices.calc_price(usage, model, provider_api_url=base_url)
    except LookupError:
        where = f"provider {provider!r}" if provider else base_url
        return Priced(
            0.0,
            "unpriced",
            f"no price for model {model!r} at {where} in genai-prices; "
            "pass price=PriceOverride(input_per_mtok, output_per_mtok) to account its cost",
        )
    except Exception as exc:  # a price table bug must not fail the model call that succeeded
        return Priced(0.0, "unpriced", f"genai-prices failed: {type(exc).__name__}: {exc}")
    return Priced(
        float(calc.total_price),
        "genai-prices",
        f"genai-prices: {calc.provider.id}/{calc.model.id}",
    )
