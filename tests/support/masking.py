"""The check the redaction net's unit tests share: a text masks to what it must become."""

from __future__ import annotations

from loopwright._redact import redact, redact_text


def both_paths(text: str, want: str) -> None:
    """``text`` masks to ``want`` alone, in a record (through the clean scan) and again."""
    assert redact_text(text) == want
    assert redact_text(want) == want  # masking twice changes nothing
    assert redact({"message": text}) == {"message": want}
    assert redact([text]) == [want]
