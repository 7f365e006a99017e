"""The redaction net's pieces on a trivial cycle's commit, one at a time, for valgrind to count.

Usage:  python bench/net_pieces.py N PIECE        (``--list`` prints the pieces)

Calls PIECE N times on the text a commit of ``cycle_phases.py``'s loop scans (its record, its
four events' data, no run columns: 819 characters, cycle 295); ``(Ir(1000) - Ir(0)) / 1000``
is a call's instructions (bench/RESULTS.md, "stop 50"). ``words`` and ``words-prose`` are a
variant of the prefilter measured and not kept: the text cut into its runs of needle
characters (``bytes.translate`` + ``split``), each run looked up in a cache of runs found
clean, the needles tested only on runs not seen before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import orjson

from loopwright import _redact
from loopwright import _redact_shapes as shapes

TEXT = (
    '[{"cycle":295,"proposal":{"kind":"edit","edits":[{"artifact":"doc","part":"body",'
    '"value":"draft 295"}]},"digest":"d448b33bd7933b6fb50a2b4aa54d3999","visible":{"check":'
    '{"passed":false,"score":0.5,"findings":[{"message":"still open","artifact":"doc",'
    '"part":"body","dimension":"text"}]}},"score":0.5,"improved":false,"decision":"revise",'
    '"calls":[{"who":"actor"},{"who":"verifier:check"}],"usage":{"seconds":'
    '0.00009866999999985637}},[{},{"kind":"edit","digest":"d448b33bd7933b6fb50a2b4aa54d3999",'
    '"note":"","parts":["doc/body"],"effects":[],"usage":{"cost_usd":0.0,"tokens":0,'
    '"seconds":0.0},"seconds":5.268999984764378e-6},{"verifier":"check","held_out":false,'
    '"passed":false,"score":0.5,"findings":1,"seconds":3.998000011051772e-6},{"decision":'
    '"revise","score":0.5,"best_score":0.5,"improved":false,"duplicate":false}],null]'
)
PROSE = ('the loop keeps a "draft" of each section and\nrevises it until the checks pass; ' * 20)[
    :1500
]
# Prose with capitals, ``_`` and ``.`` (a docstring, a model's answer): the capitals' pre-check
# reads it for the mixed-case keys' prefixes (``mixed_case_key``; stop 52, keys52), at 1.5 KB
# and 15 KB
CAPS = 'The Loop keeps a "draft" of each_section. It Revises it until the checks pass; ' * 200
CAPS_SMALL, CAPS_BIG = CAPS[:1500], CAPS[:15000]

_TO_SPACE = bytes(c if chr(c) in shapes._NEEDLE_CHARS else 32 for c in range(256))
_NEEDLES = tuple(n.encode() for n in shapes.PREFILTER)
_clean_runs: set[bytes] = set()


def _runs_hit(low: str) -> bool:
    """The variant: whether a needle is in a run of needle characters of ``low``."""
    runs = low.encode().translate(_TO_SPACE).split()
    if _clean_runs.issuperset(runs):
        return False
    for r in runs:
        if r not in _clean_runs:
            for n in _NEEDLES:
                if n in r:
                    return True
            _clean_runs.add(r)
    return False


def _words(low: str) -> bool | None:
    """``_triggered(low, passw=True)`` with the variant in place of the stripped needle tests."""
    if (
        "=" in low
        or "://" in low
        or ("x" in low and "xox" in low)
        or ("%" in low and "%3a%2f%2f" in low)
        or ("-" in low and "-u" in low)
        or shapes._token_trigger(low)
    ):
        return True
    return shapes._confirmed(low, True) if _runs_hit(low) else False


def pieces() -> dict[str, tuple[Callable[[], Any], str]]:
    whole = orjson.loads(TEXT)
    low, prose = TEXT.lower(), PROSE.lower()
    caps_small, caps_big = CAPS_SMALL.lower(), CAPS_BIG.lower()
    fields = _redact.SECRET_FIELDS
    pats = _redact._key_patterns_of(fields)
    assert pats is not None
    values = _redact.env_secrets()
    assert _redact.redact_unique(whole) is whole  # clean: the path every trivial commit takes
    assert _words(low) == shapes.triggered(low, passw=True)
    assert _words(prose) == shapes.triggered(prose, passw=True)
    return {
        "redact": (lambda: _redact.redact_unique(whole), "the commit's whole net"),
        "env": (_redact.env_secrets, "the environment check"),
        "dumps": (
            lambda: orjson.dumps(whole, option=_redact._AS_STORED).decode(),
            "the JSON text scanned",
        ),
        "clean-text": (
            lambda: _redact._clean_text(TEXT, values, fields, pats),
            "the scan of that text",
        ),
        "lower": (TEXT.lower, "its lower-cased copy"),
        "triggered": (lambda: shapes.triggered(low, passw=True), "the prefilter"),
        "upper": (lambda: shapes.upper_triggered(TEXT, low), "the capitals' pre-check"),
        "words": (lambda: _words(low), "the prefilter, runs of needle characters (not kept)"),
        "prose": (lambda: shapes.triggered(prose, passw=True), "the prefilter, 1.5 KB prose"),
        "words-prose": (lambda: _words(prose), "the variant, 1.5 KB prose (not kept)"),
        "upper-caps": (
            lambda: shapes.upper_triggered(CAPS_SMALL, caps_small),
            "the capitals' pre-check, 1.5 KB prose with capitals",
        ),
        "upper-caps-big": (
            lambda: shapes.upper_triggered(CAPS_BIG, caps_big),
            "the capitals' pre-check, 15 KB prose with capitals",
        ),
        "prose-big": (lambda: shapes.triggered(caps_big, passw=True), "the prefilter, 15 KB"),
    }


def main(argv: list[str]) -> None:
    table = pieces()
    if argv[:1] == ["--list"]:
        for name, (_, what) in table.items():
            print(f"{name:12} {what}")
        return
    fn = table[argv[1]][0]
    for _ in range(int(argv[0])):
        fn()


if __name__ == "__main__":
    main(sys.argv[1:])
