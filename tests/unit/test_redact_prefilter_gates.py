"""``_redact_shapes.triggered`` answers as a test of every needle of ``PREFILTER`` on the
text would (stop 49, digest49: the needles holding ``_`` or ``-`` are tested only where the
text holds one of those characters, so prose is not read once for each of them)."""

from __future__ import annotations

import random

from loopwright import _redact_shapes as shapes


def _reference(low: str, passw: bool) -> bool | None:
    """``_triggered`` as every needle tested on the whole text."""
    if any(t in low for t in ("=", "://", "xox", "%3a%2f%2f", "-u")) or shapes._token_trigger(low):
        return True
    if any(n in low for n in shapes.PREFILTER):
        return shapes._confirmed(low, passw)
    return False


_PIECES = (
    *shapes.PREFILTER,
    *("_", "-", "k", "_k", "hf", "lw", "gith", "ub_pat", "glpat", "sk", "dop", "_v", "k-"),
    *(" ", "the loop keeps a draft ", "\n", "x", "z", "j", "7", '"', "token", "private"),
)


def _text(r: random.Random, n: int) -> str:
    words = [r.choice(_PIECES[-10:]) for _ in range(n)]
    for _ in range(r.randint(0, 2)):  # a needle or two somewhere, often none
        words.insert(r.randrange(len(words) + 1), r.choice(_PIECES))
    return "".join(words).lower()


def test_triggered_answers_as_every_needle_tested() -> None:
    r = random.Random(49)
    for _ in range(3000):
        low = _text(r, r.choice([1, 5, 40, 120, 400, 1200]))
        for passw in (False, True):
            assert shapes.triggered(low, passw=passw) == _reference(low, passw), low


def test_each_gated_needle_alone_in_prose_is_found() -> None:
    prose = "the loop keeps a draft of each section and revises it " * 60  # > _STRIP_MAX
    for n in shapes._PREFILTER_SCORE:
        for low in (prose + n, n + prose, prose[:300] + n):
            assert shapes.triggered(low, passw=True) == _reference(low, True), n
    assert shapes.triggered(prose, passw=False) is False


def test_long_text_read_at_its_marks_finds_every_gated_needle() -> None:
    """A long text with few ``_`` and ``-`` is read at each (``_scored``), one with many by
    each needle's scan: both answer as the scans would, wherever the needle sits."""
    prose = "the loop keeps a draft of each section and revises it; " * 100
    few = '{"cost_usd":1,"new_steps":[],"x-y":2,"v":"' + prose + '"}'
    many = few + " a_b c-d" * 40
    for base in (few, many):
        assert len(base) >= shapes._SCORE_WALK_MIN
        assert shapes._scored(base) is False
        for n in shapes._PREFILTER_SCORE:
            for low in (n + base, base + n, base[:2000] + n + base[2000:], base[:-1] + n[:-1]):
                assert shapes._scored(low) == any(m in low for m in shapes._PREFILTER_SCORE)
                assert shapes.triggered(low, passw=True) == _reference(low, True), n
