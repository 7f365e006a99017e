"""stop 52 (doubts52): a bare secret value ends before a ``:`` that ends the sentence, and the
provider keys of today are caught by their shape alone."""

from __future__ import annotations

import json

import pytest
from support.masking import both_paths

from loopwright._redact import REDACTED, redact, redact_text


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


_M = "Qw3rTy7uIo9pAs1dFg2hJk4lZx5cVb6nM8"  # 34 letters and digits, both cases
_H = "9f3b5d1e0a7c2b84"

# The providers the doubt named, each in a value no name marks secret; and (stop 52) NVIDIA,
# Tavily, Pinecone and Stripe's webhook signing secret, which were left in clear.
KEYS = {
    "openai": "sk-" + _M + "Ab12Cd34Ef56",
    "openai-project": "sk-proj-" + _M + "_-" + _M + "T3BlbkFJ" + _M,
    "anthropic": "sk-ant-api03-" + _M * 2 + "_-" + _M + "AA",
    "google": "AIza" + _M + "_",  # 35 after AIza
    "github-classic": "ghp_" + _M + "Ab",
    "github-fine-grained": "github_pat_" + _M[:22] + "_" + _M + _M[:25],
    "slack-bot": "xoxb-1234567890-1234567890123-" + _M[:24],
    "slack-user": "xoxp-1234567890-1234567890-1234567890123-" + _H * 2,
    "slack-app-level": "xoxa-2-" + _M,
    "aws-access": "AKIAIOSFODNN7EXAMPLE",
    "aws-session": "ASIAY34FZKBOKMUTVV7A",
    "stripe-secret": "sk_live_" + _M + _M,
    "stripe-restricted": "rk_live_" + _M + _M,
    "huggingface": "hf_" + _M,
    "groq": "gsk_" + _M + "Pq0WeRt5yUi7oP9aSd",
    "xai": "xai-" + _M * 2 + "Zz1Yy2Xx3Ww4",
    "openrouter": "sk-or-v1-" + _H * 4,
    "nvidia": "nvapi-" + _M + "_-" + _M[:28],  # 64
    "tavily": "tvly-" + _M[:32],
    "tavily-dev": "tvly-dev-" + _M[:32],
    "pinecone": "pcsk_4Xy9z_" + _M + _M[:20],
    "stripe-webhook": "whsec_" + _M,
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_a_providers_key_is_masked_by_its_shape(name: str) -> None:
    key = KEYS[name]
    both_paths(f"using {key} now", f"using {REDACTED} now")
    both_paths(f"({key}).", f"({REDACTED}).")
    stored = json.dumps(redact({"note": key, "cfg": {"endpoint_for_x": [f"k={key[:0]}", key]}}))
    assert key not in stored and key[len(key) // 3 :] not in stored


@pytest.mark.parametrize(
    "text",
    [
        "nvapi-docs and nvapi-v2 of the catalog",
        "tvly-search, tvly-dev-short",
        "pcsk_ prefix: pcsk_abc_short",
        "whsec_ is Stripe's; whsec_short",
        "an nvapi-" + "a" * 63,  # one short
    ],
)
def test_words_that_start_like_the_new_keys_stay(text: str) -> None:
    assert redact_text(text) == text
    assert redact({"message": text}) == {"message": text}


def test_a_mistral_key_has_no_shape_and_is_caught_by_its_name() -> None:
    """Mistral's (and Cohere's) keys are 32 (40) letters and digits with no prefix: no shape
    tells them from an identifier, so a bare one stays; named, they are masked."""
    key = _M[:32]
    assert redact_text(f"MISTRAL_API_KEY={key}") == f"MISTRAL_API_KEY={REDACTED}"
    assert redact({"mistral_api_key": key}) == {"mistral_api_key": REDACTED}
