"""loopwright._redact: shapes docs/security.md listed as known misses until stop 48 — a
``.netrc`` entry with an ``account`` or its password before its ``login``, a Twilio auth
token written apart from its account's SID — and a number with an exponent under a name
ending in ``token``, which was masked as if it were one. Each with the exact text it must
become, and the prose or ordinary values near each shape that must stay."""

from __future__ import annotations

import hashlib
import json

import pytest
from support.masking import both_paths

from loopwright import _redact

SID = "AC" + "9f3b" * 8
TOKEN = "5d1e" * 8  # a Twilio auth token: 32 hex digits


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "machine h login u account acme password p4ss",
            "machine h login u account acme password ***",
        ),
        (
            "machine h account acme login u password p4ss",
            "machine h account acme login u password ***",
        ),
        ("machine h password p4ss login u", "machine h password *** login u"),
        ("machine h password 'p4ss' account a", "machine h password '***' account a"),
        ("default password p4ss login anonymous", "default password *** login anonymous"),
        (
            "machine h\n  login u\n  account a\n  password p4ss\n",
            "machine h\n  login u\n  account a\n  password ***\n",
        ),
        (
            json.dumps({"netrc": "machine h\nlogin u\naccount a\npassword p4ss"}),
            json.dumps({"netrc": "machine h\nlogin u\naccount a\npassword ***"}),
        ),
        (
            json.dumps({"netrc": "machine h\npassword p4ss\nlogin u"}),
            json.dumps({"netrc": "machine h\npassword ***\nlogin u"}),
        ),
    ],
)
def test_a_netrc_entry_with_an_account_or_its_password_first_is_masked(
    text: str, want: str
) -> None:
    both_paths(text, want)


@pytest.mark.parametrize(
    "text",
    [
        "machine learning: login with the account page, password reset below",
        "the machine learning account password reset flow",
        "machine learning password",
        "default login page: password reset",
    ],
)
def test_prose_about_machines_accounts_and_passwords_stays(text: str) -> None:
    both_paths(text, text)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (f"twilio sid {SID} token {TOKEN}", f"twilio sid {SID} token ***"),
        (f"TWILIO_SID={SID}\nTW={TOKEN}", f"TWILIO_SID={SID}\nTW=***"),
        (f"{TOKEN} is the token of {SID}", f"*** is the token of {SID}"),
        (json.dumps({"cfg": f"{SID}\n{TOKEN}"}), json.dumps({"cfg": f"{SID}\n***"})),
        (repr((SID, "us1", TOKEN)), repr((SID, "us1", "***"))),
    ],
)
def test_a_twilio_auth_token_apart_from_its_account_sid_is_masked(text: str, want: str) -> None:
    both_paths(text, want)


def test_hex_beside_no_account_sid_and_twilios_other_sids_stay() -> None:
    md5 = hashlib.md5(b"x").hexdigest()
    for text in (
        f"digest {md5}",  # no account's SID: a digest
        f"message SM{md5} of {SID}",  # a message's SID is prefixed
        f"{SID} sha {md5[:16]} and {hashlib.sha256(b'x').hexdigest()}",  # not 32 digits
    ):
        both_paths(text, text)


@pytest.mark.parametrize(
    "text",
    ["USD_PER_INPUT_TOKEN = 15e-6", "X_TOKEN=1.5E+3, y", "price(per_token=2e-3)"],
)
def test_a_number_with_an_exponent_under_a_token_name_stays(text: str) -> None:
    both_paths(text, text)


@pytest.mark.parametrize(
    ("text", "want"),
    [("token=15e-6abc", "token=***"), ("token=e5", "token=***"), ("token=1e5x9", "token=***")],
)
def test_a_value_that_is_not_only_a_number_is_still_masked(text: str, want: str) -> None:
    both_paths(text, want)


def _camel(snake: str, pascal: bool) -> str:
    head, *rest = snake.split("_")
    return (head.title() if pascal else head) + "".join(w.title() for w in rest)


_SNAKE_NAMES = sorted(
    {n for n in _redact.SECRET_FIELDS if "_" in n}
    | {"db" + s for s in _redact.SECRET_SUFFIXES}
    | {"db_password", "refresh_token", "session_token", "secret_access_key"}
)


@pytest.mark.parametrize("pascal", [False, True])
@pytest.mark.parametrize("snake", _SNAKE_NAMES)
def test_a_secrets_name_in_camel_case_masks_its_value(snake: str, pascal: bool) -> None:
    """``SessionToken`` and ``SecretAccessKey`` (AWS's credentials as boto3 returns them),
    ``clientSecret``, ``refreshToken`` (JavaScript's): masked as their snake_case spellings
    are, in a mapping (through the clean scan: its answer must agree), with a space after the
    name, and printed into text."""
    name = _camel(snake, pascal)
    assert name != snake
    assert _redact.redact({name: "Fwo9planted", "n": 1}) == {name: "***", "n": 1}
    assert _redact.redact({"c": {f"{name} ": "Fwo9planted"}}) == {"c": {f"{name} ": "***"}}
    printed = repr({name: "Fwo9planted", "n": 1})
    assert "Fwo9planted" not in _redact.redact_text(printed)
    assert "Fwo9planted" not in _redact.redact_text(json.dumps({name: "Fwo9planted"}))


@pytest.mark.parametrize(
    "name", ["taskKey", "maxTokens", "tokenCount", "TokenizerName", "secretary", "AccessKeyId"]
)
def test_other_names_in_camel_case_keep_their_values(name: str) -> None:
    assert _redact.redact({name: "kept-value"}) == {name: "kept-value"}


@pytest.mark.parametrize("name", ["MYSQL_PWD", "SMTP_PASS", "redis_pass"])
def test_an_environment_password_named_pwd_or_pass_is_masked(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """MySQL reads its password from ``MYSQL_PWD``; ``SMTP_PASS`` is a common spelling. A
    failed command quoting it (``mysql -pVALUE``: ``-p`` is not read as a password's option)
    is masked by the value itself."""
    monkeypatch.setenv(name, "env-pw-48-planted")
    both_paths("mysql -uroot -penv-pw-48-planted db", "mysql -uroot -p*** db")


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "BYPASS"])
def test_the_shells_directories_and_other_names_are_not_read_as_secrets(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "/home/planted48/work")
    both_paths("cd /home/planted48/work", "cd /home/planted48/work")


def test_an_authorization_header_passed_as_a_query_parameter_is_masked() -> None:
    both_paths(
        "GET https://api.example/v1?authorization=Bearer%20opaqueTok3n&x=1",
        "GET https://api.example/v1?authorization=***&x=1",
    )
