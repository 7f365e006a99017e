"""Usage accounting: what one call, one cycle or one run spent."""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError
from ._frozen import quick_init, twin_of
from ._money_text import usd

__all__ = ["MAX_AMOUNT", "MAX_RUN_TOKENS", "MAX_TOKENS", "Usage", "plain_usage"]

_set = object.__setattr__  # what a frozen dataclass's __init__ calls

MAX_TOKENS = 2**53
"""The most tokens one ``Usage`` may report: far beyond any real call, and the largest whole
number a float (and a JSON reader such as the dashboard's) holds exactly. A larger count is
refused where it is made, so no reported value can fail a commit (SQLite's INTEGER stops at
2**63 - 1)."""

MAX_RUN_TOKENS = 2**63 - 1
"""The most tokens a run's total may reach: the largest integer a store's column holds (SQLite's
INTEGER, PostgreSQL's BIGINT). A cycle that would take the total past it ends the run
``escalated`` (``_conclude``), and a budget past it is refused (``Budget``): a total past it
failed the commit with ``OverflowError``, leaving the run ``running`` for ever (stop 52)."""

MAX_AMOUNT = 2.0**53
"""The most ``cost_usd`` (or ``seconds``) one ``Usage`` may report: far beyond any real call
(9e15 USD). Unbounded, an int past every float (``10**400``) passed the check and failed the
cycle's sum (``OverflowError``: the run ``failed``, as loopwright's own error), and two costs of
1.5e308 summed to an infinity, which a store writes as ``null``; under this bound no sum of a
run's calls leaves the floats."""


@quick_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Spend of one call (or a sum of calls).

    Attributes:
        cost_usd: money spent, in US dollars (a number ≥ 0, at most ``MAX_AMOUNT``).
        tokens: model tokens (input + output), or a documented proxy (a whole number ≥ 0, at
            most ``MAX_TOKENS``).
        seconds: wall-clock seconds of the call (a number ≥ 0, at most ``MAX_AMOUNT``).

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
            and 0 <= c <= MAX_AMOUNT
            and 0 <= t <= MAX_TOKENS
            and 0 <= s <= MAX_AMOUNT
        ):
            return
        object.__setattr__(self, "cost_usd", _amount(c, "cost_usd"))
        object.__setattr__(self, "tokens", _count(t))
        object.__setattr__(self, "seconds", _amount(s, "seconds"))

    @classmethod
    def _stored(cls, cost_usd: float, tokens: int, seconds: float) -> Usage:
        """A usage as recorded (a store, a trace, a sum of checked usages): not checked again,
        so what an older release accepted still loads."""
        # (``shapes.stored`` written out: a cycle adds up usages a few times)
        if cls is not Usage:  # a subclass: its own layout
            sub = object.__new__(cls)
            _set(sub, "cost_usd", cost_usd)
            _set(sub, "tokens", tokens)
            _set(sub, "seconds", seconds)
            return sub
        return _plain(cost_usd, tokens, seconds)

    def __add__(self, other: Usage) -> Usage:
        return _plain(
            self.cost_usd + other.cost_usd, self.tokens + other.tokens, self.seconds + other.seconds
        )

    def add_seconds(self, seconds: float) -> Usage:
        """``self + Usage(seconds=seconds)`` for a measured duration (a ``perf_counter``
        difference: finite and ≥ 0), without building and checking that usage: every cycle
        adds its duration."""
        # as __add__ with a cost of 0.0
        return _plain(self.cost_usd + 0.0, self.tokens + 0, self.seconds + seconds)

    def __str__(self) -> str:
        """As a person reads it (``print(result.spent)``): ``$0.02, 600 tokens, 0.01 s``, the
        dollars as every view prints them; the ``repr`` printed ``Usage(cost_usd=0.02,
        tokens=600, seconds=0.006571...)``, float noise and all (polish54)."""
        return f"{usd(self.cost_usd)}, {self.tokens:,} tokens, {self.seconds:.2f} s"

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


def plain_usage(usage: Usage | None) -> Usage | None:
    """``usage`` as a plain ``Usage``, its amounts checked: a subclass's are checked again (one
    that overrides ``__post_init__`` reported a negative or NaN cost unchecked, and the
    engine's own sum of it raised ``ConfigError`` outside the user's call: the run was left
    running, stop 52). ``ConfigError`` naming the field when they are not amounts."""
    if usage is None or type(usage) is Usage:
        return usage
    return Usage(usage.cost_usd, usage.tokens, usage.seconds)


_new = object.__new__
# Usage's twin (``_frozen.quick_init``): the engine's sums built with plain attribute stores.
_TWIN: Any = twin_of(Usage)


def _plain(cost_usd: float, tokens: int, seconds: float) -> Usage:
    """A ``Usage`` of these checked amounts, built as its twin with plain attribute stores."""
    obj = _new(_TWIN)
    obj.cost_usd = cost_usd
    obj.tokens = tokens
    obj.seconds = seconds
    obj.__class__ = Usage
    out: Usage = obj  # (typed by the annotation: ``typing.cast`` is a call, twice a cycle)
    return out


def _amount(value: Any, name: str) -> float:
    # numpy's floats and ints are numbers.Real; what is stored is a plain float or int
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    try:
        number = float(value) if ok else math.nan
    except OverflowError:  # an int past every float (10**400)
        number = math.inf
    if not 0 <= number < math.inf:  # NaN too
        raise ConfigError(
            f"must be a finite number ≥ 0, got {_shown(value)}", field=f"Usage.{name}"
        )
    if number > MAX_AMOUNT or value > MAX_AMOUNT:  # (an int just past it rounds down to it)
        raise ConfigError(
            f"must be at most 2**53 (MAX_AMOUNT), got {_shown(value)}", field=f"Usage.{name}"
        )
    return value if type(value) is int else number


def _shown(value: Any) -> str:
    # (an int's repr past 4,300 digits raises)
    return _short(value) if type(value) is int else repr(value)


def _count(value: Any) -> int:
    try:
        n = operator.index(value)  # int, or an integer type such as numpy's
    except TypeError:
        n = None
    if n is None or isinstance(value, bool) or n < 0:
        raise ConfigError(f"must be a whole number ≥ 0, got {value!r}", field="Usage.tokens")
    if n > MAX_TOKENS:
        raise ConfigError(
            f"must be at most 2**53 (MAX_TOKENS), got {_short(n)}", field="Usage.tokens"
        )
    return n


def _short(n: int) -> str:
    # str() of an int past 4,300 digits raises: say its size instead
    return str(n) if n.bit_length() <= 100 else f"about 2**{n.bit_length() - 1}"
