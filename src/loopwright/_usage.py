"""Usage accounting: what one call, one cycle or one run spent."""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass
from typing import Any

from . import _shapes as shapes
from ._errors import ConfigError

__all__ = ["Usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Spend of one call (or a sum of calls).

    Attributes:
        cost_usd: money spent, in US dollars (a finite number ≥ 0).
        tokens: model tokens (input + output), or a documented proxy (a whole number ≥ 0).
        seconds: wall-clock seconds of the call (a finite number ≥ 0).

    Invariant 7 (budget honesty) rests on these: a negative cost would let a run spend without
    limit, a NaN would reach the store. So a bad value is refused where it is made, inside the
    actor, verifier or effect that reported it (which the engine escalates), not cycles later.
    """

    cost_usd: float = 0.0
    tokens: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        c, t, s = self.cost_usd, self.tokens, self.seconds
        # the common case in a few type tests; NaN fails the comparisons and falls through
        if (
            (type(c) is float or type(c) is int)
            and type(t) is int
            and (type(s) is float or type(s) is int)
            and 0 <= c < math.inf
            and t >= 0
            and 0 <= s < math.inf
        ):
            return
        object.__setattr__(self, "cost_usd", _amount(c, "cost_usd"))
        object.__setattr__(self, "tokens", _count(t))
        object.__setattr__(self, "seconds", _amount(s, "seconds"))

    @classmethod
    def _stored(cls, cost_usd: float, tokens: int, seconds: float) -> Usage:
        """A usage as recorded (a store, a trace, a sum of checked usages): not checked again,
        so what an older release accepted still loads."""
        return shapes.stored(cls, cost_usd, tokens, seconds)

    def __add__(self, other: Usage) -> Usage:
        return Usage._stored(
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
        return cls._stored(
            float(data.get("cost_usd", 0.0)),
            int(data.get("tokens", 0)),
            float(data.get("seconds", 0.0)),
        )


def _amount(value: Any, name: str) -> float:
    # numpy's floats and ints are numbers.Real; what is stored is a plain float or int
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    number = float(value) if ok else math.nan
    if not 0 <= number < math.inf:  # NaN too
        raise ConfigError(f"must be a finite number ≥ 0, got {value!r}", field=f"Usage.{name}")
    return value if type(value) is int else number


def _count(value: Any) -> int:
    try:
        n = operator.index(value)  # int, or an integer type such as numpy's
    except TypeError:
        n = None
    if n is None or isinstance(value, bool) or n < 0:
        raise ConfigError(f"must be a whole number ≥ 0, got {value!r}", field="Usage.tokens")
    return n
