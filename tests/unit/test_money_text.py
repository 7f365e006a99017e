"""One form for a dollar amount in every view (newcomer54): nothing spent read `$0.0000` in
`show` and `metrics`, `$0.000` in `run`'s table, and a few millionths rounded to the same."""

from __future__ import annotations

import pytest

from loopwright._money_text import usd, usd_digits


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "$0"),
        (0.0, "$0"),
        (0.02, "$0.02"),
        (0.0125, "$0.0125"),
        (0.123456, "$0.1235"),
        (3.0, "$3.00"),
        (1234.5, "$1,234.50"),
        (681.9129, "$681.91"),
        (0.006, "$0.006"),
        (0.00012345, "$0.00012"),
        (3.1e-5, "$0.000031"),
        (0.0099999, "$0.01"),
        (1e-9, "<$0.000001"),
        (-0.5, "-$0.50"),
    ],
)
def test_usd(value: float, text: str) -> None:
    assert usd(value) == text


def test_a_tiny_amount_is_never_zero() -> None:
    for v in (1e-300, 4e-7, 2e-6, 0.00049, 0.0049):
        assert usd_digits(v) not in ("0", "0.00", "0.0000"), v
        assert float(usd_digits(v).lstrip("<")) > 0, v
