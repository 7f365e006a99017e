"""loopwright._redact (keys52): the provider keys a previous helper found left in clear by
their shape — LangSmith, Cerebras, Fireworks, Linear, Notion, Doppler, Sentry, Atlassian,
DigitalOcean's OAuth and refresh tokens, an Azure connection string's ``AccountKey`` — and a
Google key glued to more key characters (masked only for its first 39). Each is masked in free
text, in a JSON value under an innocent name, in a URL's path, in an exception's message and
through a run into the store; the words, identifiers, hashes, UUIDs and base64 image data near
those shapes stay as they are. Every key here is generated (a fixed seed), none is real."""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

import pytest
from support.masking import both_paths
from support.planted import planted_run

import loopwright as lw
from loopwright import _redact
from loopwright._redact import REDACTED, redact, redact_text
from loopwright._redact_shapes import triggered, upper_triggered

_R = random.Random(52)
_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"
_LOWER = string.ascii_lowercase + string.digits


def _fake(n: int, chars: str = _ALNUM) -> str:
    return "".join(_R.choice(chars) for _ in range(n))


_SENTRY_CLAIMS = base64.b64encode(
    b'{"iat":1700000000.0,"url":"https://sentry.io","region_url":"https://us.sentry.io",'
    b'"org":"acme"}'
).decode()

# (each in the form its provider documents; the body of a lower-case one is lower-case)
KEYS = {
    "langsmith-personal": "lsv2_pt_" + _fake(32, _HEX) + "_" + _fake(10, _HEX),
    "langsmith-service": "lsv2_sk_" + _fake(32, _HEX) + "_" + _fake(10, _HEX),
    "cerebras": "csk-" + _fake(48, _LOWER),
    "fireworks": "fw_" + _fake(24),
    "linear": "lin_api_" + _fake(40),
    "notion": "ntn_" + _fake(11, string.digits) + _fake(35),
    "doppler-personal": "dp.pt." + _fake(43),
    "doppler-service": "dp.st.prd." + _fake(43),
    "sentry-org": "sntrys_" + _SENTRY_CLAIMS.rstrip("=") + "_" + _fake(43, _ALNUM + "+/"),
    "sentry-user": "sntryu_" + _fake(64, _HEX),
    "atlassian": "ATATT3xFfGF0" + _fake(170, _ALNUM + "_-") + "=" + _fake(8, "0123456789ABCDEF"),
    "digitalocean-oauth": "doo_v1_" + _fake(64, _HEX),
    "digitalocean-refresh": "dor_v1_" + _fake(64, _HEX),
    # Google's key and more key characters glued on: the whole run, not its first 39
    "google-glued": "AIza" + _fake(35) + "_" + _fake(12),
}

# The shapes the brief asked to check again: caught before keys52, kept so
ALREADY = {
    "replicate": "r8_" + _fake(37),
    "anthropic-admin": "sk-ant-admin01-" + _fake(86, _ALNUM + "_-") + "AA",
    "gitlab": "glpat-" + _fake(20, _ALNUM + "_-"),
    "npm": "npm_" + _fake(36),
    "pypi": "pypi-AgEIcHlwaS5vcmc" + _fake(60, _ALNUM + "_-"),
    "digitalocean": "dop_v1_" + _fake(64, _HEX),
    "twilio-key": "SK" + _fake(32, _HEX),
    "sendgrid": "SG." + _fake(22, _ALNUM + "_-") + "." + _fake(43, _ALNUM + "_-"),
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0." + _fake(43, _ALNUM + "_-"),
    "google": "AIza" + _fake(35),
}


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()


def _gone(key: str, text: str) -> bool:
    """No part of ``key`` a reader could use is left: neither its start nor its end."""
    return key[: len(key) // 2] not in text and key[-10:] not in text


@pytest.mark.parametrize("name", sorted(KEYS) + sorted(ALREADY))
def test_a_providers_key_is_masked_wherever_it_is_written(name: str) -> None:
    key = {**KEYS, **ALREADY}[name]
    both_paths(f"using {key} now", f"using {REDACTED} now")
    both_paths(f"line one\n{key}", f"line one\n{REDACTED}")
    both_paths(f"({key}).", f"({REDACTED}).")
    # a JSON value under names that mark nothing secret, and a record's JSON inside a string
    stored = json.dumps(redact({"note": key, "cfg": {"endpoint_for_x": ["k", key]}}))
    assert _gone(key, stored)
    assert _gone(key, json.dumps(redact({"msg": json.dumps({"k": f"\t{key}"})})))
    # in a URL's path, and in an exception's message (its repr quotes it)
    url = redact_text(f"GET https://api.example.com/v1/{key}/items failed: 401")
    assert _gone(key, url) and url.endswith("/items failed: 401")
    assert _gone(key, redact_text(str(RuntimeError(("auth failed", key)))))
    assert _gone(key, redact_text(repr(ValueError(f"bad key {key!r}"))))


@pytest.mark.parametrize("name", sorted(KEYS))
def test_the_pre_check_passes_a_text_holding_the_key(name: str) -> None:
    """The per-write pre-check lets each key through to the shapes, in lower-case text too
    where the key's body is lower-case (LangSmith, Cerebras, Sentry's user token, DigitalOcean)."""
    key = KEYS[name]
    text = f'{{"goal": "x", "note": "{key}"}}'
    assert triggered(text.lower()) or upper_triggered(text, text.lower())


def test_the_google_key_is_masked_whole_when_more_key_characters_follow() -> None:
    key = KEYS["google-glued"]
    assert redact_text(f"key {key} end") == f"key {REDACTED} end"


def test_an_azure_connection_strings_account_key_is_masked() -> None:
    account_key = _fake(86, _ALNUM + "+/") + "=="
    conn = (
        "DefaultEndpointsProtocol=https;AccountName=acmestore;"
        f"AccountKey={account_key};EndpointSuffix=core.windows.net"
    )
    want = (
        "DefaultEndpointsProtocol=https;AccountName=acmestore;"
        f"AccountKey={REDACTED};EndpointSuffix=core.windows.net"
    )
    both_paths(conn, want)
    both_paths(
        f"generate_blob_sas(account_key='{account_key}', permission=p)",
        f"generate_blob_sas(account_key='{REDACTED}', permission=p)",
    )
    bus_key = _fake(43, _ALNUM + "+/") + "="
    bus = (
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;"
        f"SharedAccessKey={bus_key}"
    )
    masked = redact_text(bus)
    assert bus_key not in masked
    assert masked.endswith(f"SharedAccessKeyName=Root;SharedAccessKey={REDACTED}")


def test_the_keys_raised_in_a_run_are_not_stored(tmp_path: Path) -> None:
    """Planted through the engine into a SQLite store (an actor's error, a verifier's finding
    and evidence under innocent names): no byte of any key is in the database files."""
    keys = sorted(KEYS.values())
    half = len(keys) // 2

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            raise RuntimeError("upstream refused: " + ", ".join(repr(k) for k in keys[:half]))
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        finding = lw.Finding(
            "found " + " ".join(keys[half:]),
            evidence={"endpoint": [f"https://h/x/{k}" for k in keys], "note": keys[0]},
        )
        return lw.Verdict(passed=False, score=0.5, findings=(finding,))

    packet, trace, raw = planted_run(tmp_path, actor, check)
    assert "upstream refused: " in packet  # the error, read back (masked)
    for key in keys:
        assert key[-10:].encode() not in raw, key[:8]
        assert key[-10:] not in trace and key[-10:] not in packet, key[:8]
    assert REDACTED.encode() in raw  # stored, masked: not dropped


@pytest.mark.parametrize(
    "text",
    [
        # words and identifiers that start like the new keys
        "fw_version_check and fw_update_firmware_controller_v2 and fw_",
        "set fw_timeout_seconds=30 (FW_MAX_RETRIES)",
        "lin_api_client, lin_api_ and ntn_ and ntn_12345 are names",
        "dp.pt. and dp.st.dev and dp.pt.short are too short; dp.px." + "a1B2" * 12,
        "csk-based and csk-v2 are words; lsv2_pt_ alone; lsv2_pt_" + "a" * 31,
        "sntryu_ and sntrys_ prefixes; sntryu_" + "0" * 63,
        "ATATT3 is a prefix; ATATT3short; XATATT3" + "a" * 120,
        "doo_v1_ and dor_v1_notes and doo_v1_" + "f" * 63,
        "AIza and AIzaShort are words",
        # hashes and UUIDs
        "sha256 " + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "git 5eedfb4a74ec4f0b86683803643cd7058968da1d, id 123e4567-e89b-12d3-a456-426614174000",
        # an Azure name that is not the key
        "AccountName=acmestore;EndpointSuffix=core.windows.net",
    ],
)
def test_words_that_start_like_the_new_keys_stay(text: str) -> None:
    assert redact_text(text) == text
    assert redact({"message": text}) == {"message": text}


def test_base64_image_data_in_a_parts_value_stays() -> None:
    """A PNG's base64 in a part value (``iVBORw0KGgo…``) holds no key's prefix at a word's
    start: stored whole, as written."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(_R.randrange(256) for _ in range(3000)))
    data = "data:image/png;base64," + png.decode()
    assert redact({"image": {"src": data}}) == {"image": {"src": data}}
    assert redact_text(data) == data


@pytest.mark.parametrize(
    "shape",
    [
        "account_key: {v}",
        '{{"account_key": "{v}"}}',
        "azure:\n  account-key: {v}\n",
        "AccountKey: {v}",
        '{{"AccountKey": "{v}", "AccountName": "acmestore"}}',
    ],
)
def test_an_account_key_written_with_a_colon_is_masked(shape: str) -> None:
    """``account_key`` is a key name of ``conn`` (``=`` or ``:``), as ``api_key`` is: a YAML
    line or a JSON object naming it has its value masked. The pre-check had no trigger for
    it, so only the ``=`` form (which ``=`` triggers) reached the shape (review52b)."""
    value = "lowercase0secret0value0of0twenty"
    text = shape.format(v=value)
    masked = redact_text(text)
    assert value not in masked
    assert REDACTED in masked
    assert value not in json.dumps(redact({"note": text}))
