"""``without_userinfo``: the credential a URL carries is taken out of it and masked."""

from __future__ import annotations

import pytest

from loopwright import _redact
from loopwright._redact import REDACTED, redact_text
from loopwright._userinfo import without_userinfo


@pytest.fixture(autouse=True)
def _fresh_registry() -> None:
    _redact.reset()


@pytest.mark.parametrize(
    "url",
    ["https://ghp_tok3nTOKEN1234@host.example/v1", "https://ghp_tok3nTOKEN1234:@host.example/v1"],
)
def test_a_token_written_as_the_user_name_is_masked(url: str) -> None:
    # https://TOKEN@host/ has no password: the user name is the credential
    bare, headers = without_userinfo(url)
    assert bare == "https://host.example/v1"
    assert set(headers) == {"Authorization"}
    echoed = "401: token ghp_tok3nTOKEN1234 is not valid"
    assert redact_text(echoed) == f"401: token {REDACTED} is not valid"


def test_a_percent_encoded_token_is_masked_as_sent() -> None:
    without_userinfo("https://tok%2Fen-secret-99@host.example/")
    assert redact_text("got tok/en-secret-99") == f"got {REDACTED}"  # the decoded text


def test_beside_a_password_the_user_name_stays_readable() -> None:
    without_userinfo("https://deploy-bot:pa55word-xyz@host.example/")
    assert redact_text("deploy-bot said pa55word-xyz") == f"deploy-bot said {REDACTED}"


def test_a_url_without_credentials_is_unchanged() -> None:
    assert without_userinfo("https://host.example/a?b=1") == ("https://host.example/a?b=1", {})
