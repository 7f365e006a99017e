"""loopwright._redact: what stop 46's probe found in clear (secrets46) — a key on the line after
an escaped line break (``'…\\nsk-…'``: a printed or JSON-escaped string, an echoed error body),
a value read on across such a break (``password=a\\napi_key: …``), a known secret in hex,
percent-encoded or as Go and PHP write JSON, OpenPGP's private key block and chat webhook
URLs — each with the exact text it must become, and the prose near each that must stay."""

from __future__ import annotations

import base64
import binascii
import json
import urllib.parse

import pytest
from support.masking import both_paths

from loopwright import _redact
from loopwright._redact import register_secret


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()


SK = "sk-proj-abcdefABCDEF123456"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"


@pytest.mark.parametrize("esc", ["\\n", "\\r", "\\t", "\\r\\n"])
@pytest.mark.parametrize(
    ("line", "want"),
    [
        (SK, "***"),
        ("sk_live_abcdefghij0123456789", "***"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123", "***"),
        ("github_pat_11ABCDEFG0abcdefghijklmnop", "***"),
        ("xoxb-123456789012-abcdef", "***"),
        ("AKIAQPLANTED12345678 and more", "*** and more"),
        ("AIza" + "A1b2C3d4" * 4 + "xyz", "***"),
        ("hf_abcdefghijklmnopqrstuvwxyz", "***"),
        ("glpat-abcdefghijklmnopqrstu", "***"),
        ("lw_" + "a1" * 21, "***"),
        (JWT, "***"),
        ("x-" + JWT, "***"),  # what is glued to it before a ``-`` goes with it
        ("Bearer abcdefgh12345", "Bearer ***"),
        ("Authorization: Basic dXNlcjpwdzEy", "Authorization: Basic ***"),
        ("Cookie: sid=abc123", "Cookie: ***"),
        ("pwd=hunter22", "pwd=***"),
        ("token: abc123def456", "token: ***"),
        ("--password Hunter22", "--password ***"),
        ("psql --token abcdefgh", "psql --token ***"),
    ],
)
def test_a_key_after_an_escaped_line_break_is_masked(esc: str, line: str, want: str) -> None:
    """In a printed or JSON-escaped string a line break reads ``\\n``: its ``n`` is a word
    character, so a key at the next line's start was not at a word's start."""
    both_paths(f"first line{esc}{line}", f"first line{esc}{want}")


def test_a_key_in_an_echoed_error_body_quoted_as_text_is_masked() -> None:
    body = json.dumps({"error": {"message": f"Incorrect API key provided:\n{SK}"}})
    both_paths(f"HTTP 401: {body}", f"HTTP 401: {body.replace(SK, '***')}")
    message = repr(f"config was:\nAKIAQPLANTED12345678\n{JWT}\n")
    both_paths(f"ValueError({message})", "ValueError('config was:\\n***\\n***\\n')")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "X-Api-Key: abc\\napi_key: SECRETVALUE123",
            "X-Api-Key: ***\\napi_key: ***",
        ),
        (
            "password=abc\\naws_secret_access_key: SECRETVALUE123",
            "password=***\\naws_secret_access_key: ***",
        ),
        ("password=abc\\tpassword: SECRETVALUE123", "password=***\\tpassword: ***"),
        ("DB_PASSWORD=hunter22\\r\\nAPI_KEY=abcdef123", "DB_PASSWORD=***\\r\\nAPI_KEY=***"),
        # an escape that is no line break is part of the value, as before
        ("password=ab\\xcd next", "password=*** next"),
    ],
)
def test_a_bare_value_ends_at_an_escaped_line_break(text: str, want: str) -> None:
    both_paths(text, want)


@pytest.mark.parametrize(
    "text",
    [
        "the\\nskill-set and \\nghost town, \\ntokens: 5",
        "C:\\new\\token\\nothing here",
        "line\\nBearer of bad news",
        "line\\nAuthorization: denied for bob",
        "line\\n--password option, or\\n--token flag",
        "line\\npwd is the current dir\\npwd=/home/bob",
        "line\\ntoken: 12",
        "line\\nCookie: a small file",
        "line\\nskeleton-key-is-a-word",  # ``sk-`` only at a word's start
    ],
)
def test_prose_after_an_escaped_line_break_stays_readable(text: str) -> None:
    both_paths(text, text)


def test_a_known_secret_in_hex_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_API_KEY", "planted-env-key-4471")
    register_secret("RegPlantedZq81xLm4w")
    for secret in ("planted-env-key-4471", "RegPlantedZq81xLm4w"):
        hx = binascii.hexlify(secret.encode()).decode()
        both_paths(f"dump {hx} end", "dump *** end")
        both_paths(f"DUMP {hx.upper()}", "DUMP ***")
        # inside a longer hex dump (bytes around it): the whole run goes
        both_paths(f"buf=0a0b{hx}0c0d; n=3", "buf=***; n=3")
        both_paths(json.dumps({"raw": hx, "n": 1}), '{"raw": "***", "n": 1}')


def test_an_escaped_line_break_before_an_encoded_secret_is_kept() -> None:
    """The run of base64 or hex characters masked around a known secret's encoding does not
    take the letter of the escape before it (``\\n***``, not ``\\***``: an escape JSON
    does not know)."""
    register_secret("RegPlantedZq81xLm4w")
    blob = base64.b64encode(b"RegPlantedZq81xLm4w").decode()
    hx = binascii.hexlify(b"RegPlantedZq81xLm4w").decode()
    both_paths(f"body:\\n{blob}\\n{hx}\\tend", "body:\\n***\\n***\\tend")
    both_paths(f'{{"m": "x\\n{blob}"}}', '{"m": "x\\n***"}')


def test_hex_of_other_bytes_stays() -> None:
    register_secret("RegPlantedZq81xLm4w")
    other = binascii.hexlify(b"RegPlantedZq81xLm4X").decode()  # one byte differs
    both_paths(f"sha {other}", f"sha {other}")
    both_paths("commit 4786d0aca42d4566b9666d67ed9f4ee6", "commit 4786d0aca42d4566b9666d67ed9f4ee6")


SPECIAL = "Reg/Pl@nted+Pw:92&x<y>"


@pytest.mark.parametrize(
    "form",
    [
        urllib.parse.quote(SPECIAL, safe=""),  # a query parameter's value
        urllib.parse.quote(SPECIAL),  # a path: ``/`` kept
        urllib.parse.quote_plus(SPECIAL + " z"),  # a form body: a space as ``+``
        "Reg/Pl@nted+Pw:92\\u0026x\\u003cy\\u003e",  # JSON as Go writes it
        "Reg\\/Pl@nted+Pw:92&x<y>",  # JSON as PHP writes it
    ],
)
def test_a_registered_value_is_masked_percent_encoded_and_as_go_and_php_escape_it(
    form: str,
) -> None:
    register_secret(SPECIAL)
    register_secret(SPECIAL + " z")
    both_paths(f"GET /cb?next=x&v={form}&n=1", "GET /cb?next=x&v=***&n=1")
    both_paths(f'{{"error": "bad key {form}"}}', '{"error": "bad key ***"}')


def test_a_plain_api_key_has_no_escaped_forms() -> None:
    """A key of letters, digits, ``-`` and ``_`` reads alike everywhere: nothing added to
    search for it (the cost per record stays that of its value, base64 and hex)."""
    assert _redact.escaped_forms("sk-proj-abcDEF_123.x~y") == set()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGabc\n=abcd\n"
            "-----END PGP PRIVATE KEY BLOCK-----\nafter",
            "***\nafter",
        ),
        ("key: -----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGabc", "key: ***"),  # cut
        (
            "post to https://hooks.slack.com/services/T0001/B0002/XXXXXXXXXXXXXXXX ok",
            "post to https://hooks.slack.com/services/*** ok",
        ),
        (
            '{"url": "https://hooks.slack.com/workflows/T01/A02/333/abcDEF123"}',
            '{"url": "https://hooks.slack.com/workflows/***"}',
        ),
        (
            "https://discord.com/api/webhooks/123456789/abcDEF-ghi_jkl ok",
            "https://discord.com/api/webhooks/*** ok",
        ),
    ],
)
def test_a_pgp_key_block_and_webhook_urls_are_masked(text: str, want: str) -> None:
    both_paths(text, want)


@pytest.mark.parametrize(
    "text",
    [
        "the PGP PRIVATE KEY BLOCK format",
        "see https://hooks.slack.com/services/ in the docs",
        "https://api.slack.com/messaging/webhooks explains it",
        "https://discord.com/developers/docs/resources/webhook",
    ],
)
def test_prose_about_keys_and_webhooks_stays(text: str) -> None:
    both_paths(text, text)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "receive_response_headers.complete return_value=(b'HTTP/1.1', 401, b'Unauthorized', "
            "[(b'Server', b'x'), (b'Set-Cookie', b'sid=abc123; Path=/'), (b'Content-Length', b'2')])",
            "receive_response_headers.complete return_value=(b'HTTP/1.1', 401, b'Unauthorized', "
            "[(b'Server', b'x'), (b'Set-Cookie', b'***'), (b'Content-Length', b'2')])",
        ),
        (
            "scope headers [(b'authorization', b'Basic dXNlcjpwdzEy')]",
            "scope headers [(b'authorization', b'***')]",
        ),
        ('[("Proxy-Authorization", "Digest a=1, b=2")]', '[("Proxy-Authorization", "***")]'),
        ("(b'x-api-key', b'abcdef123')", "(b'x-api-key', b'***')"),
        # printed inside a printed string: its quotes escaped
        (
            "print('[(\\'authorization\\', \\'Basic dXNlcjpwdzEy\\')]')",
            "print('[(\\'authorization\\', \\'***\\')]')",
        ),
        ("('X-Auth-Token', 'abc')", "('X-Auth-Token', '***')"),
        ("('cookie', 'the value') and ('x', 'y')", "('cookie', '***') and ('x', 'y')"),
    ],
)
def test_a_credential_headers_pair_in_a_header_list_is_masked(text: str, want: str) -> None:
    """An HTTP client's debug log prints a reply's headers as pairs (a model server's
    ``Set-Cookie``), an ASGI scope its request's (``authorization`` with a Basic token)."""
    both_paths(text, want)


@pytest.mark.parametrize(
    "text",
    [
        '("authorization", "cookie")',  # two header names
        "('cookie', '')",
        "('cookie', 'abc', 3)",  # no pair
        "(b'Server', b'uvicorn')",
        "the authorization, cookie and set-cookie headers",
    ],
)
def test_header_names_and_other_pairs_stay(text: str) -> None:
    both_paths(text, text)


@pytest.mark.parametrize("esc", ["\n", "\t", "\r\n"])
def test_a_line_break_escaped_twice_ends_the_value_and_keeps_its_escape(esc: str) -> None:
    """JSON in a JSON string (an echoed error body logged as JSON) writes a line break
    ``\\\\n``: the value ended between the two backslashes, so the masked text read one level
    less escaped (``\\n``), and the inner JSON held a raw line break (unreadable) — review46.
    The value ends before the pair, the next line's key is masked, and both levels read."""
    inner = json.dumps({"cfg": f"password=abc{esc}aws_secret_access_key: SECRETVALUE123"})
    outer = json.dumps({"body": inner})
    want = outer.replace("=abc", "=***").replace("SECRETVALUE123", "***")
    both_paths(f"resp {outer}", f"resp {want}")
    read = json.loads(json.loads(want)["body"])["cfg"]
    assert read == f"password=***{esc}aws_secret_access_key: ***"


def test_a_value_ending_in_an_escaped_backslash_keeps_its_closing_quote() -> None:
    """``"password=C:\\\\"`` (a value ending in a backslash, JSON-escaped): the value ended
    between the two backslashes and the masked text escaped the closing quote."""
    text = json.dumps({"log": "password=C:\\"})
    both_paths(text, '{"log": "password=***"}')
