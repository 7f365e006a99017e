"""``_task_parts._masks``: whether a stored (masked) task text is a given text with some of it
masked — the changed-task check's wildcard match, by hand (fitloop47's regular expression
backtracked without bound on a text with many masked pieces)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from loopwright._redact import REDACTED
from loopwright._task_parts import _masks


def _by_regex(masked: str, text: str) -> bool:
    """The meaning, as a regular expression: each mask stands for one character or more."""
    if REDACTED not in masked:
        return False
    pattern = ".+?".join(re.escape(piece) for piece in masked.split(REDACTED))
    return re.fullmatch(pattern, text, re.DOTALL) is not None


@given(
    pieces=st.lists(st.text(alphabet="ab*", max_size=3), min_size=1, max_size=5),
    text=st.text(alphabet="ab*", max_size=12),
)
def test_the_match_by_hand_means_what_the_expression_means(pieces: list[str], text: str) -> None:
    masked = REDACTED.join(pieces)
    assert _masks(masked, text) == _by_regex(masked, text)


def test_known_cases() -> None:
    assert _masks("call with *** end", "call with planted-old-value-1 end")
    assert not _masks("call with *** end", "call with  end!")
    assert not _masks("call with *** end", "call with end")  # a mask stands for something
    assert _masks("***", "x") and not _masks("***", "")
    assert not _masks("no mask", "no mask")


def test_many_masked_pieces_against_a_text_that_does_not_match() -> None:
    """Forty masked pieces against 20,000 characters that almost match: the expression tried
    every split of the text among the masks; the match by hand reads the text once a piece."""
    masked = REDACTED.join(["a"] * 40) + "b"
    assert _masks(masked, "a" * 20_000) is False
    assert _masks(masked, "a" * 20_000 + "b") is True
