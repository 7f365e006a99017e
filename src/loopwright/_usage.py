"""Usage accounting: what one call, one cycle or one run spent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Spend of one call (or a sum of calls).

    Attributes:
        cost_usd: money spent, in US dollars.
        tokens: model tokens (input + output), or a documented proxy.
        seconds: wall-clock seconds of the call.
    """

    cost_usd: float = 0.0
    tokens: int = 0
    seconds: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.cost_usd + other.cost_usd,
            self.tokens + other.tokens,
            self.seconds + other.seconds,
        )

    def to_dict(self) -> dict[str, Any]:
        return {"cost_usd": self.cost_usd, "tokens": self.tokens, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        if not data:
            return cls()
        return cls(
            float(data.get("cost_usd", 0.0)),
            int(data.get("tokens", 0)),
            float(data.get("seconds", 0.0)),
        )
