"""loopwright._redact: other providers' API keys (``_redact_keys``) masked by their shape in
free text with no name near them — Groq, xAI, Perplexity, npm, PyPI, Google OAuth, Slack app
tokens, DigitalOcean, Shopify, Replicate — and the words that start the same, which stay."""

from __future__ import annotations

import json

import pytest
from support.masking import both_paths

from loopwright import _redact
from loopwright._redact import REDACTED, redact, redact_text

_MIXED = "Qw3rTy7uIo9pAs1dFg2hJk4lZx5cVb6nM8"  # 34 letters and digits, both cases
_HEX = "9f3b5d1e0a7c2b84"

KEYS = {
    "groq": "gsk_" + _MIXED + "Pq0WeRt5yUi7oP9aSd",  # 52
    "xai": "xai-" + _MIXED * 2 + "Zz1Yy2Xx3Ww4",  # 80
    "perplexity": "pplx-" + _MIXED + "a1b2c3d4e5f6g7",  # 48
    "npm": "npm_" + _MIXED + "Rt",  # 36
    "pypi": "pypi-AgEIcHlwaS5vcmcCJGE" + _MIXED + "_-" + _MIXED,
    "google-oauth": "ya29.a0AfH6SMBx" + _MIXED + "-_Lk",
    "google-client": "GOCSPX-" + _MIXED[:26] + "_-",  # 28
    "slack-app": "xapp-1-A0123ABCD45-1234567890123-" + _HEX * 4,
    "digitalocean": "dop_v1_" + _HEX * 4,  # 64 hex digits
    "shopify-access": "shpat_" + _HEX * 2,
    "shopify-secret": "shpss_" + _HEX * 2,
    "shopify-custom": "shpca_" + _HEX * 2,
    "shopify-private": "shppa_" + _HEX * 2,
    "replicate": "r8_" + _MIXED + "Abc",  # 37
}


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()


@pytest.mark.parametrize("name", sorted(KEYS))
def test_a_providers_key_in_free_text_is_masked(name: str) -> None:
    key = KEYS[name]
    both_paths(f"using {key} now", f"using {REDACTED} now")
    both_paths(f"line one\n{key}", f"line one\n{REDACTED}")
    both_paths(f"({key}).", f"({REDACTED}).")
    # a record's JSON inside a string (the clean scan reads the escaped text)
    nested = json.dumps({"k": f"\t{key}"})
    assert key not in json.dumps(redact({"msg": nested}))


@pytest.mark.parametrize(
    "text",
    [
        "xai-based models and xai-2 benchmarks",
        "run npm_modules/.bin/tsc; npm_config_cache=/tmp",
        "pypi-server and pypi-AgE short",
        "ya29. is a prefix; see ya29.short",
        "GOCSPX-too-short and GOCSPX-" + "a" * 40,
        "xapp-1-slack app tokens",
        "dop_v1_ is DigitalOcean's; dop_v1_" + "g" * 64,
        "shpat_ and shpss_: shpat_" + "0" * 31,
        "r8_ engine, r8_model_v2, gsk_short, pplx-online-7b",
        "Shopify's shp prefixes: shpat_, shpca_ (Draft 3)",
        "npm_" + _MIXED + "Rt9",  # 37: not npm's 36
    ],
)
def test_words_that_start_like_a_key_stay(text: str) -> None:
    assert redact_text(text) == text
    assert redact({"message": text}) == {"message": text}


def test_a_mixed_case_key_needs_no_lower_case_trigger() -> None:
    """The mixed-case keys reach the shapes by the capital their body holds; a lower-case
    record (the engine's own) is not scanned for their prefixes: its clean scan stays clean."""
    from loopwright._redact_shapes import triggered, upper_triggered

    for name in ("groq", "xai", "npm", "pypi", "google-oauth", "google-client", "replicate"):
        key = KEYS[name]
        assert upper_triggered(key, key.lower()), name
    clean = '{"goal":"xai-based npm_modules","kind":"edit","value":"draft 3"}'
    assert not triggered(clean, passw=True)
    assert not upper_triggered(clean, clean.lower())
    for name in ("digitalocean", "shopify-access", "shopify-private"):
        assert triggered(KEYS[name].lower()), name
