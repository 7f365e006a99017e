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

In the table a model is looked up as spelt, then without a gateway's ``vendor/`` prefix
(``openai/gpt-4o-mini`` at ``provider="openai"``), the prefixes ``model_identity`` strips. When
the server says it served another model than the one asked for (a gateway's substitution, an
Azure deployment's name), both are looked up and the call is billed at the dearer of the prices
found: the served model's is what the provider bills; the asked model's bounds it from below, so a
server claiming a cheaper model than asked never lowers the bill. A ``PriceOverride`` is the
user's word for this adapter's calls and wins whatever the server says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import ConfigError
from .._modelcalls import MODEL_CHARS
from ._endpoint import PROVIDER_PREFIXES

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
        model: the model name the price is that of (the one asked for, or the one the server
            said it served); ``None`` for an override or no price.
    """

    cost_usd: float
    source: PriceSource
    detail: str
    model: str | None = None


def _spellings(model: str) -> list[str]:
    """``model`` as spelt, then without each leading gateway prefix (``openai/``,
    ``azure/``...: those ``model_identity`` strips)."""
    out = [model]
    head, sep, rest = model.partition("/")
    while sep and rest and head.strip().lower() in PROVIDER_PREFIXES:
        out.append(rest)
        head, sep, rest = rest.partition("/")
    return out


def _lookup(
    genai_prices: Any,
    usage: Any,
    model: str,
    base_url: str,
    default_endpoint: bool,
    provider: str | None,
) -> Any:
    """genai-prices' price of one call of ``model`` (its first spelling the table knows), or
    ``None``. A failure of the table other than a miss is raised."""
    for name in _spellings(model):
        try:
            if provider is not None:
                return genai_prices.calc_price(usage, name, provider_id=provider)
            if default_endpoint:
                return genai_prices.calc_price(usage, name, provider_id="openai")
            return genai_prices.calc_price(usage, name, provider_api_url=base_url)
        except LookupError:
            continue
    return None


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
    served: object = None,
) -> Priced:
    """Price one call of ``model`` that the server says ``served`` (its reply's ``model``, any
    value; see the module's docstring for the order of precedence and the served model)."""
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
    other = (
        served.strip()
        if isinstance(served, str)
        and 0 < len(served.strip()) <= MODEL_CHARS
        and served.strip().lower() != model.strip().lower()
        else None
    )
    try:
        asked = _lookup(genai_prices, usage, model, base_url, default_endpoint, provider)
        got = (
            None
            if other is None
            else _lookup(genai_prices, usage, other, base_url, default_endpoint, provider)
        )
    except Exception as exc:  # a price table bug must not fail the model call that succeeded
        return Priced(0.0, "unpriced", f"genai-prices failed: {type(exc).__name__}: {exc}")
    if asked is None and got is None:
        at = f"provider {provider!r}" if provider else base_url
        names = repr(model) if other is None else f"{model!r} (served as {other!r})"
        return Priced(
            0.0,
            "unpriced",
            f"no price for model {names} at {at} in genai-prices; "
            "pass price=PriceOverride(input_per_mtok, output_per_mtok) to account its cost",
        )
    # the dearer of the two; a tie (the same model under a dated name) is the asked one's
    found = [(c, n) for c, n in ((asked, model), (got, other)) if c is not None]
    calc, name = max(found, key=lambda cn: cn[0].total_price)  # (the first of equals)
    detail = f"genai-prices: {calc.provider.id}/{calc.model.id}"
    side = "asked" if name == model else "served"
    if len(found) == 2 and found[0][0].model.id != found[1][0].model.id:
        detail += f" (asked {model!r}, served {other!r}: the dearer, the {side} one)"
    elif asked is None:
        detail += f" (served {other!r}; asked {model!r} is not in the table)"
    return Priced(float(calc.total_price), "genai-prices", detail, name)
