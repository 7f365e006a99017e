"""The prefilter's needles holding ``_`` on a short text are found at its ``_`` by one pattern
(``_redact_shapes._SCORE_UNDERSCORE``, cpu54), not by a scan a needle: the same answers as the
scans, and a record holding ``_`` and ``-`` but no needle is no longer read once a needle."""

from __future__ import annotations

import random

from loopwright import _redact_shapes as shapes

_SCORE = shapes._PREFILTER_SCORE
# every needle, its pieces cut at each place, its marks alone and doubled, letters around
_PIECES = (
    *_SCORE,
    *(n[:k] for n in _SCORE for k in range(1, len(n))),
    *(n[k:] for n in _SCORE for k in range(1, len(n))),
    *("_", "-", "__", "--", "_-", "-_", "a", "x", "e-6", "cost_usd", "held_out", "best_score"),
)


class _Counted(str):
    """A text that counts the substring tests made on it (``needle in text``)."""

    tests = 0

    def __contains__(self, needle: object) -> bool:
        type(self).tests += 1
        return str.__contains__(self, needle)  # type: ignore[operator]


def test_scored_answers_as_every_needle_scanned() -> None:
    r = random.Random(54)
    for _ in range(40_000):
        hay = "".join(r.choice(_PIECES) for _ in range(r.randint(0, 9)))
        assert shapes._scored(hay) == any(n in hay for n in _SCORE), hay


def test_each_needle_found_wherever_it_sits_among_marks() -> None:
    marks = "cost_usd_held_out-e-6_best_score-" * 8  # short: under the long text's walk
    assert len(marks) < shapes._SCORE_WALK_MIN
    assert shapes._scored(marks) is False
    for n in _SCORE:
        for hay in (n + marks, marks + n, marks[:50] + n + marks[50:], n):
            assert shapes._scored(hay) is True, (n, hay)
        # the needle less its last character, or its first, is not taken for it
        for cut in (n[:-1], n[1:]):
            hay = "x" + cut + "x"
            assert shapes._scored(hay) == any(m in hay for m in _SCORE), hay


def test_a_record_with_marks_and_no_needle_is_not_scanned_once_a_needle() -> None:
    # A trivial cycle's record, stripped as ``_triggered`` strips it: ``_`` in three keys and
    # ``-`` in a float's exponent. Before cpu54 each of the eleven needles was a scan of it.
    record = (
        "cycleproposalkindediteditsartifactdocpartbodyvaluedraftdigestadecfbbabcfecbba"
        "usagecost_usdtokenssecondssecondse-verifiercheckheld_outfalsepassedfalsescore"
        "findingssecondse-decisionrevisescorebest_scoreiprovedfalseduplicatefalsenull"
    )
    hay = _Counted(record)
    _Counted.tests = 0
    assert shapes._scored(hay) is False
    # the ``_`` and ``-`` memchr tests, then the two needles holding ``-`` and no ``_``
    assert _Counted.tests <= 4, _Counted.tests
    assert len(_SCORE) - len(shapes._SCORE_DASH) >= 9  # the needles found by the pattern
