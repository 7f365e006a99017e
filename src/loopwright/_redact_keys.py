"""Other providers' API keys for the redaction net's ``SHAPES``: each prefix with the length
and characters its provider documents, so a word that starts the same (``xai-based``,
``npm_modules``) stays. Groq (``gsk_``), xAI (``xai-``), Perplexity (``pplx-``), npm
(``npm_``), PyPI upload tokens (``pypi-`` and a macaroon: ``AgE`` is its first bytes), Google
OAuth access tokens (``ya29.``) and client secrets (``GOCSPX-``), Slack app tokens
(``xapp-``), DigitalOcean (``dop_v1_``), Shopify (``shpat_``, ``shpss_``, ``shpca_``,
``shppa_``) and Replicate (``r8_``); since stop 52 NVIDIA (``nvapi-``), Tavily (``tvly-``),
Pinecone (``pcsk_``) and Stripe's webhook signing secrets (``whsec_``); since stop 52
(keys52) LangSmith (``lsv2_pt_``, ``lsv2_sk_``), Cerebras (``csk-``), Fireworks (``fw_``),
Linear (``lin_api_``), Notion (``ntn_``), Doppler (``dp.pt.``, ``dp.st.``, …), Sentry
(``sntrys_``, ``sntryu_``), Atlassian (``ATATT3``) and DigitalOcean's OAuth and refresh
tokens (``doo_v1_``, ``dor_v1_``).

A text reaches ``SHAPES`` only past the pre-check (``_redact_shapes.triggered`` and
``_upper_triggered``). The keys whose body is lower-case (DigitalOcean, Shopify, LangSmith,
Sentry's user tokens; Cerebras's ``csk-`` holds the trigger ``sk-``) are among its
``_TRIGGERS``; the others' bodies mix cases, so a text holding one has a capital,
and ``mixed_case_key`` looks for their prefixes only in such a text: the engine's own records
are lower-case (one ``memcmp`` tells), and pay nothing for these prefixes.
"""

from __future__ import annotations

import re

# (alternatives of ``SHAPES``' key group: each at a word's start)
PROVIDER_KEYS = (
    r"gsk_[A-Za-z0-9]{48,}|xai-[A-Za-z0-9]{70,}|pplx-[A-Za-z0-9]{40,}"
    r"|npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])|pypi-AgE[A-Za-z0-9_-]{50,}"
    r"|ya29\.[A-Za-z0-9_-]{20,}|GOCSPX-[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])"
    r"|xapp-[0-9]+-[A-Z0-9]+-[0-9]+-[a-f0-9]{32,}"
    r"|do[opr]_v1_[a-f0-9]{64}(?![A-Za-z0-9])"
    r"|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}(?![A-Za-z0-9])"
    r"|r8_[A-Za-z0-9]{37}(?![A-Za-z0-9])"
    r"|nvapi-[A-Za-z0-9_-]{64}(?![A-Za-z0-9_-])"
    r"|tvly-(?:dev-|prod-)?+[A-Za-z0-9]{32}(?![A-Za-z0-9])"
    r"|pcsk_[A-Za-z0-9]{4,8}_[A-Za-z0-9]{40,}"
    r"|whsec_[A-Za-z0-9+/=]{32,}"
    # (keys52) LangSmith: 32 and 10 hex digits; Cerebras: 48 letters and digits
    r"|lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}(?![A-Za-z0-9])"
    r"|csk-[A-Za-z0-9]{40,}+(?![_-])"
    # Fireworks: a body of 20 or more with a capital or a digit, not an identifier's words
    # (``fw_version_check``, ``fw_update``)
    r"|fw_(?=[a-z]*+[A-Z0-9])[A-Za-z0-9]{20,}+(?![_-])"
    r"|lin_api_[A-Za-z0-9]{40}(?![A-Za-z0-9])"
    r"|ntn_[0-9]{11}[A-Za-z0-9]{35}(?![A-Za-z0-9])"
    # Doppler: personal, service (an environment's name before the body), service account,
    # CLI, SCIM and audit tokens
    r"|dp\.(?:pt|st|sa|ct|scim|audit)\.(?:[a-z0-9_-]{2,35}\.)?+[A-Za-z0-9]{40,}"
    # Sentry: an organization's token (base64 JSON, ``_`` and a secret of 43: a ``/`` after it
    # is a URL's path), a user's (64 hex digits)
    r"|sntrys_eyJ[A-Za-z0-9+/]{20,}+={0,2}+_[A-Za-z0-9+/]{43}"
    r"|sntryu_[a-f0-9]{64}(?![A-Za-z0-9])"
    # Atlassian's API tokens (about 190 characters)
    r"|ATATT3[A-Za-z0-9_=-]{100,}"
)

# The lower-case keys' prefixes, for ``_TRIGGERS`` (Sentry's ``sntrys_`` holds ``eyj``, one).
LOWER_PREFIXES = (
    *("shpat_", "shpss_", "shpca_", "shppa_", "dop_v1_", "doo_v1_", "dor_v1_"),
    *("lsv2_pt_", "lsv2_sk_", "sntryu_"),
)
# Each of ``LOWER_PREFIXES`` holds one of these (``PREFILTER``'s needles for them): none holds
# a digit, which a long text keeps where it is stripped of the characters no needle holds
# (``_NOT_NEEDLE``); ``_pt_`` for ``lsv2_pt_`` (``lsv2_sk_`` holds Stripe's ``k_``).
LOWER_NEEDLES = ("shp", "dop_v", "doo_v", "dor_v", "_pt_", "sntryu_")


# The mixed-case keys' prefixes that end in ``_``, found at their ``_`` (perf52): the pattern
# starts with it, so ``re`` passes over the text in C to each ``_``, tests the character before
# it (one class: most ``_`` of prose stop there), then the prefixes. One pass where a scan a
# prefix read the whole text eight times (×1.65 on prose with capitals at stop 52, keys52); a
# pattern of the prefixes themselves is tried at each of their common first letters (54 k
# instructions on a 663-character record).
_UNDERSCORE_HEADS = ("gsk", "npm", "r8", "pcsk", "whsec", "fw", "lin_api", "ntn")
_UNDERSCORE_KEY = re.compile(
    "_(?<=["
    + "".join(sorted({head[-1] for head in _UNDERSCORE_HEADS}))
    + "]_)(?:"
    + "|".join(f"(?<={head}_)" for head in _UNDERSCORE_HEADS)
    + ")"
)
# (the pattern where at most one character in 2**5 is ``_``: on code, ``_`` every few
# characters, it cost ×8 the eight scans — 243 µs on 15 KB)
_UNDERSCORE_SPARSE = 5


def mixed_case_key(s: str) -> bool:
    """Whether ``s``, a text with a capital, holds the prefix of a key whose body mixes cases
    (a body of 36 or more random letters and digits with no capital is too rare to pay these
    tests on every lower-case record). The separator first: one ``memchr`` where the text
    has none; a digit of the prefix before its scan (``ya29.``, ``ATATT3``), one ``memchr``
    where prose has none. The prefixes ending in ``_`` found at the text's ``_`` by one pattern
    (``_UNDERSCORE_KEY``). Each test spelled out: a generator over the prefixes cost a
    fifth of the call (≈ 22 k instructions on a 663-character record, 18 k without; one
    regular expression of all the prefixes, a single scan, 54 k: its first characters are
    common letters)."""
    if "_" in s:
        if s.count("_") <= len(s) >> _UNDERSCORE_SPARSE:
            if _UNDERSCORE_KEY.search(s) is not None:
                return True
        elif (  # ``_`` everywhere (identifiers): the pattern stops at each, a scan a prefix
            "gsk_" in s
            or "npm_" in s
            or "r8_" in s
            or "pcsk_" in s
            or "whsec_" in s
            or "fw_" in s
            or "lin_api_" in s
            or "ntn_" in s
        ):
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
    if "." in s and (("9" in s and "ya29." in s) or "dp." in s):
        return True
    return "3" in s and "T" in s and "ATATT3" in s
