"""loopwright._redact: the shapes the earlier rounds left in clear (stop 45) — an option's
lower-case value, HTTP ``Cookie:``/``Set-Cookie:`` and ``Authorization:`` lines with parameters,
``pwd=``, a quoted value holding an escaped quote, a known secret written in base64 — each with
the exact text it must become, and the prose near each shape that must stay readable."""

from __future__ import annotations

import base64
import json

import pytest
from support.masking import both_paths

from loopwright import _redact
from loopwright._redact import REDACTED, redact, register_secret


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # a lower-case value, followed by another option, a shell operator or the line's end
        ("exec: psql --password hunter -h db", "exec: psql --password *** -h db"),
        ("cli --token abcdefgh", "cli --token ***"),
        ("cli --token abcdefgh\nnext line", "cli --token ***\nnext line"),
        ("cli --api-key abcdefgh | tee log", "cli --api-key *** | tee log"),
        ("cli --secret hunter; echo ok", "cli --secret ***; echo ok"),
        ("cli --db-password hunter --verbose", "cli --db-password *** --verbose"),
        ("cli --passphrase correcthorse", "cli --passphrase ***"),
        # quoted: whatever the value
        ("cli --password 'hunter' -v", "cli --password '***' -v"),
        ('cli --token "abc def"', 'cli --token "***"'),
        # an argument list, as subprocess's error prints it
        (
            "Command '['psql', '--password', 'hunter', '-h', 'db']' returned non-zero exit status 2.",
            "Command '['psql', '--password', '***', '-h', 'db']' returned non-zero exit status 2.",
        ),
        ('argv ["cli", "--token", "abcdefgh"]', 'argv ["cli", "--token", "***"]'),
        # with "=": read by the key=value shapes, whatever the value
        ("cli --password=hunter -v", "cli --password=*** -v"),
        ("cli --pwd=hunter -v", "cli --pwd=*** -v"),
        ("cli --token=abcdefgh -v", "cli --token=*** -v"),
        # as before: a value with a digit, a capital or a symbol, anywhere
        ("cli --token ghx123def456 --verbose", "cli --token *** --verbose"),
    ],
)
def test_an_options_lower_case_value_is_masked(text: str, want: str) -> None:
    both_paths(text, want)


@pytest.mark.parametrize(
    "text",
    [
        "Use the --password option, or the --token flag.",
        "see --token docs and --password prompt",
        "the --password flag is deprecated",
        "pass --token instead",
        "with --password hunter and more",  # prose follows the value: read as prose
        "psql -p hunter2 -h db",  # -p is a port as often as a password: not read
        "psql -p hunter",
        "--token abc",  # under 6 characters
        "see the --api-key option's value",
    ],
)
def test_prose_about_options_stays_readable(text: str) -> None:
    both_paths(text, text)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Cookie: sid=abc123; theme=dark", "Cookie: ***"),
        ("> Cookie: sid=abc123\n> Host: example.com", "> Cookie: ***\n> Host: example.com"),
        (
            "< Set-Cookie: session=Zx9q; Path=/; HttpOnly\r\n< Vary: x",
            "< Set-Cookie: ***\r\n< Vary: x",
        ),
        ("set-cookie: a=b", "set-cookie: ***"),
        ('Cookie: sid="a b c"; x=1', "Cookie: ***"),
        ("headers: Cookie : sid=abc123", "headers: Cookie : ***"),
        # inside a JSON string: the line ends at an escaped newline, the string at its quote
        ('{"raw": "Cookie: sid=abc\\r\\nHost: h"}', '{"raw": "Cookie: ***\\r\\nHost: h"}'),
        ('{"raw": "Cookie: sid=\\"abc\\"; x=1", "n": 1}', '{"raw": "Cookie: ***", "n": 1}'),
        ("['Set-Cookie: sid=abc; Path=/', 'ok']", "['Set-Cookie: ***', 'ok']"),
        # Authorization with parameters after the scheme (Digest, AWS Signature 4)
        (
            'Authorization: Digest username="bob", realm="x", response="6629fae49393a053"',
            "Authorization: Digest ***",
        ),
        (
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/"
            "aws4_request, SignedHeaders=host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6"
            "789a8edb4c82c400e06b5924a6f2b5d7\nHost: iam.amazonaws.com",
            "Authorization: AWS4-HMAC-SHA256 ***\nHost: iam.amazonaws.com",
        ),
        ("Proxy-Authorization: Basic dXNlcjpwdzEy", "Proxy-Authorization: Basic ***"),
        (
            '{"Authorization": "Basic dXNlcjpwdzEy=", "x": "y"}',
            '{"Authorization": "Basic ***", "x": "y"}',
        ),
    ],
)
def test_cookie_and_authorization_header_lines_are_masked(text: str, want: str) -> None:
    both_paths(text, want)


@pytest.mark.parametrize(
    "text",
    [
        "set-cookie handling is done by the client",
        "Cookie: a small file a site stores",
        "the cookie: see the docs",
        "Set-Cookie headers are parsed here",
        "authorization: denied for bob",
    ],
)
def test_prose_about_cookies_stays_readable(text: str) -> None:
    both_paths(text, text)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("https://h/login?user=bob&pwd=hunter2", "https://h/login?user=bob&pwd=***"),
        ("GET /x?pwd=hunter HTTP/1.1", "GET /x?pwd=*** HTTP/1.1"),
        ("login user=bob pwd=hunter ok", "login user=bob pwd=*** ok"),
        ("DB_PWD=s3cret next", "DB_PWD=*** next"),
        ("Cfg(pwd='hunter')", "Cfg(pwd='***')"),
    ],
)
def test_pwd_as_a_parameter_or_key_value_is_masked(text: str, want: str) -> None:
    both_paths(text, want)


@pytest.mark.parametrize(
    "text",
    [
        "pwd is the current dir",
        "PWD=/home/bob OLDPWD=/tmp",  # the shell's working directory: a path
        "env: PWD=~/work",
        "cd $PWD; echo pwd",
        "pwd=C:\\Users\\bob",
    ],
)
def test_pwd_as_the_working_directory_stays(text: str) -> None:
    both_paths(text, text)


_NESTED = json.dumps(json.dumps({"password": 'ab"cd', "n": 1}))


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('{"password": "ab\\"cd", "n": 1}', '{"password": "***", "n": 1}'),
        ('{"token": "ab\\"cd efgh"}', '{"token": "***"}'),
        ("{'password': 'ab\\'cd', 'n': 1}", "{'password': '***', 'n': 1}"),
        ("{'password': 'it\"s mine'}", "{'password': '***'}"),  # the other quote is plain
        ('password: "correct horse battery"', 'password: "***"'),
        ("Cfg(secret='ab\\'cd12')", "Cfg(secret='***')"),
        ('{"password": "a\\\\", "n": "x"}', '{"password": "***", "n": "x"}'),  # ends in \\
        # one level deeper: JSON inside a JSON string
        (_NESTED, _NESTED.replace('ab\\\\\\"cd', REDACTED)),
    ],
)
def test_a_quoted_value_holding_an_escaped_quote_is_masked_whole(text: str, want: str) -> None:
    assert REDACTED in want and want != text
    both_paths(text, want)


def _b64(raw: bytes, urlsafe: bool = False, pad: bool = True) -> str:
    out = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()
    return out if pad else out.rstrip("=")


@pytest.mark.parametrize("prefix", [b"", b"u", b"u:"])  # the three alignments
@pytest.mark.parametrize("urlsafe", [False, True])
@pytest.mark.parametrize("pad", [False, True])
def test_a_registered_value_is_masked_in_base64(prefix: bytes, urlsafe: bool, pad: bool) -> None:
    secret = "hunter2?>>Zq~~9"  # "?>>" and "~~" encode to "/" and "+" (urlsafe: "_", "-")
    register_secret(secret)
    blob = _b64(prefix + secret.encode() + b"\n", urlsafe, pad)
    both_paths(f"Authorization: Token {blob} sent", "Authorization: Token *** sent")
    both_paths(f'{{"data": "{blob}", "n": 2}}', '{"data": "***", "n": 2}')
    both_paths(f"body {blob}\nend", "body ***\nend")


@pytest.mark.parametrize("secret", ["sixsix", "seven77", "eight888"])
@pytest.mark.parametrize("before", [0, 1, 2])  # the value's place in its 3-byte group
@pytest.mark.parametrize("after", [b"", b"!", b"tail!"])
def test_a_short_values_base64_is_found_at_every_alignment(
    secret: str, before: int, after: bytes
) -> None:
    """docs/security.md: a value of 6 or more bytes is found in base64 wherever it starts in a
    3-byte group (stop 47 found a 6-byte one only where it starts a group, a 7-byte one there
    or a byte before one). A value is searched by the characters all of whose bits are its
    own: 8 for 6 bytes at a group's start, 7 at the other two places."""
    register_secret(secret)
    blob = _b64(b"xy"[:before] + secret.encode() + after)
    both_paths(f"data {blob}", "data ***")
    both_paths(f"data {blob.rstrip('=')} end", "data *** end")


def test_an_environment_secret_is_masked_in_base64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_TOKEN", "planted-token-value-2")
    blob = _b64(b"bob:planted-token-value-2")
    both_paths(f"Basic {blob}", "Basic ***")
    assert redact({"auth": {"header": f"X {blob}"}}) == {"auth": {"header": "X ***"}}


def test_base64_of_other_text_stays() -> None:
    register_secret("hunter2?>>Zq~~9")
    blob = _b64(b"an ordinary payload with no secret in it")
    both_paths(f"data {blob}", f"data {blob}")


def test_a_declared_fields_quoted_value_with_an_escaped_quote_is_masked_whole() -> None:
    _redact.register_secret_field("iban")
    both_paths('{"iban": "DE\\"89 3704", "n": 1}', '{"iban": "***", "n": 1}')
    both_paths("Account(iban='DE\\'89 3704')", "Account(iban='***')")
