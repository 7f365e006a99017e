"""What a picture cost and what the image adapter got: ``ImagePrice`` (dollars per picture, from
a spec or the environment), ``ImageResult``, and a reply's untrusted token counts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import ConfigError
from .._usage import Usage
from ._prices import Priced
from ._reply import token_count

__all__ = ["ImagePrice", "ImageResult"]


def _rate(value: Any, field: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"must be a number, got {value!r}", field=field)
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number, got {value!r}", field=field) from None
    if not math.isfinite(rate) or rate < 0:
        raise ConfigError(f"must be a finite number ≥ 0, got {value!r}", field=field)
    return rate


@dataclass(frozen=True, slots=True)
class ImagePrice:
    """What one picture costs, in US dollars (generated or edited alike)."""

    per_image_usd: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_image_usd", _rate(self.per_image_usd, "price"))

    @classmethod
    def coerce(cls, value: Any, *, field: str = "price") -> ImagePrice | None:
        """A price from a spec or an environment variable: an ``ImagePrice``, a number, a
        string ``"0.04"`` or a table ``{per_image_usd}``; ``None`` or ``""`` for none."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, Mapping):
            if set(value) != {"per_image_usd"}:
                raise ConfigError(f"needs per_image_usd, got keys {sorted(value)}", field=field)
            return cls(_rate(value["per_image_usd"], f"{field}.per_image_usd"))
        return cls(_rate(value, field))


@dataclass(frozen=True, slots=True)
class ImageResult:
    """One picture as the adapter got it.

    Attributes:
        value: the part value (``image_value``); the bytes are in the store under its digest.
        data: the picture's bytes.
        usage: tokens and cost charged for it.
        priced: where the price came from.
        model: the model asked for.
        endpoint: ``generations`` or ``edits``.
        masked: whether it was a masked edit (local repair).
        references: how many reference images went with it.
        revised_prompt: the prompt as the server rewrote it, when it says.
        seconds: wall-clock time of the HTTP call.
        input_tokens / output_tokens: as the reply's ``usage`` says (0 when it says nothing).
    """

    value: dict[str, Any]
    data: bytes
    usage: Usage
    priced: Priced
    model: str
    endpoint: Literal["generations", "edits"]
    masked: bool
    references: int
    revised_prompt: str | None
    seconds: float
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def digest(self) -> str:
        return str(self.value["image"])


def tokens_of(body: Mapping[str, Any]) -> tuple[int, int, int]:
    """The reply's input, output and total tokens (0 where it says nothing)."""
    raw = body.get("usage")
    if not isinstance(raw, Mapping):
        return 0, 0, 0
    input_tokens, output_tokens = _int(raw.get("input_tokens")), _int(raw.get("output_tokens"))
    return (
        input_tokens,
        output_tokens,
        max(input_tokens + output_tokens, _int(raw.get("total_tokens"))),
    )


def _int(value: Any) -> int:
    # a server's usage is untrusted: NaN, infinity or 2**63 count 0 rather than fail the call
    # or the run's commit (as the chat adapters' ``usage_of``)
    return token_count(value) or 0
