"""stop 52 (doubts52): a bare secret value ends before a ``:`` that ends the sentence, and the
provider keys of today are caught by their shape alone."""

from __future__ import annotations

import pytest

from loopwright._redact import redact_text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        # a ``:`` before a space or a line break is the sentence's: it was eaten with the value
        ("password=hunter2: connection refused", "password=***: connection refused"),
        ("pwd=hunter2: bad", "pwd=***: bad"),
        ("token=abcd1234efgh: bad", "token=***: bad"),
        ("api_key: abcd1234efgh: rejected", "api_key: ***: rejected"),
        ("password=hunter2:\nnext", "password=***:\nnext"),
        ('{"log": "password=hunter2:\\nnext"}', '{"log": "password=***:\\nnext"}'),
        ("curl -u bob:hunter2: x", "curl -u bob:***: x"),
        # a ``:`` inside the value, or ending the text, is the value's: masked with it
        ("password=abc:def rest", "password=*** rest"),
        ("DB_PASSWORD=s3cr3t:x", "DB_PASSWORD=***"),
        ("password=hunter2:", "password=***"),
        ("password=a:b:c: said", "password=***: said"),
    ],
)
def test_a_bare_value_keeps_the_sentences_colon(text: str, masked: str) -> None:
    assert redact_text(text) == masked
    assert redact_text(masked) == masked  # (masked again: as it was)
