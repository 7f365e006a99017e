"""Invariant 9 in loopwright's own logs: a failure logged with its traceback (the dashboard's
background resume, live tracing, a webhook's delivery, the store's migration) can quote an
exception holding a secret; every module logger masks the message and the traceback before a
handler formats them. Until stop 48 only the HTTP client's and the SDK's loggers were masked,
and only their messages."""

from __future__ import annotations

import importlib
import io
import logging

import pytest

from loopwright._redact_logs import RedactingFilter, masked_logger

PW = "planted-log-pw-48"
KEY = "sk-proj-planted48LogKey0123456789"

# (module, the name of its logger): each logger loopwright logs to
MODULE_LOGGERS = [
    ("loopwright.web._context", "log"),
    ("loopwright.web._notify", "log"),
    ("loopwright.web._feed", "log"),
    ("loopwright.web._http", "log"),
    ("loopwright.web._refusals", "log"),
    ("loopwright.trace._live", "log"),
    ("loopwright.store._sql_migrations", "_log"),
    ("loopwright.verifiers._boundary", "_log"),
    ("loopwright.adapters._chat_client", "_log"),
]


def _printed(logger: logging.Logger) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    try:
        try:
            raise ConnectionError(f"cannot reach postgresql://app:{PW}@db/x with {KEY}")
        except ConnectionError as exc:
            logger.exception("resuming run %s failed: %s", "r1", exc)
            logger.warning("again", exc_info=True, stack_info=True)
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


@pytest.mark.parametrize(("module", "attr"), MODULE_LOGGERS)
def test_each_module_logger_masks_message_and_traceback(module: str, attr: str) -> None:
    if module.startswith("loopwright.web"):
        pytest.importorskip("fastapi")
    logger = getattr(importlib.import_module(module), attr)
    printed = _printed(logger)
    assert "Traceback (most recent call last)" in printed  # the traceback is still there
    assert "postgresql://***@db/x" in printed and "ConnectionError" in printed
    assert PW not in printed and KEY not in printed


def test_a_masked_logger_gets_one_filter_however_often_asked() -> None:
    a = masked_logger("loopwright.test48")
    b = masked_logger("loopwright.test48")
    assert a is b and sum(isinstance(f, RedactingFilter) for f in a.filters) == 1


def test_a_record_with_nothing_to_mask_is_left_as_it_is() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "n=%d", (3,), None)
    assert RedactingFilter().filter(record)
    assert (record.msg, record.args, record.exc_text) == ("n=%d", (3,), None)
