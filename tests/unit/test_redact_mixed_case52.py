"""``mixed_case_key`` (perf52: the ``_`` prefixes found by one pattern at each ``_``, digits
looked for before ``ya29.`` and ``ATATT3``) answers as the substring scan of each prefix did."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright._redact_keys import mixed_case_key

_PREFIXES = (
    *("gsk_", "npm_", "r8_", "pcsk_", "whsec_", "fw_", "lin_api_", "ntn_"),
    *("xai-", "pplx-", "pypi-", "GOCSPX-", "xapp-", "nvapi-", "tvly-"),
    *("ya29.", "dp.", "ATATT3"),
)


def _scanned(s: str) -> bool:
    """The check as keys52 wrote it: each prefix's own substring test."""
    return any(prefix in s for prefix in _PREFIXES)


# Pieces of the prefixes (their heads, tails, separators) so that texts hold them whole, cut,
# doubled, at the text's start and end, and next to one another.
_PIECES = sorted(
    {p[:i] for p in _PREFIXES for i in range(len(p) + 1)}
    | {p[i:] for p in _PREFIXES for i in range(len(p))}
    | {"_", "-", ".", "9", "3", "T", "A", "x", " ", "k_", "n_", "__"}
)


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_PIECES), max_size=12))
def test_mixed_case_key_is_the_substring_scan(pieces: list[str]) -> None:
    s = "".join(pieces)
    assert mixed_case_key(s) is _scanned(s), s


def test_each_prefix_alone_at_each_place() -> None:
    """Each prefix found at a text's start, middle and end, and not once its last character is
    cut (``_`` before it too: ``lin_api_`` holds one)."""
    for prefix in _PREFIXES:
        for text in (prefix, "The " + prefix + "X", "The_" + prefix):
            assert mixed_case_key(text), text
        cut = prefix[:-1]
        for text in (cut, "The " + cut + " X", "the_" + cut):
            assert not mixed_case_key(text), text
    assert not mixed_case_key("The Loop keeps each_section. It Revises_it, k_ n_ w_ 8_ c_ i_ m_")
