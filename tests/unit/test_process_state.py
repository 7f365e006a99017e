"""Each test starts with loopwright's process-wide state as no earlier test left it
(tests/conftest.py): the tests of a worker, and their order, vary from run to run under
``-n``/``--dist loadfile``. The first test here leaves state behind; the second, run after it in
the same process, must not see it."""

from __future__ import annotations

from loopwright import _redact
from loopwright._redact import redact, redact_text, register_secret, register_secret_field
from loopwright.adapters._limits import Limits, gate_for, limits_in_use

SECRET = "planted-by-an-earlier-test-7q2w"
FIELD = "earlier_tests_pin"
URL, MODEL = "http://127.0.0.1:9/v1", "left-behind-m"


def test_1_an_earlier_test_registers_a_secret_a_field_and_a_limit() -> None:
    register_secret(SECRET)
    register_secret_field(FIELD)
    gate_for(URL, MODEL, Limits(max_concurrency=1))
    assert redact_text(SECRET) == "***"
    assert redact({FIELD: "4711"}) == {FIELD: "***"}
    assert limits_in_use(URL, MODEL) == Limits(1, None)
    assert redact({"a text found clean": "once"}) is not None
    assert _redact._clean_texts  # a text found clean is remembered


def test_2_a_later_test_starts_without_them() -> None:
    assert not _redact._clean_texts
    assert redact_text(f"x {SECRET}") == f"x {SECRET}"
    # nor its pieces: the reset emptied the values but left their index of 16-character
    # pieces, so a piece of a former value was masked again once any value was registered
    register_secret("registered-by-this-later-test-4k8m")
    assert redact_text(f"x {SECRET[4:24].upper()}") == f"x {SECRET[4:24].upper()}"
    assert redact({FIELD: "4711"}) == {FIELD: "4711"}
    assert limits_in_use(URL, MODEL) == Limits()
