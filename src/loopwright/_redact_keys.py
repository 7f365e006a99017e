"""Other providers' API keys for the redaction net's ``_SHAPES``: each prefix with the length
and characters its provider documents, so a word that starts the same (``xai-based``,
``npm_modules``) stays. Groq (``gsk_``), xAI (``xai-``), Perplexity (``pplx-``), npm
(``npm_``), PyPI upload tokens (``pypi-`` and a macaroon: ``AgE`` is its first bytes), Google
OAuth access tokens (``ya29.``) and client secrets (``GOCSPX-``), Slack app tokens
(``xapp-``), DigitalOcean (``dop_v1_``), Shopify (``shpat_``, ``shpss_``, ``shpca_``,
``shppa_``) and Replicate (``r8_``); since stop 52 NVIDIA (``nvapi-``), Tavily (``tvly-``),
Pinecone (``pcsk_``) and Stripe's webhook signing secrets (``whsec_``).

A text reaches ``_SHAPES`` only past the pre-check (``_redact_shapes._triggered`` and
``_upper_triggered``). The keys whose body is lower-case hex (DigitalOcean, Shopify) are
among its ``_TRIGGERS``; the others' bodies mix cases, so a text holding one has a capital,
and ``mixed_case_key`` looks for their prefixes only in such a text: the engine's own records
are lower-case (one ``memcmp`` tells), and pay nothing for these prefixes.
"""

from __future__ import annotations

# (alternatives of ``_SHAPES``' key group: each at a word's start)
PROVIDER_KEYS = (
    r"gsk_[A-Za-z0-9]{48,}|xai-[A-Za-z0-9]{70,}|pplx-[A-Za-z0-9]{40,}"
    r"|npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])|pypi-AgE[A-Za-z0-9_-]{50,}"
    r"|ya29\.[A-Za-z0-9_-]{20,}|GOCSPX-[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])"
    r"|xapp-[0-9]+-[A-Z0-9]+-[0-9]+-[a-f0-9]{32,}"
    r"|dop_v1_[a-f0-9]{64}(?![A-Za-z0-9])"
    r"|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}(?![A-Za-z0-9])"
    r"|r8_[A-Za-z0-9]{37}(?![A-Za-z0-9])"
    r"|nvapi-[A-Za-z0-9_-]{64}(?![A-Za-z0-9_-])"
    r"|tvly-(?:dev-|prod-)?+[A-Za-z0-9]{32}(?![A-Za-z0-9])"
    r"|pcsk_[A-Za-z0-9]{4,8}_[A-Za-z0-9]{40,}"
    r"|whsec_[A-Za-z0-9+/=]{32,}"
)

# The lower-case keys' prefixes, for ``_TRIGGERS`` (``shp`` and ``dop_v`` in its prefilter).
LOWER_PREFIXES = ("shpat_", "shpss_", "shpca_", "shppa_", "dop_v1_")


def mixed_case_key(s: str) -> bool:
    """Whether ``s``, a text with a capital, holds the prefix of a key whose body mixes cases
    (a body of 36 or more random letters and digits with no capital is too rare to pay these
    tests on every lower-case record). The separator first: one ``memchr`` where the text
    has none. Each test spelled out: a generator over the prefixes cost a fifth of the call
    (≈ 22 k instructions on a 663-character record, 18 k without; one regular expression of
    all the prefixes, a single scan, 54 k: its first characters are common letters)."""
    if "_" in s and ("gsk_" in s or "npm_" in s or "r8_" in s or "pcsk_" in s or "whsec_" in s):
        return True
    if "-" in s and (
        "xai-" in s
        or "pplx-" in s
        or "pypi-" in s
        or "GOCSPX-" in s
        or "xapp-" in s
        or "nvapi-" in s
        or "tvly-" in s
    ):
        return True
    return "." in s and "ya29." in s
