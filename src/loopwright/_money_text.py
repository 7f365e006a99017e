"""Dollar amounts as every view prints them: one form, so a run's spend reads the same in
``run``, ``show``, ``runs``, ``metrics``, ``diff``, ``check`` and the dashboard.

Zero is ``$0`` (exactly nothing was spent: ``$0.0000`` read as a rounded amount); a dollar
or more is cents (``$3.00``, ``$1,234.50``); a cent or more keeps cents and up to two digits
more (``$0.02``, ``$0.0125``); less keeps two significant digits, never rounded to zero
(``$0.0042``, ``$0.000031``); below a millionth of a dollar it is ``<$0.000001``.
"""

from __future__ import annotations

import math

__all__ = ["usd", "usd_digits"]

_TINY = 1e-6


def usd_digits(v: float) -> str:
    """``v`` dollars without the sign, for a column headed ``$``: ``0``, ``0.02``, ``0.0042``."""
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    sign = "-" if v < 0 else ""
    if a == 0:
        return "0"
    if a < _TINY:
        return f"<{sign}0.000001"
    if a >= 1:  # whole dollars: cents ($681.9129 read as noise beside $681.91)
        return f"{sign}{a:,.2f}"
    if a >= 0.01:
        text = f"{a:,.4f}".rstrip("0")
        whole, _, cents = text.partition(".")
        return f"{sign}{whole}.{cents.ljust(2, '0')}"
    # two significant digits: 0.0042, 0.000031 (a tiny amount is never shown as 0)
    places = 1 - math.floor(math.log10(a))
    return f"{sign}{a:.{places}f}".rstrip("0")


def usd(v: float) -> str:
    """``v`` dollars with the sign: ``$0``, ``$0.02``, ``$1,234.50``, ``-$0.0042``."""
    digits = usd_digits(v)
    if digits.startswith("<"):
        return "<" + usd(float(digits[1:]))
    if digits.startswith("-"):
        return "-$" + digits[1:]
    return "$" + digits
