"""Log records masked (invariant 9: a log): ``RedactingFilter`` masks a record's message and
its traceback before any handler formats them; ``masked_logger`` is ``logging.getLogger``
with one on it, for loopwright's own loggers (a failure logged with its traceback can quote
an exception holding a secret: a resume in the dashboard, live tracing's exporter). The model
adapters put one on the HTTP client's and the SDK's loggers."""

from __future__ import annotations

import contextlib
import logging
import traceback

from ._redact import redact_text


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message (its arguments put in first) and in the text of
    its exception and stack: the traceback is formatted here, masked, and kept as the record's
    ``exc_text``, which ``logging.Formatter`` prints instead of formatting it again."""

    def filter(self, record: logging.LogRecord) -> bool:
        with contextlib.suppress(Exception):  # a log call must never fail for this
            text = record.getMessage()
            masked = redact_text(text)
            if masked != text:
                record.msg, record.args = masked, ()
            if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
                formatted = "".join(traceback.format_exception(*record.exc_info))
                record.exc_text = redact_text(formatted.removesuffix("\n"))
            if record.stack_info:
                record.stack_info = redact_text(record.stack_info)
        return True


def mask(logger: logging.Logger) -> logging.Logger:
    """``logger`` with a ``RedactingFilter`` (one, however often it is asked)."""
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    return logger


def masked_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` whose records are masked. A filter sees only the records
    logged to its own logger, not those its children pass up: each module asks for its own."""
    return mask(logging.getLogger(name))
